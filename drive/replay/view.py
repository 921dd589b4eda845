"""View synthesis at the camera's own resolution: a recorded frame as seen from a nearby pose.

The geometry is :mod:`drive.data.viewpoint`'s (flat ground below the horizon, infinitely far scenery
above; PilotNet's and VISTA's model): for a camera moved ``forward_m`` and ``shift_m`` (left) and yawed
``yaw_rad`` (left), target pixels sample the source frame through two homographies split by the new
image's horizon line (:func:`~drive.data.viewpoint.view_homographies`). Here they are applied to the
whole source frame with OpenCV (bilinear), before any crop, so content the policy's crop leaves out
is still there to move into view.

Pixels whose source lies outside the frame have no recorded content: they repeat the border (as the
training augmentation does) and are counted, over the part of the frame the policy looks at
(``region``), as :attr:`ViewSynthesis.no_source_share`.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import cv2
import numpy as np

from drive.data.viewpoint import view_homographies

__all__ = ["ViewSynthesis"]

_PROBE_STEP = 4  # the no-source share is measured on every 4th pixel in each direction


class ViewSynthesis:
    """Re-render frames of one camera for pose offsets.

    Args:
        camera: calibration at the frame size (fx, fy, cx, cy, height_m, pitch_rad).
        size: (H, W) of the frames.
        region: [top, bottom, left, right] of the pixels the policy sees (its crop); None = all.
    """

    def __init__(
        self, camera: Dict[str, float], size: Tuple[int, int], region: Optional[Sequence[int]] = None
    ) -> None:
        self.camera, self.size = dict(camera), (int(size[0]), int(size[1]))
        h, w = self.size
        v, u = np.mgrid[0:h, 0:w].astype(np.float64)
        self._pixels = np.stack([u, v, np.ones_like(u)], axis=-1)  # [H, W, 3] homogeneous target pixels
        top, bottom, left, right = region if region is not None else (0, h, 0, w)
        probe = self._pixels[top:bottom:_PROBE_STEP, left:right:_PROBE_STEP].reshape(-1, 3)
        self._probe = probe if len(probe) else self._pixels.reshape(-1, 3)
        self.no_source_share = 0.0

    def __call__(
        self, frame: np.ndarray, shift_m: float, yaw_rad: float, forward_m: float = 0.0
    ) -> np.ndarray:
        """The frame (uint8 [H, W, 3]) as seen from the moved camera; sets :attr:`no_source_share`."""
        h, w = self.size
        if frame.shape[:2] != (h, w):
            raise ValueError(f"frame is {frame.shape[1]}x{frame.shape[0]}, the camera's size is {w}x{h}")
        ground, sky, horizon = view_homographies(self.camera, shift_m, yaw_rad, forward_m)
        below = self._pixels @ horizon > 0  # [H, W]: the new ray meets the ground
        flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
        out = cv2.warpPerspective(frame, ground, (w, h), flags=flags, borderMode=cv2.BORDER_REPLICATE)
        if not below.all():
            up = cv2.warpPerspective(frame, sky, (w, h), flags=flags, borderMode=cv2.BORDER_REPLICATE)
            out = np.where(below[..., None], out, up)
        self.no_source_share = self._outside_share(ground, sky, horizon)
        return out

    def _outside_share(self, ground: np.ndarray, sky: np.ndarray, horizon: np.ndarray) -> float:
        """Share of probed target pixels whose source point lies outside the frame."""
        h, w = self.size
        p = self._probe
        src = np.where((p @ horizon > 0)[:, None], p @ ground.T, p @ sky.T)
        z = np.where(np.abs(src[:, 2]) < 1e-12, 1e-12, src[:, 2])
        x, y = src[:, 0] / z, src[:, 1] / z
        outside = (z <= 0) | (x < -0.5) | (x > w - 0.5) | (y < -0.5) | (y > h - 0.5)
        return float(outside.mean())
