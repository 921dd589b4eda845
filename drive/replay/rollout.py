"""On-policy rollouts in log replay: a batch of episodes driven at once, every step kept with its label.

Behaviour cloning learns the states the logs show; the car then drifts into states they never
showed, and errors compound (Ross et al., DAgger, AISTATS 2011). In log replay the policy visits its
own states on any log, and each has a label: the recorded command for the frame it was shown,
corrected by pure pursuit for the camera's offset from that frame (``corrected_curvature``, the label
viewpoint augmentation uses: Coulter 1992; look-ahead ``max(min_lookahead_m, lookahead_s x speed)``).

:func:`rollout` drives several :class:`~drive.replay.world.LogWorld` episodes side by side, one
batched policy call per step (``act``: views in, curvature out, state kept by the caller), with the
world's safety driver, and returns every step as a :class:`Rollout`: which recorded frame the car
saw, the camera's offset from it (enough to re-render the view later, from a cache), the label, the
speed and the elapsed time the policy was given. Training rolls out over preprocessing caches
(:mod:`drive.replay.cached`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Sequence

import numpy as np

from drive.data.viewpoint import corrected_curvature
from drive.replay.world import LogWorld
from drive.sim.safety import SAFETY_DRIVER, InterventionRule

__all__ = ["Rollout", "rollout"]


@dataclass
class Rollout:
    """Every step of a rollout, one entry per step, episode by episode in time order.

    episode, recording, frame: int64 [S] (the recording index is the caller's, ``frame`` the recorded
    frame shown); forward_m, left_m, yaw_rad: the camera's offset from that frame's camera;
    label_per_m: the corrected label; speed_mps, dt_s: float64 [S]; start: bool [S], the first step
    of an episode or the step after a takeover (a fresh hidden state).
    """

    episode: np.ndarray
    recording: np.ndarray
    frame: np.ndarray
    forward_m: np.ndarray
    left_m: np.ndarray
    yaw_rad: np.ndarray
    label_per_m: np.ndarray
    speed_mps: np.ndarray
    dt_s: np.ndarray
    start: np.ndarray

    def __len__(self) -> int:
        return len(self.episode)

    def to_dict(self) -> Dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def concat(cls, parts: Sequence["Rollout"]) -> "Rollout":
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)})


def rollout(
    worlds: Sequence[LogWorld],
    recordings: Sequence[int],
    act: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    steps: int,
    lookahead_s: float = 2.0,
    min_lookahead_m: float = 5.0,
    rule: InterventionRule = SAFETY_DRIVER,
) -> Rollout:
    """Drive every world for up to ``steps`` steps (an episode ends early at its path's end).

    ``act(views uint8 [n, h, w, 3], episodes int [n], start bool [n]) -> curvature [n]`` (1/m) steers
    the ``n`` episodes still running (their indices in ``worlds``); ``start`` marks those that begin
    now or after a takeover (reset their hidden state).
    ``recordings[i]`` is the caller's index of world ``i``'s recording, kept with its steps.
    """
    steps_of: List[List[List[Any]]] = [[] for _ in worlds]
    running = [True] * len(worlds)
    start = np.ones(len(worlds), bool)
    for _ in range(steps):
        live = [i for i, w in enumerate(worlds) if running[i]]
        if not live:
            break
        views = np.stack([worlds[i].render() for i in live])
        commands = np.asarray(act(views, np.asarray(live), start[live]), dtype=np.float64).reshape(-1)
        for i, cmd in zip(live, commands):
            w = worlds[i]
            forward, left, yaw = w.offset
            frame = w.shown[-1]
            pos = int(np.searchsorted(w.path.frames, frame))
            kappa, speed = w.path.curvature_per_m[pos], w.path.speed_mps[pos]
            steps_of[i].append([frame, forward, left, yaw, kappa, speed, w.dt_s, bool(start[i])])
            if not math.isfinite(cmd):
                raise ValueError(f"the policy returned a non-finite curvature {cmd} in an on-policy rollout")
            w.step(float(cmd))
            start[i] = False
            if rule.needs_takeover(w):
                w.place_on_lane(w.s_m)
                start[i] = True
            if w.remaining_m < 1.0:
                running[i] = False
    rows = [(e, recordings[e], *step) for e, episode in enumerate(steps_of) for step in episode]
    cols = list(zip(*rows)) if rows else [[] for _ in range(10)]
    types = [np.int64] * 3 + [np.float64] * 6 + [bool]
    e, r, frame, forward, left, yaw, kappa, speed, dt, first = (
        np.asarray(c, dtype=t) for c, t in zip(cols, types)
    )
    label = corrected_curvature(kappa, left, yaw, speed, lookahead_s, min_lookahead_m)
    return Rollout(e, r, frame, forward, left, yaw, label, speed, dt, first)
