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

Under DDP the validation paths are planned once (:func:`plan_drive`: every path and the length of it
to drive, the ``km`` budget applied in the recordings' order) and dealt out to the ranks, longest
first to the least loaded (:func:`plan_share`); each rank's replay process drives its own, and at the
validation's end the ranks all-gather every segment's sums (:func:`segment_sums`: interventions, km,
time, squared lateral offsets and steps), from which every rank computes the same metrics
(:func:`replay_metrics`, in the plan's order: the numbers of one process, to the last bit on one
machine, as each segment is driven alone by a batch-1 policy on one thread) and logs them; the
picture's segments come from whichever rank drove them and rank 0 draws it.
"""

from __future__ import annotations

import math
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
from drive.io.workers import stop_now
from drive.nn.policy import Policy
from drive.replay.cached import cached_paths, cached_world
from drive.replay.loop import END_MARGIN_M
from drive.replay.path import MIN_PATH_M
from drive.sim.closed_loop import Segment, drive_segment
from drive.sim.driver import Observation
from drive.sim.poisson import rate_interval
from drive.sim.safety import SAFETY_DRIVER
from drive.train.ranks import gather_results, policy_snapshot, side_process

__all__ = [
    "ReplayJob",
    "ReplayValidation",
    "plan_drive",
    "plan_share",
    "replay_metrics",
    "replay_score",
    "run_replay",
    "segment_sums",
]

PREFIX = "val/replay/"
PICTURE_SEGMENTS = 8  # the picture shows the first segments of the plan
# one segment of a validation drive: (index in the plan, cache, first frame, end frame, path of that
# range, metres to drive)
PlanItem = Tuple[int, int, int, int, int, float]


def replay_score(interventions: int, lateral_rms_m: float) -> float:
    """Interventions first, lateral RMS (m, capped below 1) breaking ties: lower is better."""
    return float(interventions) + min(float(lateral_rms_m), 0.999)


@dataclass
class ReplayJob:
    """One validation's drive (or one rank's share of it), sent to the replay process: the validation
    caches, the segments to drive (:data:`PlanItem` s of :func:`plan_drive`), the policy (config and
    weights) and whether to return the segments the picture shows (the first
    :data:`PICTURE_SEGMENTS` of the plan)."""

    caches: List[str]
    items: List[PlanItem]
    policy_config: Dict[str, Any]
    weights: Dict[str, torch.Tensor]
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


def plan_drive(
    recordings: List[CachedRecording], ranges: List[Tuple[int, int, int]], km: float
) -> List[PlanItem]:
    """Every validation path longer than :data:`MIN_PATH_M` in the recordings' order, each to be
    driven to :data:`END_MARGIN_M` before its end, the first ``km`` of them (0 = all)."""
    plan: List[PlanItem] = []
    budget_m = 1000.0 * km if km > 0 else math.inf
    for c, first, end in ranges:
        for j, path in enumerate(cached_paths(recordings[c], (first, end))):
            if path.length_m <= MIN_PATH_M or budget_m <= 0:
                continue
            length = min(path.length_m - END_MARGIN_M, budget_m)
            plan.append((len(plan), c, first, end, j, length))
            budget_m -= length
    return plan


def plan_share(plan: List[PlanItem], rank: int, world: int) -> List[PlanItem]:
    """Rank ``rank``'s segments of ``plan``: longest first to the rank with the fewest metres so far
    (deterministic: every rank computes the same assignment), in the plan's order."""
    load = [0.0] * world
    mine = []
    for item in sorted(plan, key=lambda it: (-it[5], it[0])):
        target = load.index(min(load))
        load[target] += item[5]
        if target == rank:
            mine.append(item)
    return sorted(mine)


def segment_sums(segment: Segment) -> Dict[str, float]:
    """What :func:`replay_metrics` needs of a driven segment: sums that add up across segments."""
    lateral = np.asarray(segment.lateral_offset_m, dtype=np.float64)
    return {
        "index": float(segment.index),
        "interventions": float(len(segment.intervention_xy)),
        "km": float(segment.km),
        "time_s": float(segment.time_s),
        "lateral_sq": float(np.sum(lateral**2)),
        "steps": float(len(lateral)),
    }


def replay_metrics(sums: List[Dict[str, float]]) -> Dict[str, float]:
    """``val/replay/...`` (without the prefix) from the segments' :func:`segment_sums`, added in the
    plan's order (so any split of the segments over ranks gives the same numbers): interventions/km
    with its exact 95 % Poisson interval, lateral RMS, autonomy (6 s per intervention), km, score."""
    total = {k: 0.0 for k in ("interventions", "km", "time_s", "lateral_sq", "steps")}
    for part in sorted(sums, key=lambda p: p["index"]):
        for key in total:
            total[key] += part[key]
    n, km, time_s = int(total["interventions"]), total["km"], total["time_s"]
    lo, hi = rate_interval(n, km)
    rms = math.sqrt(total["lateral_sq"] / total["steps"]) if total["steps"] else math.nan
    return {
        "interventions": float(n),
        "interventions_per_km": n / km if km > 0 else math.nan,
        "interventions_per_km_lo": lo,
        "interventions_per_km_hi": hi,
        "lateral_rms_m": rms,
        "autonomy": max(0.0, (1.0 - n * SAFETY_DRIVER.takeover_s / time_s) * 100.0)
        if time_s > 0
        else math.nan,
        "km": km,
        "score": replay_score(n, rms),
    }


def run_replay(job: ReplayJob) -> Dict[str, Any]:
    """Drive ``job``'s segments (module docstring); returns their :func:`segment_sums` (``sums``) and
    the driven :class:`~drive.sim.closed_loop.Segment` s the picture shows (``segments``)."""
    torch.set_num_threads(1)
    policy = Policy.from_config(job.policy_config)
    policy.load_state_dict(job.weights)
    policy.eval()
    driver, fps = _PolicyDriver(policy), 1.0 / policy.frame_period_s
    paths: Dict[Tuple[int, int, int], Tuple[CachedRecording, List[Any]]] = {}
    sums, shown = [], []
    for index, c, first, end, j, length in job.items:
        if (c, first, end) not in paths:
            cached = CachedRecording(job.caches[c])
            paths[c, first, end] = (cached, cached_paths(cached, (first, end)))
        cached, found = paths[c, first, end]
        world = cached_world(cached, found[j], fps, 0.0)
        conditions = {"recording": cached.name}
        segment = drive_segment(world, driver, length, None, SAFETY_DRIVER, None, index, conditions)
        sums.append(segment_sums(segment))
        if job.picture and index < PICTURE_SEGMENTS:
            shown.append(segment)
    return {"sums": sums, "segments": shown}


def _picture(segments: List[Segment]) -> np.ndarray:
    import cv2  # here: only where a picture is drawn

    from drive.sim.plot import plot_drive  # here: matplotlib's start-up only where a picture is drawn

    with tempfile.TemporaryDirectory() as folder:
        png = plot_drive(segments, Path(folder) / "drive.png", title="validation in log replay")
        return cv2.cvtColor(cv2.imread(str(png)), cv2.COLOR_BGR2RGB)


def validation_ranges(dataset: Any) -> List[Tuple[int, int, int]]:
    """``(recording, first, end)`` of every stretch of frames a validation dataset covers: its windows'
    frames, a new stretch wherever a window does not start where the previous one ended (the first
    and the last part of a drive that ``val_split: ncp`` validates on are two stretches, and the
    training frames between them are never driven)."""
    ranges: List[List[int]] = []
    for w in dataset.windows:
        if ranges and ranges[-1][0] == w.recording and ranges[-1][2] == w.start:
            ranges[-1][2] = w.start + w.length
        else:
            ranges.append([w.recording, w.start, w.start + w.length])
    return [(r, lo, hi) for r, lo, hi in ranges]


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
        self.world, self.items = 1, []  # DDP world size, this rank's segments (on_fit_start)
        self._job: Optional[futures.Future] = None
        self._pool: Optional[futures.ProcessPoolExecutor] = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.active = False
        dm = trainer.datamodule
        dataset = getattr(dm, "datasets", {}).get("val") if self.enabled else None
        why, plan = self._plan(dataset)
        if why:
            _monitor_loss_instead(trainer, why)
            return
        self.world = int(trainer.world_size)
        self.items = plan_share(plan, int(trainer.global_rank), self.world)
        self.active, self.caches = True, [str(r.directory) for r in dataset.recordings]
        if self.process and self.items:
            self._pool = side_process()

    def _plan(self, dataset: Any) -> Tuple[str, List[PlanItem]]:
        """Why the validation data cannot be driven ('' where it can) and the plan of the drive."""
        if not self.enabled:
            return "val_replay is off", []
        if dataset is None:
            return "no validation data", []
        recordings: List[CachedRecording] = dataset.recordings
        ranges = validation_ranges(dataset)
        if any(model_camera(recordings[r].info) is None for r, _, _ in ranges):
            return "the validation logs have no camera calibration, which log replay needs", []
        plan = plan_drive(recordings, ranges, self.km)
        return ("" if plan else f"no validation path is {MIN_PATH_M:g} m long"), plan

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._pool is not None:  # an interrupted validation's drive is not waited for
            stop_now(self._pool)
            self._pool = None

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not self.active or trainer.sanity_checking:
            return
        weights = policy_snapshot(pl_module, self.world)
        job = ReplayJob(self.caches, self.items, pl_module.policy.config(), weights, self.picture)
        if self._pool is not None:
            self._job = self._pool.submit(run_replay, job)
        else:  # in this process (or a rank with no segment of its own: nothing to drive)
            self._job = futures.Future()
            self._job.set_result(run_replay(job))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        """Every rank's segments gathered (a collective under DDP: every rank validates), the same
        metrics logged on every rank (a max over identical values: exact), the picture drawn by rank 0."""
        if self._job is None:
            return
        parts, self._job = gather_results(self._job.result, self.world), None
        metrics = replay_metrics([s for part in parts for s in part["sums"]])
        for name, value in metrics.items():
            pl_module.log(PREFIX + name, value, on_epoch=True, sync_dist=self.world > 1, reduce_fx="max")
        shown = sorted((s for part in parts for s in part["segments"]), key=lambda s: s.index)
        log_dir = trainer.log_dir  # a broadcast from rank 0 under DDP: every rank asks
        if shown and trainer.is_global_zero:
            # in the replay process where there is one: matplotlib stays out of the training process
            done = self._pool.submit(_picture, shown).result() if self._pool else _picture(shown)
            self._save_picture(trainer, done, log_dir)

    def _save_picture(self, trainer: L.Trainer, picture: np.ndarray, log_dir: Optional[str]) -> None:
        step = trainer.global_step
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if hasattr(experiment, "add_image"):
                experiment.add_image(PREFIX + "drive", picture, step, dataformats="HWC")
        if log_dir is not None:
            folder = Path(log_dir) / "replay"
            folder.mkdir(parents=True, exist_ok=True)
            write_image(folder / f"step_{step:06d}.png", picture)
