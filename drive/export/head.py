"""The deployed module's perception head: raw-scale frames (0-255) -> features, and the mean pixel.

The training heads (:mod:`drive.nn.heads`) take frames in [0, 1] and standardise them inside.
On the vehicle the same arithmetic is rearranged for a batch-1 step, where a handful of small
operators, not the convolutions' FLOPs, set the latency:

* :class:`DeployedNCPHead` (the NCP conv head of every recurrent family) -- one mean gives both
  the black-frame test and the standardisation's centre; ``/255`` is folded into the
  standardisation (``(x/255 - m/255) / max(s/255, 1/sqrt(n)) = (x - m) / max(s, 255/sqrt(n))``),
  the deviation is a norm of the centred frame, scaled in place (``std_mean`` takes ~10x as long
  at batch 1); all on the HWC view of the camera frame, so no layout copy. The five convolutions
  run channels-last with in-place ReLU; the eight per-map ``Dense(250 -> 4)`` layers become one
  ``addmm`` with a block-diagonal weight ``[h*w*8, 32]`` laid out for the channels-last maps (no
  copy, no batched einsum), derived from the head's own ``dense_weight`` at export time.
* :class:`DeployedHead` -- any other head (PilotNet): ``head(x / 255)`` as in training.

``use_mkldnn`` (default False, the portable choice saved in files) routes fp32 CPU convolutions to
oneDNN directly (``aten::mkldnn_convolution``); PyTorch's own heuristic sends the 3x3 layers on
10x25 maps at batch 1 to its slower im2col path. Loaders set it where oneDNN is present
(:func:`drive.export.runtime.optimize_loaded`, ``drive_runtime``), then freeze the module.
"""

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from drive.nn.heads import NCPConvHead

__all__ = ["DeployedNCPHead", "DeployedHead", "deployed_head"]


class DeployedNCPHead(nn.Module):
    """NCP conv head on 0-255 frames: ``x [B, 3, H, W]`` uint8 (or float) -> (features ``[B, 32]``,
    mean pixel ``[B]``).

    Same parameters and equations as :class:`drive.nn.heads.NCPConvHead` (per-frame
    standardisation, five SAME ReLU convolutions, per-map ``Dense(h*w -> 4, ReLU)``).
    """

    use_mkldnn: bool

    def __init__(self, head: NCPConvHead) -> None:
        super().__init__()
        self.convs = nn.ModuleList([m for m in head.convs if isinstance(m, nn.Conv2d)])
        self.strides: List[List[int]] = [[int(c.stride[0]), int(c.stride[1])] for c in self.convs]
        self.paddings: List[List[int]] = [[int(c.padding[0]), int(c.padding[1])] for c in self.convs]
        self.input_size: Tuple[int, int] = head.input_size
        self.numel = 3 * head.input_size[0] * head.input_size[1]
        dense_weight, dense_bias = head.dense_parameters()  # the feature normalisation folded in
        maps, positions, units = dense_weight.shape
        # block[p * maps + g, g * units + k] = dense_weight[g, p, k]: channels-last flattening
        block = torch.zeros(positions, maps, maps, units, dtype=dense_weight.dtype)
        for g in range(maps):
            block[:, g, g, :] = dense_weight[g]
        self.register_buffer("dense_block", block.reshape(positions * maps, maps * units))
        self.register_buffer("dense_bias", dense_bias.reshape(maps * units).clone())
        self.use_mkldnn = False

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        torch._assert(
            x.dim() == 4
            and x.size(1) == 3
            and x.size(2) == self.input_size[0]
            and x.size(3) == self.input_size[1],
            "DeployedNCPHead: frames must be [B, 3, H, W] at input_size",
        )
        batch, height, width = x.size(0), x.size(2), x.size(3)
        # HWC order: for a channels-last (camera HWC) frame the reshape is a view, the cast the one copy
        centred = x.permute(0, 2, 3, 1).reshape(batch, -1).to(torch.float32, copy=True)
        mean = centred.mean(dim=1, keepdim=True)
        centred.sub_(mean)
        # 1/std = rsqrt(mean((x - m)^2)) (two passes: no cancellation), std floored at 255 / sqrt(n); the
        # training head's form (drive.nn.heads.standardize_frames) on 0-255 values
        variance = centred.square().mean(dim=1, keepdim=True)
        centred.mul_(variance.clamp_min(255.0 * 255.0 / float(self.numel)).rsqrt())
        y = (
            centred.view(batch, height, width, 3).permute(0, 3, 1, 2).to(self.dense_block.dtype)
        )  # channels-last
        fast = self.use_mkldnn and y.device.type == "cpu" and y.dtype == torch.float32
        for i, conv in enumerate(self.convs):
            if fast:
                y = torch.mkldnn_convolution(
                    y, conv.weight, conv.bias, self.paddings[i], self.strides[i], [1, 1], 1
                )
            else:
                y = F.conv2d(y, conv.weight, conv.bias, self.strides[i], self.paddings[i])
            y = torch.relu_(y)
        flat = y.permute(0, 2, 3, 1).reshape(y.size(0), -1)  # a view for channels-last maps
        features = torch.relu_(torch.addmm(self.dense_bias, flat, self.dense_block))
        return features.float(), mean.flatten()


class DeployedHead(nn.Module):
    """Any other head on 0-255 frames: ``head(x / 255)`` (channels-last) and the mean pixel."""

    use_mkldnn: bool

    def __init__(self, head: nn.Module, half: bool) -> None:
        super().__init__()
        self.head = head
        self.fp16 = bool(half)  # not `half`: that name would hide nn.Module.half(), which deployed_head calls
        self.use_mkldnn = False  # unused: the wrapped head runs as trained

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        x = x.float()
        mean = x.mean(dim=[1, 2, 3])
        x = (x / 255.0).contiguous(memory_format=torch.channels_last)
        if self.fp16:
            x = x.half()
        return self.head(x).float(), mean


def deployed_head(head: nn.Module, half: bool) -> nn.Module:
    """The deployed form of ``head`` (a copy's parameters are shared, not copied), fp16 on request."""
    out: nn.Module = DeployedNCPHead(head) if isinstance(head, NCPConvHead) else DeployedHead(head, half)
    if half:
        out.half()
    return out.to(memory_format=torch.channels_last)
