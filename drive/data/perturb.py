"""Seeded camera-image perturbations: what a dirty or failing camera does.

Upstream of everything that consumes frames (the world's closed loop, saliency, robustness), so
every part of drive corrupts images the same way.

Every perturbation maps uint8 RGB frames [H, W, 3] to uint8 RGB frames of the same size. drive
applies it to the **network's view** -- the frame after the checkpoint's crop and resize
(:func:`perturb_views`) -- so a level means what it means in the papers, whose noise is added to
the network's 200x78 input: noise on a larger camera frame would be averaged away by the resize
(std 0.2 on a 920x360 crop reaches a 200x78 input as ~0.03). That is where robustness open loop,
closed loop (:class:`drive.policy_drivers.PolicyDriver` ``perturb=``), saliency stability and saliency
videos put it. Randomness comes from a NumPy generator seeded by ``seed``; call :meth:`reset` to
replay the same noise sequence (one frame after another, as a drive sees it).

Kinds and what ``level`` means:

- ``gaussian``: zero-mean Gaussian noise on [0, 1] pixel values, clipped; level = standard
  deviation (the NCP authors' code, Lechner et al. 2020). Build with ``variance=True`` to give the
  variance sigma^2 instead, as the CfC paper's Fig. 5 does (0.35 -> sigma 0.59).
- ``salt_pepper``: level = fraction of pixels set to black or white (half each).
- ``blur``: Gaussian blur, level = sigma in pixels.
- ``brightness``: level = additive shift on [0, 1] pixel values (negative darkens), clipped.
- ``occlusion``: a mid-grey square patch covering ``level`` of the image area, at a position drawn
  once per :meth:`reset` (a stuck leaf, not flicker).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple

import cv2
import numpy as np
import torch

__all__ = ["Perturbation", "KINDS", "gaussian_noise", "perturb_views"]

KINDS = ("gaussian", "salt_pepper", "blur", "brightness", "occlusion")


def gaussian_noise(shape: Tuple[int, ...], std: float, rng: np.random.Generator) -> np.ndarray:
    """Zero-mean Gaussian noise with standard deviation ``std`` (float32), before any clipping."""
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)


class Perturbation:
    """A named, seeded image perturbation. ``Perturbation("gaussian", 0.2, seed=0)(frame)``."""

    def __init__(self, kind: str, level: float, seed: int = 0, variance: bool = False):
        if kind not in KINDS:
            raise ValueError(f"perturbation kind must be one of {KINDS}, got {kind!r}")
        if not math.isfinite(level):
            raise ValueError(f"perturbation level must be finite, got {level!r}")
        if kind in ("gaussian", "salt_pepper", "blur", "occlusion") and level < 0:
            raise ValueError(f"{kind} level must be >= 0, got {level}")
        if kind in ("salt_pepper", "occlusion") and level > 1:
            raise ValueError(f"{kind} level is a fraction of the image and must be <= 1, got {level}")
        if variance and kind != "gaussian":
            raise ValueError("variance=True applies to gaussian noise only")
        self.kind, self.level, self.seed, self.variance = kind, float(level), int(seed), variance
        self.reset()

    @property
    def std(self) -> float:
        """Standard deviation of gaussian noise on [0, 1] pixels."""
        return math.sqrt(self.level) if self.variance else self.level

    @property
    def name(self) -> str:
        unit = "var" if self.variance else ""
        return f"{self.kind}{unit}={self.level:g}"

    def __repr__(self) -> str:
        return f"Perturbation({self.name}, seed={self.seed})"

    def reset(self) -> None:
        """Restart the random sequence (and redraw the occlusion position)."""
        self.rng = np.random.default_rng(self.seed)
        self._patch: Optional[Tuple[float, float]] = None

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        if frame.dtype != np.uint8 or frame.ndim != 3:
            raise ValueError(f"perturbation expects a uint8 [H, W, C] frame, got {frame.dtype} {frame.shape}")
        if self.level == 0:
            return frame
        return getattr(self, "_" + self.kind)(frame)

    def _gaussian(self, frame: np.ndarray) -> np.ndarray:
        x = frame.astype(np.float32) / 255.0 + gaussian_noise(frame.shape, self.std, self.rng)
        return _to_uint8(x)

    def _salt_pepper(self, frame: np.ndarray) -> np.ndarray:
        out = frame.copy()
        u = self.rng.random(frame.shape[:2])
        out[u < self.level / 2] = 0
        out[(u >= self.level / 2) & (u < self.level)] = 255
        return out

    def _blur(self, frame: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(frame, (0, 0), sigmaX=self.level, borderType=cv2.BORDER_REPLICATE)

    def _brightness(self, frame: np.ndarray) -> np.ndarray:
        return _to_uint8(frame.astype(np.float32) / 255.0 + self.level)

    def _occlusion(self, frame: np.ndarray) -> np.ndarray:
        h, w = frame.shape[:2]
        side = int(round(math.sqrt(self.level * h * w)))
        ph, pw = min(side, h), min(side, w)
        if self._patch is None:
            self._patch = (self.rng.random(), self.rng.random())
        top = int(self._patch[0] * (h - ph))
        left = int(self._patch[1] * (w - pw))
        out = frame.copy()
        out[top : top + ph, left : left + pw] = 128
        return out


def _to_uint8(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def perturb_views(views: torch.Tensor, perturb: Optional[Callable[[np.ndarray], np.ndarray]]) -> torch.Tensor:
    """Network views uint8 ``[N, 3, h, w]`` -> the same, ``perturb`` applied to each (as an
    ``[h, w, 3]`` frame) in order; ``None`` returns ``views`` unchanged."""
    if perturb is None:
        return views
    frames = views.permute(0, 2, 3, 1).cpu().numpy()
    out = np.stack([perturb(np.ascontiguousarray(f)) for f in frames])
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous().to(views.device)
