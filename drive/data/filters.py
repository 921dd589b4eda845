"""Pixel filters of the augmenter (:mod:`drive.data.augment`): Gaussian blur as banded matrices and
a JPEG round trip where the frames lie."""

from __future__ import annotations

import warnings

import torch
import torchvision
from torchvision.transforms.v2 import functional as TF

__all__ = ["gaussian_matrices", "jpeg_round_trip"]


def gaussian_matrices(n: int, sigma: torch.Tensor) -> torch.Tensor:
    """[U, n, n] symmetric banded blur matrices, one per sigma [U] (rows sum to 1):
    blurred = G_h @ x @ G_w^T."""
    i = torch.arange(n, dtype=torch.float32, device=sigma.device)
    d = (i[:, None] - i[None, :])[None]
    s = sigma.view(-1, 1, 1)
    g = torch.exp(-0.5 * (d / s) ** 2) * (d.abs() <= torch.ceil(2 * s))
    return g / g.sum(-1, keepdim=True)


def jpeg_round_trip(frames: torch.Tensor, quality: int) -> torch.Tensor:
    """JPEG round trip of uint8 frames [K,3,H,W] where they lie: nvJPEG on CUDA (batched encode,
    decode of the compressed bytes, a few kB a frame, back to the GPU); torchvision's CPU codec on
    the CPU and where torchvision has no CUDA codec."""
    if frames.device.type == "cuda":
        try:
            data = torchvision.io.encode_jpeg(list(frames), quality=quality)
            return torch.stack(torchvision.io.decode_jpeg([d.cpu() for d in data], device=frames.device))
        except RuntimeError as err:  # a torchvision built without nvJPEG: the CPU codec, said once
            warnings.warn(f"JPEG augmentation on the CPU codec: nvJPEG failed on CUDA ({err})", stacklevel=2)
    return TF.jpeg(frames.cpu(), quality).to(frames.device)
