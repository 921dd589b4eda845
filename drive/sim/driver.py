"""What a driver sees and the protocol every driver (expert, policy, exported file) follows.

A :class:`Driver` has ``reset()`` (start of an episode, or after an intervention: drop any
hidden state) and ``act(obs) -> float``, a curvature command in 1/m (positive = left).
An optional attribute ``needs_image = False`` tells the world not to render frames for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

import numpy as np

from drive.sim.road import Road

__all__ = ["Observation", "Driver", "ConstantDriver", "needs_image"]


@dataclass
class Observation:
    """One camera period.

    image: uint8 RGB [H, W, 3] (None when the driver does not need images);
    dt_s: time since the previous observation; speed_mps; timestamp_s.
    Privileged ground truth (the expert uses it; learned policies must not):
    road, s_m (arc length), x_m, y_m, yaw_rad (world pose), lateral_offset_m (left of the
    right-lane centre), heading_error_rad (left of the lane direction).
    """

    image: Optional[np.ndarray]
    dt_s: float
    speed_mps: float
    timestamp_s: float
    road: Road
    s_m: float
    x_m: float
    y_m: float
    yaw_rad: float
    lateral_offset_m: float
    heading_error_rad: float


@runtime_checkable
class Driver(Protocol):
    def reset(self) -> None: ...

    def act(self, obs: Observation) -> float: ...


def needs_image(driver: Driver) -> bool:
    """Whether frames must be rendered for ``driver`` (default True)."""
    return bool(getattr(driver, "needs_image", True))


class ConstantDriver:
    """Always commands the same curvature (1/m): a baseline that must fail lane keeping."""

    needs_image = False

    def __init__(self, curvature_per_m: float = 0.0) -> None:
        if not np.isfinite(curvature_per_m):
            raise ValueError(f"curvature must be finite, got {curvature_per_m}")
        self.curvature_per_m = float(curvature_per_m)
        self.name = f"constant:{self.curvature_per_m:g}"

    def reset(self) -> None:
        pass

    def act(self, obs: Observation) -> float:
        return self.curvature_per_m
