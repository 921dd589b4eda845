"""PolicyModule: the learning logic for a steering policy (Lightning), nothing else.

Training follows the NCP lane-keeping recipe (Lechner et al. 2020, REFERENCE.md §2): Adam
(lr 5e-4), batches of sequences (20 x 16 frames, set by the datamodule), global grad-norm clip 10
(``trainer.gradient_clip_val``), and the curve-weighted MSE in 1/km

    loss = sum_i w_i (yhat_i - y_i)^2 / sum_i w_i,   w_i = exp(c |y_i|),   c = curve_factor (0.1)

Weight constraints of the recurrent cell (LTC with ``positivity="clip"``) are applied after every
optimizer step. Validation and test are *stateful*: the datamodule streams whole recordings as
consecutive windows, and the hidden state is carried from one window to the next and zeroed where
the stream says ``reset`` (a new recording or a time gap) -- the way the policy runs on the car.
Metrics are MSE / MAE in 1/km, overall and per recording.

On a GPU the conv head runs under autocast (``head_precision``), the recurrent cell in fp32.
Checkpoints carry :func:`drive.policy_io.policy_meta` under ``"drive"`` (weights_only-safe), so a
checkpoint alone rebuilds and runs the policy (:func:`drive.policy_io.load_policy`).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

import lightning.pytorch as pl
import torch
from torch import Tensor

from drive.nn.policy import Policy
from drive.policy_io import policy_meta
from drive.preprocess import Preprocessing
from drive.train.families import FAMILIES, build_policy

__all__ = ["PolicyModule", "weighted_mse"]


def weighted_mse(pred_km: Tensor, target_km: Tensor, curve_factor: float) -> Tensor:
    """Curve-weighted MSE (REFERENCE.md §2): weights ``exp(c |y|)`` normalised to sum 1; 1/km units."""
    weights = torch.exp(curve_factor * target_km.abs())
    return (weights * (pred_km - target_km) ** 2).sum() / weights.sum()


class PolicyModule(pl.LightningModule):
    """Train a :class:`~drive.nn.policy.Policy` of one family on curvature labels.

    Args:
        family: ``ncp_ltc`` (NCP conv head + 19-neuron lane-keeping NCP LTC), ``cfc``, ``lstm``,
            ``ctrnn`` or ``cnn`` (PilotNet, single frames).
        units: hidden units of ``lstm``, ``ctrnn`` and dense ``cfc`` (paper: 64).
        cfc_mode: CfC variant ``default`` | ``no_gate`` | ``pure`` (Cf-S).
        cfc_mixed_memory: CfC with an LSTM memory cell (CfC-mmRNN).
        cfc_wired: CfC on the lane-keeping NCP wiring instead of dense units.
        ode_unfolds: fused-solver unfolds per step for ``ncp_ltc`` (paper: 6).
        positivity: LTC positivity of w, cm, gleak: ``clip`` (after each optimizer step) or
            ``softplus``.
        wiring_seed: seed of the NCP wiring's random synapses.
        input_hw: network input (H, W); must equal the datamodule's preprocessing size.
        lr: Adam learning rate (paper: 5e-4).
        weight_decay: Adam weight decay.
        curve_factor: ``c`` of the curve weights exp(c |y|) with y in 1/km (paper: 0.1; 0 = plain MSE).
        lr_schedule: ``cosine`` (to ``lr * lr_min_ratio`` over the run), ``step`` (x ``lr_gamma``
            every ``lr_step_epochs``) or ``constant``.
        warmup_steps: linear warm-up steps before the schedule.
        head_precision: autocast dtype for the conv head on CUDA: ``bf16``, ``fp16`` or ``fp32``.
    """

    def __init__(
        self,
        family: str = "ncp_ltc",
        units: int = 64,
        cfc_mode: str = "default",
        cfc_mixed_memory: bool = False,
        cfc_wired: bool = False,
        ode_unfolds: int = 6,
        positivity: str = "clip",
        wiring_seed: int = 22222,
        input_hw: Tuple[int, int] = (78, 200),
        lr: float = 5e-4,
        weight_decay: float = 0.0,
        curve_factor: float = 0.1,
        lr_schedule: str = "cosine",
        lr_min_ratio: float = 0.1,
        lr_step_epochs: int = 10,
        lr_gamma: float = 0.5,
        warmup_steps: int = 0,
        head_precision: str = "bf16",
    ) -> None:
        super().__init__()
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILIES)}")
        if lr_schedule not in ("cosine", "step", "constant"):
            raise ValueError(f"lr_schedule must be cosine, step or constant, got {lr_schedule!r}")
        if head_precision not in ("bf16", "fp16", "fp32"):
            raise ValueError(f"head_precision must be bf16, fp16 or fp32, got {head_precision!r}")
        self.save_hyperparameters()
        self.policy: Policy = build_policy(
            family,
            input_hw=tuple(input_hw),
            units=units,
            cfc_mode=cfc_mode,
            cfc_mixed_memory=cfc_mixed_memory,
            cfc_wired=cfc_wired,
            ode_unfolds=ode_unfolds,
            positivity=positivity,
            wiring_seed=wiring_seed,
        )
        self.preprocessing = Preprocessing(size=(int(input_hw[0]), int(input_hw[1])))
        self.fps = 1.0 / self.policy.frame_period_s
        self._stream_hidden: Optional[Tensor] = None
        self._stats: Dict[str, Tensor] = {}
        self._recording_names: List[str] = []

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
        fps = getattr(datamodule, "fps", None)
        if fps:
            self.fps = float(fps)
            self.policy.frame_period_s = 1.0 / self.fps

    def drive_meta(self) -> Dict[str, Any]:
        """Checkpoint metadata (plain types): policy config, preprocessing, fps, units, family."""
        return policy_meta(self.policy, self.preprocessing, self.fps, self.hparams.family)

    def on_save_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        checkpoint["drive"] = self.drive_meta()
        checkpoint["hyper_parameters"] = {k: _plain(v) for k, v in checkpoint.get("hyper_parameters", {}).items()}

    def on_load_checkpoint(self, checkpoint: Dict[str, Any]) -> None:
        meta = checkpoint.get("drive", {})
        if "fps" in meta:
            self.fps = float(meta["fps"])
            self.policy.frame_period_s = 1.0 / self.fps
        if "preprocessing" in meta:
            self.preprocessing = Preprocessing.from_dict(meta["preprocessing"])

    # -- forward -------------------------------------------------------------------------------
    def forward_km(
        self, frames_u8: Tensor, hidden: Optional[Tensor] = None, timespans: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """uint8 frames ``[B, L, 3, H, W]`` -> (curvature 1/km ``[B, L]``, hidden); head under autocast on GPU."""
        frames = frames_u8.float().div_(255.0) if frames_u8.dtype == torch.uint8 else frames_u8
        precision = self.hparams.head_precision
        use_amp = frames.is_cuda and precision != "fp32"
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        with torch.autocast(device_type=frames.device.type, dtype=dtype, enabled=use_amp):
            features = self.policy.encode(frames)
        with torch.autocast(device_type=frames.device.type, enabled=False):
            return self.policy.decode(features.float(), hidden, timespans)

    # -- training ------------------------------------------------------------------------------
    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        target = batch["curvature"].float() * 1000.0
        pred, _ = self.forward_km(batch["frames"], None, _timespans(batch))
        loss = weighted_mse(pred, target, self.hparams.curve_factor)
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=target.shape[0])
        self.log("train/mae_km", (pred - target).abs().mean().detach(), on_epoch=True, batch_size=target.shape[0])
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        constrain = getattr(self.policy.rnn, "apply_constraints", None)
        if constrain is not None:
            constrain()

    # -- stateful evaluation -------------------------------------------------------------------
    def _eval_step(self, batch: Mapping[str, Tensor], prefix: str) -> None:
        target = batch["curvature"].float() * 1000.0
        hidden = self._carry_hidden(batch)
        pred, hidden = self.forward_km(batch["frames"], hidden, _timespans(batch))
        self._stream_hidden = hidden.detach()
        valid = batch["valid"].bool() if "valid" in batch else torch.ones_like(target, dtype=torch.bool)
        weights = torch.exp(self.hparams.curve_factor * target.abs()) * valid
        err = (pred - target) * valid
        rec = batch["recording"].long().view(-1, 1).expand_as(target) if "recording" in batch else torch.zeros_like(target, dtype=torch.long)
        n_rec = max(len(self._recording_names), int(rec.max()) + 1 if rec.numel() else 1)
        sums = {
            "sq": err**2, "abs": err.abs(), "n": valid.float(), "wsq": weights * err**2, "w": weights,
        }
        for key, value in sums.items():
            acc = self._stats.get(key)
            if acc is None or acc.numel() < n_rec:
                grown = torch.zeros(n_rec, device=value.device)
                if acc is not None:
                    grown[: acc.numel()] += acc
                acc = grown
            self._stats[key] = acc.index_add(0, rec.reshape(-1), value.reshape(-1).float())

    def _carry_hidden(self, batch: Mapping[str, Tensor]) -> Optional[Tensor]:
        hidden = self._stream_hidden
        b = batch["frames"].shape[0]
        if hidden is None or hidden.shape[0] != b:
            return None
        reset = batch.get("reset")
        if reset is not None:
            hidden = hidden * (~reset.bool()).to(hidden.dtype).view(-1, 1)
        return hidden

    def _start_stream(self, stage: str) -> None:
        self._stream_hidden = None
        self._stats = {}
        datamodule = getattr(self.trainer, "datamodule", None)
        names = getattr(datamodule, f"{stage}_recording_names", None) if datamodule is not None else None
        self._recording_names = list(names() if callable(names) else names or [])

    def _end_stream(self, prefix: str) -> None:
        if not self._stats:
            return
        stats = {k: self.trainer.strategy.reduce(v, reduce_op="sum") if self.trainer.world_size > 1 else v
                 for k, v in self._stats.items()}
        n = stats["n"].clamp_min(1.0)
        total_n = stats["n"].sum().clamp_min(1.0)
        self.log(f"{prefix}/loss", stats["wsq"].sum() / stats["w"].sum().clamp_min(1e-12), prog_bar=True, sync_dist=False)
        self.log(f"{prefix}/mse_km", stats["sq"].sum() / total_n, prog_bar=True)
        self.log(f"{prefix}/mae_km", stats["abs"].sum() / total_n)
        for i in range(stats["n"].numel()):
            if stats["n"][i] > 0:
                name = self._recording_names[i] if i < len(self._recording_names) else str(i)
                self.log(f"{prefix}_recording/{name}/mse_km", stats["sq"][i] / n[i])
                self.log(f"{prefix}_recording/{name}/mae_km", stats["abs"][i] / n[i])
        self._stats = {}
        self._stream_hidden = None

    def on_validation_epoch_start(self) -> None:
        self._start_stream("val")

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._end_stream("val")

    def on_test_epoch_start(self) -> None:
        self._start_stream("test")

    def test_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._end_stream("test")

    def on_predict_epoch_start(self) -> None:
        self._stream_hidden = None

    def predict_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        """Stateful prediction: ``{"curvature_per_m": [B, L], ...}`` over the streamed recordings."""
        hidden = self._carry_hidden(batch)
        pred, hidden = self.forward_km(batch["frames"], hidden, _timespans(batch))
        self._stream_hidden = hidden.detach()
        out = {"curvature_per_m": (pred / 1000.0).cpu()}
        for key in ("recording", "frame_index", "curvature"):
            if key in batch:
                out[key] = batch[key].cpu()
        return out

    # -- optimisation ----------------------------------------------------------------------------
    def configure_optimizers(self) -> Dict[str, Any]:
        hp = self.hparams
        optimizer = torch.optim.Adam(self.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
        total = max(1, int(self.trainer.estimated_stepping_batches))
        steps_per_epoch = max(1, total // max(1, self.trainer.max_epochs or 1))

        def factor(step: int) -> float:
            if step < hp.warmup_steps:
                return (step + 1) / hp.warmup_steps
            if hp.lr_schedule == "cosine":
                progress = min(1.0, (step - hp.warmup_steps) / max(1, total - hp.warmup_steps))
                return hp.lr_min_ratio + (1 - hp.lr_min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
            if hp.lr_schedule == "step":
                return hp.lr_gamma ** (step // (steps_per_epoch * hp.lr_step_epochs))
            return 1.0

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _timespans(batch: Mapping[str, Tensor]) -> Optional[Tensor]:
    """Elapsed seconds per frame ``[B, L]`` from the batch (``dt_s``), or None (nominal period)."""
    dt = batch.get("dt_s")
    return None if dt is None else dt.float()


def _plain(value: Any) -> Any:
    """Hyperparameters as weights_only-safe plain types (tuples -> lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
