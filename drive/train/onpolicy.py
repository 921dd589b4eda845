"""On-policy data for ``drive fit``: every N optimizer steps the current policy drives the training logs
in log replay, and the states it visited join the training batches with their corrected labels.

Why: behaviour cloning learns the states the logs show; a policy's small errors take the car to states
they never showed, and its errors compound there (Ross et al., DAgger, AISTATS 2011). Log replay
(:mod:`drive.replay`) produces those states on any log, each with a label: the command recorded for
the frame the car was shown, corrected by pure pursuit for the camera's offset from it (the label
viewpoint augmentation uses; :func:`drive.data.viewpoint.corrected_curvature`). VISTA (Amini et al.,
IEEE RA-L 2020) trains in this loop.

:class:`OnPolicyData` (a Lightning callback, ``--onpolicy.*`` in ``drive fit``, off unless
``every_n_steps`` > 0):

- **rounds**: at every ``every_n_steps``-th step (from ``start_step`` on, if given: behaviour cloning
  first, then training in the loop, as the ``demo`` profile does) a snapshot of the policy's weights drives
  ``episodes`` episodes of ``episode_s`` seconds at random places of the training recordings (their
  preprocessing caches: model-size frames re-rendered with the cache's own calibration), with DART
  noise on the commands the car executes (``noise_std``; Laskey et al., CoRL 2017), batched,
  in a separate process (``process: true``) while training goes on; its result joins the buffer
  ``every_n_steps // 2`` steps later (waiting for it then, if it is not done: where a round lands never
  depends on speed); a round that would land after ``max_steps`` is not started. Rollouts are seeded
  by ``(seed, step)``. With ``focus`` > 0 that share of the episodes starts 3 s before places where the
  last three rounds took over (:mod:`drive.train.rounds`), so a policy keeps meeting the rare places
  it cannot yet drive instead of the straights it already drives.
- **what a round saw**: when it lands, ``onpolicy/takeovers_per_km`` is logged, the takeovers per km
  of its episodes (with their DART noise; the quiet rate on held-out logs is ``val/replay/...``,
  :mod:`drive.train.replay_validation`), so the training curve shows the policy's driving too, and
  ``onpolicy/visited_steps``, the steps its episodes drove (what joins the buffer).
- **the buffer** keeps every visited step (recorded frame, camera offset, label, speed, the elapsed
  time the rollout used): all rounds (``keep_rounds: 0``, DAgger's growing aggregate) or the last
  ``keep_rounds`` (a ring).
- **batches**: once the buffer holds a window, the last ``round(share x batch)`` windows of every
  training batch are replaced by on-policy windows (``seq_len`` consecutive steps of one episode, no
  takeover inside), drawn by ``(seed, step)`` and re-rendered from the cache.
- **resume**: the buffer and a pending round's weight snapshot are saved in every checkpoint; a
  resumed run re-runs the pending round from its snapshot and lands it at the same step, so it
  continues exactly as the uninterrupted run. Nothing else needs saving: every draw (episode starts,
  noise, the windows a batch gets) is a function of ``(seed, step)`` and the rank.
- **under DDP** (``trainer/ddp``, ``torchrun``, SLURM) each rank's rollout process drives its block
  of the round's episodes (:func:`~drive.train.rounds.episode_share`: each started, seeded and
  numbered as one process would), and at the landing step every rank all-gathers the blocks
  (:func:`~drive.train.ranks.gather_results`), so every rank holds the same buffer, the one a single
  process would have drawn from the same weights. The share is of the global batch: the ranks'
  batches are the interleaved rows of the batch one process trains at ``batch_size x world_size``
  (:class:`~drive.data.sampling.EpochShards`), and the on-policy windows replace the same rows of it
  as in one process, each rank filling its own, so a 2-process run mixes in the windows a 1-process
  run at the same global batch does.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any, Dict, List, Optional

import lightning as L
import numpy as np
import torch

from drive.data.augment import AugmentConfig
from drive.data.cache import CachedRecording, model_camera
from drive.data.dataset import sample_weights
from drive.data.sampling import global_rows
from drive.io.workers import stop_now
from drive.replay.cached import drivable_paths
from drive.replay.path import MIN_PATH_M
from drive.replay.rollout import Rollout
from drive.replay.view import ViewSynthesis
from drive.train.label_lookahead import fit_on_recordings
from drive.train.onpolicy_buffer import OnPolicyBuffer
from drive.train.ranks import gather_results, policy_snapshot, side_process
from drive.train.rounds import RoundJob, round_takeovers_per_km, run_round

__all__ = ["DART_NOISE_STD", "OnPolicyData"]

DART_NOISE_STD = 0.015  # 1/m: the rounds' default noise, the DART noise of the built-in world's logs
FOCUS_ROUNDS = 3  # the rounds whose takeovers the focus episodes start before


def _before_end(trainer: L.Trainer, step: int) -> bool:
    """Whether a batch at ``step`` is still trained (a round landing later would only be waited for):
    before ``max_steps``, or for a budget in epochs before the steps they make."""
    if trainer.max_steps is not None and trainer.max_steps >= 0:
        return step < trainer.max_steps
    return step < trainer.estimated_stepping_batches  # inf when neither bounds the run


class OnPolicyData(L.Callback):
    """On-policy rollouts in log replay, mixed into the training batches (module docstring).

    Args:
        every_n_steps: optimizer steps between rounds (0 = off).
        episodes: episodes per round (driven as one batch).
        episode_s: seconds per episode.
        share: fraction of every training batch's windows replaced by on-policy windows.
        keep_rounds: rounds kept in the buffer (0 = all: DAgger's aggregate).
        process: roll out in a separate process while training goes on (else in the training process).
        seed: the rollouts' and draws' seed.
        start_step: the step of the first round, then every ``every_n_steps`` (0: the first round at
            step ``every_n_steps``); a run that ends before a round could land has none, and needs
            nothing rounds need (camera calibration).
        noise_std: DART noise (Laskey et al., CoRL 2017) on the commands the car executes in the
            rollouts, 1/m (Ornstein-Uhlenbeck, 1 s; 0 = none): the policy then also visits its own
            recoveries from being pushed off the path, not only the near-perfect states a good policy
            keeps to; labels are those of the states visited (docs/benchmarks.md, "DART noise in the
            rounds").
        max_offset_m, max_yaw_deg: train only on windows whose every step lies within this lateral
            offset and heading error from the recorded frame's camera (0 = no limit), e.g. the
            envelope of viewpoint augmentation, where the re-rendered views are most faithful.
        focus: the share of a round's episodes that start ``FOCUS_LEAD_S`` (3 s) before a place where
            one of the last ``FOCUS_ROUNDS`` (3) rounds took over (prioritised replay of the policy's
            failures; the rest start at random places, as with 0, the default).
    """

    def __init__(
        self,
        every_n_steps: int = 0,
        episodes: int = 16,
        episode_s: float = 20.0,
        share: float = 0.25,
        keep_rounds: int = 0,
        process: bool = True,
        seed: int = 0,
        max_offset_m: float = 0.0,
        max_yaw_deg: float = 0.0,
        noise_std: float = DART_NOISE_STD,
        start_step: int = 0,
        focus: float = 0.0,
    ) -> None:
        if every_n_steps < 0 or episodes < 1 or not episode_s > 0 or not 0.0 < share < 1.0 or keep_rounds < 0:
            raise ValueError(
                "onpolicy: every_n_steps >= 0, episodes >= 1, episode_s > 0, 0 < share < 1 and "
                f"keep_rounds >= 0, got {every_n_steps}, {episodes}, {episode_s}, {share}, {keep_rounds}"
            )
        if start_step < 0 or not 0.0 <= focus < 1.0:
            raise ValueError(f"onpolicy: start_step >= 0 and 0 <= focus < 1, got {start_step}, {focus}")
        self.focus = float(focus)
        if max_offset_m < 0 or max_yaw_deg < 0 or not noise_std >= 0:
            raise ValueError(
                "onpolicy: max_offset_m, max_yaw_deg, noise_std >= 0, got "
                f"{max_offset_m}, {max_yaw_deg}, {noise_std}"
            )
        self.noise_std = float(noise_std)
        self.buffer = OnPolicyBuffer(int(keep_rounds), float(max_offset_m), float(np.radians(max_yaw_deg)))
        self.every, self.episodes, self.episode_s = int(every_n_steps), int(episodes), float(episode_s)
        self.first = int(start_step) or self.every  # the first round's step
        self.share, self.process, self.seed = float(share), process, int(seed)
        self.pending: Optional[Dict[str, Any]] = None  # {"step", "weights"} of the round in flight
        self.active = False  # rounds run in this fit (on_fit_start)
        self.rank, self.world = 0, 1  # this process's DDP rank, of world_size (on_fit_start)
        self._job: Optional[futures.Future] = None
        self._pool: Optional[futures.ProcessPoolExecutor] = None
        self._views: Dict[int, ViewSynthesis] = {}

    # -- set-up --------------------------------------------------------------------------------
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.active = bool(self.every) and (
            self.pending is not None or len(self.buffer) > 0 or _before_end(trainer, self._lands(self.first))
        )
        if not self.active:  # off, or no round lands in this run (a short run of a late schedule)
            return
        self.rank, self.world = int(trainer.global_rank), int(trainer.world_size)
        dm = trainer.datamodule
        self.recordings: List[CachedRecording] = dm.datasets["train"].recordings
        missing = [r.name for r in self.recordings if model_camera(r.info) is None]
        if missing:
            raise ValueError(
                "onpolicy: rollouts re-render frames and need camera calibration, missing for "
                f"{missing[:3]}; give the reader option camera (docs/data.md) or train without rounds: "
                "--onpolicy.every_n_steps 0"
            )
        if not drivable_paths(self.recordings):
            raise ValueError(
                f"onpolicy: rollouts need a drivable stretch of {MIN_PATH_M:g} m, and no training recording "
                "has one (too short, or stopped); train without rounds: --onpolicy.every_n_steps 0"
            )
        aug = dm.augment or AugmentConfig()
        lookahead_s = aug.lookahead_s
        if lookahead_s == "fit":  # no augmentation for PolicyModule's set-up to have fitted it in
            fps = 1.0 / pl_module.policy.frame_period_s
            lookahead_s = fit_on_recordings(self.recordings, fps, aug.min_lookahead_m).lookahead_s
        self.lookahead = [lookahead_s, aug.min_lookahead_m]
        self.curve_factor, self.seq_len = dm.curve_factor, dm.seq_len
        if self.process:
            self._pool = side_process()
        if self.pending is not None:  # a resumed run: the round in flight when the checkpoint was saved
            self._submit(pl_module, self.pending["step"], self.pending["weights"])

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._pool is not None:  # a round in flight is not waited for: a resumed run redoes it
            stop_now(self._pool)
            self._pool = None

    # -- rounds --------------------------------------------------------------------------------
    def _submit(self, pl_module: Any, step: int, weights: Dict[str, torch.Tensor]) -> None:
        self.pending = {"step": step, "weights": weights}
        fps = 1.0 / pl_module.policy.frame_period_s
        job = RoundJob(
            caches=[str(r.directory) for r in self.recordings],
            policy_config=pl_module.policy.config(),
            weights=weights,
            seed=self.seed * 1_000_003 + step,
            episodes=self.episodes,
            steps=max(1, int(round(self.episode_s * fps))),
            lookahead_s=self.lookahead[0],
            min_lookahead_m=self.lookahead[1],
            noise_std=self.noise_std,
            focus=self.buffer.takeover_places(FOCUS_ROUNDS) if self.focus else [],
            focus_share=self.focus,
            part=(self.rank, self.world),
        )
        if self._pool is not None:
            self._job = self._pool.submit(run_round, job)
        else:
            self._job = futures.Future()
            self._job.set_result(run_round(job))

    def _land(self, trainer: L.Trainer) -> None:
        """The round joins the buffer: every rank's block of episodes, gathered (a step every rank
        reaches, so it is a collective under DDP), in rank order = the round of one process; what it
        saw is logged at the step it lands, whatever log_every_n_steps is."""
        parts = [Rollout(**p) for p in gather_results(self._job.result, self.world)]
        landed = Rollout.concat(parts) if len(parts) > 1 else parts[0]
        self.buffer.add(landed)
        seen = {
            "onpolicy/takeovers_per_km": round_takeovers_per_km(landed),
            "onpolicy/visited_steps": len(landed),
        }
        for logger in trainer.loggers:
            logger.log_metrics(seen, step=trainer.global_step)
        self.pending, self._job = None, None

    def _lands(self, step: int) -> int:
        """The step at which a round started at ``step`` joins the buffer."""
        return step + max(1, self.every // 2)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if not self.active:
            return
        step = trainer.global_step
        if self.pending is not None and step >= self._lands(self.pending["step"]):
            self._land(trainer)
        due = step >= self.first and (step - self.first) % self.every == 0
        if due and self.pending is None and _before_end(trainer, self._lands(step)):
            self._submit(pl_module, step, policy_snapshot(pl_module, self.world))
        self._mix(batch, step)

    # -- batches -------------------------------------------------------------------------------
    def _mix(self, batch: Dict[str, torch.Tensor], step: int) -> None:
        """The last ``round(share x global batch)`` rows of the global batch: on-policy windows."""
        if not len(self.buffer):
            return
        b = batch["frames"].shape[0]
        total = b * self.world  # the global batch, whose rows the ranks' batches interleave
        count = min(total, int(round(self.share * total)))
        draws = self.buffer.draw(self.seed, step, count, self.seq_len)  # for the last `count` rows
        if len(draws) == 0:
            return
        data = self.buffer.data
        for row, at in enumerate(global_rows(b, self.rank, self.world)):
            if at >= total - count:
                first = draws[at - (total - count)]
                self._put(batch, row, data, np.arange(first, first + self.seq_len))

    def _put(self, batch: Dict[str, torch.Tensor], row: int, data: Rollout, steps: np.ndarray) -> None:
        """Window ``steps`` of the buffer, re-rendered from the cache, into batch row ``row``."""
        rec = int(data.recording[steps[0]])
        if rec not in self._views:
            cached = self.recordings[rec]
            self._views[rec] = ViewSynthesis(model_camera(cached.info), cached.frames.shape[2:])
        view, frames = self._views[rec], self.recordings[rec].frames
        images = []
        for k in steps:
            recorded = np.ascontiguousarray(frames[data.frame[k]].transpose(1, 2, 0))
            images.append(
                view(recorded, data.left_m[k], data.yaw_rad[k], data.forward_m[k]).transpose(2, 0, 1)
            )
        device = batch["frames"].device
        batch["frames"][row] = torch.from_numpy(np.stack(images)).to(device)
        label = data.label_per_m[steps]
        for key, value in (
            ("curvature", label),
            ("dt", data.dt_s[steps]),
            ("speed", data.speed_mps[steps]),
            ("weight", sample_weights(label, self.curve_factor)),
        ):
            if key in batch:
                batch[key][row] = torch.from_numpy(value.astype(np.float32)).to(device)
        if "mask" in batch:
            batch["mask"][row] = True

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        if not self.every:
            return {}
        return {**self.buffer.state_dict(), "pending": self.pending}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.buffer.load_state_dict(state)
        self.pending = state.get("pending")
