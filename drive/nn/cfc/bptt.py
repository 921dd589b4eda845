"""Hand-written backpropagation through time for CfC sequences (eager training fast path).

Autograd over a CfC loop records ~20 small nodes per step and computes every weight gradient one
step at a time; at CfC's sizes that is all dispatch overhead. These ``autograd.Function``s instead

1. run the forward loop once without a graph, keeping each step's activations;
2. turn them, for all steps at once, into the local derivatives of every element-wise stage (the
   head update of Eq. 9/10, the backbone activations with their dropout masks, the LSTM cell);
3. run the reverse recurrence for the *state* gradient only: per step one broadcast multiply per
   element-wise stage and one matmul per weight on the state path;
4. form all weight gradients after the loop as a few large matmuls over the [L*B, ...] rows.

The loops themselves (``drive.nn.cfc.scripted``) run as TorchScript functions, entered through
``drive.nn.cfc.forward_loop`` (the specs, the weights' loop layout and the forward run);
the math (update, activations, LSTM and their derivatives) is that of ``drive.nn.cfc.cell``. Tests
compare both paths' gradients and run ``gradcheck`` in float64. Elapsed times get no gradient
(callers fall back to autograd when one is needed); double backward is not supported.

Inputs and gradients are matched by name (``_Inputs``): both Functions take the shared inputs
``SHARED_INPUTS`` first, then their own named weights, then a variadic list (dense: each layer's
weight and bias; wired: the feed-forward blocks). The part of the backward both share (LSTM and
Cf-S parameter gradients, the input gradient's layout) is ``_shared_tail``.
"""

import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from drive.nn.cfc.cell import SIGMOID_FORM, activation_derivative, lstm_jacobian, saves_input, update_jacobian
from drive.nn.cfc.forward_loop import (
    DenseSpec,
    WiredSpec,
    dense_loop_weights,
    dense_run,
    wired_loop_weights,
    wired_run,
)
from drive.nn.cfc.scripted import compiled, dense_backward, wired_backward

__all__ = ["DenseBPTT", "WiredBPTT"]

SHARED_INPUTS = ("spec", "x", "h", "c", "ts", "w_tau", "a", "wi", "bi", "wr")
DENSE_INPUTS = SHARED_INPUTS  # then w0, b0, w1, b1, ... (backbone layers, then the fused heads)
WIRED_INPUTS = SHARED_INPUTS + ("s", "b", "w_rec")  # then the feed-forward blocks


class _Inputs:
    """``ctx.needs_input_grad`` by input name, and the variadic inputs after the named ones."""

    def __init__(self, needs: Tuple[bool, ...], names: Tuple[str, ...]) -> None:
        self.names = names
        self.named: Dict[str, bool] = dict(zip(names, needs))
        self.rest: Tuple[bool, ...] = tuple(needs[len(names) :])

    def __getitem__(self, name: str) -> bool:
        return self.named[name]

    def gradients(self, grads: Dict[str, Optional[Tensor]], rest: Sequence[Optional[Tensor]]) -> Tuple:
        """backward's return value: the named gradients in input order (None where absent), then ``rest``."""
        return tuple(grads.get(name) for name in self.names) + tuple(rest)


def _rows(seq: Sequence[Tensor]) -> Tensor:
    """Per-step tensors [B, D] (time order) as one [L*B, D] matrix."""
    return torch.stack(list(seq)).flatten(0, 1)


def _weight_and_bias(
    dz: Tensor, inp: Tensor, need_w: bool, need_b: bool
) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """(dz^T inp, column sums of dz) for a Linear applied to the rows inp [R, I] giving dz [R, O]."""
    return (dz.t().mm(inp) if need_w else None, dz.sum(0) if need_b else None)


def _start(ctx: Any, g_seq: Optional[Tensor], g_h: Optional[Tensor], g_c: Optional[Tensor], like: Tensor):
    """(time-major g_seq, fresh dh for the last step, dc) from the output gradients."""
    g = g_seq.transpose(0, 1) if g_seq is not None else None
    dh = g_h.clone() if g_h is not None else torch.zeros_like(like)
    if g is not None:
        dh += g[-1]
    return g, dh, g_c if g_c is not None else torch.zeros_like(like)


def _fp32_backward(backward: Callable) -> Callable:
    """Run a backward with autocast off (a ``.backward()`` called inside an autocast region would
    otherwise cast its matmuls): the forward ran in the module's dtype, so does its backward."""

    @functools.wraps(backward)
    def wrapped(ctx: Any, *grads: Optional[Tensor]):
        with torch.autocast(ctx.ts.device.type, enabled=False):
            return backward(ctx, *grads)

    return wrapped


def _shared_tail(
    need: _Inputs,
    spec: Any,
    grads: Dict[str, Optional[Tensor]],
    dx: Optional[Tensor],
    dzm: List[Tensor],
    dH: List[Tensor],
    pure_saved: Callable[[], Tuple[Tensor, Tensor]],
    x_rows: Tensor,
    mem_in: List[Tensor],
    wi: Tensor,
    a: Tensor,
    t: Tensor,
    steps: int,
    features: int,
) -> Dict[str, Optional[Tensor]]:
    """The gradients both cells compute alike, added to ``grads``: the LSTM's (``wi``, ``bi``,
    ``wr``; its input path joins ``dx``), Cf-S's ``w_tau`` and ``a`` from the state gradients dH
    (reverse order) and ``pure_saved()`` = stacked (z, decay) [L, B, n], and ``x`` batch-major."""
    if spec.mixed:
        dz = _rows(dzm[::-1])
        grads["wi"], grads["bi"] = _weight_and_bias(dz, x_rows, need["wi"], need["bi"])
        grads["wr"] = dz.t().mm(_rows(mem_in)) if need["wr"] else None
        if dx is not None:
            dx = dx + dz.mm(wi)
    if spec.mode == "pure":
        z, decay = pure_saved()
        d = torch.stack(dH[::-1])
        grads["w_tau"] = (d * a * z * decay * t).sum((0, 1)) if need["w_tau"] else None
        grads["a"] = (d - d * decay * z).sum((0, 1)) if need["a"] else None
    grads["x"] = dx.view(steps, -1, features).transpose(0, 1) if dx is not None else None
    return grads


def _layer_grads(
    rows: List[Tensor], x_rows: Tensor, h_rows: Tensor, ins_rows: List[Tensor], needs: Sequence[bool]
) -> List[Optional[Tensor]]:
    """Dense: (weight, bias) gradients of every layer from its pre-activation gradient rows; layer
    0's weight reads ``[x, h]`` (two products instead of one over a concatenated copy)."""
    out: List[Optional[Tensor]] = []
    for k in range(len(rows)):
        need_w, need_b = needs[2 * k], needs[2 * k + 1]
        if k == 0:
            g_w = torch.cat([rows[0].t().mm(x_rows), rows[0].t().mm(h_rows)], 1) if need_w else None
            out.extend((g_w, _weight_and_bias(rows[0], x_rows, False, need_b)[1]))
        else:
            out.extend(_weight_and_bias(rows[k], ins_rows[k - 1], need_w, need_b))
    return out


def _layer_a(a: Tensor, bounds: List[int], layer: int, mode: str) -> Tensor:
    """Wired: Cf-S's ``A`` of one layer's neurons (pure mode), else the (empty) placeholder."""
    return a[bounds[layer] : bounds[layer + 1]] if mode == "pure" else a


def _block_grads(
    out_rows: Tensor, dz_rows: Tensor, spec: Any, needs: Sequence[bool]
) -> List[Optional[Tensor]]:
    """Wired: the gradient of each feed-forward block (source layer's outputs x destination layer's
    pre-activation gradients, every head)."""
    bounds, src, dst, k = spec.bounds, spec.block_src, spec.block_dst, spec.heads
    return [
        out_rows[:, bounds[src[j]] : bounds[src[j] + 1]]
        .t()
        .mm(dz_rows[:, k * bounds[dst[j]] : k * bounds[dst[j] + 1]])
        if needs[j]
        else None
        for j in range(len(src))
    ]


class DenseBPTT(torch.autograd.Function):
    """Dense CfC sequence: apply(spec, x [B, L, F], h0 [B, n], c0 [B, n] | empty, ts [B, L, 1],
    w_tau, A, wi, bi, wr, w0, b0, w1, b1, ...) -> (states [B, L, n], h [B, n], c [B, n] | empty).

    spec: a :class:`DenseSpec`; weights as prepared by ``CfC._prepare``."""

    @staticmethod
    def forward(
        ctx: Any,
        spec: DenseSpec,
        x: Tensor,
        h: Tensor,
        c: Tensor,
        ts: Tensor,
        w_tau: Tensor,
        a: Tensor,
        wi: Tensor,
        bi: Tensor,
        wr: Tensor,
        *wb: Tensor,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        ws = list(wb[0::2])
        f = x.size(2)
        y, xt, (outs, h, c, h_in, mem_in, mem_saved, acts, ins, masks, heads) = dense_run(
            spec, x, h, c, ts, dense_loop_weights(f, spec.mixed, [w_tau, a, wi, bi, wr, *wb])
        )
        ctx.spec, ctx.f, ctx.ts = spec, f, ts
        ctx.saved = (xt, mem_in, mem_saved, h_in, acts, ins, masks, heads)
        ctx.save_for_backward(w_tau, a, wi, wr, *ws)
        return y, h, c

    @staticmethod
    @once_differentiable
    @_fp32_backward
    def backward(ctx: Any, g_seq: Optional[Tensor], g_h: Optional[Tensor], g_c: Optional[Tensor]):
        spec: DenseSpec = ctx.spec
        n, mode, kind = spec.units, spec.mode, spec.activation
        xt, mem_in, mem_saved, h_in, acts, ins, masks, heads = ctx.saved
        w_tau, a, wi, wr, *ws = ctx.saved_tensors
        f, last, steps = ctx.f, len(ws) - 1, len(h_in)
        need = _Inputs(ctx.needs_input_grad, DENSE_INPUTS)
        sigmoid_form = mode == SIGMOID_FORM
        t = ctx.ts.transpose(0, 1)
        g, dh, dc = _start(ctx, g_seq, g_h, g_c, h_in[0])
        if sigmoid_form:  # gradients with respect to L = (x + 1) / 2 (g is doubled inside the loop)
            dh.mul_(2.0)
        stacked = [torch.stack(v) for v in acts]
        dact = [activation_derivative(stacked[k], masks[k], kind) for k in range(last)]
        ins_rows = [
            stacked[k].flatten(0, 1) if not saves_input(kind) and not masks[k] else _rows(ins[k])
            for k in range(last)
        ]  # saved outputs without dropout are the next layer's inputs
        dz_k, dzm, dH, dh, dc = compiled(dense_backward)(
            dh,
            dc,
            g,
            update_jacobian(heads, t, n, mode, a),
            dact,
            ws[1:],
            ws[0][:, f:].contiguous(),
            wr,
            lstm_jacobian(mem_saved, n) if spec.mixed else [],
            mode == "pure",
            2.0 if sigmoid_form else 1.0,
        )
        rows = [_rows(d[::-1]) for d in dz_k]
        x_rows = xt.flatten(0, 1)
        layer_grads = _layer_grads(rows, x_rows, _rows(h_in), ins_rows, need.rest)
        dx = rows[0].mm(ws[0][:, :f]) if need["x"] else None
        grads: Dict[str, Optional[Tensor]] = {}
        _shared_tail(
            need,
            spec,
            grads,
            dx,
            dzm,
            dH,
            lambda: tuple(torch.stack([s[j] for s in heads]) for j in range(2)),
            x_rows,
            mem_in,
            wi,
            a,
            t,
            steps,
            f,
        )
        if sigmoid_form:
            dh = dh * 0.5
        grads["h"] = dh if need["h"] else None
        grads["c"] = dc if spec.mixed and need["c"] else None
        return need.gradients(grads, layer_grads)


class WiredBPTT(torch.autograd.Function):
    """Wired CfC sequence in layer order: apply(spec, x, h0, c0 | empty, ts [B, L, 1], w_tau, A,
    wi, bi, wr, s [K n, F], b [K n], w_rec [n, K n], *blocks) -> (states [B, L, n], h, c).

    spec: a :class:`WiredSpec`; see ``WiredCfC._prepare``."""

    @staticmethod
    def forward(
        ctx: Any,
        spec: WiredSpec,
        x: Tensor,
        h: Tensor,
        c: Tensor,
        ts: Tensor,
        w_tau: Tensor,
        a: Tensor,
        wi: Tensor,
        bi: Tensor,
        wr: Tensor,
        s: Tensor,
        b: Tensor,
        w_rec: Tensor,
        *blocks: Tensor,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        xt, (outs, h, c, h_in, mem_in, mem_saved, saved) = wired_run(
            spec, x, h, c, ts, wired_loop_weights(spec.mixed, [w_tau, a, wi, bi, wr, s, b, w_rec, *blocks])
        )
        ctx.spec, ctx.ts = spec, ts
        ctx.saved = (xt, mem_in, mem_saved, h_in, saved, outs)
        ctx.save_for_backward(w_tau, a, wi, wr, s, w_rec, *blocks)
        return torch.stack(outs, 1), h, c

    @staticmethod
    @once_differentiable
    @_fp32_backward
    def backward(ctx: Any, g_seq: Optional[Tensor], g_h: Optional[Tensor], g_c: Optional[Tensor]):
        spec: WiredSpec = ctx.spec
        n, mode, bounds = spec.units, spec.mode, spec.bounds
        xt, mem_in, mem_saved, h_in, saved, outs = ctx.saved
        w_tau, a, wi, wr, s, w_rec, *blocks = ctx.saved_tensors
        layers, steps = len(bounds) - 1, len(h_in)
        need = _Inputs(ctx.needs_input_grad, WIRED_INPUTS)
        t = ctx.ts.transpose(0, 1)
        g, dh, dc = _start(ctx, g_seq, g_h, g_c, h_in[0])
        jac = [
            update_jacobian(saved[i], t, bounds[i + 1] - bounds[i], mode, _layer_a(a, bounds, i, mode))
            for i in range(layers)
        ]
        dZ, dzm, dH, dh, dc = compiled(wired_backward)(
            dh,
            dc,
            g,
            jac,
            [blk.t().contiguous() for blk in blocks],
            bounds,
            spec.block_src,
            spec.block_dst,
            w_rec.t().contiguous(),
            wr,
            lstm_jacobian(mem_saved, n) if spec.mixed else [],
            mode == "pure",
        )
        dz_rows, x_rows = _rows(dZ[::-1]), xt.flatten(0, 1)
        grads: Dict[str, Optional[Tensor]] = {}
        grads["s"], grads["b"] = _weight_and_bias(dz_rows, x_rows, need["s"], need["b"])
        grads["w_rec"] = _rows(h_in).t().mm(dz_rows) if need["w_rec"] else None
        g_blocks = _block_grads(_rows(outs), dz_rows, spec, need.rest)
        dx = dz_rows.mm(s) if need["x"] else None
        _shared_tail(
            need,
            spec,
            grads,
            dx,
            dzm,
            dH,
            lambda: tuple(
                torch.cat([torch.stack([sv[j] for sv in saved[layer]]) for layer in range(layers)], 2)
                for j in range(2)
            ),
            x_rows,
            mem_in,
            wi,
            a,
            t,
            steps,
            xt.size(2),
        )
        grads["h"] = dh if need["h"] else None
        grads["c"] = dc if spec.mixed and need["c"] else None
        return need.gradients(grads, g_blocks)
