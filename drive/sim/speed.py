"""A speed that follows the road: a target speed along the lane and the longitudinal controller that
tracks it, for the built-in world's cars on hard roads (the expert recording logs and the ego car in
closed loop alike; the policy commands curvature only).

Target speed at each sample of the right lane (:func:`speed_profile`), the least of

- the cruise speed (``speed_mps``, 30 km/h by default);
- the lateral-acceleration limit, ``v = sqrt(a_lat / |kappa_lane|)`` (2.5 m/s², a calm driver);
- the steering-rate budget: a clothoid of ``dkappa/ds`` needs a rate ``v dkappa/ds``, kept to half the
  car's rate limit, so steering never has to saturate to follow the road;

then made reachable: no more than ``decel_mps2`` of braking towards a slow curve ahead (a backward
pass) and ``accel_mps2`` out of it (a forward pass), never under ``min_speed_mps``.

The controller (:class:`SpeedController`) is proportional on the target ``preview_s`` ahead, with the
acceleration limits: ``a = clip((v_target - v) / time_constant_s, -decel, accel)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from drive.sim.road import Road
from drive.sim.vehicle import VehicleLimits

__all__ = ["SpeedRules", "SpeedController", "lane_curvature", "speed_profile"]


@dataclass(frozen=True)
class SpeedRules:
    """How fast a car takes the road (module docstring); m/s and m/s²."""

    lateral_accel_mps2: float = 2.5
    accel_mps2: float = 1.5
    decel_mps2: float = 2.5
    min_speed_mps: float = 2.0
    rate_share: float = 0.5
    preview_s: float = 0.5
    time_constant_s: float = 0.5


def lane_curvature(road: Road) -> np.ndarray:
    """Curvature (1/m) of the right lane's centre at each sample of ``road``."""
    k = road.curvature_per_m
    return k / (1.0 + 0.5 * road.lane_width_m * k)


def speed_profile(
    road: Road, cruise_mps: float, limits: VehicleLimits, rules: SpeedRules = SpeedRules()
) -> np.ndarray:
    """Target speed (m/s) at each sample of ``road`` (module docstring)."""
    k = np.abs(lane_curvature(road))
    dk = np.abs(np.gradient(k, road.ds_m))
    with np.errstate(divide="ignore"):
        rate_bound = rules.rate_share * limits.max_curvature_rate / dk
        v = np.minimum(np.sqrt(rules.lateral_accel_mps2 / k), rate_bound)
    v = np.clip(v, rules.min_speed_mps, max(cruise_mps, rules.min_speed_mps))
    for i in range(len(v) - 2, -1, -1):  # brake in time for what comes
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2.0 * rules.decel_mps2 * road.ds_m))
    for i in range(1, len(v)):  # and accelerate out of it no faster than the car can
        v[i] = min(v[i], math.sqrt(v[i - 1] ** 2 + 2.0 * rules.accel_mps2 * road.ds_m))
    return v


class SpeedController:
    """Tracks :func:`speed_profile` along a road: :meth:`target` for a place, :meth:`__call__` the speed
    after one period."""

    def __init__(
        self, road: Road, cruise_mps: float, limits: VehicleLimits, rules: SpeedRules = SpeedRules()
    ) -> None:
        self.road, self.rules = road, rules
        self.profile = speed_profile(road, cruise_mps, limits, rules)

    def target(self, s_m: float) -> float:
        return float(np.interp(s_m, self.road.s_m, self.profile))

    def __call__(self, s_m: float, speed_mps: float, dt_s: float) -> float:
        r = self.rules
        want = self.target(s_m + r.preview_s * speed_mps)
        accel = min(max((want - speed_mps) / r.time_constant_s, -r.decel_mps2), r.accel_mps2)
        return max(speed_mps + accel * dt_s, 0.5 * r.min_speed_mps)
