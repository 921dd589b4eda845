"""The virtual safety driver: when it takes over, and what a takeover costs. One rule for every closed
loop drive runs: the built-in world, Gymnasium envs, log replay, on-policy rounds and validation by
driving.

An intervention (the NCP paper's safety driver; VISTA's pi/10 heading limit, Amini et al. 2020) is
counted when the car is more than ``max_lateral_m`` (1 m) off the lane centre (or the recorded path) or
points more than ``max_heading_rad`` (pi/10, 18 degrees) away from it; the car is then put back on the
lane at that point, aligned with it, with a fresh driver state. Each intervention costs ``takeover_s``
(6 s) of autonomy (PilotNet, Bojarski et al. 2016): ``autonomy = (1 - interventions x 6 s / time)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict

__all__ = ["InterventionRule", "SAFETY_DRIVER"]


@dataclass(frozen=True)
class InterventionRule:
    """When the safety driver takes over (module docstring)."""

    max_lateral_m: float = 1.0
    max_heading_rad: float = math.pi / 10
    takeover_s: float = 6.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"intervention rule: {name} must be a positive number, got {value!r}")

    def needs_takeover(self, world: Any) -> bool:
        """Whether the car of ``world`` (anything with ``lateral_offset_m`` and ``heading_error_rad``) is
        beyond the rule's limits."""
        return (
            abs(world.lateral_offset_m) > self.max_lateral_m
            or abs(world.heading_error_rad) > self.max_heading_rad
        )

    def describe(self) -> str:
        """When it takes over, in words, for reports."""
        return (
            f"|lateral offset| > {self.max_lateral_m:g} m or |heading error| > "
            f"{self.max_heading_rad:.3f} rad ({math.degrees(self.max_heading_rad):.0f} deg)"
        )

    def to_dict(self) -> Dict[str, float]:
        """The rule as a metrics file states it (``criteria``)."""
        return asdict(self)


SAFETY_DRIVER = InterventionRule()  # the rule of every drive unless a caller states another
