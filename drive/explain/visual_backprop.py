"""VisualBackProp: which input pixels a conv head's features come from (Bojarski et al., ICRA 2018).

The algorithm (Bojarski et al. 2018 and the authors' ``vis.lua``; docs/references.md):

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

The geometry is read from the head. A head with ``convs`` (an ``nn.Sequential`` of alternating
``Conv2d`` and ``ReLU``, as :mod:`drive.nn.heads` builds them) is read from that, with
``head.standardize(frames)``, when present, as the convolutions' input. Any other module (a plain
``nn.Sequential(Conv2d, ReLU, ...)``, a user's head) is read from one forward pass with hooks on
its layers: its forward must run a chain of Conv2d layers, each followed directly by a ReLU
(``nn.ReLU`` or ``F.relu``; layers that change nothing, such as Dropout in eval mode, may sit in
between), the first conv seeing the frame's size; what comes after the last conv+ReLU (flatten,
dense layers) does not enter the mask. Anything else is a :class:`VisualBackPropError` naming
what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

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
        raise VisualBackPropError(
            f"{name}.convs must alternate Conv2d and ReLU; it ends with {type(layers[-1]).__name__}"
        )
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


@dataclass
class _Call:
    """One leaf module's call during the traced forward: its name, the module, its first tensor
    input and its output (copies: an in-place ReLU must not change what was recorded)."""

    name: str
    module: nn.Module
    input: Optional[Tensor]
    output: Optional[Tensor]


def _first_tensor(value: Any) -> Optional[Tensor]:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for v in value:
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def _same(a: Optional[Tensor], b: Optional[Tensor]) -> bool:
    return a is not None and b is not None and a.shape == b.shape and torch.equal(a, b)


def _same_flat(a: Optional[Tensor], b: Tensor) -> bool:
    """Equal values in the same order, whatever the shape (a dense layer's input is a flattened map)."""
    return a is not None and a.numel() == b.numel() and torch.equal(a.reshape(-1), b.reshape(-1))


def _traced_chain(head: nn.Module, frames: Tensor) -> Tuple[List[ConvGeometry], Tensor, List[Tensor]]:
    """Geometry, the first conv's input and every post-ReLU map of a head without ``convs``, from one
    forward pass with hooks on its leaf modules (module docstring)."""
    name = type(head).__name__
    if not any(isinstance(m, nn.Conv2d) for m in head.modules()):
        raise VisualBackPropError(
            f"{name} has no Conv2d layer: VisualBackProp needs a conv head whose forward "
            "is a chain of Conv2d layers each followed by a ReLU"
        )
    calls, result = _record_calls(head, frames)
    # leaves whose output equals their input (Dropout in eval, Identity, a ReLU on a post-ReLU map)
    # change nothing and are left out of the chain
    chain = [c for c in calls if not (type(c.module) is not nn.Conv2d and _same(c.input, c.output))]
    convs = [i for i, c in enumerate(chain) if isinstance(c.module, nn.Conv2d)]
    if len({id(chain[i].module) for i in convs}) != len(convs):
        raise VisualBackPropError(
            f"{name}: a Conv2d is called more than once (shared weights or a loop); "
            "VisualBackProp needs a plain chain"
        )
    geometry, maps = [], []
    for k, i in enumerate(convs):
        conv = chain[i]
        where = f"{name} layer {conv.name!r}"
        if type(conv.module) is not nn.Conv2d:
            raise VisualBackPropError(f"{where} is {type(conv.module).__name__}, expected a plain Conv2d")
        if k == 0 and conv.input is not None and tuple(conv.input.shape[-2:]) != tuple(frames.shape[-2:]):
            raise VisualBackPropError(
                f"{where}: the first Conv2d sees {tuple(conv.input.shape[-2:])}, not the "
                f"frame's size {tuple(frames.shape[-2:])}; VisualBackProp maps back to the frame"
            )
        nxt = chain[convs[k + 1]] if k + 1 < len(convs) else None
        after = _map_after(name, chain, i, nxt, convs[k + 1] if nxt is not None else None, result)
        if nxt is not None and not _same(nxt.input, after):
            raise VisualBackPropError(
                f"{name}: Conv2d {nxt.name!r} does not take the output of {conv.name!r}+ReLU "
                "(a branch, a skip connection or an unhooked operation between them); "
                "VisualBackProp needs a chain"
            )
        geometry.append(_geometry(conv.module, where))
        maps.append(after)
    return geometry, chain[convs[0]].input, maps


def _record_calls(head: nn.Module, frames: Tensor) -> Tuple[List[_Call], Optional[Tensor]]:
    """Every leaf module's call in one forward pass of ``head`` (hooks, removed afterwards), and the
    forward's (first tensor) result; a forward that fails is a one-line VisualBackPropError."""
    name = type(head).__name__
    calls: List[_Call] = []
    handles = []
    for layer_name, module in head.named_modules():
        if len(list(module.children())) == 0:

            def pre(mod, args, layer_name=layer_name):
                t = _first_tensor(args)
                calls.append(_Call(layer_name or name, mod, None if t is None else t.detach().clone(), None))

            def post(mod, args, output):
                t = _first_tensor(output)  # a leaf calls no other module: the last call is its own
                calls[-1].output = None if t is None else t.detach().clone()

            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))
    try:
        return calls, _first_tensor(head(frames))
    except VisualBackPropError:
        raise
    # the head's own forward (any module a user passes) may fail with any error type on these frames:
    # say so in one line naming the head
    except Exception as e:  # noqa: BLE001
        raise VisualBackPropError(
            f"{name}: its forward failed on frames of shape {tuple(frames.shape)} "
            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from None
    finally:
        for h in handles:
            h.remove()


def _map_after(
    name: str,
    chain: List[_Call],
    i: int,
    nxt: Optional[_Call],
    nxt_index: Optional[int],
    result: Optional[Tensor],
) -> Tensor:
    """The post-ReLU map of the Conv2d ``chain[i]``: an ``nn.ReLU`` right after it, or ``F.relu`` in
    the forward feeding the next layer (or ending the forward); anything else between it and the
    next Conv2d (``nxt``, at ``nxt_index``) is an error naming it."""
    conv = chain[i]
    where = f"{name} layer {conv.name!r}"
    relu = torch.relu(conv.output)
    following = chain[i + 1] if i + 1 < len(chain) else None
    if following is not None and type(following.module) is nn.ReLU and _same(following.input, conv.output):
        if nxt is not None and nxt_index != i + 2:
            other = chain[i + 2]
            raise VisualBackPropError(
                f"{name} layer {other.name!r} ({type(other.module).__name__}) sits between "
                f"{conv.name!r}+ReLU and the next Conv2d {nxt.name!r}: VisualBackProp "
                "needs each Conv2d+ReLU to feed the next Conv2d directly"
            )
        return following.output  # nn.ReLU
    if (
        following is not None
        and (_same(following.input, relu) if nxt is not None else _same_flat(following.input, relu))
        and (nxt is None or nxt is following)
    ):
        return relu  # F.relu in the forward, then the next layer
    if following is None and nxt is None and _same(result, relu):
        return relu  # the forward ends with F.relu(last conv)
    if following is None and nxt is None:
        raise VisualBackPropError(
            f"{where} is the last layer and the forward does not return its ReLU; "
            "VisualBackProp needs a ReLU after every Conv2d"
        )
    got = type(following.module).__name__ if following is not None else "nothing"
    raise VisualBackPropError(
        f"{where} is followed by {got} ({following.name if following else ''!r}), not by "
        "a ReLU: VisualBackProp needs a ReLU directly after every Conv2d (non-negative maps)"
    )


def _normalize(mask: Tensor) -> Tensor:
    """Min-max per image over ``[B, H, W]``; masks whose range is below 1e-6 of their peak -> zeros."""
    flat = mask.flatten(1)
    lo = flat.min(dim=1).values.view(-1, 1, 1)
    hi = flat.max(dim=1).values.view(-1, 1, 1)
    span = hi - lo
    constant = span <= 1e-6 * torch.maximum(hi.abs(), lo.abs()).clamp_min(torch.finfo(mask.dtype).tiny)
    return torch.where(
        constant, torch.zeros_like(mask), (mask - lo) / torch.where(constant, torch.ones_like(span), span)
    )


def _bojarski(geometry: List[ConvGeometry], x: Tensor, maps: List[Tensor]) -> Tensor:
    means = [m.mean(dim=1, keepdim=True) for m in maps]  # [B, 1, h_i, w_i]
    sizes = [tuple(x.shape[-2:])] + [tuple(m.shape[-2:]) for m in means]
    mask = means[-1]
    for i in range(len(means) - 1, -1, -1):
        g = geometry[i]
        ones = torch.ones(1, 1, *g.kernel, dtype=mask.dtype, device=mask.device)
        mask = F.conv_transpose2d(
            mask,
            ones,
            stride=g.stride,
            padding=g.padding,
            output_padding=g.output_padding(sizes[i], sizes[i + 1]),
        )
        if i > 0:
            mask = mask * means[i - 1]
    return _normalize(mask[:, 0])


def _ncp(x: Tensor, maps: List[Tensor]) -> Tensor:
    means = [(m / (m.amax(dim=(2, 3), keepdim=True) + 1e-4)).mean(dim=1, keepdim=True) for m in maps]
    mask = means[-1]
    for shallower in reversed(means[:-1]):
        mask = (
            F.interpolate(mask, size=shallower.shape[-2:], mode="bilinear", align_corners=False) * shallower
        )
    mask = _normalize(mask[:, 0])[:, None]
    mask = F.interpolate(mask, size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    intensity = _normalize(x.mean(dim=1))
    return _normalize(mask * intensity)


def visual_backprop(head: nn.Module, frames: Tensor, method: str = "bojarski") -> Tensor:
    """Saliency masks of ``head`` for ``frames``.

    Args:
        head: a conv head whose ``convs`` alternate Conv2d and ReLU (e.g. ``NCPConvHead``, ``PilotNetCNN``),
            or any module whose forward is a chain of Conv2d+ReLU layers (a plain ``nn.Sequential``;
            the module docstring says what is accepted).
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
    with torch.no_grad():
        if isinstance(getattr(head, "convs", None), nn.Sequential):
            geometry = conv_geometry(head)
            x, maps = _feature_maps(head, frames)
        else:
            geometry, x, maps = _traced_chain(head, frames)
        return _bojarski(geometry, x, maps) if method == "bojarski" else _ncp(x, maps)
