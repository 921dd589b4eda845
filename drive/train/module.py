"""PolicyModule: the learning logic for a steering policy (Lightning), nothing else.

Training follows the NCP lane-keeping recipe (Lechner et al. 2020 and its code): Adam
(lr 5e-4), batches of sequences (20 x 16 frames, set by the datamodule), global grad-norm clip 10
(``trainer.gradient_clip_val``), and the curve-weighted MSE in 1/km

    loss = sum_i w_i (yhat_i - y_i)^2 / sum_i w_i,   w_i = exp(c |y_i|),   c = 0.1

The weights come with every batch (``batch["weight"]``, set by the datamodule's ``curve_factor``,
0 on padding), so the curve factor has one home: ``--data.curve_factor``. Weight constraints of
the recurrent cell (LTC with ``positivity="clip"``) are applied after every optimizer step.
Validation and test are *stateful*: the datamodule streams whole recordings as consecutive
windows, and the hidden state is carried from one window to the next and zeroed where the stream
says ``reset`` (a new recording or a time gap) -- the way the policy runs on the car. Metrics are
MSE / MAE in 1/km, overall and per recording (the hooks live in :mod:`drive.train.stateful_eval`).

The model is a family (:mod:`drive.nn.families`, where its options and their defaults live) with
one options group per family (``--model.cfc.mode no_gate``); ``drive fit`` checks that it learns
(:mod:`drive.train.monitor`).

On a GPU the conv head runs under autocast (``head_precision``), the recurrent cell in fp32.
Checkpoints carry :func:`drive.checkpoint.policy_meta` under ``"drive"`` (weights_only-safe), so a
checkpoint alone rebuilds and runs the policy (:func:`drive.checkpoint.load_policy`).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor

from drive.checkpoint import policy_meta
from drive.data.preprocess import Preprocessing
from drive.data.sequences import median_dt
from drive.io.checks import number
from drive.nn.families import DEFAULT_INPUT_HW, build_policy, family_options
from drive.nn.init import data_init, sample_frames
from drive.nn.policy import Policy
from drive.train.hparams import checkpoint_hparams, option_groups, plain
from drive.train.label_lookahead import resolve_lookahead
from drive.train.label_range import curvature_limit, curve_weight_note, label_range, readout_scale_km
from drive.train.loss import channels_last_frames, weighted_mse
from drive.train.monitor import LearningMonitor
from drive.train.schedule import lr_factor, param_groups
from drive.train.stateful_eval import StatefulEvalModule

__all__ = ["PolicyModule"]


class PolicyModule(StatefulEvalModule):
    """Train a :class:`~drive.nn.policy.Policy` of one family on curvature labels.

    Args:
        family: ``ncp_ltc`` (NCP conv head + 19-neuron lane-keeping NCP LTC), ``cfc``, ``lstm``,
            ``ctrnn``, ``cnn`` (PilotNet, single frames) or a plugin's; :mod:`drive.nn.families`.
        input_hw: network input (H, W); must equal the datamodule's preprocessing size.
        lr: Adam learning rate (paper: 5e-4).
        cell_lr_scale: the recurrent cell's learning rate as a multiple of ``lr`` (the head's stays ``lr``).
        weight_decay: Adam weight decay.
        lr_schedule: ``cosine`` (from ``lr`` down to ``lr * lr_min_ratio`` over the run), ``step``
            (x ``lr_gamma`` every ``lr_step_epochs``) or ``constant``; updated every step.
        lr_min_ratio: final learning rate of the cosine schedule, as a fraction of ``lr``.
        lr_step_epochs: epochs between learning-rate drops of the step schedule.
        lr_gamma: factor of each drop of the step schedule.
        warmup_steps: linear warm-up steps before the schedule.
        head_precision: autocast dtype for the conv head on CUDA: ``bf16``, ``fp16`` or ``fp32`` (training
            in ``fp16`` needs ``trainer.precision: 16-mixed`` for its gradient scaler).
        label_scale_km: scale of the readout (1/km per unit of recurrent output); None = the
            standard deviation of the training labels, measured when fitting starts, or for a cell
            read out directly (the NCP-LTC's motor neuron, bounded to +-1) the largest |label|
            (single-frame spikes left out) when that is larger.
        init: ``data`` (default): before the first step of a new run, the head is LSUV-initialised and
            the cell's input map (the LTC's ``input_w``, ``input_b``) calibrated from the first
            training frames (:mod:`drive.nn.init`; the architecture is unchanged), so the cell
            trains whatever the camera and scene; ``default``: PyTorch's initialisation, as in the
            paper's code. A resumed run or a loaded checkpoint keeps its weights.
        feature_norm: ``batch`` (default): the NCP conv head batch-normalises its 32 dense
            pre-activations (:class:`drive.nn.heads.NCPConvHead` ``norm``), which keeps the cell's
            inputs on a unit scale through training; ``none``: the paper's head. With
            ``init: default`` and ``feature_norm: none`` the model is exactly the paper's.
        check_after_steps: after this many training steps ``drive fit`` checks that the model learns
            and warns once per problem (:mod:`drive.train.monitor`): training or validation MSE no better
            than the best constant predictor, most head features dead, or the cell's inputs
            saturated. The best-constant MSE is logged beside ``val/mse_km``. 0 turns the checks off.
        options: one options group per family with options, by the family's name (``ncp_ltc``,
            ``cfc``, ``lstm``, ``ctrnn`` and any a plugin registers;
            :func:`drive.train.hparams.option_groups`): its dataclass or a dict of its fields; the
            chosen family's group builds the model, all are recorded.
    """

    def __init__(
        self,
        family: str = "ncp_ltc",
        input_hw: Tuple[int, int] = DEFAULT_INPUT_HW,
        lr: float = 5e-4,
        cell_lr_scale: float = 1.0,
        weight_decay: float = 0.0,
        lr_schedule: str = "cosine",
        lr_min_ratio: float = 0.1,
        lr_step_epochs: int = 10,
        lr_gamma: float = 0.5,
        warmup_steps: int = 0,
        head_precision: str = "bf16",
        label_scale_km: Optional[float] = None,
        init: str = "data",
        feature_norm: str = "batch",
        check_after_steps: int = 300,
        **options: Any,
    ) -> None:
        super().__init__()
        if lr_schedule not in ("cosine", "step", "constant"):
            raise ValueError(f"lr_schedule must be cosine, step or constant, got {lr_schedule!r}")
        if feature_norm not in ("batch", "none"):
            raise ValueError(f"feature_norm must be 'batch' or 'none', got {feature_norm!r}")
        if init not in ("data", "default"):
            raise ValueError(f"init must be 'data' or 'default', got {init!r}")
        if head_precision not in ("bf16", "fp16", "fp32"):
            raise ValueError(f"head_precision must be bf16, fp16 or fp32, got {head_precision!r}")
        for name, value, limits in (
            ("lr", lr, dict(low=0.0, high=10.0, low_open=True)),
            ("cell_lr_scale", cell_lr_scale, dict(low=0.0, high=1e3, low_open=True)),
            ("weight_decay", weight_decay, dict(low=0.0, high=10.0)),
            ("lr_min_ratio", lr_min_ratio, dict(low=0.0, high=1.0)),
            ("lr_step_epochs", lr_step_epochs, dict(low=1, high=1e9, integer=True)),
            ("lr_gamma", lr_gamma, dict(low=0.0, high=1.0, low_open=True)),
            ("warmup_steps", warmup_steps, dict(low=0, high=1e12, integer=True)),
            ("check_after_steps", check_after_steps, dict(low=0, high=1e12, integer=True)),
        ):
            number(value, f"--model.{name}", **limits)
        if label_scale_km is not None:
            number(label_scale_km, "--model.label_scale_km", low=0.0, high=1e6, low_open=True)
        # Every family's group, the defaults filled in and the flat names of earlier versions read as
        # groups, into ``options`` itself: Lightning records the hyperparameters from this frame's
        # arguments, so checkpoints hold every group, in today's names.
        groups = option_groups(**options)
        options.clear()
        options.update(groups)
        self.save_hyperparameters()
        self.policy: Policy = build_policy(
            family,
            input_hw=tuple(input_hw),
            # the family's group as its options type (LightningCLI and checkpoints hand over a dict)
            options=family_options(family, options.get(family)),
            feature_norm=feature_norm,
        )
        self.preprocessing = Preprocessing(size=(int(input_hw[0]), int(input_hw[1])))
        self.fps = 1.0 / self.policy.frame_period_s
        self.frame_size: Optional[List[int]] = None
        self._initialised = False  # data-dependent init done (or weights come from a checkpoint)
        self.init_health: Dict[str, float] = {}
        self.monitor = LearningMonitor(check_after_steps)
        self.label_range: Optional[List[float]] = None  # training labels' [min, max] 1/m, spikes left out
        self.curvature_limit: Optional[float] = None  # the export's clamp, from label_range
        self.label_lookahead_s: Optional[float] = None  # fitted on the training logs (lookahead_s: fit)
        # On a CPU the conv head trains on channels-last frames, oneDNN's fast layout: the same
        # network, faster per step (tools/bench_train.py prints the ratio against False, the layout
        # before, in one run; docs/benchmarks.md). CUDA keeps the frames as they come.
        self.channels_last = True

    # -- data description (from the datamodule, stored in checkpoints) ------------------------
    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is None:
            return
        preprocessing = getattr(datamodule, "preprocessing", None)
        if preprocessing is not None:
            if tuple(preprocessing.size) != tuple(self.hparams.input_hw):
                raise ValueError(
                    f"the data is preprocessed to {tuple(preprocessing.size)} but the model's "
                    f"input_hw is {tuple(self.hparams.input_hw)}; set model.input_hw to match"
                )
            self.preprocessing = preprocessing
        datasets = getattr(datamodule, "datasets", {})
        recordings = [r for ds in datasets.values() for r in ds.recordings]
        if stage == "fit" and "train" in datasets:
            train = [r.curvature for r in datasets["train"].recordings]
            self._label_limits(train, float(getattr(datamodule, "curve_factor", 0.0)))
            scale = self.hparams.label_scale_km
            if scale is None:
                scale = readout_scale_km(train, self.label_range, direct=not self.policy.has_readout)
            self.policy.readout.scale_km.fill_(scale)  # a resumed run restores its own afterwards
            self.monitor.set_baseline(datasets)
        if recordings and stage == "fit":
            sizes = {tuple(int(v) for v in r.info["source_size"]) for r in recordings}
            self.frame_size = list(sizes.pop()) if len(sizes) == 1 else None  # camera size, for export
            period_s = float(np.median([median_dt(r.timestamp_s) for r in recordings]))
            self.fps = round(1.0 / period_s, 6)  # timestamps are rounded: 10 Hz, not 10.000000000014
            self.policy.frame_period_s = 1.0 / self.fps
        if stage == "fit" and "train" in datasets:
            fit = resolve_lookahead(datamodule, self.fps)
            if fit is not None:
                self.label_lookahead_s = fit.lookahead_s
                (rank_zero_warn if fit.kept_none else rank_zero_info)(fit.summary())

    def _label_limits(self, curvatures: List[np.ndarray], curve_factor: float) -> None:
        """The training labels' range and the export's curvature limit (:mod:`drive.train.label_range`),
        and a warning when ``curve_factor`` would make the loss the error of a few sharp frames."""
        labels = label_range(curvatures)
        if labels is not None:
            self.label_range = labels
            self.curvature_limit = curvature_limit(labels)
        median_km = 1000.0 * float(np.nanmedian(np.abs(np.concatenate(curvatures)))) if curvatures else 0.0
        note = curve_weight_note(labels, median_km, curve_factor)
        if note:
            rank_zero_warn(note)

    def drive_meta(self) -> Dict[str, Any]:
        """Checkpoint metadata (plain types): policy config, preprocessing, fps, units, family, and
        the camera frame size [H, W] of the training logs when they share one (export builds the
        module for it)."""
        extra: Dict[str, Any] = {"frame_size": self.frame_size} if self.frame_size else {}
        if self.label_range is not None:
            extra["label_range_per_m"] = [float(v) for v in self.label_range]
        if self.curvature_limit is not None:
            extra["curvature_limit_per_m"] = float(self.curvature_limit)
        if self.label_lookahead_s is not None:
            extra["label_lookahead_s"] = float(self.label_lookahead_s)
        return policy_meta(self.policy, self.preprocessing, self.fps, self.hparams.family, **extra)

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls,
        checkpoint_path: Any,
        map_location: Any = None,
        hparams_file: Any = None,
        strict: Optional[bool] = None,
        weights_only: Optional[bool] = True,
        **kwargs: Any,
    ) -> "PolicyModule":
        """Lightning's loader, reading the hyperparameters of any drive version in today's names:
        a checkpoint written with the flat options (``units``, ``cfc_mode``, ``ode_unfolds``, ...)
        rebuilds the network it was trained with (Lightning alone drops the keys ``__init__`` no
        longer takes, builds the defaults and then fails to load the weights). Tensors only are
        unpickled (``weights_only=True``) unless the caller says otherwise. ``kwargs`` override."""
        hparams = (
            checkpoint_hparams(checkpoint_path)
            if hparams_file is None and isinstance(checkpoint_path, (str, os.PathLike))
            else {}
        )
        return super().load_from_checkpoint(  # type: ignore[return-value]
            checkpoint_path,
            map_location=map_location,
            hparams_file=hparams_file,
            strict=strict,
            weights_only=weights_only,
            # built here from today's names; LightningCLI's instantiator (which a drive fit checkpoint
            # names) would parse the file's own keys, flat ones included, and refuse those
            **{**hparams, "_instantiator": None, **kwargs},
        )

    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        checkpoint["drive"] = self.drive_meta()
        for key in ("hyper_parameters", "datamodule_hyper_parameters"):
            if key in checkpoint:
                checkpoint[key] = plain(dict(checkpoint[key]))

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        # A checkpoint written before the head's feature normalisation existed (or with it off) loads
        # into the architecture it was trained with, whatever this module was constructed with.
        head = self.policy.head
        if hasattr(head, "set_norm") and "state_dict" in checkpoint:
            has_norm = "policy.head.feature_norm.weight" in checkpoint["state_dict"]
            if has_norm != (head.norm == "batch"):
                head.set_norm("batch" if has_norm else "none")
                self.hparams["feature_norm"] = head.norm
        meta = checkpoint.get("drive", {})
        if "fps" in meta:
            self.fps = float(meta["fps"])
            self.policy.frame_period_s = 1.0 / self.fps
        if "preprocessing" in meta:
            self.preprocessing = Preprocessing.from_dict(meta["preprocessing"])
        self.frame_size = meta.get("frame_size")
        self.label_range = meta.get("label_range_per_m", self.label_range)
        self.curvature_limit = meta.get("curvature_limit_per_m", self.curvature_limit)
        self._initialised = True

    # -- forward -------------------------------------------------------------------------------
    def forward_km(
        self, frames_u8: Tensor, hidden: Optional[Tensor] = None, timespans: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """uint8 frames ``[B, L, 3, H, W]`` -> (curvature 1/km ``[B, L]``, hidden); the head under
        autocast on GPU."""
        features = self._encode(frames_u8)
        with torch.autocast(device_type=features.device.type, enabled=False):
            return self.policy.decode(features, hidden, timespans)

    def _encode(self, frames_u8: Tensor) -> Tensor:
        """Head on every frame -> fp32 features ``[B, L, F]`` (autocast to ``head_precision`` on CUDA;
        on a CPU the frames channels-last, :attr:`channels_last`)."""
        if self.channels_last and not frames_u8.is_cuda:
            frames_u8 = channels_last_frames(frames_u8)
        frames = frames_u8.float().div_(255.0) if frames_u8.dtype == torch.uint8 else frames_u8
        precision = self.hparams.head_precision
        use_amp = frames.is_cuda and precision != "fp32"
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        with torch.autocast(device_type=frames.device.type, dtype=dtype, enabled=use_amp):
            features = self.policy.encode(frames)
        return features.float()

    # -- training ------------------------------------------------------------------------------
    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        target = batch["curvature"].float() * 1000.0
        features = self._encode(batch["frames"])
        with torch.autocast(device_type=features.device.type, enabled=False):
            pred, _ = self.policy.decode(features, None, batch.get("dt"))
        loss = weighted_mse(pred, target, batch["weight"])
        n = target.shape[0]
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=n)
        self.log("train/mae_km", (pred - target).abs().mean().detach(), on_epoch=True, batch_size=n)
        if self.monitor.check_after_steps > 0:
            self.monitor.watch(self, features.detach(), pred.detach(), target, batch["weight"])
        return loss

    def on_fit_start(self) -> None:
        precision = str(self.trainer.precision)
        if self.hparams.head_precision == "fp16" and self.device.type == "cuda" and precision != "16-mixed":
            raise ValueError(
                "model.head_precision fp16 trains only with trainer.precision 16-mixed (Lightning's "
                f"gradient scaler keeps fp16 gradients from underflowing; got {precision!r}): "
                "use head_precision bf16, or set --trainer.precision 16-mixed"
            )
        if (
            self.hparams.get("init", "data") == "data"
            and not self._initialised
            and self.trainer.ckpt_path is None
        ):
            self.data_init()
        self._initialised = True

    @torch.no_grad()
    def data_init(self) -> None:
        """Data-dependent initialisation (:func:`drive.nn.init.data_init`) from evenly spaced training
        windows; under DDP rank 0's result is broadcast so every replica starts from the same weights."""
        datasets = getattr(getattr(self.trainer, "datamodule", None), "datasets", {})
        if "train" not in datasets:
            return
        frames = sample_frames(datasets["train"])
        if frames is None:
            return
        frames = frames.to(self.device).float().div_(255.0)
        self.init_health = data_init(self.policy, frames)
        constrain = getattr(self.policy.rnn, "apply_constraints", None)
        if constrain is not None:  # an initialisation is a valid model: the cell's constraints hold
            constrain()
        if self.trainer.world_size > 1:
            for tensor in list(self.policy.head.parameters()) + list(self.policy.rnn.parameters()):
                tensor.data.copy_(self.trainer.strategy.broadcast(tensor.data, src=0))

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # Random draws in a step (dropout of a CfC backbone) follow from (seed, rank, step) alone, so
        # a run resumed from a checkpoint draws what the uninterrupted run drew at that step.
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        state = np.random.SeedSequence([seed, self.global_rank, self.global_step]).generate_state(2)
        torch.manual_seed(int(state[0]) << 32 | int(state[1]))

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        # Inside the step, not in on_train_batch_end: that hook runs after the checkpoint callbacks
        # save the step, so last.ckpt would hold the weights before the constraints (resume then differs).
        constrain = getattr(self.policy.rnn, "apply_constraints", None)
        if constrain is not None:
            constrain()

    # -- optimisation ----------------------------------------------------------------------------
    def configure_optimizers(self) -> Dict[str, Any]:
        hp = self.hparams
        groups = param_groups(self, self.policy.rnn, hp.lr, hp.cell_lr_scale)
        optimizer = torch.optim.Adam(groups, lr=hp.lr, weight_decay=hp.weight_decay)
        length: List[int] = []  # [total steps, steps per epoch], read once training runs

        def factor(step: int) -> float:
            # The run's length is read at the first step past 0, never here: with max_epochs set,
            # Lightning builds the training loader to count its batches, before a resumed run's data
            # position is restored, and never applies that position (the resumed run would replay
            # its epoch from the start). At step 0 every schedule's factor is independent of it.
            if step > 0 and not length:
                total = max(1, int(self.trainer.estimated_stepping_batches))
                length.extend([total, max(1, total // max(1, self.trainer.max_epochs or 1))])
            total, steps_per_epoch = length or [1, 1]
            return lr_factor(
                step,
                hp.lr_schedule,
                total,
                steps_per_epoch,
                warmup_steps=hp.warmup_steps,
                min_ratio=hp.lr_min_ratio,
                gamma=hp.lr_gamma,
                step_epochs=hp.lr_step_epochs,
            )

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
