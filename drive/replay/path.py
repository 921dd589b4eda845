"""The reference path of a recorded drive: where the recording's car went, and where each frame was shot.

Log replay measures a driver against the path the recording's car drove (VISTA, Amini et al. 2020;
PilotNet's simulator, Bojarski et al. 2016): lateral offset and heading error are relative to it, and
every frame is re-rendered from the pose the frame was taken at. The path comes from

- the log's poses (``x_m``, ``y_m``, ``yaw_rad`` columns, world frame, yaw left-positive) where it
  has them, else
- its curvature (1/m), speed (m/s) and timestamps: the car is taken to hold frame ``i``'s curvature
  and speed from ``t_i`` to ``t_{i+1}`` (the period the command of a frame acts in the world) and to
  drive the exact circular arc; heading and position follow by integration from ``(0, 0, 0)``.

A recording splits into *segments* at time gaps (:func:`drive.data.sequences.segments`, the same rule
as training windows) and where the car stands or crawls (below ``MIN_SPEED_MPS``: lane keeping is not
measured while parked); each is one :class:`ReferencePath`. Its ``road`` is the path as a
:class:`~drive.sim.road.Road` of zero lane width, sampled every ``ds_m``: the world's own geometry
(projection, lane errors, ``lane_pose``, pure pursuit on it) applies to it unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Mapping, Optional

import numpy as np

from drive.data.sequences import segments
from drive.io.recording import POSE_COLUMNS, Recording
from drive.sim.road import Road

# shorter recorded stretches are not driven on by training (on-policy rounds, the look-ahead fit,
# validation by driving)
MIN_PATH_M = 30.0

__all__ = ["MIN_PATH_M", "ReferencePath", "reference_paths", "paths_from_log", "MIN_SPEED_MPS"]

DS_M = 0.1  # sampling of the reference line
MIN_SPEED_MPS = 1.0  # slower frames (standing, parking) are not driven in replay


@dataclass
class ReferencePath:
    """One gap-free segment of a recording as the path its car drove.

    Attributes:
        road: the path as a zero-width :class:`Road` (arc length from 0 at the segment's first frame).
        frames: [N] indices of the segment's frames in the recording.
        frame_s_m: [N] arc length of each frame's pose along ``road`` (non-decreasing).
        frame_pose: [N, 3] vehicle pose (x_m, y_m, yaw_rad) at each frame.
        speed_mps, curvature_per_m, timestamp_s: [N] the log's values at each frame.
        source: ``"poses"`` or ``"curvature"`` (what the path was built from).
        recording: a name for messages and reports.
    """

    road: Road
    frames: np.ndarray
    frame_s_m: np.ndarray
    frame_pose: np.ndarray
    speed_mps: np.ndarray
    curvature_per_m: np.ndarray
    timestamp_s: np.ndarray
    source: str
    recording: str

    @property
    def length_m(self) -> float:
        return float(self.frame_s_m[-1])

    @property
    def duration_s(self) -> float:
        return float(self.timestamp_s[-1] - self.timestamp_s[0])

    def nearest_frame(self, s_m: float) -> int:
        """Position (in this segment, 0..N-1) of the frame shot nearest arc length ``s_m``."""
        i = int(np.searchsorted(self.frame_s_m, s_m))
        if i <= 0:
            return 0
        if i >= len(self.frame_s_m):
            return len(self.frame_s_m) - 1
        return i if self.frame_s_m[i] - s_m < s_m - self.frame_s_m[i - 1] else i - 1

    def speed_at(self, s_m: float) -> float:
        """The recorded speed at arc length ``s_m`` (linear between frames), m/s."""
        return float(np.interp(s_m, self.frame_s_m, self.speed_mps))

    def curvature_at(self, s_m: float) -> float:
        """The path's curvature at arc length ``s_m``, 1/m."""
        return float(self.road.sample(s_m)[3])


def _arcs(x0: np.ndarray, y0: np.ndarray, th0: np.ndarray, k: np.ndarray, u: np.ndarray):
    """End points (x, y, heading) of circular arcs of curvature ``k`` and length ``u`` from poses."""
    turn = k * u
    chord = u * np.sinc(turn / (2.0 * math.pi))  # 2 sin(turn/2) / k, also for k = 0
    mid = th0 + 0.5 * turn
    return x0 + chord * np.cos(mid), y0 + chord * np.sin(mid), th0 + turn


def _from_curvature(t: np.ndarray, k: np.ndarray, v: np.ndarray, ds_m: float):
    """Frame arc lengths and poses, and the dense line, by integrating curvature and speed."""
    step = np.maximum(v[:-1], 0.0) * np.diff(t)  # metres driven from frame i to i+1
    s = np.concatenate([[0.0], np.cumsum(step)])
    n = len(t)
    x, y, th = np.zeros(n), np.zeros(n), np.zeros(n)
    for i in range(n - 1):  # sequential by nature: each arc starts where the last one ended
        x[i + 1], y[i + 1], th[i + 1] = _arcs(x[i], y[i], th[i], k[i], step[i])
    dense_s = np.arange(int(math.floor(s[-1] / ds_m)) + 1) * ds_m
    seg = np.clip(np.searchsorted(s, dense_s, side="right") - 1, 0, max(n - 2, 0))
    dx, dy, dth = _arcs(x[seg], y[seg], th[seg], k[seg], dense_s - s[seg])
    return s, np.stack([x, y, th], axis=1), dense_s, dx, dy, dth, k[seg]


def _from_poses(x: np.ndarray, y: np.ndarray, yaw: np.ndarray, ds_m: float):
    """Frame arc lengths and poses, and the dense line, from recorded poses (linear in between)."""
    s = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(x), np.diff(y)))])
    yaw = np.unwrap(yaw)
    dense_s = np.arange(int(math.floor(s[-1] / ds_m)) + 1) * ds_m
    dth = np.interp(dense_s, s, yaw)
    kappa = np.gradient(dth, ds_m) if len(dense_s) > 1 else np.zeros(1)
    return (
        s,
        np.stack([x, y, yaw], axis=1),
        dense_s,
        np.interp(dense_s, s, x),
        np.interp(dense_s, s, y),
        dth,
        kappa,
    )


def reference_paths(
    recording: Recording,
    gap_factor: float = 3.0,
    min_frames: int = 2,
    ds_m: float = DS_M,
    use_poses: bool = True,
) -> List[ReferencePath]:
    """The gap-free segments of ``recording`` as reference paths (module docstring).

    Segments with fewer than ``min_frames`` frames are left out (the caller reports the distance).
    ``use_poses=False`` integrates curvature even where poses exist.
    """
    name = str(recording.path) if recording.path is not None else "recording"
    return paths_from_log(recording.log, name, None, gap_factor, min_frames, ds_m, use_poses)


def paths_from_log(
    log: Mapping[str, np.ndarray],
    name: str,
    valid: Optional[np.ndarray] = None,
    gap_factor: float = 3.0,
    min_frames: int = 2,
    ds_m: float = DS_M,
    use_poses: bool = True,
) -> List[ReferencePath]:
    """:func:`reference_paths` of a log's columns (``timestamp_s``, ``curvature``, ``speed_mps``,
    optionally the pose columns), e.g. a preprocessing cache's; ``valid`` [N] leaves frames out."""
    t = np.asarray(log["timestamp_s"], dtype=np.float64)
    has_poses = use_poses and all(c in log for c in POSE_COLUMNS)
    out: List[ReferencePath] = []
    usable = np.asarray(log["speed_mps"], dtype=np.float64) >= MIN_SPEED_MPS
    if valid is not None:
        usable &= np.asarray(valid, dtype=bool)
    for lo, hi in segments(t, usable, gap_factor):
        if hi - lo < min_frames:
            continue
        ts, k, v = t[lo:hi], np.asarray(log["curvature"][lo:hi]), np.asarray(log["speed_mps"][lo:hi])
        if has_poses:
            built = _from_poses(log["x_m"][lo:hi], log["y_m"][lo:hi], log["yaw_rad"][lo:hi], ds_m)
        else:
            built = _from_curvature(ts, k, v, ds_m)
        s, poses, dense_s, dx, dy, dth, dk = built
        if len(dense_s) < 2:
            continue
        road = Road(
            seed=0,
            split="log",
            index=len(out),
            ds_m=ds_m,
            s_m=dense_s,
            x_m=dx,
            y_m=dy,
            heading_rad=dth,
            curvature_per_m=dk,
            lane_width_m=np.zeros_like(dense_s),
            objects=[],
        )
        out.append(
            ReferencePath(
                road=road,
                frames=np.arange(lo, hi),
                frame_s_m=s,
                frame_pose=poses,
                speed_mps=v.astype(np.float64),
                curvature_per_m=k.astype(np.float64),
                timestamp_s=ts,
                source="poses" if has_poses else "curvature",
                recording=name,
            )
        )
    return out
