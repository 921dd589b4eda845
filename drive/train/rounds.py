"""One on-policy round (:mod:`drive.train.onpolicy`): a snapshot of the policy drives episodes of the
training logs in log replay with DART noise, batched, in the rollout process or the training process.

:class:`RoundJob` is everything a round needs (it is pickled to the rollout process); :func:`run_round`
drives it and returns every step as a :class:`~drive.replay.rollout.Rollout`'s arrays. Episodes start at
random places of the logs, seeded by the job's seed, and a ``focus_share`` of them a few seconds before
places where earlier rounds took over (:func:`takeover_places`): prioritised replay of the policy's
failures, so the rare places it cannot yet drive are driven again while it learns them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

from drive.data.cache import CachedRecording
from drive.nn.policy import Policy
from drive.replay.cached import cached_world, drivable_paths
from drive.replay.path import MIN_PATH_M, ReferencePath
from drive.replay.rollout import Rollout, rollout
from drive.sim.expert import SteeringNoise

__all__ = [
    "FOCUS_LEAD_S",
    "RoundJob",
    "episode_share",
    "round_takeovers_per_km",
    "run_round",
    "takeover_places",
]

FOCUS_LEAD_S = 3.0  # a focus episode starts this long before an earlier round's takeover


@dataclass
class RoundJob:
    """What one round needs, sent to the rollout process: the training caches, the policy (config and a
    snapshot of its weights), the rollouts' seed, ``episodes`` of ``steps`` steps, the labels'
    look-ahead (``lookahead_s``, at least ``min_lookahead_m``), DART noise (1/m), and the ``focus``
    places ``(recording, frame)`` where earlier rounds took over, a ``focus_share`` of the episodes
    starting ``focus_lead_s`` before one of them. ``part = (rank, world)``: drive only that rank's
    share of the episodes (:func:`episode_share`), every one exactly as one process drives it."""

    caches: List[str]
    policy_config: Dict[str, Any]
    weights: Dict[str, torch.Tensor]
    seed: int
    episodes: int
    steps: int
    lookahead_s: float
    min_lookahead_m: float
    noise_std: float = 0.0
    focus: List[Tuple[int, int]] = field(default_factory=list)
    focus_share: float = 0.0
    focus_lead_s: float = FOCUS_LEAD_S
    part: Tuple[int, int] = (0, 1)


def episode_share(episodes: int, rank: int, world: int) -> Tuple[int, int]:
    """The episodes ``[first, end)`` of a round that rank ``rank`` of ``world`` drives: consecutive
    blocks, sizes differing by at most one, in rank order (so the parts concatenated in rank order
    are the round one process drives)."""
    return episodes * rank // world, episodes * (rank + 1) // world


def _focus_starts(
    job: RoundJob, paths: List[Tuple[int, ReferencePath]], count: int
) -> List[Tuple[int, ReferencePath, float]]:
    """``count`` episode starts ``focus_lead_s`` before takeovers of ``job.focus``, drawn by the job's
    seed: (recording, path, start arc length)."""
    rng = np.random.default_rng([job.seed, 0x0F])
    starts = []
    for pick in rng.choice(len(job.focus), size=count):
        recording, frame = job.focus[int(pick)]
        for i, path in paths:
            pos = int(np.searchsorted(path.frames, frame))
            if i == recording and pos < len(path.frames) and path.frames[pos] == frame:
                back = job.focus_lead_s * float(path.speed_mps[pos])
                starts.append((i, path, max(0.0, float(path.frame_s_m[pos]) - back)))
                break
    return starts


def _episode_starts(
    job: RoundJob, paths: List[Tuple[int, ReferencePath]], fps: float
) -> List[Tuple[int, ReferencePath, float]]:
    """Every episode's ``(recording, path, start arc length)``, drawn by the job's seed: those at random
    places of the logs first, then the focus episodes. All are drawn whatever ``job.part``, so each
    episode starts where it does in one process."""
    focused = int(round(job.focus_share * job.episodes)) if job.focus else 0
    focus = _focus_starts(job, paths, focused)
    rng = np.random.default_rng([job.seed, 0x0B])
    length = np.array([p.length_m for _, p in paths])
    starts = []
    for pick in rng.choice(len(paths), size=job.episodes - len(focus), p=length / length.sum()):
        i, path = paths[int(pick)]
        start = rng.uniform(0.0, max(0.0, path.length_m - job.steps / fps * float(path.speed_mps.mean())))
        starts.append((i, path, start))
    return starts + focus


def run_round(job: RoundJob) -> Dict[str, np.ndarray]:
    """One round of rollouts (:class:`~drive.replay.rollout.Rollout` as a dict of arrays); runs in the
    rollout process, one torch thread, or in the training process. ``job.noise_std`` > 0 adds DART's
    Ornstein-Uhlenbeck noise (1/m, 1 s) to the commands the car executes, one stream per episode; the
    focus episodes come after the ones started at random places of the logs. With ``job.part`` only
    that rank's episodes are driven, numbered as in the whole round."""
    torch.set_num_threads(1)
    policy = Policy.from_config(job.policy_config)
    policy.load_state_dict(job.weights)
    policy.eval()
    recs = [CachedRecording(d) for d in job.caches]
    paths = drivable_paths(recs)
    if not paths:
        raise ValueError(
            f"on-policy rollouts: no training recording has a drivable stretch of {MIN_PATH_M:g} m"
        )
    fps = 1.0 / policy.frame_period_s
    first, end = episode_share(job.episodes, *job.part)
    mine = _episode_starts(job, paths, fps)[first:end]
    worlds = [cached_world(recs[i], path, fps, start) for i, path, start in mine]
    ids = [i for i, _, _ in mine]
    hidden = policy.initial_state(max(1, len(mine)))
    fresh = policy.initial_state(1)
    noise = [SteeringNoise(job.noise_std, seed=job.seed * 1_000_003 + e) for e in range(first, end)]

    def act(views: np.ndarray, rows: np.ndarray, start: np.ndarray) -> np.ndarray:
        h = hidden[rows]
        h[torch.from_numpy(start)] = fresh
        x = torch.from_numpy(views).permute(0, 3, 1, 2).float().div_(255.0)
        with torch.inference_mode():
            curvature, hidden[rows] = policy.step(x, h, torch.full((len(rows),), 1.0 / fps))
        return curvature.numpy() + np.array([noise[int(e)](1.0 / fps) for e in rows])  # 0 if quiet

    done = rollout(
        worlds, ids, act, job.steps, lookahead_s=job.lookahead_s, min_lookahead_m=job.min_lookahead_m
    )
    done.episode += first
    return done.to_dict()


def takeover_places(data: Rollout) -> List[Tuple[int, int]]:
    """``(recording, frame)`` of every takeover in ``data`` (a fresh start that is not an episode's first
    step): where the policy left the path."""
    first = np.ones(len(data), bool)
    first[1:] = data.episode[1:] != data.episode[:-1]
    at = np.flatnonzero(data.start & ~first)
    return [(int(data.recording[i]), int(data.frame[i])) for i in at]


def round_takeovers_per_km(data: Rollout) -> float:
    """Takeovers per km the round's episodes drove (with the round's DART noise), nan for no distance."""
    km = float(np.sum(data.speed_mps * data.dt_s)) / 1000.0
    return len(takeover_places(data)) / km if km > 0 else float("nan")
