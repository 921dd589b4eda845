"""The forward camera of the built-in world: a pinhole mounted on the vehicle over a flat ground.

Vehicle frame: x forward, y left, z up; the camera sits ``height_m`` above the ground at the
vehicle's reference point, pitched down by ``pitch_rad``. Camera frame (OpenCV): x right, y down,
z along the optical axis; pixel centres at integer coordinates. A ground point (X forward, Y left)
projects to

    z_c = X cos(pitch) + h sin(pitch),   y_c = h cos(pitch) - X sin(pitch),
    u = cx - fx Y / z_c,                 v = cy + fy y_c / z_c,

and the horizon is the row ``v = cy - fy tan(pitch)``. :class:`drive.sim.render.Renderer` draws
what it sees; recordings, the Gymnasium env and the CLI size their frames with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np

__all__ = ["Camera"]


@dataclass(frozen=True)
class Camera:
    """Pinhole camera mounted on the vehicle. Pixels: OpenCV convention (centres at integers)."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    height_m: float
    pitch_rad: float  # downwards

    @classmethod
    def default(
        cls,
        width: int = 200,
        height: int = 78,
        hfov_deg: float = 80.0,
        height_m: float = 1.5,
        pitch_rad: float = 0.15,
    ) -> "Camera":
        """Square pixels, horizontal field of view ``hfov_deg``, principal point at the centre."""
        if width < 16 or height < 8:
            raise ValueError(f"camera must be at least 16x8 pixels, got {width}x{height}")
        f = 0.5 * width / np.tan(np.radians(hfov_deg) / 2.0)
        return cls(
            width=int(width),
            height=int(height),
            fx=float(f),
            fy=float(f),
            cx=(width - 1) / 2.0,
            cy=(height - 1) / 2.0,
            height_m=float(height_m),
            pitch_rad=float(pitch_rad),
        )

    @property
    def horizon_row(self) -> float:
        """Image row (float) of the horizon of the flat ground."""
        return self.cy - self.fy * np.tan(self.pitch_rad)

    def project_ground(self, forward_m: np.ndarray, left_m: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates (u, v) of ground points given in the vehicle frame (m)."""
        c, s = np.cos(self.pitch_rad), np.sin(self.pitch_rad)
        zc = np.asarray(forward_m) * c + self.height_m * s
        yc = self.height_m * c - np.asarray(forward_m) * s
        return self.cx - self.fx * np.asarray(left_m) / zc, self.cy + self.fy * yc / zc
