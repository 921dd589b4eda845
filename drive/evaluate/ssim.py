"""Structural similarity with MATLAB's ``ssim`` defaults, batched in torch.

Wang et al. 2004, as MATLAB computes it: a Gaussian window with sigma 1.5 (11x11 taps, radius
ceil(3 sigma)), replicate padding so the SSIM map has the image's size, K1 = 0.01, K2 = 0.03,
data range 1 (maps in [0, 1]); the score is the mean of the map. The saliency-robustness figure of
the CfC paper (Fig. 5) compares clean and noisy VisualBackProp maps this way.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["ssim", "ssim_map", "gaussian_window"]


def gaussian_window(sigma: float = 1.5) -> torch.Tensor:
    """1-D normalised Gaussian taps, radius ceil(3 sigma) (11 taps at sigma 1.5), float64."""
    radius = int(math.ceil(3 * sigma))
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    g = torch.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def _blur(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    r = (g.numel() - 1) // 2
    x = F.pad(x, (r, r, r, r), mode="replicate")
    x = F.conv2d(x, g.view(1, 1, 1, -1))
    return F.conv2d(x, g.view(1, 1, -1, 1))


def ssim_map(
    a: torch.Tensor,
    b: torch.Tensor,
    data_range: float = 1.0,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
) -> torch.Tensor:
    """Per-pixel SSIM of two batches of single-channel images [B, H, W] (or [H, W]) -> same shape."""
    if a.shape != b.shape:
        raise ValueError(f"ssim: shapes differ, {tuple(a.shape)} vs {tuple(b.shape)}")
    squeeze = a.dim() == 2
    x = a.to(torch.float64).reshape(-1, 1, *a.shape[-2:])
    y = b.to(torch.float64).reshape(-1, 1, *b.shape[-2:])
    g = gaussian_window(sigma).to(x.device)
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    mu_x, mu_y = _blur(x, g), _blur(y, g)
    var_x = _blur(x * x, g) - mu_x**2
    var_y = _blur(y * y, g) - mu_y**2
    cov = _blur(x * y, g) - mu_x * mu_y
    out = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    out = out.reshape(a.shape)
    return out if not squeeze else out.reshape(a.shape[-2:])


def ssim(a: torch.Tensor, b: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """SSIM score per image: [B, H, W] x [B, H, W] -> [B] (a scalar for [H, W] inputs)."""
    m = ssim_map(a, b, data_range)
    return m.mean(dim=(-2, -1))
