"""A video of a replayed drive: the re-rendered view beside a top-down map of the recorded and driven paths.

Left: what the policy was shown (the recorded frame re-rendered for the car's pose), upscaled. Right: a
map centred on the car, heading up, 1 px = ``MAP_M_PER_PX``: the recorded path in grey, the path the
car drove in blue, the car as a triangle, a red frame for a few steps after each intervention. The
file is written beside its destination under a temporary name and renamed on :meth:`close`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, List, Tuple, Union

import cv2
import numpy as np

from drive.io.video import VideoFile

__all__ = ["ReplayVideo"]

PANEL_PX = 240  # height of both panels
MAP_M_PER_PX = 0.15
_FLASH_STEPS = 5


class ReplayVideo:
    """``video(obs, interventions)``: one frame per observation of a replayed drive."""

    def __init__(self, path: Union[str, Path], fps: float) -> None:
        self.path = Path(path)
        self.file = VideoFile(self.path, fps)  # whole or not at all (drive.io.video)
        self._road: Any = None
        self._trail: List[Tuple[float, float]] = []
        self._interventions, self._flash = 0, 0

    def __call__(self, obs: Any, interventions: int) -> None:
        if obs.road is not self._road:  # a new segment: a new trail
            self._road, self._trail, self._interventions = obs.road, [], interventions
        if interventions > self._interventions:
            self._interventions, self._flash = interventions, _FLASH_STEPS
        self._trail.append((obs.x_m, obs.y_m))
        h, w = obs.image.shape[:2]
        view = cv2.resize(obs.image, (int(round(w * PANEL_PX / h)), PANEL_PX), interpolation=cv2.INTER_LINEAR)
        frame = np.concatenate([view, self._map(obs)], axis=1)
        bgr = np.ascontiguousarray(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        text = f"t {obs.timestamp_s:6.1f} s  lat {obs.lateral_offset_m:+.2f} m  takeovers {interventions}"
        cv2.putText(bgr, text, (6, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        if self._flash > 0:
            self._flash -= 1
            cv2.rectangle(bgr, (0, 0), (bgr.shape[1] - 1, bgr.shape[0] - 1), (0, 0, 255), 4)
        self.file.write_bgr(bgr)

    def _map(self, obs: Any) -> np.ndarray:
        """The top-down panel (RGB), car-centred with its heading up."""
        panel = np.full((PANEL_PX, PANEL_PX, 3), 24, np.uint8)
        c, s = math.cos(obs.yaw_rad), math.sin(obs.yaw_rad)
        centre = np.array([PANEL_PX / 2.0, PANEL_PX * 0.7])

        def pixels(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            dx, dy = np.asarray(x) - obs.x_m, np.asarray(y) - obs.y_m
            forward, left = c * dx + s * dy, -s * dx + c * dy
            return np.stack([centre[0] - left / MAP_M_PER_PX, centre[1] - forward / MAP_M_PER_PX], -1)

        road = obs.road
        lo, hi = road.index_at(obs.s_m - 15.0), road.index_at(obs.s_m + 40.0) + 1
        recorded = pixels(road.x_m[lo:hi], road.y_m[lo:hi])
        cv2.polylines(panel, [np.round(recorded).astype(np.int32)], False, (150, 150, 150), 2, cv2.LINE_AA)
        trail = np.asarray(self._trail[-400:])
        driven = pixels(trail[:, 0], trail[:, 1])
        cv2.polylines(panel, [np.round(driven).astype(np.int32)], False, (60, 140, 255), 2, cv2.LINE_AA)
        tip = centre + np.array([0.0, -10.0])
        car = np.array([tip, centre + np.array([-5.0, 4.0]), centre + np.array([5.0, 4.0])])
        cv2.fillPoly(panel, [np.round(car).astype(np.int32)], (255, 255, 255), cv2.LINE_AA)
        return panel

    def close(self, keep: bool = True) -> None:
        """Finish the file and rename it into place (``keep``), or delete it (a failed run)."""
        self.file.close(keep=keep and self.file.frames > 0)
