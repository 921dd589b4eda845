"""The expert: pure pursuit on the right-lane centre, and DART-style noise for data collection.

Pure pursuit (Coulter 1992): pick the lane-centre point ``L`` metres ahead (arc length) and
steer the circle through it tangent to the car's heading,
``kappa = 2 y_t / (x_t^2 + y_t^2)`` with (x_t, y_t) the target in the vehicle frame. On a
circle the command is exact, so the expert tracks curves without a steady-state offset.

DART (Laskey et al., 2017): while collecting data the executed command is the expert's
command plus noise, but the label recorded is the expert's clean command for the state the
car is actually in, so the logs contain recoveries from the deviations the noise causes.
:class:`SteeringNoise` is an Ornstein-Uhlenbeck process (smooth, mean-reverting drifts of
a given standard deviation and time constant).
"""

from __future__ import annotations

import math

import numpy as np

from drive.sim.driver import Observation

__all__ = ["PurePursuitExpert", "SteeringNoise"]


class PurePursuitExpert:
    """Pure pursuit on the lane centre with look-ahead ``max(min_lookahead_m, lookahead_s * speed)``."""

    needs_image = False
    name = "expert"

    def __init__(self, lookahead_s: float = 0.9, min_lookahead_m: float = 6.0) -> None:
        if lookahead_s <= 0 or min_lookahead_m <= 0:
            raise ValueError("look-ahead must be positive")
        self.lookahead_s = lookahead_s
        self.min_lookahead_m = min_lookahead_m

    def reset(self) -> None:
        pass

    def act(self, obs: Observation) -> float:
        look = max(self.min_lookahead_m, self.lookahead_s * obs.speed_mps)
        tx, ty, _ = obs.road.lane_pose(obs.s_m + look)
        dx, dy = tx - obs.x_m, ty - obs.y_m
        c, s = math.cos(obs.yaw_rad), math.sin(obs.yaw_rad)
        x, y = c * dx + s * dy, -s * dx + c * dy
        return 2.0 * y / (x * x + y * y)


class SteeringNoise:
    """Ornstein-Uhlenbeck curvature noise (1/m): stationary std ``std_per_m``, time constant ``tau_s``."""

    def __init__(self, std_per_m: float, tau_s: float = 1.0, seed: int = 0) -> None:
        if std_per_m < 0 or tau_s <= 0:
            raise ValueError(f"noise std must be >= 0 and tau > 0, got {std_per_m}, {tau_s}")
        self.std_per_m, self.tau_s = std_per_m, tau_s
        self.rng = np.random.default_rng(seed)
        self.value = 0.0

    def __call__(self, dt_s: float) -> float:
        a = math.exp(-dt_s / self.tau_s)
        self.value = a * self.value + self.std_per_m * math.sqrt(1.0 - a * a) * float(
            self.rng.standard_normal()
        )
        return self.value
