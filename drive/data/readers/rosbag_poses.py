"""A ROS bag's pose topic (reader option ``odometry_topic``) aligned to its camera frames, and the
rule both the steering and the pose samples follow: a frame inside a dropout of the samples longer
than ``GAP_FACTOR`` x their median period has no value there (never bridged).

The pose messages (``nav_msgs/msg/Odometry``, ``geometry_msgs/msg/PoseStamped`` or
``PoseWithCovarianceStamped``: x, y of the position, yaw of the orientation, REP 103) are checked
like label rows (non-finite values, duplicate or decreasing times, yaw against the direction of
travel), then interpolated linearly to each frame's time, yaw unwrapped first. A frame before the
first or after the last pose sample, or inside a pose dropout, has no pose and is reported
(``unlabelled_frames``) like a frame without steering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

import numpy as np

from drive.data.errors import Problems
from drive.data.readers.base import NoFrames, build_recording
from drive.data.readers.poses import interpolate_poses
from drive.data.readers.ros_messages import Series
from drive.io.recording import POSE_COLUMNS, Recording

__all__ = ["GAP_FACTOR", "unlabelled_in_gaps", "add_poses"]

GAP_FACTOR = 3.0


def unlabelled_in_gaps(frame_t: np.ndarray, lt: np.ndarray) -> np.ndarray:
    """[N] True for frames that fall inside a dropout of the samples at ``lt`` (> GAP_FACTOR x
    their median period)."""
    if len(lt) < 2:
        return np.zeros(len(frame_t), dtype=bool)
    dt = np.diff(lt)
    limit = GAP_FACTOR * float(np.median(dt))
    j = np.searchsorted(lt, frame_t, side="right")  # lt[j-1] <= t < lt[j]
    inside = (j > 0) & (j < len(lt))
    out = np.zeros(len(frame_t), dtype=bool)
    out[inside] = dt[j[inside] - 1] > limit
    out[inside] &= np.abs(frame_t[inside] - lt[j[inside] - 1]) > 1e-9  # a frame on a sample has its value
    return out


def _pose_samples(path: Path, series: Series, t: np.ndarray, problems: Problems) -> Optional[Recording]:
    """The pose messages checked as label rows (a recording without frames); None (reported) when
    fewer than two are usable, or when the heading check dropped them (``on_error: skip``)."""
    if len(t) < 2:
        problems.report(
            f"{path} {series.topic}",
            None,
            "empty",
            f"{len(t)} readable pose message(s); need at least two to interpolate",
        )
        return None
    v = series.values
    samples = build_recording(
        file=f"{path} {series.topic}",
        rows=series.ordinals,
        log={
            "timestamp_s": t,
            "curvature": np.zeros(len(t)),
            "speed_mps": np.zeros(len(t)),
            "x_m": v["x"],
            "y_m": v["y"],
            "yaw_rad": v["yaw"],
        },
        source=NoFrames(len(t)),
        problems=problems,
        meta={"fps": 1.0, "width": 1, "height": 1},
    )
    if samples is None or len(samples) < 2 or not all(c in samples.log for c in POSE_COLUMNS):
        return None
    return samples


def add_poses(
    path: Path,
    camera: Series,
    pose: Series,
    frame_t: np.ndarray,
    pose_t: np.ndarray,
    log: Dict[str, np.ndarray],
    problems: Problems,
) -> np.ndarray:
    """Add the pose columns, interpolated to ``frame_t``, to ``log``; returns [N] False for the
    frames without a pose (reported). A pose topic with nothing usable (reported, ``on_error:
    skip``) adds nothing and keeps every frame: the path is then integrated from curvature."""
    samples = _pose_samples(path, pose, pose_t, problems)
    if samples is None:
        return np.ones(len(frame_t), dtype=bool)
    st = samples.log["timestamp_s"]
    finite = np.isfinite(frame_t)
    outside = finite & ((frame_t < st[0] - 1e-9) | (frame_t > st[-1] + 1e-9))
    gapped = finite & ~outside & unlabelled_in_gaps(frame_t, st)
    for mask, why in (
        (outside, f"outside the time range {st[0]:.3f}..{st[-1]:.3f} s of the pose samples"),
        (gapped, f"in a gap of {pose.topic} (> {GAP_FACTOR:g} x its median period)"),
    ):
        for i in np.flatnonzero(mask)[:1]:
            problems.report(
                f"{path} {camera.topic}",
                int(camera.ordinals[i]),
                "unlabelled_frames",
                f"{int(mask.sum())} frame(s) have no pose: they lie {why} (first: this message at "
                f"{frame_t[i]:.3f} s)",
            )
    log.update(interpolate_poses(frame_t, st, samples.log))
    return ~(outside | gapped)
