"""The training step's tensors: the NCP paper's curve-weighted MSE and its weights, and the frame
layout the conv head trains in on a CPU."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["weighted_mse", "curve_weights", "channels_last_frames"]


def weighted_mse(pred_km: Tensor, target_km: Tensor, weight: Tensor) -> Tensor:
    """Weighted MSE normalised by the weights (Lechner et al. 2020), in (1/km)^2; all ``[B, L]``."""
    return (weight * (pred_km - target_km) ** 2).sum() / weight.sum().clamp_min(1e-12)


def curve_weights(target_km: Tensor, curve_factor: float) -> Tensor:
    """NCP sample weights ``exp(c |y|)``, y in 1/km (the datamodule's ``weight``)."""
    return torch.exp(curve_factor * target_km.abs())


def channels_last_frames(frames: Tensor) -> Tensor:
    """``frames [B, L, C, H, W]`` (the same values) laid out so that each frame ``[C, H, W]`` is
    channels-last: ``frames.flatten(0, 1)`` is then a ``torch.channels_last`` batch without a copy,
    and the convolutions run in that layout (oneDNN's fast one on a CPU)."""
    return frames.permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)
