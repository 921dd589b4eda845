"""The sigmoid form of the dense default-mode CfC: its layers rewritten so that the loop runs on
sigmoids only (``SigmoidForm``), and when that rewrite applies."""

import functools
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

__all__ = ["uniform_time", "sigmoid_form_applies", "SigmoidForm"]


def uniform_time(ts: Tensor) -> Optional[Tensor]:
    """The elapsed time shared by every sample and step of ts [B, L, 1] as a 0-dim tensor, or None
    when they differ (no timespans given: the expanded ones of ``check_sequence``, no sync)."""
    if ts.numel() == 0:
        return None
    t = ts[0, 0, 0]
    if ts.stride(0) == 0 and ts.stride(1) == 0:
        return t
    return t if bool((ts == t).all()) else None


def sigmoid_form_applies(mode: str, kind: str, p: float, mixed: bool) -> bool:
    """Whether ``SigmoidForm`` can rewrite this dense CfC (default mode, tanh-like backbone, no
    dropout, no mixed memory; the elapsed time must also be uniform)."""
    return mode == "default" and kind in ("lecun_tanh", "tanh") and p == 0.0 and not mixed


@functools.lru_cache(maxsize=16)
def _sigmoid_maps(
    shapes: Tuple[Tuple[int, int], ...], f: int, lecun: bool, dtype: torch.dtype, device: torch.device
) -> List[Tuple[Tensor, Tensor, float]]:
    """Per layer of the given weight shapes: (column scale c P, fold vector u, row scale P) with
    W' = P (W * c), b' = P (b - W u). Constants of the architecture, built once."""
    last, out = len(shapes) - 1, []
    for k, (_, cols) in enumerate(shapes):
        p = 2.0 * (0.666 if lecun else 1.0) if k < last else 1.0  # doubled (pre-scaled) pre-activation
        if k == 0:  # reads [input | state]; the state arrives as L = (x + 1) / 2
            c = torch.cat([torch.ones(f), torch.full((cols - f,), 2.0)])
            u = torch.cat([torch.zeros(f), torch.ones(cols - f)])
        else:  # reads a sigmoid s with tanh = 2 s - 1 (times LeCun's 1.7159)
            q = 1.7159 if lecun else 1.0
            c, u = torch.full((cols,), 2.0 * q), torch.full((cols,), q)
        out.append(((c * p).to(dtype=dtype, device=device), u.to(dtype=dtype, device=device), p))
    return out


class SigmoidForm(torch.autograd.Function):
    """The dense CfC's layers rewritten so that the default-mode loop at a uniform elapsed time t runs
    on sigmoids only (on CPU ``tanh`` costs ~3x a ``sigmoid``; this also removes a head and an op
    per step). With tanh(u) = 2 sigmoid(2u) - 1, every map is exact:

    - the loop carries L = (x + 1) / 2, so the first layer's state columns give 2 W L + (b - W 1);
    - each backbone pre-activation is doubled (LeCun's 0.666 folded in) and the next layer reads the
      sigmoid s: W tanh(u) + b = 2 W s + (b - W 1) (LeCun's 1.7159 folded in);
    - ff1 and ff2 are doubled and the time gate's heads fold into one, time_a t + time_b, so the heads
      give z = [2 ff1 | 2 ff2 | gate], s = sigmoid(z) and L_new = lerp(s1, s2, s3) = (x_new + 1) / 2
      for x_new = lerp(tanh ff1, tanh ff2, sigmoid(gate)) of Eq. 10.

    apply(f, n, t, lecun, w0, b0, w1, b1, ...) with the raw layer parameters -> (w0', b0', ...).
    The map is linear in the parameters; one autograd node applies its adjoint (a few ops instead of
    the ~60 nodes autograd would record)."""

    @staticmethod
    def forward(ctx: Any, f: int, n: int, t: Tensor, lecun: bool, *wb: Tensor) -> Tuple[Tensor, ...]:
        ws, bs = wb[0::2], wb[1::2]
        maps = _sigmoid_maps(tuple((w.size(0), w.size(1)) for w in ws), f, lecun, ws[0].dtype, ws[0].device)
        ctx.n, ctx.t, ctx.maps = n, t, maps
        out: List[Tensor] = []
        for w, b, (c, u, p) in zip(ws, bs, maps):
            out += [w * c, torch.addmv(b, w, u, beta=p, alpha=-p)]
        for i in (-2, -1):  # heads [ff1 | ff2 | time_a | time_b] -> [2 ff1 | 2 ff2 | time_a t + time_b]
            v = out[i]
            out[i] = torch.cat([v[: 2 * n] * 2.0, torch.addcmul(v[3 * n :], v[2 * n : 3 * n], t)])
        ctx.shapes = [v.shape for v in out]
        return tuple(out)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Optional[Tensor]):
        n, t, maps = ctx.n, ctx.t, ctx.maps
        g = [t.new_zeros(shape) if v is None else v for v, shape in zip(grads, ctx.shapes)]
        for i in (-2, -1):
            gate = g[i][2 * n :]
            g[i] = torch.cat([g[i][: 2 * n] * 2.0, gate * t, gate])
        out: List[Optional[Tensor]] = [None, None, None, None]
        for k, (c, u, p) in enumerate(maps):
            gw, gb = g[2 * k], g[2 * k + 1]
            out += [(gw * c).addr_(gb, u, alpha=-p), gb * p]
        return tuple(out)
