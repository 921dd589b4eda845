"""Kinematic bicycle driven by a curvature command, with actuator limits.

State: position (x_m, y_m), yaw_rad, speed_mps, and the curvature the steering actually
holds. Each step the commanded curvature is clipped to ``|k| <= max_curvature_per_m`` and
the actual curvature moves towards it at most ``max_curvature_rate`` (1/m per second); the
car then follows the exact circular arc of that curvature for ``speed * dt`` metres
(kinematic bicycle with the steering angle expressed as path curvature,
kappa = tan(delta) / wheelbase).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["VehicleLimits", "VehicleState", "Vehicle", "HARD_ROAD_LIMITS"]


@dataclass(frozen=True)
class VehicleLimits:
    """Steering limits: curvature magnitude (1/m) and rate of change (1/m per s)."""

    max_curvature_per_m: float = 1.0 / 20.0
    max_curvature_rate: float = 0.15


# The car of hard roads (a compact car at low speed): 0.25 1/m is a 4 m radius, tan(34 deg) of road-wheel
# lock over a 2.7 m wheelbase (an 11 m turning circle); 0.25 1/m per s is about 39 deg/s at the road
# wheels, 580 deg/s at a 15:1 steering wheel, quick hand-over-hand steering. Easy roads keep the
# default car, so every easy road drives as it did before hard roads existed.
HARD_ROAD_LIMITS = VehicleLimits(max_curvature_per_m=0.25, max_curvature_rate=0.25)


@dataclass
class VehicleState:
    x_m: float
    y_m: float
    yaw_rad: float
    speed_mps: float
    curvature_per_m: float = 0.0


class Vehicle:
    """Integrates :class:`VehicleState` one camera period at a time."""

    def __init__(self, state: VehicleState, limits: VehicleLimits = VehicleLimits()) -> None:
        if not (math.isfinite(state.speed_mps) and state.speed_mps > 0):
            raise ValueError(f"speed must be positive, got {state.speed_mps}")
        self.state = state
        self.limits = limits

    def step(self, curvature_cmd_per_m: float, dt_s: float) -> VehicleState:
        """Apply a curvature command for ``dt_s`` seconds; returns the new state."""
        if not math.isfinite(curvature_cmd_per_m):
            raise ValueError(f"curvature command must be finite, got {curvature_cmd_per_m}")
        st, lim = self.state, self.limits
        target = min(max(curvature_cmd_per_m, -lim.max_curvature_per_m), lim.max_curvature_per_m)
        max_change = lim.max_curvature_rate * dt_s
        k = st.curvature_per_m + min(max(target - st.curvature_per_m, -max_change), max_change)
        dist = st.speed_mps * dt_s
        turn = k * dist
        if abs(turn) < 1e-9:
            dx, dy = dist, 0.0
        else:  # exact arc: chord of length 2 sin(turn/2)/k at half the turn
            chord = 2.0 * math.sin(0.5 * turn) / k
            dx, dy = chord * math.cos(0.5 * turn), chord * math.sin(0.5 * turn)
        c, s = math.cos(st.yaw_rad), math.sin(st.yaw_rad)
        self.state = VehicleState(
            st.x_m + c * dx - s * dy, st.y_m + s * dx + c * dy, st.yaw_rad + turn, st.speed_mps, k
        )
        return self.state
