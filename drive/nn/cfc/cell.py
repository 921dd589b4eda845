"""The CfC cell's math, once: the update equation (Eq. 9/10) and its derivative, the backbone
activations and theirs, the mixed-memory LSTM cell and its derivative.

Every path runs these functions: the autograd loops of ``CfC``/``WiredCfC`` (TorchScript and the
elapsed-time-gradient case), the TorchScript forward loops of the hand-written BPTT (``loops``)
and its backward (``bptt``). Modes and activations travel as their names (TorchScript compares
strings as cheaply as integers); two names are private to the fast paths:

- mode ``"sigmoid_form"``: the default mode rewritten by ``sigmoid_form.SigmoidForm``
  (z = [2 ff1 | 2 ff2 | gate pre-activation], state L = (x + 1) / 2);
- activation ``"sigmoid"``: the backbone activation of that rewrite.

``lecun_tanh`` arrives with its scales folded into the weights, so it is a plain tanh here.
"""

from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "MODES",
    "ACTIVATIONS",
    "SIGMOID_FORM",
    "SIGMOID",
    "saves_input",
    "activate",
    "activation_derivative",
    "update",
    "update_jacobian",
    "lstm_update",
    "lstm_jacobian",
    "dropout_mask",
]

MODES = ("default", "no_gate", "pure")
ACTIVATIONS = ("lecun_tanh", "tanh", "relu", "gelu", "silu")
SIGMOID_FORM = "sigmoid_form"  # private mode of the fast default-mode loop
SIGMOID = "sigmoid"  # private activation of that loop


def saves_input(kind: str) -> bool:
    """Whether the derivative of activation ``kind`` is computed from its input (else its output)."""
    return kind == "gelu" or kind == "silu"


def activate(x: Tensor, kind: str) -> Tensor:
    """Backbone activation by name (lecun_tanh pre-scaled: a plain tanh)."""
    if kind == "lecun_tanh" or kind == "tanh":
        return torch.tanh(x)
    if kind == "sigmoid":
        return torch.sigmoid(x)
    if kind == "relu":
        return torch.relu(x)
    if kind == "gelu":
        return F.gelu(x)
    return F.silu(x)


def activation_derivative(v: Tensor, masks: List[Tensor], kind: str) -> Tensor:
    """Backbone activation (times dropout mask) derivative for all steps [L, B, D]; v (stacked, left
    intact) holds the output (tanh, sigmoid, relu) or the input (gelu, silu: :func:`saves_input`)."""
    if kind == "lecun_tanh" or kind == "tanh":
        d = 1.0 - v * v
    elif kind == "sigmoid":
        d = torch.addcmul(v, v, v, value=-1.0)
    elif kind == "relu":
        d = (v > 0).to(v.dtype)
    elif kind == "gelu":
        d = torch.ops.aten.gelu_backward(torch.ones_like(v), v)
    else:
        d = torch.ops.aten.silu_backward(torch.ones_like(v), v)
    return d * torch.stack(masks) if masks else d


def dropout_mask(like: Tensor, p: float) -> Tensor:
    """Inverted-dropout mask (0 or 1/(1-p)) shaped like ``like``. The autograd loop and the BPTT
    fast path draw these in the same order, so one seed gives both the same masks."""
    return torch.empty_like(like).bernoulli_(1.0 - p).div_(1.0 - p)


def update(z: Tensor, t: Tensor, n: int, mode: str, w_tau: Tensor, a: Tensor) -> Tuple[Tensor, List[Tensor]]:
    """The CfC update: new state [B, n] from fused head pre-activations z [B, K n] and elapsed time
    t [B, 1], with what :func:`update_jacobian` needs.

    - default (Eq. 10): ``lerp(tanh ff1, tanh ff2, sigmoid(time_a t + time_b))``;
    - no_gate: ``tanh ff1 + sigmoid(time_a t + time_b) tanh ff2``;
    - pure (Cf-S, Eq. 9; z = ff1, w_tau = |w_tau| already): ``A - A exp(-(w_tau + |z|) t) z``;
    - sigmoid_form: ``lerp(s1, s2, s3)`` with s = sigmoid(z) (the default mode on L = (x + 1) / 2).
    """
    if mode == "sigmoid_form":
        s = torch.sigmoid(z)
        s1, s2, s3 = s.view(-1, 3, n).unbind(1)  # two ops for three views (three slices cost three)
        return torch.lerp(s1, s2, s3), [s]
    if mode == "pure":
        decay = torch.exp(-t * (w_tau + z.abs()))
        return torch.addcmul(a, a * decay, z, value=-1.0), [z, decay]
    ff1, ff2, time_a, time_b = z.split(n, 1)  # one op for four views (slices cost one each)
    g, h = torch.tanh(ff1), torch.tanh(ff2)
    s = torch.sigmoid(torch.addcmul(time_b, time_a, t))
    new = torch.lerp(g, h, s) if mode == "default" else torch.addcmul(g, s, h)
    return new, [g, h, s]


def update_jacobian(saved: Sequence[List[Tensor]], t: Tensor, n: int, mode: str, a: Tensor) -> Tensor:
    """d new state / d z of :func:`update` for all steps: [L, B, K, n] (the update is diagonal per
    head); saved[step] as :func:`update` returns it, t [L, B, 1]."""
    if mode == "sigmoid_form":  # L = lerp(s1, s2, s3), s = sigmoid(z); in place over the stacked copy
        s = torch.stack([sv[0] for sv in saved])  # (each large fresh tensor costs cache misses)
        s1, s2, s3 = s.split(n, 2)
        diff = s2 - s1
        torch.addcmul(s2, s2, s2, value=-1.0, out=s2).mul_(s3)  # s2 (1 - s2) s3
        torch.addcmul(s1, s1, s1, value=-1.0, out=s1).addcmul_(s1, s3, value=-1.0)  # s1 (1 - s1) (1 - s3)
        torch.addcmul(s3, s3, s3, value=-1.0, out=s3).mul_(diff)  # s3 (1 - s3) (s2 - s1)
        return s.view(s.shape[:2] + (3, n))
    if mode == "pure":
        z, decay = (torch.stack([s[i] for s in saved]) for i in range(2))
        return (a * decay * (t * z.abs() - 1.0)).unsqueeze(2)
    g, h, s = (torch.stack([sv[i] for sv in saved]) for i in range(3))
    default = mode == "default"
    ds = s * (1.0 - s) * (h - g if default else h)
    dg = (1.0 - s) * (1.0 - g * g) if default else 1.0 - g * g
    return torch.stack([dg, s * (1.0 - h * h), ds * t, ds], 2)


def lstm_update(z: Tensor, c: Tensor, n: int) -> Tuple[Tensor, Tensor, List[Tensor]]:
    """ncps's LSTMCell given z = W_in I + b + W_rec x (+1 already added to the forget gate): (new x,
    new c, what :func:`lstm_jacobian` needs). Gate order: input activation, input gate, forget
    gate, output gate."""
    act, sg = torch.tanh(z[:, :n]), torch.sigmoid(z[:, n:])
    c_new = torch.addcmul(sg[:, n : 2 * n] * c, act, sg[:, :n])
    tc = torch.tanh(c_new)
    return tc * sg[:, 2 * n :], c_new, [c, act, sg, tc]


def lstm_jacobian(saved: Sequence[List[Tensor]], n: int) -> List[Tensor]:
    """For all steps [L, B, ...]: dc/dh_new, d z[:3n]/dc [L, B, 3, n], d z[3n:]/dh_new, forget gate."""
    c, act, sg, tc = (torch.stack([s[i] for s in saved]) for i in range(4))
    ig, fg, og = sg[..., :n], sg[..., n : 2 * n], sg[..., 2 * n :]
    dsg = sg * (1.0 - sg)
    to_c = torch.stack([ig * (1.0 - act * act), act * dsg[..., :n], c * dsg[..., n : 2 * n]], 2)
    return [og * (1.0 - tc * tc), to_c, tc * dsg[..., 2 * n :], fg]
