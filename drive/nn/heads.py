"""Perception heads: camera frames in, features (or a steering value) out.

Two heads from the NCP lane-keeping pipeline (Lechner et al., Nature Machine Intelligence 2020,
and its authors' code; docs/references.md):

* :class:`NCPConvHead` -- the conv head shared by the recurrent policies (NCP, LTC, CfC, LSTM,
  CT-RNN): 5 SAME-padded ReLU convolutions giving 8 maps, each map flattened into its own
  ``Dense(4, ReLU)``, 32 features per frame, 79,420 parameters at 3x78x200.
* :class:`PilotNetCNN` -- the feed-forward PilotNet-style baseline: 5 VALID convolutions, FC 1000,
  FC 100, linear output without bias, 5,068,900 parameters at 3x78x200.

Both take float frames ``[N, 3, H, W]`` in ``[0, 1]`` and standardise each frame inside the
network (zero mean, unit standard deviation over all its pixels and channels, as TensorFlow's
``per_image_standardization`` in the authors' code). Both keep their convolutions in ``self.convs``,
an ``nn.Sequential`` of alternating ``Conv2d`` and ``ReLU``, and expose ``standardize(frames)``,
so :func:`drive.explain.visual_backprop` derives its geometry from the module itself.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["NCPConvHead", "PilotNetCNN", "standardize_frames", "conv_output_hw", "HEADS", "build_head"]

# (out_channels, kernel, stride) per conv layer
_NCP_CONVS: Tuple[Tuple[int, int, int], ...] = ((24, 5, 2), (36, 5, 2), (48, 3, 2), (64, 3, 1), (8, 3, 1))
_PILOTNET_CONVS: Tuple[Tuple[int, int, int], ...] = (
    (24, 5, 2),
    (36, 5, 2),
    (48, 3, 2),
    (64, 3, 1),
    (64, 3, 1),
)


def standardize_frames(frames: Tensor) -> Tensor:
    """Per-frame standardisation: ``(x - mean) / max(std, 1/sqrt(n))`` over each frame's C*H*W values.

    frames: ``[N, C, H, W]`` float. The ``1/sqrt(n)`` floor is TensorFlow's guard for constant
    frames (a uniform frame maps to zeros instead of dividing by zero).
    """
    n = frames.shape[1] * frames.shape[2] * frames.shape[3]
    centred = frames - frames.mean(dim=[1, 2, 3], keepdim=True)
    # 1/std = rsqrt(mean((x - mean)^2)), the floor std >= 1/sqrt(n) as variance >= 1/n. Two passes (no
    # cancellation), as accurate as Tensor.std and on a CPU about 5x faster than its reduction
    # (tools/bench_train.py prints the ratio, "standardisation").
    variance = centred.square().mean(dim=[1, 2, 3], keepdim=True)
    return centred * variance.clamp_min(1.0 / float(n)).rsqrt()


def conv_output_hw(
    input_hw: Sequence[int], layers: Sequence[Tuple[int, int, int]], same: bool
) -> Tuple[int, int]:
    """Spatial size after a stack of convolutions (``same``: padding k//2, else none)."""
    h, w = int(input_hw[0]), int(input_hw[1])
    for _, k, s in layers:
        p = k // 2 if same else 0
        h = (h + 2 * p - k) // s + 1
        w = (w + 2 * p - k) // s + 1
        if h < 1 or w < 1:
            raise ValueError(f"input size {tuple(input_hw)} is too small for this head's convolutions")
    return h, w


def _conv_stack(layers: Sequence[Tuple[int, int, int]], same: bool) -> nn.Sequential:
    modules: List[nn.Module] = []
    in_ch = 3
    for out_ch, k, s in layers:
        modules += [nn.Conv2d(in_ch, out_ch, k, stride=s, padding=k // 2 if same else 0), nn.ReLU()]
        in_ch = out_ch
    return nn.Sequential(*modules)


def _check_frames(frames: Tensor, input_size: Tuple[int, int], name: str) -> None:
    torch._assert(frames.dim() == 4, name + ": frames must be [N, 3, H, W]")
    torch._assert(frames.shape[1] == 3, name + ": frames must have 3 (RGB) channels")
    torch._assert(
        frames.shape[2] == input_size[0] and frames.shape[3] == input_size[1],
        name + ": frame size differs from the head's input_size",
    )


class NCPConvHead(nn.Module):
    """NCP conv head: frames ``[N, 3, H, W]`` in [0, 1] -> features ``[N, 32]`` (Lechner et al. 2020).

    24@5x5/2 -> 36@5x5/2 -> 48@3x3/2 -> 64@3x3/1 -> 8@3x3/1, padding k//2, ReLU: 8 maps of
    10x25 at 78x200. Map ``g`` is flattened and fed to its own ``Dense(250 -> 4, ReLU)``; the eight
    dense layers are one batched einsum with weight ``dense_weight[8, 250, 4]``. Feature ``4g + k``
    is unit ``k`` of map ``g``. 79,420 parameters at 78x200 (71,388 conv + 8,032 dense).

    Args:
        input_hw: frame size (H, W) the head is built for; the dense layers depend on it.
        features_per_map: units of each per-map dense layer (4 in the paper).
        norm: ``"none"`` (the paper's head) or ``"batch"``: batch normalisation of the dense
            pre-activations before their ReLU (``feature_norm``, 2 x 32 parameters, its bias
            starting at +0.5), so the features keep a unit scale and no unit dies whatever the
            camera, scene and training do to the convolutions (docs/training.md "Feature scale").
            In eval mode and in exports it is a fixed per-feature affine map.
    """

    def __init__(
        self, input_hw: Sequence[int] = (78, 200), features_per_map: int = 4, norm: str = "none"
    ) -> None:
        super().__init__()
        if norm not in ("none", "batch"):
            raise ValueError(f"norm must be 'none' or 'batch', got {norm!r}")
        self.input_size: Tuple[int, int] = (int(input_hw[0]), int(input_hw[1]))
        self.convs = _conv_stack(_NCP_CONVS, same=True)
        self.map_hw: Tuple[int, int] = conv_output_hw(self.input_size, _NCP_CONVS, same=True)
        self.maps: int = _NCP_CONVS[-1][0]
        self.features_per_map: int = int(features_per_map)
        self.output_size: int = self.maps * self.features_per_map
        map_numel = self.map_hw[0] * self.map_hw[1]
        self.dense_weight = nn.Parameter(torch.empty(self.maps, map_numel, self.features_per_map))
        self.dense_bias = nn.Parameter(torch.empty(self.maps, self.features_per_map))
        bound = 1.0 / math.sqrt(map_numel)  # nn.Linear's default initialisation, per map
        nn.init.uniform_(self.dense_weight, -bound, bound)
        nn.init.uniform_(self.dense_bias, -bound, bound)
        self.norm: str = "none"
        self.feature_norm: nn.Module = nn.Identity()
        self.set_norm(norm)

    @torch.jit.unused
    def set_norm(self, norm: str) -> None:
        """Switch the feature normalisation (fresh parameters); used to match a checkpoint's architecture."""
        if norm not in ("none", "batch"):
            raise ValueError(f"norm must be 'none' or 'batch', got {norm!r}")
        self.norm = norm
        # Under batch normalisation the dense bias is cancelled by the batch mean: its gradient is
        # rounding noise, which Adam would scale up to lr-sized random steps. It is frozen there.
        self.dense_bias.requires_grad_(norm != "batch")
        if norm == "batch":
            bn = nn.BatchNorm1d(self.output_size).to(self.dense_weight.device)
            nn.init.constant_(bn.bias, 0.5)  # ~70 % of frames give a non-zero feature
            self.feature_norm = bn
        else:
            self.feature_norm = nn.Identity()

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``NCPConvHead(**head.config())`` rebuilds the architecture."""
        cfg: Dict[str, Any] = {"input_hw": list(self.input_size), "features_per_map": self.features_per_map}
        if self.norm != "none":  # absent = the paper's head, as in checkpoints written before the option
            cfg["norm"] = self.norm
        return cfg

    @torch.jit.unused
    def dense_parameters(self) -> Tuple[Tensor, Tensor]:
        """(weight ``[G, P, K]``, bias ``[G, K]``) of the per-map dense layers with the eval-mode
        feature normalisation folded in (the same features as :meth:`forward` in eval mode, one
        affine layer fewer); exports build their head from these."""
        weight, bias = self.dense_weight.detach(), self.dense_bias.detach()
        bn = self.feature_norm
        if isinstance(bn, nn.BatchNorm1d):
            var, mean = bn.running_var.view(self.maps, -1), bn.running_mean.view(self.maps, -1)
            scale = bn.weight.detach().view(self.maps, -1) / torch.sqrt(var + bn.eps)
            weight = weight * scale.unsqueeze(1)
            bias = (bias - mean) * scale + bn.bias.detach().view(self.maps, -1)
        return weight, bias

    @torch.jit.export
    def standardize(self, frames: Tensor) -> Tensor:
        """The convolutions' input: ``frames [N, 3, H, W]`` standardised per frame."""
        _check_frames(frames, self.input_size, "NCPConvHead")
        return standardize_frames(frames)

    def forward(self, frames: Tensor) -> Tensor:
        maps = self.convs(self.standardize(frames))  # [N, 8, h, w]
        flat = maps.flatten(2)  # [N, 8, h*w]
        features = torch.einsum("ngp,gpk->ngk", flat, self.dense_weight) + self.dense_bias
        return F.relu(self.feature_norm(features.flatten(1)))  # [N, 8 * features_per_map]


class PilotNetCNN(nn.Module):
    """Feed-forward PilotNet-style CNN: frames ``[N, 3, H, W]`` in [0, 1] -> ``[N, 1]`` (Lechner et al. 2020).

    VALID convolutions 24@5x5/2, 36@5x5/2, 48@3x3/2, 64@3x3/1, 64@3x3/1 (4x19x64 at 78x200),
    dropout, FC 1000 (ReLU), FC 100 (ReLU), linear output without bias: 5,068,900 parameters at
    78x200. The output is in the training target's units (1/km in drive).

    Args:
        input_hw: frame size (H, W); the first FC layer depends on it.
        dropout: dropout probability before the first FC layer.
    """

    def __init__(self, input_hw: Sequence[int] = (78, 200), dropout: float = 0.5) -> None:
        super().__init__()
        self.input_size: Tuple[int, int] = (int(input_hw[0]), int(input_hw[1]))
        self.output_size: int = 1
        self.dropout_p: float = float(dropout)
        self.convs = _conv_stack(_PILOTNET_CONVS, same=False)
        self.map_hw: Tuple[int, int] = conv_output_hw(self.input_size, _PILOTNET_CONVS, same=False)
        flat = _PILOTNET_CONVS[-1][0] * self.map_hw[0] * self.map_hw[1]
        self.dropout = nn.Dropout(self.dropout_p)
        self.fc = nn.Sequential(nn.Linear(flat, 1000), nn.ReLU(), nn.Linear(1000, 100), nn.ReLU())
        self.out = nn.Linear(100, 1, bias=False)

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``PilotNetCNN(**head.config())`` rebuilds the architecture."""
        return {"input_hw": list(self.input_size), "dropout": self.dropout_p}

    @torch.jit.export
    def standardize(self, frames: Tensor) -> Tensor:
        """The convolutions' input: ``frames [N, 3, H, W]`` standardised per frame."""
        _check_frames(frames, self.input_size, "PilotNetCNN")
        return standardize_frames(frames)

    def forward(self, frames: Tensor) -> Tensor:
        maps = self.convs(self.standardize(frames))
        return self.out(self.fc(self.dropout(maps.flatten(1))))


HEADS: Dict[str, type] = {"ncp_conv": NCPConvHead, "pilotnet": PilotNetCNN}


def build_head(name: str, **kwargs: Any) -> nn.Module:
    """Build a head by name (``"ncp_conv"`` or ``"pilotnet"``) with constructor kwargs."""
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; choose one of {sorted(HEADS)}")
    return HEADS[name](**kwargs)
