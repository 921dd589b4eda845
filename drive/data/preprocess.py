"""Camera frame -> network input: crop, then resize. One implementation for training and the car.

The data cache (drive.data) and exported deployment modules (drive.export) both call
:func:`preprocess_frames`, which is TorchScript-scriptable, so a policy sees byte-identical inputs
in training and on the vehicle. Resizing is bilinear with antialiasing (area-like when shrinking),
rounded back to uint8.

The NCP paper's setup (Lechner et al. 2020): 1920x1208 frames cropped to rows 590:950 and columns
520:1440, resized to 200x78 (W x H): ``Preprocessing.ncp()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

__all__ = ["Preprocessing", "preprocess_frames", "MODEL_SIZE"]

MODEL_SIZE: Tuple[int, int] = (78, 200)  # (H, W), the NCP paper's network input


def preprocess_frames(frames: torch.Tensor, crop: List[int], size: List[int]) -> torch.Tensor:
    """Crop and resize camera frames.

    Args:
        frames: uint8 [N, H, W, 3] RGB.
        crop: ``[top, bottom, left, right]`` (rows top:bottom, columns left:right) or ``[]`` for none.
        size: ``[height, width]`` of the output.
    Returns:
        uint8 [N, 3, height, width].
    """
    if frames.dim() != 4 or frames.size(3) != 3:
        raise ValueError("frames must be [N, H, W, 3], got " + str(list(frames.shape)))
    if frames.dtype != torch.uint8:
        raise ValueError("frames must be uint8, got " + str(frames.dtype))
    if len(crop) == 4:
        top, bottom, left, right = crop[0], crop[1], crop[2], crop[3]
        if not (0 <= top < bottom <= frames.size(1) and 0 <= left < right <= frames.size(2)):
            raise ValueError(
                "crop "
                + str(crop)
                + " does not fit frames of size "
                + str(frames.size(1))
                + "x"
                + str(frames.size(2))
                + " (H x W)"
            )
        frames = frames[:, top:bottom, left:right, :]
    elif len(crop) != 0:
        raise ValueError("crop must be [top, bottom, left, right] or empty, got " + str(crop))
    x = frames.permute(0, 3, 1, 2)
    if x.size(2) == size[0] and x.size(3) == size[1]:
        return x.contiguous()
    # the op F.interpolate(mode="bilinear", antialias=True) runs, called directly: scripted, the
    # whole of F.interpolate would go into an exported file, with ops of every mode, some newer
    # than the torch on a car (torch 2.12's lanczos: a file from torch 2.14 did not load on 2.11)
    y = torch.ops.aten._upsample_bilinear2d_aa(x.float(), [size[0], size[1]], False, None, None)
    return y.round_().clamp_(0.0, 255.0).to(torch.uint8)


@dataclass(frozen=True)
class Preprocessing:
    """How raw camera frames become network inputs. Stored in checkpoints and exported modules."""

    size: Tuple[int, int] = MODEL_SIZE
    crop: Optional[Tuple[int, int, int, int]] = None

    def __post_init__(self) -> None:
        if len(self.size) != 2 or min(self.size) <= 0:
            raise ValueError(f"size must be (height, width) > 0, got {self.size}")
        if self.crop is not None:
            top, bottom, left, right = self.crop
            if not (0 <= top < bottom and 0 <= left < right):
                raise ValueError(
                    f"crop must be (top, bottom, left, right) with top<bottom, left<right, got {self.crop}"
                )

    @classmethod
    def ncp(cls) -> "Preprocessing":
        """The NCP authors' crop for 1920x1208 cameras, resized to 200x78."""
        return cls(size=MODEL_SIZE, crop=(590, 950, 520, 1440))

    @property
    def crop_list(self) -> List[int]:
        return list(self.crop) if self.crop is not None else []

    def __call__(self, frames: np.ndarray | torch.Tensor) -> torch.Tensor:
        """uint8 [N, H, W, 3] (or one [H, W, 3] frame) -> uint8 [N, 3, h, w]."""
        t = torch.as_tensor(frames)
        if t.dim() == 3:
            t = t.unsqueeze(0)
        return preprocess_frames(t, self.crop_list, list(self.size))

    def to_dict(self) -> Dict[str, Any]:
        return {"size": list(self.size), "crop": list(self.crop) if self.crop is not None else None}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Preprocessing":
        crop = d.get("crop")
        return cls(size=tuple(d.get("size", MODEL_SIZE)), crop=tuple(crop) if crop else None)
