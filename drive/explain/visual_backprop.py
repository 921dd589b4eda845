"""VisualBackProp: which input pixels a conv head's features come from (Bojarski et al., ICRA 2018).

The algorithm (REFERENCE.md §4, the authors' ``vis.lua``):

1. one forward pass through the head's convolutions, keeping every post-ReLU feature map;
2. average each layer's maps over channels;
3. from the deepest layer, scale the current mask up to the shallower layer's resolution with a
   transposed convolution whose kernel size and stride are those of the conv that produced the
   deeper map (weights 1, bias 0, the conv's padding, ``output_padding`` per dimension so the size
   matches exactly), multiply point-wise with the shallower layer's average, repeat; the first
   layer's mask is scaled up to the input size the same way;
4. min-max normalise each image's mask to [0, 1] (a constant mask becomes all zeros).

``method="ncp"`` is the NCP authors' variant (Lechner et al. 2020 code): each channel divided by
its maximum before averaging, bilinear upsampling instead of the transposed convolution, min-max
normalisation at the first layer's resolution, then bilinear upsampling to the input size and a
product with the standardised input's intensity (channel mean, min-max scaled to [0, 1]).

The geometry is read from the head: ``head.convs`` must be an ``nn.Sequential`` of alternating
``Conv2d`` and ``ReLU`` (as :mod:`drive.nn.heads` builds them); ``head.standardize(frames)``, when
present, gives the convolutions' input. Anything else is a :class:`VisualBackPropError`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["VisualBackPropError", "ConvGeometry", "conv_geometry", "visual_backprop", "METHODS"]

METHODS = ("bojarski", "ncp")


class VisualBackPropError(ValueError):
    """The head's structure is one VisualBackProp cannot explain (non-ReLU, branches, no convs)."""


@dataclass(frozen=True)
class ConvGeometry:
    """Kernel size, stride and padding (each (h, w)) of one conv layer, as VBP inverts it."""

    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[int, int]

    def output_padding(self, in_hw: Tuple[int, int], out_hw: Tuple[int, int]) -> Tuple[int, int]:
        """Per-dimension ``output_padding`` so the transposed conv maps ``out_hw`` back to ``in_hw``.

        ``in = (out - 1) * s - 2p + k + op``, hence ``op = (in + 2p - k) mod s`` in [0, s).
        """
        pads = []
        for d in range(2):
            op = in_hw[d] - ((out_hw[d] - 1) * self.stride[d] - 2 * self.padding[d] + self.kernel[d])
            if not 0 <= op < self.stride[d]:
                raise VisualBackPropError(f"sizes {in_hw} -> {out_hw} do not match conv geometry {self}")
            pads.append(op)
        return pads[0], pads[1]


def _pair(value) -> Tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (tuple, list)) else (int(value), int(value))


def _geometry(conv: nn.Conv2d, where: str) -> ConvGeometry:
    kernel, stride, dilation = _pair(conv.kernel_size), _pair(conv.stride), _pair(conv.dilation)
    if dilation != (1, 1):
        raise VisualBackPropError(f"{where}: dilated convolutions are not supported (dilation {dilation})")
    if conv.padding == "valid":
        padding = (0, 0)
    elif conv.padding == "same":
        if kernel[0] % 2 == 0 or kernel[1] % 2 == 0:
            raise VisualBackPropError(f"{where}: padding='same' with an even kernel {kernel} is asymmetric")
        padding = (kernel[0] // 2, kernel[1] // 2)
    else:
        padding = _pair(conv.padding)
    return ConvGeometry(kernel, stride, padding)


def conv_geometry(head: nn.Module) -> List[ConvGeometry]:
    """Validate ``head.convs`` (Conv2d, ReLU, Conv2d, ReLU, ...) and return each conv's geometry.

    Raises:
        VisualBackPropError: no ``convs``, a non-ReLU activation, a missing activation, a nested
            container or any other module (branches cannot be inverted by VBP).
    """
    convs = getattr(head, "convs", None)
    name = type(head).__name__
    if not isinstance(convs, nn.Sequential) or len(convs) == 0:
        raise VisualBackPropError(
            f"{name} has no `convs` (an nn.Sequential of Conv2d, ReLU pairs); VisualBackProp needs one"
        )
    layers = list(convs)
    if len(layers) % 2:
        raise VisualBackPropError(f"{name}.convs must alternate Conv2d and ReLU; it ends with {type(layers[-1]).__name__}")
    geometry = []
    for i in range(0, len(layers), 2):
        conv, act = layers[i], layers[i + 1]
        if type(conv) is not nn.Conv2d:
            raise VisualBackPropError(f"{name}.convs[{i}] is {type(conv).__name__}, expected Conv2d")
        if type(act) is not nn.ReLU:
            raise VisualBackPropError(
                f"{name}.convs[{i + 1}] is {type(act).__name__}: VisualBackProp needs a ReLU after every "
                "Conv2d (non-negative maps)"
            )
        geometry.append(_geometry(conv, f"{name}.convs[{i}]"))
    return geometry


def _feature_maps(head: nn.Module, frames: Tensor) -> Tuple[Tensor, List[Tensor]]:
    """The convolutions' input ``[B, C, H, W]`` and every post-ReLU map, in one forward pass."""
    x = head.standardize(frames) if hasattr(head, "standardize") else frames
    maps = []
    h = x
    for module in head.convs:
        h = module(h)
        if isinstance(module, nn.ReLU):
            maps.append(h)
    return x, maps


def _normalize(mask: Tensor) -> Tensor:
    """Min-max per image over ``[B, H, W]``; masks whose range is below 1e-6 of their peak -> zeros."""
    flat = mask.flatten(1)
    lo = flat.min(dim=1).values.view(-1, 1, 1)
    hi = flat.max(dim=1).values.view(-1, 1, 1)
    span = hi - lo
    constant = span <= 1e-6 * torch.maximum(hi.abs(), lo.abs()).clamp_min(torch.finfo(mask.dtype).tiny)
    return torch.where(constant, torch.zeros_like(mask), (mask - lo) / torch.where(constant, torch.ones_like(span), span))


def _bojarski(geometry: List[ConvGeometry], x: Tensor, maps: List[Tensor]) -> Tensor:
    means = [m.mean(dim=1, keepdim=True) for m in maps]  # [B, 1, h_i, w_i]
    sizes = [tuple(x.shape[-2:])] + [tuple(m.shape[-2:]) for m in means]
    mask = means[-1]
    for i in range(len(means) - 1, -1, -1):
        g = geometry[i]
        ones = torch.ones(1, 1, *g.kernel, dtype=mask.dtype, device=mask.device)
        mask = F.conv_transpose2d(
            mask, ones, stride=g.stride, padding=g.padding, output_padding=g.output_padding(sizes[i], sizes[i + 1])
        )
        if i > 0:
            mask = mask * means[i - 1]
    return _normalize(mask[:, 0])


def _ncp(x: Tensor, maps: List[Tensor]) -> Tensor:
    means = [(m / (m.amax(dim=(2, 3), keepdim=True) + 1e-4)).mean(dim=1, keepdim=True) for m in maps]
    mask = means[-1]
    for shallower in reversed(means[:-1]):
        mask = F.interpolate(mask, size=shallower.shape[-2:], mode="bilinear", align_corners=False) * shallower
    mask = _normalize(mask[:, 0])[:, None]
    mask = F.interpolate(mask, size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    intensity = _normalize(x.mean(dim=1))
    return _normalize(mask * intensity)


def visual_backprop(head: nn.Module, frames: Tensor, method: str = "bojarski") -> Tensor:
    """Saliency masks of ``head`` for ``frames``.

    Args:
        head: a conv head whose ``convs`` alternate Conv2d and ReLU (e.g. ``NCPConvHead``, ``PilotNetCNN``).
        frames: ``[B, 3, H, W]`` float in [0, 1], the head's own input.
        method: ``"bojarski"`` (the published algorithm) or ``"ncp"`` (the NCP authors' variant).

    Returns:
        masks ``[B, H, W]`` in [0, 1], same dtype and device as ``frames``; 1 marks the pixels the
        deepest features depend on most. No gradients are recorded.
    """
    if method not in METHODS:
        raise ValueError(f"unknown VisualBackProp method {method!r}; choose one of {METHODS}")
    if frames.dim() != 4:
        raise ValueError(f"frames must be [B, C, H, W], got shape {tuple(frames.shape)}")
    geometry = conv_geometry(head)
    with torch.no_grad():
        x, maps = _feature_maps(head, frames)
        return _bojarski(geometry, x, maps) if method == "bojarski" else _ncp(x, maps)
