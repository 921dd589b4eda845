"""Label semantics: every steering signal becomes curvature in 1/m, positive = turning left.

Kinematic bicycle model (docs/references.md): ``kappa = tan(delta) / wheelbase`` with ``delta`` the
road-wheel angle; a steering-wheel angle is divided by the steering ratio first; normalized
steering in [-1, 1] is scaled by the maximum road-wheel angle. ``sign`` maps the log's convention
onto ours: the Udacity simulator steers right for positive values, so its sign is -1.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from drive.io.checks import number

__all__ = [
    "LabelSpec",
    "to_curvature_per_m",
    "speed_to_mps",
    "time_to_s",
    "LABEL_UNITS",
    "SPEED_UNITS",
    "TIME_UNITS",
]

LABEL_UNITS = (
    "curvature_per_m",
    "curvature_per_km",
    "normalized",
    "wheel_deg",
    "wheel_rad",
    "steering_wheel_deg",
    "steering_wheel_rad",
)
SPEED_UNITS = {"mps": 1.0, "kph": 1.0 / 3.6, "mph": 0.44704}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclasses.dataclass
class LabelSpec:
    """How a log's steering column maps to curvature.

    unit: one of :data:`LABEL_UNITS`.
    sign: +1 if positive values steer left in the log, -1 if they steer right.
    max_angle_deg: road-wheel angle at normalized steering 1 (``unit="normalized"``).
    wheelbase_m: axle distance (every unit except the two curvature units).
    steering_ratio: steering-wheel angle / road-wheel angle (``steering_wheel_*`` units).
    """

    unit: str = "curvature_per_m"
    sign: float = 1.0
    max_angle_deg: float = 25.0
    wheelbase_m: float = 2.7
    steering_ratio: float = 15.0

    def __post_init__(self) -> None:
        if self.unit not in LABEL_UNITS:
            raise ValueError(f"label unit must be one of {LABEL_UNITS}, got {self.unit!r}")
        if isinstance(self.sign, bool) or self.sign not in (1, -1, 1.0, -1.0):
            raise ValueError(f"label sign must be +1 or -1, got {self.sign!r}")
        self.sign = float(self.sign)
        for name, high in (("max_angle_deg", 90.0), ("wheelbase_m", 100.0), ("steering_ratio", 1000.0)):
            limits = dict(low=0.0, high=high, low_open=True, high_open=True)
            setattr(self, name, number(getattr(self, name), f"label {name}", **limits))

    @classmethod
    def from_any(cls, spec: Optional[object], **defaults) -> "LabelSpec":
        """Build from None (use ``defaults``), a dict (overriding ``defaults``) or a LabelSpec."""
        if isinstance(spec, LabelSpec):
            return spec
        if spec is not None and not isinstance(spec, dict):
            raise ValueError(f"label must be a mapping such as {{unit: normalized}}, got {spec!r}")
        merged = dict(defaults)
        merged.update(dict(spec or {}))
        unknown = sorted(set(merged) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(
                f"label: unknown key(s) {unknown}; known: {[f.name for f in dataclasses.fields(cls)]}"
            )
        return cls(**merged)


def to_curvature_per_m(values: np.ndarray, spec: LabelSpec) -> np.ndarray:
    """Convert a steering signal [N] to curvature [N] in 1/m (positive = left)."""
    v = np.asarray(values, dtype=np.float64) * float(spec.sign)
    if spec.unit == "curvature_per_m":
        return v
    if spec.unit == "curvature_per_km":
        return v / 1000.0
    if spec.unit == "normalized":
        delta = v * math.radians(spec.max_angle_deg)
    elif spec.unit == "wheel_deg":
        delta = np.radians(v)
    elif spec.unit == "wheel_rad":
        delta = v
    elif spec.unit == "steering_wheel_deg":
        delta = np.radians(v) / spec.steering_ratio
    else:  # steering_wheel_rad
        delta = v / spec.steering_ratio
    with np.errstate(invalid="ignore", over="ignore"):  # a damaged row's inf is NaN here, reported by row
        return np.tan(delta) / spec.wheelbase_m


def speed_to_mps(values: np.ndarray, unit: str) -> np.ndarray:
    """Convert speed [N] in ``unit`` (mps | kph | mph) to m/s."""
    if unit not in SPEED_UNITS:
        raise ValueError(f"speed unit must be one of {tuple(SPEED_UNITS)}, got {unit!r}")
    return np.asarray(values, dtype=np.float64) * SPEED_UNITS[unit]


def time_to_s(values: np.ndarray, unit: str) -> np.ndarray:
    """Convert timestamps [N] in ``unit`` (s | ms | us | ns) to seconds (float64)."""
    if unit not in TIME_UNITS:
        raise ValueError(f"time unit must be one of {tuple(TIME_UNITS)}, got {unit!r}")
    return np.asarray(values, dtype=np.float64) * TIME_UNITS[unit]
