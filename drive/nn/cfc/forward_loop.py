"""Running a CfC forward loop: what a loop needs besides tensors (``DenseSpec``, ``WiredSpec``),
the prepared weights in the layout the loops take, and one forward run of the compiled loop.

Both callers share them: the modules' no-gradient fast path (``drive.nn.cfc.dense``,
``drive.nn.cfc.wired``) runs the forward loop alone; the hand-written BPTT
(``drive.nn.cfc.bptt``) runs it once, keeping each step's activations, then its reverse loop.
The loops themselves are the TorchScript functions of ``drive.nn.cfc.scripted``.
"""

from typing import Callable, List, NamedTuple, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from drive.nn.cfc.cell import SIGMOID_FORM
from drive.nn.cfc.scripted import compiled, dense_forward, wired_forward

__all__ = ["DenseSpec", "WiredSpec", "dense_loop_weights", "dense_run", "wired_loop_weights", "wired_run"]


class DenseSpec(NamedTuple):
    """What a dense loop needs besides tensors (``mode`` and ``activation`` by name)."""

    units: int
    mode: str
    activation: str
    dropout: float
    mixed: bool


class WiredSpec(NamedTuple):
    """What a wired loop needs besides tensors: layer boundaries and feed-forward blocks
    (``block_src[j]`` -> ``block_dst[j]``) in layer order."""

    units: int
    mode: str
    heads: int
    bounds: List[int]
    block_src: List[int]
    block_dst: List[int]
    mixed: bool


def dense_loop_weights(f: int, mixed: bool, prep: Sequence[Tensor]) -> Tuple:
    """``CfC._prepare``'s list as the loop takes it: (W_1 input part, b_1, W_1 state part^T,
    [W_k^T], [b_k] for k >= 2, W_lstm_in, b_lstm_in, W_lstm_rec^T, |w_tau|, A)."""
    w_tau, a, wi, bi, wr = prep[:5]
    ws, bs = list(prep[5::2]), list(prep[6::2])
    return (
        ws[0][:, :f],
        bs[0],
        ws[0][:, f:].t().contiguous(),
        [w.t().contiguous() for w in ws[1:]],
        bs[1:],
        wi,
        bi,
        wr.t().contiguous() if mixed else wr,
        w_tau,
        a,
    )


def _loop(fn: Callable, xt: Tensor) -> Callable:
    """The compiled loop, or the plain function for a single step (TorchScript's call overhead then
    exceeds the step's work)."""
    return fn if xt.size(0) == 1 else compiled(fn)


def dense_run(
    spec: "DenseSpec", x: Tensor, h: Tensor, c: Tensor, ts: Tensor, lw: Tuple
) -> Tuple[Tensor, Tensor, Tuple]:
    """Run the dense loop: (states [B, L, n], time-major x, what ``dense_forward`` returns); lw from
    ``dense_loop_weights``. In the sigmoid form the loop carries L = (x + 1) / 2: h enters
    converted and the states and the last state leave as x (the lists keep L)."""
    n, mode, kind, p, mixed = spec
    w_in, b0, w_h, ws_t, bs, wi, bi, wr_t, w_tau, a = lw
    xt = x.transpose(0, 1).contiguous()
    m_part = F.linear(xt, wi, bi) if mixed else xt
    if mode == SIGMOID_FORM:
        h = torch.add(h, 1.0).mul_(0.5)
    out = _loop(dense_forward, xt)(
        F.linear(xt, w_in, b0),
        m_part,
        h,
        c,
        ts.transpose(0, 1),
        w_h,
        ws_t,
        bs,
        wr_t,
        w_tau,
        a,
        n,
        mode,
        kind,
        p,
        mixed,
    )
    y = torch.stack(out[0], 1)
    if mode == SIGMOID_FORM:
        y.mul_(2.0).sub_(1.0)
        out = (out[0], out[1] * 2.0 - 1.0) + out[2:]
    return y, xt, out


def wired_loop_weights(mixed: bool, prep: Sequence[Tensor]) -> Tuple:
    """``WiredCfC._prepare``'s list as the loop takes it (the LSTM's recurrent weight transposed)."""
    return (*prep[:4], prep[4].t().contiguous() if mixed else prep[4], *prep[5:8], list(prep[8:]))


def wired_run(
    spec: "WiredSpec", x: Tensor, h: Tensor, c: Tensor, ts: Tensor, lw: Tuple
) -> Tuple[Tensor, Tuple]:
    """Run the wired loop: (time-major x, what ``wired_forward`` returns)."""
    n, mode, k, bounds, src, dst, mixed = spec
    w_tau, a, wi, bi, wr_t, s, b, w_rec, blocks = lw
    xt = x.transpose(0, 1).contiguous()
    m_part = F.linear(xt, wi, bi) if mixed else xt
    return xt, _loop(wired_forward, xt)(
        F.linear(xt, s, b),
        m_part,
        h,
        c,
        ts.transpose(0, 1),
        w_rec,
        blocks,
        bounds,
        src,
        dst,
        k,
        wr_t,
        w_tau,
        a,
        mode,
        mixed,
    )
