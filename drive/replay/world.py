"""A recorded drive as a world: the car drives against the recording's path and sees its frames,
re-rendered for where the car is (data-driven simulation, VISTA 1.0: Amini et al., IEEE RA-L 2020).

:class:`LogWorld` offers what :class:`drive.sim.world.World` offers (``observe``, ``step``,
``place_on_lane``, lane errors, ``road``), so the closed loop, the drivers, the intervention rule and
the metrics are the built-in world's (:func:`drive.sim.closed_loop.drive_segment`):

- the ego car is the world's kinematic model (:class:`~drive.sim.vehicle.Vehicle`), steered every
  ``dt_s`` (the policy's rate) at the recorded speed of its position along the path;
- its lateral offset and heading error are relative to the recorded path (:mod:`drive.replay.path`);
- each observation is the recorded frame shot nearest the car's progress along the path, re-rendered
  from the car's camera pose relative to that frame's (forward and lateral offset, yaw;
  :class:`~drive.replay.view.ViewSynthesis`). The camera's mounting (``forward_m``, ``lateral_m``,
  ``yaw_rad`` of the calibration) moves with the car; its roll is ignored.

Steering limits: the world's (curvature 1/20 m, 0.15 1/m per s), widened where the recorded car
itself turned harder or faster (:func:`replay_limits`), so the path is always drivable.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import numpy as np

from drive.io.recording import FrameSource
from drive.replay.path import ReferencePath
from drive.replay.view import ViewSynthesis
from drive.sim.vehicle import Vehicle, VehicleLimits, VehicleState
from drive.sim.world import CarOnRoad

__all__ = ["LogWorld", "replay_limits"]


def replay_limits(path: ReferencePath, base: VehicleLimits = VehicleLimits()) -> VehicleLimits:
    """The world's steering limits, widened to 1.25x the largest curvature and curvature rate the
    recorded path shows (the rate as its 99th percentile, so one noisy label does not set it)."""
    k = np.abs(path.road.curvature_per_m)
    rate = np.abs(np.diff(path.curvature_per_m)) / np.maximum(np.diff(path.timestamp_s), 1e-6)
    top_rate = float(np.percentile(rate, 99)) if len(rate) else 0.0
    return VehicleLimits(
        max_curvature_per_m=max(base.max_curvature_per_m, 1.25 * float(k.max(initial=0.0))),
        max_curvature_rate=max(base.max_curvature_rate, 1.25 * top_rate),
    )


class LogWorld(CarOnRoad):
    """One reference path of a recording, driven closed loop (module docstring).

    Args:
        path: the segment's :class:`ReferencePath`.
        frames: the recording's frame source (uint8 RGB [H, W, 3] at the camera's size).
        camera: the calibration at that size (``CameraCalibration.to_dict()``).
        fps: the driver's step rate (Hz).
        region: [top, bottom, left, right] the policy looks at, for the no-source share.
        start_s_m: where the car starts, on the path, aligned with it.
    """

    def __init__(
        self,
        path: ReferencePath,
        frames: FrameSource,
        camera: Dict[str, float],
        fps: float,
        region: Optional[Sequence[int]] = None,
        start_s_m: float = 0.0,
        limits: Optional[VehicleLimits] = None,
    ) -> None:
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"fps must be positive, got {fps}")
        first = frames.read(int(path.frames[0]))
        self.path, self.road, self.frames = path, path.road, frames
        self.camera = dict(camera)
        self.view = ViewSynthesis(self.camera, first.shape[:2], region)
        self.dt_s, self.time_s = 1.0 / float(fps), 0.0
        self.limits = limits or replay_limits(path)
        self._cached = (int(path.frames[0]), first)
        self.shown: List[int] = []  # recording frame index of every observation
        self.offset = (0.0, 0.0, 0.0)  # the camera's (forward_m, left_m, yaw_rad) from the last one
        self.no_source: List[float] = []  # its share of pixels without recorded content
        self.place_on_lane(start_s_m)

    # -- the car ---------------------------------------------------------------------------------
    def place_on_lane(self, s_m: float) -> None:
        """Put the car on the recorded path at ``s_m``, aligned with it, steering along it."""
        x, y, yaw = self.road.lane_pose(s_m)
        state = VehicleState(x, y, yaw, self.path.speed_at(s_m), self.path.curvature_at(s_m))
        self.s_m = s_m
        self.vehicle = Vehicle(state, self.limits)
        self._update_errors()

    def step(self, curvature_cmd_per_m: float) -> None:
        """Advance one period under a curvature command (1/m), at the recorded speed of this point."""
        self.vehicle.state.speed_mps = self.path.speed_at(self.s_m)
        super().step(curvature_cmd_per_m)

    @property
    def remaining_m(self) -> float:
        return self.path.length_m - self.s_m

    # -- what the camera sees --------------------------------------------------------------------
    def camera_offset(self, frame_pos: int) -> tuple:
        """(forward_m, left_m, yaw_rad) of the car's camera relative to the camera of the segment's
        frame ``frame_pos``, in that camera's horizontal axes."""
        st, cam = self.vehicle.state, self.camera
        mount = np.array([cam.get("forward_m", 0.0), cam.get("lateral_m", 0.0)])

        def camera_pose(x: float, y: float, yaw: float) -> np.ndarray:
            c, s = math.cos(yaw), math.sin(yaw)
            return np.array([x + c * mount[0] - s * mount[1], y + s * mount[0] + c * mount[1]])

        fx, fy, fyaw = self.path.frame_pose[frame_pos]
        d = camera_pose(st.x_m, st.y_m, st.yaw_rad) - camera_pose(fx, fy, fyaw)
        heading = fyaw + cam.get("yaw_rad", 0.0)
        c, s = math.cos(heading), math.sin(heading)
        yaw = (st.yaw_rad - fyaw + math.pi) % (2.0 * math.pi) - math.pi
        return c * d[0] + s * d[1], -s * d[0] + c * d[1], yaw

    def render(self) -> np.ndarray:
        """The frame shot nearest the car's progress, re-rendered for the car's camera pose."""
        pos = self.path.nearest_frame(self.s_m)
        index = int(self.path.frames[pos])
        if self._cached[0] != index:
            self._cached = (index, self.frames.read(index))
        forward, left, yaw = self.offset = self.camera_offset(pos)
        image = self.view(self._cached[1], left, yaw, forward)
        self.shown.append(index)
        self.no_source.append(self.view.no_source_share)
        return image
