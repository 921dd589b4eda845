"""Training augmentation of one window of frames, with label correction for viewpoint changes.

Order: viewpoint synthesis (:mod:`drive.data.viewpoint`) and mirroring, colour jitter, gamma and NCP
shadow bands, random erasing, blur, Gaussian noise, JPEG artifacts. By default every parameter is
drawn once per window and applied to all T frames (an RNN should not learn flicker);
``per_frame=True`` draws per frame.
Noise pixels are always fresh per frame.

- Mirror (``mirror_p``): the window seen in a world mirrored about the car's vertical mid-plane, the
  frames flipped about the camera's principal point ``cx`` (the model image's centre for a recording
  without calibration) and the labels negated, so a left turn in the logs also teaches the right turn
  that mirrors it. The flip is folded into the viewpoint warp (one resampling); a mirrored window that
  is also shifted and yawed gets the label corrected for the shift and yaw in the mirrored world.
  A mirrored frame of a right-hand-traffic road shows the car in the left lane of a left-hand one.

- Colour jitter: brightness b, contrast c, saturation s as in torchvision.transforms.v2
  (``adjust_brightness``/``adjust_contrast``/``adjust_saturation``, same grey weights), fused into
  one 3x3 colour matrix plus offset per frame (no clamping between the three steps); hue turns the
  chroma plane of YIQ (torchvision's exact HSV hue costs ~10x the whole rest of the pipeline).
- NCP shadow bands (Lechner et al. 2020): a band of random thickness (10-99 px at 200 px width) at a
  random angle and offset, blurred with a 3/5/7 box; inside, img ** g with g = 1 + U(0, gmax), two
  thirds darker, one third lighter (g -> 1/g). Blending uses the exponent g ** mask, so gamma
  jitter and shadow cost one ``pow``. ``shadow_kind="cast"`` darkens the band as a cast shadow
  does instead: the light scaled by 1 - s, s = U(``shadow_strength_min``, ``shadow_strength_max``)
  (the world's tree shadows: 0.4-0.65), added in the same logarithm (``exp(g log img + mask log(1 - s))``).
- Random erasing (``erase_p``; Zhong et al. 2020, "Random Erasing Data Augmentation"): a rectangle
  of U(0.02, ``erase_area_max``) of the frame, aspect ratio log-uniform in [1/3, 3], filled with
  one random colour, at the same place in every frame of the window (dirt or a wiper on the lens,
  a car ahead): the policy cannot lean on one cue, a lane line or a verge, alone. Labels unchanged.
- Blur: separable Gaussian, sigma U(0.3, blur_sigma_max), radius ceil(2 sigma), truncated and
  renormalised at the borders, as two banded matrix products (torchvision's 2-D convolution costs
  ~10x more; OpenCV inside forked DataLoader workers can deadlock).
  JPEG: quality U(jpeg_quality_min, 95), ``torchvision.transforms.v2.functional.jpeg`` on the CPU;
  on a CUDA device nvJPEG through ``torchvision.io.encode_jpeg``/``decode_jpeg`` (the same libjpeg
  quantisation tables; the CPU codec where torchvision has no CUDA one).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from drive.data.filters import gaussian_matrices, jpeg_round_trip
from drive.data.viewpoint import corrected_curvature, warp_frames, warp_grids, warp_params
from drive.io.checks import number

__all__ = ["AugmentConfig", "Augmenter", "color_matrix"]

_GREY = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights
_YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])


@dataclasses.dataclass
class AugmentConfig:
    """Augmentation settings (``*_p`` = probability per window, or per frame with ``per_frame``)."""

    per_frame: bool = False
    shadow_p: float = 0.5
    shadow_kind: str = "gamma"  # "gamma": the NCP paper's img ** g; "cast": the light scaled by 1 - s
    shadow_gamma_max: float = 1.5
    shadow_strength_min: float = 0.3
    shadow_strength_max: float = 0.7
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
    mirror_p: float = 0.0
    erase_p: float = 0.0
    erase_area_max: float = 0.2
    lookahead_s: Union[float, str] = "fit"  # fitted on the training logs by drive fit, or seconds
    min_lookahead_m: float = 5.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name.endswith("_p"):  # probabilities
                setattr(self, f.name, number(getattr(self, f.name), f"augment.{f.name}", low=0.0, high=1.0))
        la = self.lookahead_s
        if la != "fit" and not (isinstance(la, (int, float)) and not isinstance(la, bool) and la > 0):
            raise ValueError(f"augment.lookahead_s: a number of seconds > 0 or 'fit', got {la!r}")
        self.erase_area_max = number(self.erase_area_max, "augment.erase_area_max", low=0.02, high=1.0)
        if self.shadow_kind not in ("gamma", "cast"):
            raise ValueError(f"augment.shadow_kind: 'gamma' or 'cast', got {self.shadow_kind!r}")
        lo = number(self.shadow_strength_min, "augment.shadow_strength_min", low=0.0, high=0.95)
        self.shadow_strength_min = lo
        self.shadow_strength_max = number(
            self.shadow_strength_max, "augment.shadow_strength_max", low=lo, high=0.95
        )

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


Geometry = Tuple[
    Optional[Dict[str, float]], Optional[np.ndarray]
]  # (camera calibration, source->model affine)


_IDENTITY = np.concatenate([np.eye(3).ravel(), np.zeros(6)])  # warp_params of no move


def _mirror(camera: Optional[Dict[str, float]], affine: Optional[np.ndarray], width: int) -> np.ndarray:
    """[3, 3] model-pixel reflection about the vertical line through the principal point: source
    ``u -> 2 cx - u`` conjugated by the crop/resize affine; the model image's centre without a
    calibration."""
    if camera is None or affine is None:
        return np.array([[-1.0, 0.0, width - 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    flip = np.array([[-1.0, 0.0, 2.0 * camera["cx"]], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    return affine @ flip @ np.linalg.inv(affine)


class Augmenter:
    """Augments W windows of T frames at once, on any device.

    ``augment(frames uint8 [W,T,3,H,W], curvature [W,T], speed [W,T], rng, geometry)`` returns
    (frames uint8 [W,T,3,H,W], curvature [W,T] 1/m); ``geometry[w]`` = (camera, affine) of window
    w's recording, used by viewpoint synthesis (see :mod:`drive.data.viewpoint`). Calling the object
    with one window ``[T,3,H,W]`` is the DataLoader-worker form.
    """

    def __init__(self, config: AugmentConfig):
        self.config = config

    def __call__(
        self,
        frames: torch.Tensor,
        curvature: np.ndarray,
        speed_mps: np.ndarray,
        rng: np.random.Generator,
        camera: Optional[Dict[str, float]] = None,
        affine: Optional[np.ndarray] = None,
    ) -> Tuple[torch.Tensor, np.ndarray]:
        out, k = self.augment(
            frames[None], np.asarray(curvature)[None], np.asarray(speed_mps)[None], rng, [(camera, affine)]
        )
        return out[0], k[0]

    def augment(
        self,
        frames: torch.Tensor,
        curvature: np.ndarray,
        speed_mps: np.ndarray,
        rng: np.random.Generator,
        geometry: Sequence[Geometry],
    ) -> Tuple[torch.Tensor, np.ndarray]:
        cfg = self.config
        n_win, t, _, h, w = frames.shape
        n = n_win * t
        # parameters are drawn per unit: a window, or a frame with per_frame; ``unit[i]`` of frame i
        units = n if cfg.per_frame else n_win
        unit = np.arange(n) if cfg.per_frame else np.repeat(np.arange(n_win), t)
        dev = frames.device
        x = frames.reshape(n, 3, h, w).float().div_(255.0)
        curvature = np.asarray(curvature, dtype=np.float64).reshape(n).copy()
        if cfg.needs_camera() or cfg.mirror_p > 0:
            curvature = self._viewpoint(x, curvature, speed_mps, rng, geometry, unit, units, t)
        photometric = rng.random(units) < cfg.photometric_p
        if photometric.any():
            x = self._colour(x, rng, photometric, unit)
        exponent, log_light = self._exponent(rng, units, unit, h, w, photometric, dev)
        if exponent is not None:  # x ** exponent * light as exp(exponent log x + log light): 3x pow's speed
            x = x.clamp_(1e-6, 1.0).log_().mul_(exponent)
            x = (x.add_(log_light) if log_light is not None else x).exp_()
        if cfg.erase_p > 0:  # the draws of a run without erasing are the same as before it existed
            x = self._erase(x, rng, rng.random(units) < cfg.erase_p, unit)
        blur = rng.random(units) < cfg.blur_p
        sigma = rng.uniform(0.3, cfg.blur_sigma_max, units)
        if blur.any():
            blurred = np.flatnonzero(blur)
            s = torch.from_numpy(sigma[blurred].astype(np.float32)).to(dev)
            g_h, g_w = gaussian_matrices(h, s), gaussian_matrices(w, s).transpose(-1, -2)
            for j, u in enumerate(blurred):  # a few units per batch: two matrix products each
                sel = torch.from_numpy(np.flatnonzero(unit == u)).to(dev)
                x[sel] = g_h[j] @ x[sel] @ g_w[j]
        noise = rng.random(units) < cfg.noise_p
        if noise.any():
            std = torch.from_numpy(
                (rng.uniform(0.0, cfg.noise_std_max, units) * noise)[unit].astype(np.float32)
            )
            gen = torch.Generator(device=dev).manual_seed(int(rng.integers(2**62)))
            x = x.add_(torch.randn(x.shape, generator=gen, device=dev) * std.to(dev).view(n, 1, 1, 1)).clamp_(
                0.0, 1.0
            )
        out = x.mul_(255.0).round_().clamp_(0, 255).to(torch.uint8)
        jpeg = rng.random(units) < cfg.jpeg_p
        quality = rng.integers(cfg.jpeg_quality_min, 96, units)
        for u in np.flatnonzero(jpeg):
            sel = torch.from_numpy(np.flatnonzero(unit == u)).to(dev)
            out[sel] = jpeg_round_trip(out[sel], int(quality[u]))
        return out.view(n_win, t, 3, h, w), curvature.reshape(n_win, t)

    def _viewpoint(
        self,
        x: torch.Tensor,
        curvature: np.ndarray,
        speed_mps: np.ndarray,
        rng: np.random.Generator,
        geometry: Sequence[Geometry],
        unit: np.ndarray,
        units: int,
        t: int,
    ) -> np.ndarray:
        """Viewpoint synthesis and mirroring: each of the ``units`` drawn with ``viewpoint_p`` is seen
        from a shifted and yawed camera, each drawn with ``mirror_p`` in the mirrored world, warped in
        place in ``x`` ([N, 3, H, W]; ``unit[i]``: frame i's unit); returns the curvature labels of
        what the frames now show."""
        cfg = self.config
        moves = cfg.needs_camera()
        if moves and cfg.lookahead_s == "fit":
            raise ValueError(
                "augment.lookahead_s 'fit' is fitted on the training logs by drive fit before the first "
                "batch; give a number of seconds to augment outside drive fit"
            )
        n, _, h, w = x.shape
        on, mirror = np.zeros(units, dtype=bool), np.zeros(units, dtype=bool)
        shift, yaw = np.zeros(units), np.zeros(units)
        if moves:  # the draws of a run without mirroring are the same as before mirroring existed
            on = rng.random(units) < cfg.viewpoint_p
            shift = rng.uniform(-cfg.max_shift_m, cfg.max_shift_m, units) * on
            yaw = np.radians(rng.uniform(-cfg.max_yaw_deg, cfg.max_yaw_deg, units)) * on
        if cfg.mirror_p > 0:
            mirror = rng.random(units) < cfg.mirror_p
        moved = on | mirror  # units whose frames are warped
        warped = np.flatnonzero(moved)
        if not len(warped):
            return curvature
        sel = np.flatnonzero(moved[unit])
        params = np.empty((len(warped), 15))
        for j, u in enumerate(warped):
            camera, affine = geometry[u if not cfg.per_frame else u // t]
            if on[u] and (camera is None or affine is None):
                raise ValueError("viewpoint augmentation needs the recording's camera calibration")
            params[j] = warp_params(camera, affine, float(shift[u]), float(yaw[u])) if on[u] else _IDENTITY
            if mirror[u]:  # sample the mirrored source: q -> F q after the warp
                f = _mirror(camera, affine, w)
                params[j, :9] = (f @ params[j, :9].reshape(3, 3)).ravel()
                params[j, 9:12] = f @ params[j, 9:12]
        grids = warp_grids(torch.from_numpy(params).to(x.device), (h, w))  # one per warped unit
        slot = np.zeros(units, dtype=np.int64)
        slot[warped] = np.arange(len(warped))
        x[sel] = warp_frames(x[sel], grids[torch.from_numpy(slot[unit[sel]]).to(x.device)])
        curvature = np.where(mirror[unit], -curvature, curvature)
        if not moves:
            return curvature
        return corrected_curvature(
            curvature,
            shift[unit],
            yaw[unit],
            np.asarray(speed_mps).reshape(n),
            cfg.lookahead_s,
            cfg.min_lookahead_m,
        )

    def _colour(
        self, x: torch.Tensor, rng: np.random.Generator, photometric: np.ndarray, unit: np.ndarray
    ) -> torch.Tensor:
        """Brightness, contrast, saturation and hue jitter of the units drawn (``photometric``): one
        colour matrix per unit, contrast about each frame's mean grey."""
        n, _, h, w = x.shape
        dev = x.device
        mats = np.tile(np.eye(3, 4), (len(photometric), 1, 1))
        for u in np.flatnonzero(photometric):
            mats[u] = color_matrix(*self._jitter(rng))
        m = torch.from_numpy(mats[unit].astype(np.float32)).to(dev)
        grey = torch.tensor(_GREY, device=dev).view(1, 3, 1, 1)
        mean_grey = (x * grey).sum(1).mean((1, 2))  # [N]
        x = torch.bmm(m[:, :, :3], x.view(n, 3, h * w)).view(n, 3, h, w)
        return x.add_((m[:, :, 3] * mean_grey[:, None])[..., None, None]).clamp_(0.0, 1.0)

    def _erase(
        self, x: torch.Tensor, rng: np.random.Generator, erase: np.ndarray, unit: np.ndarray
    ) -> torch.Tensor:
        """One rectangle of one random colour in the frames of each unit drawn (``erase``)."""
        _, _, h, w = x.shape
        k = len(erase)
        area = rng.uniform(0.02, self.config.erase_area_max, k) * h * w
        aspect = np.exp(rng.uniform(-math.log(3), math.log(3), k))  # height / width
        eh = np.clip(np.round(np.sqrt(area * aspect)), 1, h)
        ew = np.clip(np.round(np.sqrt(area / aspect)), 1, w)
        top, left = np.floor(rng.random(k) * (h - eh + 1)), np.floor(rng.random(k) * (w - ew + 1))
        colour = rng.random((k, 3))

        def at(a: np.ndarray) -> torch.Tensor:  # the units' values at each frame, [N, 1, 1, 1]
            return torch.from_numpy(a[unit].astype(np.float32)).to(x.device).view(-1, 1, 1, 1)

        v = torch.arange(h, dtype=torch.float32, device=x.device).view(1, 1, h, 1)
        u = torch.arange(w, dtype=torch.float32, device=x.device).view(1, 1, 1, w)
        box = (v >= at(top)) & (v < at(top + eh)) & (u >= at(left)) & (u < at(left + ew)) & at(erase).bool()
        fill = torch.from_numpy(colour[unit].astype(np.float32)).to(x.device).view(-1, 3, 1, 1)
        return torch.where(box, fill, x)

    def _jitter(self, rng: np.random.Generator) -> Tuple[float, float, float, float]:
        c = self.config
        return (
            rng.uniform(1 - c.brightness, 1 + c.brightness),
            rng.uniform(1 - c.contrast, 1 + c.contrast),
            rng.uniform(1 - c.saturation, 1 + c.saturation),
            rng.uniform(-c.hue, c.hue),
        )

    def _exponent(
        self,
        rng: np.random.Generator,
        units: int,
        unit: np.ndarray,
        h: int,
        w: int,
        photometric: np.ndarray,
        dev: torch.device,
    ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """(exponent, log light): the per-pixel exponent [N, 1, H, W] (or [N,1,1,1]) of gamma jitter
        and NCP shadow bands, None = 1 and nothing to do; the log of the light factor [N, 1, H, W] of
        cast-shadow bands (``shadow_kind="cast"``), None = 1."""
        cfg = self.config
        gamma = np.where(photometric, rng.uniform(1 - cfg.gamma, 1 + cfg.gamma, units), 1.0)
        expo = torch.from_numpy(gamma[unit].astype(np.float32)).to(dev).view(-1, 1, 1, 1)
        shadow = rng.random(units) < cfg.shadow_p
        if not shadow.any():
            return (None if np.all(gamma == 1.0) else expo), None
        k = len(shadow)
        scale = w / 200.0
        thick = rng.integers(cfg.shadow_thickness_min, cfg.shadow_thickness_max + 1, k) * scale
        angle, x0, y0 = rng.uniform(0, math.pi, k), rng.uniform(0, w, k), rng.uniform(0, h, k)
        kernel = rng.choice([3, 5, 7], k)
        cast = cfg.shadow_kind == "cast"
        if cast:  # the light scaled by 1 - s, darker only
            g = 1.0 - rng.uniform(cfg.shadow_strength_min, cfg.shadow_strength_max, k)
        else:
            g = 1 + rng.uniform(0, cfg.shadow_gamma_max, k)
            g = np.where(rng.random(k) < 1 / 3, 1 / g, g)  # one third lighter
        log_g = np.where(shadow, np.log(g), 0.0)
        v = torch.arange(h, dtype=torch.float32, device=dev).view(1, h, 1)
        u = torch.arange(w, dtype=torch.float32, device=dev).view(1, 1, w)
        sel = np.flatnonzero(shadow)

        def col(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a[sel].astype(np.float32)).to(dev).view(-1, 1, 1)

        dist = ((u - col(x0)) * torch.sin(col(angle)) - (v - col(y0)) * torch.cos(col(angle))).abs()
        band = (dist < col(thick) / 2).float().unsqueeze(1)  # [S,1,H,W]
        for size in (3, 5, 7):
            pick = torch.from_numpy(np.flatnonzero(kernel[sel] == size)).to(dev)
            if len(pick):
                band[pick] = F.avg_pool2d(
                    band[pick], size, stride=1, padding=size // 2, count_include_pad=False
                )
        maps = torch.zeros(units, 1, h, w, device=dev)
        maps[torch.from_numpy(sel).to(dev)] = band * col(log_g).unsqueeze(1)
        maps = maps[torch.from_numpy(unit).to(dev)]
        return (expo, maps) if cast else (expo * torch.exp(maps), None)
