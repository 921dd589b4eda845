"""Log replay over a preprocessing cache: the frames at the model's size with their own calibration,
the reference paths of a cached recording, and an episode (:class:`~drive.replay.world.LogWorld`)
over them, as training drives its logs (on-policy rounds, validation by driving, the label
look-ahead fit)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from drive.data.cache import CachedRecording, model_camera
from drive.io.recording import POSE_COLUMNS
from drive.replay.path import MIN_PATH_M, ReferencePath, paths_from_log
from drive.replay.world import LogWorld

__all__ = ["CachedFrames", "cached_paths", "cached_world", "drivable_paths"]


class CachedFrames:
    """A cache's frames as a frame source: uint8 [h, w, 3] at the model size."""

    def __init__(self, cached: CachedRecording) -> None:
        self.cached = cached

    def __len__(self) -> int:
        return len(self.cached)

    def read(self, index: int) -> np.ndarray:
        return np.ascontiguousarray(self.cached.frames[index].transpose(1, 2, 0))


def cached_paths(cached: CachedRecording, frames: Optional[Tuple[int, int]] = None) -> List[ReferencePath]:
    """The reference paths of a cached recording (its poses where it has them), valid frames only, and
    of those only frames ``first <= i < end`` if ``frames = (first, end)`` is given."""
    log = {"timestamp_s": cached.timestamp_s, "curvature": cached.curvature, "speed_mps": cached.speed_mps}
    if cached.poses is not None:
        log.update({c: cached.poses[:, i] for i, c in enumerate(POSE_COLUMNS)})
    valid = cached.valid
    if frames is not None:
        valid = valid.copy()
        valid[: frames[0]] = False
        valid[frames[1] :] = False
    return paths_from_log(log, cached.name, valid)


def drivable_paths(cached: Sequence[CachedRecording]) -> List[Tuple[int, ReferencePath]]:
    """(index into ``cached``, reference path) of every path longer than :data:`MIN_PATH_M`."""
    return [(i, p) for i, r in enumerate(cached) for p in cached_paths(r) if p.length_m > MIN_PATH_M]


def cached_world(cached: CachedRecording, path: ReferencePath, fps: float, start_s_m: float) -> LogWorld:
    """An episode over a cache: model-size frames and the calibration of those frames."""
    camera = model_camera(cached.info)
    if camera is None:
        raise ValueError(
            f"{cached.name}: on-policy rollouts re-render frames and need the camera calibration"
        )
    return LogWorld(path, CachedFrames(cached), camera, fps, start_s_m=start_s_m)
