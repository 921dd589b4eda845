"""Data-dependent initialisation of a policy, and the health measurements it is judged by.

Why (measured, docs/training.md "Feature scale"): with PyTorch's default initialisation the NCP
conv head passes almost no frame information at the start of training. Each convolution's default
weights (Kaiming-uniform with a = sqrt(5), variance 1/(3 fan_in)) shrink the signal about 1.7x per
ReLU layer, so the head's last maps are ~0.01 and the per-map dense layer's random bias dominates
its pre-activation: 30-55 % of the 32 features are exactly 0 for every frame (dead ReLUs, which
get no gradient) and the rest are near-constants (std ~0.003 across frames). The LTC's sensory
synapses (sigmoids centred at mu in [0.3, 0.8] with slopes sigma in [3, 8], LTC Eq. 1) then see a
constant input, and whatever scale the head grows to later is arbitrary: on foreign logs it grew
to features of 0 or ~100, outside the sigmoids' working range in both directions.

:func:`data_init` fixes the starting point from the first training frames, without changing the
architecture (the paper's model, its export, closed form and checkpoints stay exactly as they are):

1. the head, layer by layer (LSUV, Mishkin & Matas 2016; the data-dependent initialisation of
   Salimans & Kingma 2016): every convolution channel and dense unit is rescaled so that its
   pre-activation over the sample has unit standard deviation and is centred (dense features at
   +0.5 std, so most frames give a non-zero feature and no unit starts dead);
2. the recurrent module's own input map where it has one (:meth:`drive.nn.ltc.LTC.calibrate_inputs`
   sets the LTC's sensory affine map ``input_w``, ``input_b`` so that each feature's spread covers
   the linear range of its sensory sigmoids); the CfC, CT-RNN and LSTM read the now unit-scale
   features through their Linear layers' usual fan-in initialisation.

:func:`feature_health` measures the two failure signs ``drive fit`` warns about: dead features
and saturated cell inputs.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import Tensor, nn

__all__ = ["data_init", "init_head", "feature_health", "DENSE_SHIFT"]

DENSE_SHIFT = 0.5  # dense (feature) units start centred at +0.5 std: ~70 % of frames non-zero
_EPS = 1e-6


def _rescale(weight: Tensor, bias: Tensor, pre: Tensor, dims: tuple, shift: float = 0.0) -> None:
    """Scale ``weight``/``bias`` of the units along dim 1 of ``pre`` so they are standardised (+shift).

    A unit whose pre-activation does not vary over the sample (std < 1e-6) keeps its weights and
    only gets its bias re-centred (a scale from no spread would be arbitrary).
    """
    mean = pre.mean(dims)
    std = pre.std(dims)
    ok = std > _EPS
    scale = torch.where(ok, 1.0 / std.clamp_min(_EPS), torch.ones_like(std))
    shape = [-1] + [1] * (weight.dim() - 1)
    weight.mul_(scale.view(shape))
    bias.copy_((bias - mean) * scale + shift)


@torch.no_grad()
def init_head(head: nn.Module, frames: Tensor) -> None:
    """LSUV-initialise a conv head in place from ``frames [N, 3, H, W]`` in [0, 1] (see module doc)."""
    was_training = head.training
    head.eval()
    try:
        x = head.standardize(frames)
        for layer in head.convs:
            if isinstance(layer, nn.Conv2d):
                _rescale(layer.weight, layer.bias, layer(x).transpose(0, 1).flatten(1).t(), (0,))
            x = layer(x)
        if hasattr(head, "dense_weight"):  # NCP conv head: one dense layer per map, [G, P, K]
            flat = x.flatten(2)
            pre = torch.einsum("ngp,gpk->ngk", flat, head.dense_weight) + head.dense_bias  # [N, G, K]
            mean, std = pre.mean(0), pre.std(0)
            ok = std > _EPS
            scale = torch.where(ok, 1.0 / std.clamp_min(_EPS), torch.ones_like(std))
            head.dense_weight.mul_(scale.unsqueeze(1))
            head.dense_bias.copy_((head.dense_bias - mean) * scale + DENSE_SHIFT)
        elif hasattr(head, "fc"):  # PilotNet: FC 1000 -> ReLU -> FC 100 -> ReLU
            x = x.flatten(1)
            for layer in head.fc:
                if isinstance(layer, nn.Linear):
                    _rescale(layer.weight, layer.bias, layer(x), (0,))
                x = layer(x)
            # the linear output layer: unit output std, so the label scale is reached from the start
            out = head.out(x)
            std = out.std()
            if std > _EPS:
                head.out.weight.div_(std)
    finally:
        head.train(was_training)


@torch.no_grad()
def data_init(policy: nn.Module, frames: Tensor) -> Dict[str, float]:
    """Initialise ``policy`` (a :class:`drive.nn.policy.Policy`) in place from ``frames [N, 3, H, W]``.

    The head is LSUV-initialised, then the recurrent module's ``calibrate_inputs(features)`` runs
    when it has one. Returns :func:`feature_health` of the initialised policy on the same frames.
    """
    init_head(policy.head, frames)
    was_training = policy.head.training
    policy.head.eval()  # a normalised head: its running statistics (0, 1) match the LSUV'd dense layer
    features = policy.head(frames).float()
    policy.head.train(was_training)
    calibrate = getattr(policy.rnn, "calibrate_inputs", None)
    if calibrate is not None and features.dim() == 2 and features.shape[1] == int(policy.rnn.input_size):
        calibrate(features)
    return feature_health(policy, features)


@torch.no_grad()
def feature_health(policy: nn.Module, features: Tensor) -> Dict[str, float]:
    """Dead-feature and input-saturation measures on head features ``[N, F]`` (fp32).

    ``dead``: fraction of features that are exactly 0 on every frame; ``feature_max``: largest
    |feature|; ``saturated``: for a cell with sensory sigmoids (LTC), the fraction of (frame,
    synapse) pairs whose sigmoid is below 0.02 or above 0.98 (no gradient), else NaN.
    """
    features = features.reshape(-1, features.shape[-1]).float()
    out = {
        "dead": float((features.abs().amax(0) == 0).float().mean()),
        "feature_max": float(features.abs().max()) if features.numel() else 0.0,
        "saturated": float("nan"),
    }
    saturation = getattr(policy.rnn, "input_saturation", None)
    if saturation is not None:
        out["saturated"] = float(saturation(features))
    return out


def sample_frames(dataset: object, max_windows: int = 32, max_frames: int = 512) -> Optional[Tensor]:
    """Up to ``max_frames`` uint8 frames ``[N, 3, H, W]`` from evenly spaced windows of a dataset
    whose items are dicts with ``frames [L, 3, H, W]`` (the training :class:`SequenceDataset`)."""
    n = len(dataset)  # type: ignore[arg-type]
    if n == 0:
        return None
    count = min(max_windows, n)
    picks = sorted({int(i * n / count) for i in range(count)})
    frames = torch.cat([dataset[i]["frames"] for i in picks], 0)  # type: ignore[index]
    if frames.shape[0] > max_frames:
        frames = frames[torch.linspace(0, frames.shape[0] - 1, max_frames).long()]
    return frames
