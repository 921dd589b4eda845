"""Validation by driving: at every validation of ``drive fit`` the policy drives the validation logs in
log replay, so checkpoints are chosen, and runs stopped, by how the policy drives rather than by its
open-loop MSE (Codevilla et al., ECCV 2018: offline error ranks driving policies poorly).

:class:`ReplayValidation` (a Lightning callback, ``--val_replay.*`` in ``drive fit``; on in the
profiles ``demo`` and ``ncp_ltc``, which train on calibrated logs):

- at the start of each validation a snapshot of the policy's weights drives every reference path of
  the validation data (the validation recordings, or the validation part of the training recordings)
  in log replay (:mod:`drive.replay`) over their preprocessing caches, in a separate process
  (``process: true``) while the open-loop validation runs; its result is waited for at the
  validation's end, so the numbers belong to the weights of that step and are logged at that step
  (never a step that depends on the machine's speed), where ``ModelCheckpoint`` and ``EarlyStopping``
  see them. ``km`` > 0 drives only the first ``km`` of paths in the recordings' order (deterministic);
- it logs ``val/replay/interventions_per_km`` with the exact 95 % Poisson interval
  (``..._lo``, ``..._hi``), ``val/replay/interventions``, ``val/replay/lateral_rms_m``,
  ``val/replay/autonomy`` (%) and ``val/replay/km``, and **``val/replay/score`` = interventions +
  min(lateral RMS / 1 m, 0.999)**: lower is better; fewer interventions always rank first, and among
  equal counts the better-centred policy (``--checkpoint.monitor val/replay/score``, the profiles'
  choice); the top-down picture of the driven against the recorded paths goes to TensorBoard
  (``val/replay/drive``) and to ``<log dir>/replay/step_NNNNNN.png``;
- without camera calibration (log replay re-renders frames with it) or without a 30 m drivable
  stretch in the validation data, it says so in one line and validation stays open loop: a checkpoint
  or early stopping that monitors ``val/replay/...`` monitors ``val/loss`` instead, and says so.

A resumed run validates the restored weights on the same logs, so its numbers are those of the
uninterrupted run.
"""

from __future__ import annotations

import math
import multiprocessing
import tempfile
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info

from drive.data.cache import CachedRecording, model_camera
from drive.io.atomic import write_image
from drive.nn.policy import Policy
from drive.replay.loop import END_MARGIN_M
from drive.replay.rollout import MIN_PATH_M, cached_paths, cached_world
from drive.sim.closed_loop import Segment, drive_segment, summarize
from drive.sim.driver import Observation
from drive.sim.safety import SAFETY_DRIVER

__all__ = ["ReplayJob", "ReplayValidation", "replay_score", "run_replay"]

PREFIX = "val/replay/"


def replay_score(interventions: int, lateral_rms_m: float) -> float:
    """Interventions first, lateral RMS (m, capped below 1) breaking ties: lower is better."""
    return float(interventions) + min(float(lateral_rms_m), 0.999)


@dataclass
class ReplayJob:
    """One validation's drive, sent to the replay process: the validation caches and the frame range of
    each that validation covers ``(cache index, first, end)``, the policy (config and weights), the
    distance budget (``km``, 0 = all) and whether to draw the picture."""

    caches: List[str]
    ranges: List[Tuple[int, int, int]]
    policy_config: Dict[str, Any]
    weights: Dict[str, torch.Tensor]
    km: float = 0.0
    picture: bool = True


class _PolicyDriver:
    """A policy as a world driver on model-size frames (the cache's), batch 1."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.hidden: Optional[torch.Tensor] = None

    def reset(self) -> None:
        self.hidden = self.policy.initial_state(1)

    def act(self, obs: Observation) -> float:
        x = torch.from_numpy(obs.image).permute(2, 0, 1)[None].float().div_(255.0)
        with torch.inference_mode():
            curvature, self.hidden = self.policy.step(x, self.hidden, torch.tensor([obs.dt_s]))
        return float(curvature[0])


def _segments(job: ReplayJob, driver: _PolicyDriver, fps: float) -> List[Segment]:
    segments: List[Segment] = []
    budget_m = 1000.0 * job.km if job.km > 0 else math.inf
    for c, first, end in job.ranges:
        cached = CachedRecording(job.caches[c])
        for path in cached_paths(cached, (first, end)):
            if path.length_m <= MIN_PATH_M or budget_m <= 0:
                continue
            world = cached_world(cached, path, fps, 0.0)
            length = min(path.length_m - END_MARGIN_M, budget_m)
            conditions = {"recording": cached.name}
            segments.append(
                drive_segment(world, driver, length, None, SAFETY_DRIVER, None, len(segments), conditions)
            )
            budget_m -= length
    return segments


def run_replay(job: ReplayJob) -> Dict[str, Any]:
    """Drive ``job`` (module docstring); returns the metrics (``val/replay/...`` without the prefix) and
    the picture (uint8 RGB [H, W, 3], or None)."""
    torch.set_num_threads(1)
    policy = Policy.from_config(job.policy_config)
    policy.load_state_dict(job.weights)
    policy.eval()
    segments = _segments(job, _PolicyDriver(policy), 1.0 / policy.frame_period_s)
    m = summarize(segments)
    lo, hi = m["interventions_per_km_ci95"]
    metrics = {
        "interventions": float(m["interventions"]),
        "interventions_per_km": m["interventions_per_km"],
        "interventions_per_km_lo": lo,
        "interventions_per_km_hi": hi,
        "lateral_rms_m": m["lateral_rms_m"],
        "autonomy": m["autonomy_pct"],
        "km": m["km"],
        "score": replay_score(m["interventions"], m["lateral_rms_m"]),
    }
    return {"metrics": metrics, "picture": _picture(segments) if job.picture else None}


def _picture(segments: List[Segment]) -> np.ndarray:
    import cv2  # here: only where a picture is drawn

    from drive.sim.plot import plot_drive  # here: matplotlib's start-up only where a picture is drawn

    with tempfile.TemporaryDirectory() as folder:
        png = plot_drive(segments[:8], Path(folder) / "drive.png", title="validation in log replay")
        return cv2.cvtColor(cv2.imread(str(png)), cv2.COLOR_BGR2RGB)


def validation_ranges(dataset: Any) -> List[Tuple[int, int, int]]:
    """``(recording, first, end)`` of the frames each recording of a validation dataset covers."""
    spans: Dict[int, List[int]] = {}
    for w in dataset.windows:
        lo, hi = spans.setdefault(w.recording, [w.start, w.start + w.length])
        spans[w.recording] = [min(lo, w.start), max(hi, w.start + w.length)]
    return [(r, lo, hi) for r, (lo, hi) in sorted(spans.items())]


def _monitor_loss_instead(trainer: L.Trainer, why: str) -> None:
    """Checkpoints and early stopping that monitor a ``val/replay/`` metric monitor ``val/loss``."""
    moved = []
    for cb in trainer.callbacks:
        monitor = getattr(cb, "monitor", None)
        if isinstance(monitor, str) and monitor.startswith(PREFIX):
            cb.monitor = "val/loss"  # both lower-is-better
            moved.append(type(cb).__name__)
    if moved and why != "val_replay is off":
        rank_zero_info(f"val_replay: {why}; validation is open loop and {', '.join(moved)} monitor val/loss")
    elif moved:
        rank_zero_info(
            f"{', '.join(moved)}: {PREFIX}... needs --val_replay.enabled true; monitoring val/loss"
        )


class ReplayValidation(L.Callback):
    """Validation by driving in log replay (module docstring).

    Args:
        enabled: drive at every validation (the profiles ``demo`` and ``ncp_ltc`` turn it on).
        km: drive at most this many km of the validation paths, the first in the recordings' order
            (0 = all of them).
        process: drive in a separate process while the open-loop validation runs (else in the
            training process).
        picture: log the top-down picture of the drive.
    """

    def __init__(
        self, enabled: bool = False, km: float = 0.0, process: bool = True, picture: bool = True
    ) -> None:
        if not (math.isfinite(km) and km >= 0):
            raise ValueError(f"val_replay: km must be a number >= 0, got {km}")
        self.enabled, self.km, self.process, self.picture = (
            bool(enabled),
            float(km),
            bool(process),
            bool(picture),
        )
        self.active = False
        self._job: Optional[futures.Future] = None
        self._pool: Optional[futures.ProcessPoolExecutor] = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.active = False
        dm = trainer.datamodule
        dataset = getattr(dm, "datasets", {}).get("val") if self.enabled else None
        why = self._cannot_drive(dataset)
        if why:
            _monitor_loss_instead(trainer, why)
            return
        recordings: List[CachedRecording] = dataset.recordings
        ranges = validation_ranges(dataset)
        self.active, self.caches, self.ranges = True, [str(r.directory) for r in recordings], ranges
        if self.process:
            self._pool = futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def _cannot_drive(self, dataset: Any) -> str:
        """Why the validation data cannot be driven ('' where it can)."""
        if not self.enabled:
            return "val_replay is off"
        if dataset is None:
            return "no validation data"
        recordings: List[CachedRecording] = dataset.recordings
        ranges = validation_ranges(dataset)
        if any(model_camera(recordings[r].info) is None for r, _, _ in ranges):
            return "the validation logs have no camera calibration, which log replay needs"
        if not any(
            p.length_m > MIN_PATH_M for r, lo, hi in ranges for p in cached_paths(recordings[r], (lo, hi))
        ):
            return f"no validation path is {MIN_PATH_M:g} m long"
        return ""

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not self.active or trainer.sanity_checking:
            return
        weights = {k: v.detach().to("cpu", copy=True) for k, v in pl_module.policy.state_dict().items()}
        job = ReplayJob(self.caches, self.ranges, pl_module.policy.config(), weights, self.km, self.picture)
        if self._pool is not None:
            self._job = self._pool.submit(run_replay, job)
        else:
            self._job = futures.Future()
            self._job.set_result(run_replay(job))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if self._job is None:
            return
        result, self._job = self._job.result(), None
        for name, value in result["metrics"].items():
            pl_module.log(PREFIX + name, value, on_epoch=True, sync_dist=False)
        if result["picture"] is not None:
            self._save_picture(trainer, result["picture"])

    def _save_picture(self, trainer: L.Trainer, picture: np.ndarray) -> None:
        step = trainer.global_step
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "add_image"):
                experiment.add_image(PREFIX + "drive", picture, step, dataformats="HWC")
        if trainer.log_dir is not None and trainer.is_global_zero:
            folder = Path(trainer.log_dir) / "replay"
            folder.mkdir(parents=True, exist_ok=True)
            write_image(folder / f"step_{step:06d}.png", picture)
