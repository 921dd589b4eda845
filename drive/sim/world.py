"""One car on one road: pose bookkeeping, lane errors and camera frames, one period at a time.

Used by both data collection (:mod:`drive.sim.record`) and closed-loop evaluation
(:mod:`drive.sim.closed_loop`), so a policy is evaluated in exactly the world it was
trained on.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from drive.sim.appearance import Appearance
from drive.sim.camera import Camera
from drive.sim.driver import Observation
from drive.sim.render import Renderer
from drive.sim.road import Road
from drive.sim.speed import SpeedController
from drive.sim.vehicle import HARD_ROAD_LIMITS, Vehicle, VehicleLimits, VehicleState

__all__ = ["World", "CarOnRoad", "DEFAULT_SPEED_MPS", "DEFAULT_FPS", "car_limits"]

DEFAULT_SPEED_MPS = 30.0 / 3.6
DEFAULT_FPS = 30.0


def car_limits(road: Road) -> VehicleLimits:
    """The steering limits of the car that drives ``road``: the low-speed car on hard roads."""
    return HARD_ROAD_LIMITS if road.kind == "hard" else VehicleLimits()


class CarOnRoad:
    """What every world shares (the built-in :class:`World`, a replayed log's
    :class:`drive.replay.world.LogWorld`): a vehicle on a ``road``, its errors relative to the road's
    lane, one period ``dt_s`` at a time. A subclass gives ``road``, ``vehicle``, ``dt_s``, ``time_s``,
    ``s_m``, ``place_on_lane(s_m)`` and ``render()``."""

    road: Road
    vehicle: Vehicle
    dt_s: float
    time_s: float
    s_m: float

    def render(self) -> np.ndarray:
        raise NotImplementedError

    def _update_errors(self) -> None:
        st = self.vehicle.state
        self.s_m, self.lateral_offset_m, self.heading_error_rad = self.road.lane_errors(
            st.x_m, st.y_m, st.yaw_rad, self.s_m
        )

    def observe(self, with_image: bool = True) -> Observation:
        st = self.vehicle.state
        return Observation(
            image=self.render() if with_image else None,
            dt_s=self.dt_s,
            speed_mps=st.speed_mps,
            timestamp_s=self.time_s,
            road=self.road,
            s_m=self.s_m,
            x_m=st.x_m,
            y_m=st.y_m,
            yaw_rad=st.yaw_rad,
            lateral_offset_m=self.lateral_offset_m,
            heading_error_rad=self.heading_error_rad,
        )

    def step(self, curvature_cmd_per_m: float) -> None:
        """Advance one period under a curvature command (1/m)."""
        self.vehicle.step(curvature_cmd_per_m, self.dt_s)
        self.time_s += self.dt_s
        self._update_errors()


class World(CarOnRoad):
    """A road, its appearance, a camera and a vehicle.

    Args:
        road, appearance: the scene.
        renderer: shared :class:`Renderer` (one per camera; precomputation is per camera).
        speed_mps: the speed on easy roads (default 30 km/h); on hard roads the cruise speed, slowed
            where the road asks (:mod:`drive.sim.speed`). fps: camera rate (default 30 Hz).
        limits: the car's steering limits (default :func:`car_limits` of the road).
        start_s_m: where the car starts, on the lane centre, aligned with the lane.
    """

    def __init__(
        self,
        road: Road,
        appearance: Appearance,
        renderer: Optional[Renderer] = None,
        speed_mps: float = DEFAULT_SPEED_MPS,
        fps: float = DEFAULT_FPS,
        limits: Optional[VehicleLimits] = None,
        start_s_m: float = 0.0,
    ) -> None:
        if not speed_mps > 0:
            raise ValueError(f"speed must be positive, got {speed_mps}")
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.road, self.appearance = road, appearance
        self.renderer = renderer or Renderer()
        self.speed_mps, self.dt_s = float(speed_mps), 1.0 / float(fps)
        self.limits = limits or car_limits(road)
        self.speed = SpeedController(road, self.speed_mps, self.limits) if road.kind == "hard" else None
        self.time_s = 0.0
        self.place_on_lane(start_s_m)

    @property
    def camera(self) -> Camera:
        return self.renderer.camera

    def place_on_lane(self, s_m: float) -> None:
        """Put the car on the lane centre at ``s_m``, aligned with the lane, steering along it."""
        x, y, yaw = self.road.lane_pose(s_m)
        _, _, _, kappa, width = self.road.sample(s_m)
        lane_kappa = kappa / (1.0 + 0.5 * width * kappa)  # curvature of the offset lane centre
        speed = self.speed.target(s_m) if self.speed is not None else self.speed_mps
        self.s_m = s_m
        self.vehicle = Vehicle(VehicleState(x, y, yaw, speed, lane_kappa), self.limits)
        self._update_errors()

    def step(self, curvature_cmd_per_m: float) -> None:
        """Advance one period under a curvature command (1/m), at the speed the road asks for."""
        if self.speed is not None:
            st = self.vehicle.state
            st.speed_mps = self.speed(self.s_m, st.speed_mps, self.dt_s)
        super().step(curvature_cmd_per_m)

    def render(self) -> np.ndarray:
        st = self.vehicle.state
        return self.renderer.render(self.road, self.appearance, st.x_m, st.y_m, st.yaw_rad, self.s_m)

    @property
    def remaining_m(self) -> float:
        return self.road.length_m - self.s_m
