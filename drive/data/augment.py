"""Training augmentation of one window of frames, with label correction for viewpoint changes.

Order: viewpoint synthesis (:mod:`drive.data.viewpoint`), colour jitter, gamma and NCP shadow
bands, blur, Gaussian noise, JPEG artifacts. By default every parameter is drawn once per window
and applied to all T frames (an RNN should not learn flicker); ``per_frame=True`` draws per frame.
Noise pixels are always fresh per frame.

- Colour jitter: brightness b, contrast c, saturation s as in torchvision.transforms.v2
  (``adjust_brightness``/``adjust_contrast``/``adjust_saturation``, same grey weights), fused into
  one 3x3 colour matrix plus offset per frame (no clamping between the three steps); hue turns the
  chroma plane of YIQ (torchvision's exact HSV hue costs ~10x the whole rest of the pipeline).
- NCP shadow bands (REFERENCE.md §2): a band of random thickness (10-99 px at 200 px width) at a
  random angle and offset, blurred with a 3/5/7 box; inside, img ** g with g = 1 + U(0, gmax), two
  thirds darker, one third lighter (g -> 1/g). Blending uses the exponent g ** mask, so gamma
  jitter and shadow cost one ``pow``.
- Blur: separable Gaussian, sigma U(0.3, blur_sigma_max), radius ceil(2 sigma), truncated and
  renormalised at the borders, as two banded matrix products (torchvision's 2-D convolution costs
  ~10x more; OpenCV inside forked DataLoader workers can deadlock).
  JPEG: ``torchvision.transforms.v2.functional.jpeg`` at quality U(jpeg_quality_min, 95).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

from drive.data.viewpoint import corrected_curvature, warp_frames, warp_grid

__all__ = ["AugmentConfig", "Augmenter", "color_matrix"]

_GREY = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights
_YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])


@dataclasses.dataclass
class AugmentConfig:
    """Augmentation settings (``*_p`` = probability per window, or per frame with ``per_frame``)."""

    per_frame: bool = False
    shadow_p: float = 0.5
    shadow_gamma_max: float = 1.5
    shadow_thickness_min: int = 10
    shadow_thickness_max: int = 99
    photometric_p: float = 0.8
    brightness: float = 0.3
    contrast: float = 0.3
    saturation: float = 0.3
    hue: float = 0.05
    gamma: float = 0.2
    blur_p: float = 0.1
    blur_sigma_max: float = 1.2
    noise_p: float = 0.2
    noise_std_max: float = 0.03
    jpeg_p: float = 0.1
    jpeg_quality_min: int = 30
    viewpoint_p: float = 0.5
    max_shift_m: float = 0.6
    max_yaw_deg: float = 4.0
    lookahead_s: float = 2.0
    min_lookahead_m: float = 5.0

    @classmethod
    def from_any(cls, value: Optional[object]) -> Optional["AugmentConfig"]:
        """None/False -> no augmentation; True -> defaults; a dict overrides defaults."""
        if value is None or value is False:
            return None
        if isinstance(value, AugmentConfig):
            return value
        if value is True:
            return cls()
        d = dict(value)  # type: ignore[arg-type]
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown augmentation option(s) {sorted(unknown)}")
        return cls(**d)

    def needs_camera(self) -> bool:
        return self.viewpoint_p > 0 and (self.max_shift_m > 0 or self.max_yaw_deg > 0)


def color_matrix(brightness: float, contrast: float, saturation: float, hue: float) -> np.ndarray:
    """[3, 4] matrix: out = M[:, :3] @ rgb + M[:, 3] * mean_grey(rgb) (torchvision semantics)."""
    grey = np.array(_GREY)
    sat = saturation * np.eye(3) + (1 - saturation) * np.outer(np.ones(3), grey)
    a = 2 * math.pi * hue
    rot = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    hue_m = np.linalg.inv(_YIQ) @ rot @ _YIQ
    lin = hue_m @ sat * (contrast * brightness)
    offset = hue_m @ sat @ np.full(3, (1 - contrast) * brightness)
    return np.concatenate([lin, offset[:, None]], axis=1)


def _gaussian_matrix(n: int, sigma: float) -> torch.Tensor:
    """[n, n] symmetric banded blur matrix (rows sum to 1): blurred = G_h @ x @ G_w."""
    i = torch.arange(n, dtype=torch.float32)
    d = i[:, None] - i[None, :]
    g = torch.exp(-0.5 * (d / sigma) ** 2) * (d.abs() <= math.ceil(2 * sigma))
    return g / g.sum(1, keepdim=True)


class Augmenter:
    """Callable augmenting one window: ``(frames uint8 [T,3,H,W], curvature [T], speed [T], rng)``
    -> (frames uint8 [T,3,H,W], curvature [T] 1/m). ``camera``/``affine`` describe the source
    geometry for viewpoint synthesis (see :mod:`drive.data.viewpoint`)."""

    def __init__(self, config: AugmentConfig):
        self.config = config

    def _draw(self, rng: np.random.Generator, t: int, p: float) -> np.ndarray:
        """[T] bool: whether an effect applies to each frame (one draw per window unless per_frame)."""
        if self.config.per_frame:
            return rng.random(t) < p
        return np.full(t, rng.random() < p)

    def _values(self, rng: np.random.Generator, t: int, lo: float, hi: float) -> np.ndarray:
        return rng.uniform(lo, hi, t) if self.config.per_frame else np.full(t, rng.uniform(lo, hi))

    def __call__(self, frames: torch.Tensor, curvature: np.ndarray, speed_mps: np.ndarray,
                 rng: np.random.Generator, camera: Optional[Dict[str, float]] = None,
                 affine: Optional[np.ndarray] = None) -> Tuple[torch.Tensor, np.ndarray]:
        cfg = self.config
        t, _, h, w = frames.shape
        x = frames.float().div_(255.0)
        curvature = np.asarray(curvature, dtype=np.float64)
        if cfg.needs_camera():
            on = self._draw(rng, t, cfg.viewpoint_p)
            if on.any():
                if camera is None or affine is None:
                    raise ValueError("viewpoint augmentation needs the recording's camera calibration")
                shift = self._values(rng, t, -cfg.max_shift_m, cfg.max_shift_m) * on
                yaw = np.radians(self._values(rng, t, -cfg.max_yaw_deg, cfg.max_yaw_deg)) * on
                if cfg.per_frame:
                    grid = torch.stack([warp_grid(camera, affine, (h, w), s, y) for s, y in zip(shift, yaw)])
                else:
                    grid = warp_grid(camera, affine, (h, w), float(shift[0]), float(yaw[0]))
                x = warp_frames(x, grid)
                curvature = corrected_curvature(curvature, shift, yaw, speed_mps, cfg.lookahead_s,
                                                cfg.min_lookahead_m)
        on = self._draw(rng, t, cfg.photometric_p)
        if on.any():
            mats = [color_matrix(*self._jitter(rng)) for _ in range(t if cfg.per_frame else 1)]
            m = torch.from_numpy(np.stack(mats).astype(np.float32)).expand(t, 3, 4) * 1.0
            m[~torch.from_numpy(on)] = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]])
            grey = torch.tensor(_GREY).view(1, 3, 1, 1)
            mean_grey = (x * grey).sum(1).mean((1, 2))                            # [T]
            x = torch.einsum("tij,tjhw->tihw", m[:, :, :3], x) + (m[:, :, 3] * mean_grey[:, None])[..., None, None]
            x.clamp_(0.0, 1.0)
        exponent = self._exponent(rng, t, h, w, on)
        if exponent is not None:
            x = x.clamp_(1e-6, 1.0).log_().mul_(exponent).exp_()  # x ** exponent, 3x faster than pow
        blur = self._draw(rng, t, cfg.blur_p)
        if blur.any():
            sigma = self._values(rng, t, 0.3, cfg.blur_sigma_max)
            for i in (np.flatnonzero(blur) if cfg.per_frame else [0]):
                sel = slice(i, i + 1) if cfg.per_frame else slice(None)
                x[sel] = _gaussian_matrix(h, sigma[i]) @ x[sel] @ _gaussian_matrix(w, sigma[i]).T
        noise = self._draw(rng, t, cfg.noise_p)
        if noise.any():
            std = torch.from_numpy((self._values(rng, t, 0.0, cfg.noise_std_max) * noise).astype(np.float32))
            gen = torch.Generator().manual_seed(int(rng.integers(2 ** 62)))
            x = x.add_(torch.randn(x.shape, generator=gen) * std.view(t, 1, 1, 1)).clamp_(0.0, 1.0)
        out = x.mul_(255.0).round_().clamp_(0, 255).to(torch.uint8)
        jpeg = self._draw(rng, t, cfg.jpeg_p)
        if jpeg.any():
            quality = rng.integers(cfg.jpeg_quality_min, 96, t) if cfg.per_frame else \
                np.full(t, rng.integers(cfg.jpeg_quality_min, 96))
            if cfg.per_frame:
                for i in np.flatnonzero(jpeg):
                    out[i:i + 1] = TF.jpeg(out[i:i + 1], int(quality[i]))
            else:
                out = TF.jpeg(out, int(quality[0]))
        return out, curvature

    def _jitter(self, rng: np.random.Generator) -> Tuple[float, float, float, float]:
        c = self.config
        return (rng.uniform(1 - c.brightness, 1 + c.brightness), rng.uniform(1 - c.contrast, 1 + c.contrast),
                rng.uniform(1 - c.saturation, 1 + c.saturation), rng.uniform(-c.hue, c.hue))

    def _exponent(self, rng: np.random.Generator, t: int, h: int, w: int, photometric: np.ndarray
                  ) -> Optional[torch.Tensor]:
        """Per-pixel exponent [T, 1, H, W] (or [T,1,1,1]) for gamma jitter and shadow bands; None = 1."""
        cfg = self.config
        gamma = np.where(photometric, self._values(rng, t, 1 - cfg.gamma, 1 + cfg.gamma), 1.0)
        expo = torch.from_numpy(gamma.astype(np.float32)).view(t, 1, 1, 1)
        shadow = self._draw(rng, t, cfg.shadow_p)
        if not shadow.any():
            return None if np.all(gamma == 1.0) else expo
        n = t if cfg.per_frame else 1
        scale = w / 200.0
        masks = []
        for _ in range(n):
            thick = rng.integers(cfg.shadow_thickness_min, cfg.shadow_thickness_max + 1) * scale
            angle, x0, y0 = rng.uniform(0, math.pi), rng.uniform(0, w), rng.uniform(0, h)
            v, u = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                  indexing="ij")
            band = (((u - x0) * math.sin(angle) - (v - y0) * math.cos(angle)).abs() < thick / 2).float()
            k = int(rng.choice([3, 5, 7]))
            band = F.avg_pool2d(band[None, None], k, stride=1, padding=k // 2, count_include_pad=False)[0, 0]
            g = 1 + rng.uniform(0, cfg.shadow_gamma_max)
            g = 1 / g if rng.random() < 1 / 3 else g
            masks.append(torch.from_numpy(np.array(math.log(g), dtype=np.float32)) * band)
        log_g = torch.stack(masks).expand(t, h, w) * torch.from_numpy(shadow.astype(np.float32)).view(t, 1, 1)
        return expo * torch.exp(log_g).unsqueeze(1)
