"""Hand-written backpropagation through time for CfC sequences (eager training fast path).

Autograd over a CfC loop records ~20 small nodes per step and computes every weight gradient one
step at a time; at CfC's sizes that is all dispatch overhead. These ``autograd.Function``s instead

1. run the forward loop once without a graph, keeping each step's activations;
2. turn them, for all steps at once, into the local derivatives of every element-wise stage (the
   head update of Eq. 9/10, the backbone activations with their dropout masks, the LSTM cell);
3. run the reverse recurrence for the *state* gradient only: per step one broadcast multiply per
   element-wise stage and one matmul per weight on the state path;
4. form all weight gradients after the loop as a few large matmuls over the [L*B, ...] rows.

The math is that of ``drive.nn.cfc_cells``; tests compare both paths' gradients and run
``gradcheck`` in float64. Elapsed times get no gradient (callers fall back to autograd when one
is needed); double backward is not supported.
"""

import functools
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from drive.nn.cfc_cells import activate, dropout_mask


def update_forward(z: Tensor, t: Tensor, n: int, mode: int, w_tau: Tensor, a: Tensor) -> Tuple[Tensor, List[Tensor]]:
    """``cfc_cells.cfc_update`` that also returns what its derivative needs."""
    if mode == 2:
        decay = torch.exp(-t * (w_tau + z.abs()))
        return torch.addcmul(a, a * decay, z, value=-1.0), [z, decay]
    gh = torch.tanh(z[:, : 2 * n])
    s = torch.sigmoid(torch.addcmul(z[:, 3 * n:], z[:, 2 * n: 3 * n], t))
    new = torch.lerp(gh[:, :n], gh[:, n:], s) if mode == 0 else torch.addcmul(gh[:, :n], s, gh[:, n:])
    return new, [gh, s]


def update_jacobian(saved: List[List[Tensor]], t: Tensor, n: int, mode: int, a: Tensor) -> Tensor:
    """d new state / d z for all steps: [L, B, K, n] (the update is diagonal per head)."""
    if mode == 2:
        z, decay = (torch.stack([s[i] for s in saved]) for i in range(2))
        return (a * decay * (t * z.abs() - 1.0)).unsqueeze(2)
    gh, s = (torch.stack([sv[i] for sv in saved]) for i in range(2))
    g, h = gh[..., :n], gh[..., n:]
    ds = s * (1.0 - s) * (h - g if mode == 0 else h)
    dg = (1.0 - s) * (1.0 - g * g) if mode == 0 else 1.0 - g * g
    return torch.stack([dg, s * (1.0 - h * h), ds * t, ds], 2)


def lstm_forward(z: Tensor, c: Tensor, n: int) -> Tuple[Tensor, Tensor, List[Tensor]]:
    """``cfc_cells.lstm_update`` that also returns what its derivative needs."""
    act, sg = torch.tanh(z[:, :n]), torch.sigmoid(z[:, n:])
    c_new = torch.addcmul(sg[:, n: 2 * n] * c, act, sg[:, :n])
    tc = torch.tanh(c_new)
    return tc * sg[:, 2 * n:], c_new, [c, act, sg, tc]


def lstm_jacobian(saved: List[List[Tensor]], n: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """For all steps [L, B, ...]: (dc/dh_new, d z[:3n]/dc [L, B, 3, n], d z[3n:]/dh_new, forget gate)."""
    c, act, sg, tc = (torch.stack([s[i] for s in saved]) for i in range(4))
    ig, fg, og = sg[..., :n], sg[..., n: 2 * n], sg[..., 2 * n:]
    dsg = sg * (1.0 - sg)
    to_c = torch.stack([ig * (1.0 - act * act), act * dsg[..., :n], c * dsg[..., n: 2 * n]], 2)
    return og * (1.0 - tc * tc), to_c, tc * dsg[..., 2 * n:], fg


def _activation_jacobian(saved: List[Tensor], masks: List[Tensor], kind: int) -> Tensor:
    """Backbone activation (times dropout mask) derivative for all steps [L, B, D]; ``saved`` holds
    the output (tanh, relu) or the input (gelu, silu)."""
    v = torch.stack(saved)
    if kind <= 1:
        d = 1.0 - v * v
    elif kind == 2:
        d = (v > 0).to(v.dtype)
    elif kind == 3:
        d = torch.ops.aten.gelu_backward(torch.ones_like(v), v)
    else:
        d = torch.ops.aten.silu_backward(torch.ones_like(v), v)
    return d * torch.stack(masks) if masks else d


def _rows(seq: Sequence[Tensor]) -> Tensor:
    """Per-step tensors [B, D] (time order) as one [L*B, D] matrix."""
    return torch.stack(list(seq)).flatten(0, 1)


def _weight_and_bias(dz: Tensor, inp: Tensor, need_w: bool, need_b: bool) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """(dz^T inp, column sums of dz) for a Linear applied to the rows inp [R, I] giving dz [R, O]."""
    return (dz.t().mm(inp) if need_w else None,
            dz.t().mv(torch.ones(dz.size(0), dtype=dz.dtype, device=dz.device)) if need_b else None)


class _Lstm:
    """Reverse recurrence of the mixed-memory LSTM and its weight gradients."""

    def __init__(self, saved: List[List[Tensor]], n: int, dc: Tensor) -> None:
        self.jc, self.to_c, self.to_o, self.fg = lstm_jacobian(saved, n)
        self.dc, self.dz = dc, []  # type: Tensor, List[Tensor]

    def step(self, i: int, dh: Tensor) -> Tensor:
        """d loss / d z_i [B, 4n] from the gradient of step i's new h (updates the c gradient)."""
        dc = torch.addcmul(self.dc, dh, self.jc[i])
        dz = torch.cat([(dc.unsqueeze(1) * self.to_c[i]).flatten(1), dh * self.to_o[i]], 1)
        self.dc = dc * self.fg[i]
        self.dz.append(dz)
        return dz

    def grads(self, need: Tuple[bool, ...], x_rows: Tensor, mem_in: List[Tensor]) -> Tuple[Optional[Tensor], ...]:
        """Gradients of (input weight, bias, recurrent weight); need = needs_input_grad[7:10]."""
        dz = _rows(self.dz[::-1])
        g_wi, g_bi = _weight_and_bias(dz, x_rows, need[0], need[1])
        return g_wi, g_bi, dz.t().mm(_rows(mem_in)) if need[2] else None


def _pure_grads(need: Tuple[bool, ...], dH: List[Tensor], saved: Tensor, t: Tensor, a: Tensor):
    """Gradients of |w_tau| and A (pure mode) from the per-step state gradients (reverse order) and
    the stacked (z, decay) [2, L, B, n]; need = needs_input_grad[5:7]."""
    d = torch.stack(dH[::-1])
    z, decay = saved[0], saved[1]
    return ((d * a * z * decay * t).sum((0, 1)) if need[0] else None,
            (d - d * decay * z).sum((0, 1)) if need[1] else None)


def _fp32_backward(backward: Callable) -> Callable:
    """Run a backward with autocast off (a ``.backward()`` called inside an autocast region would
    otherwise cast its matmuls): the forward ran in the module's dtype, so does its backward."""
    @functools.wraps(backward)
    def wrapped(ctx: Any, *grads: Optional[Tensor]):
        with torch.autocast(ctx.ts.device.type, enabled=False):
            return backward(ctx, *grads)
    return wrapped


def _carry(g_seq: Optional[Tensor], i: int, dz: Tensor, w: Tensor) -> Tensor:
    """Gradient reaching step i-1's output: dz_i @ w plus the loss's own gradient at step i-1."""
    return dz.mm(w) if g_seq is None or i == 0 else torch.addmm(g_seq[:, i - 1], dz, w)


class DenseBPTT(torch.autograd.Function):
    """Dense CfC sequence: apply(spec, x [B, L, F], h0 [B, n], c0 [B, n] | empty, ts [B, L, 1],
    w_tau, A, wi, bi, wr, w0, b0, w1, b1, ...) -> (states [B, L, n], h [B, n], c [B, n] | empty).

    spec = (n, mode, activation code, dropout p, mixed); weights as prepared by ``CfC._prepare``."""

    @staticmethod
    def forward(ctx: Any, spec: Tuple, x: Tensor, h: Tensor, c: Tensor, ts: Tensor, w_tau: Tensor, a: Tensor,
                wi: Tensor, bi: Tensor, wr: Tensor, *wb: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        n, mode, kind, p, mixed = spec
        ws, bs = list(wb[0::2]), list(wb[1::2])
        f, last = x.size(2), len(ws) - 1
        xt = x.transpose(0, 1).contiguous()
        x_part = F.linear(xt, ws[0][:, :f], bs[0])
        w_h = ws[0][:, f:].t()
        m_part = F.linear(xt, wi, bi) if mixed else xt
        mem_in: List[Tensor] = []
        mem_saved: List[List[Tensor]] = []
        h_in: List[Tensor] = []
        acts: List[List[Tensor]] = [[] for _ in range(last + 1)]  # activation (or input) of layer k-1
        ins: List[List[Tensor]] = [[] for _ in range(last + 1)]   # input of layer k (after dropout)
        masks: List[List[Tensor]] = [[] for _ in range(last + 1)]
        heads: List[List[Tensor]] = []
        outs: List[Tensor] = []
        for i in range(x.size(1)):
            if mixed:
                mem_in.append(h)
                h, c, sv = lstm_forward(torch.addmm(m_part[i], h, wr.t()), c, n)
                mem_saved.append(sv)
            h_in.append(h)
            z = torch.addmm(x_part[i], h, w_h)
            for k in range(1, last + 1):
                y = activate(z, kind)
                acts[k].append(y if kind <= 2 else z)
                if p > 0.0:
                    m = dropout_mask(y, p)
                    masks[k].append(m)
                    y = y * m
                ins[k].append(y)
                z = F.linear(y, ws[k], bs[k])
            h, sv = update_forward(z, ts[:, i], n, mode, w_tau, a)
            heads.append(sv)
            outs.append(h)
        ctx.spec, ctx.f, ctx.ts = spec, f, ts
        ctx.saved = (xt, mem_in, mem_saved, h_in, acts, ins, masks, heads)
        ctx.save_for_backward(w_tau, a, wi, wr, *ws)
        return torch.stack(outs, 1), h, c

    @staticmethod
    @once_differentiable
    @_fp32_backward
    def backward(ctx: Any, g_seq: Optional[Tensor], g_h: Optional[Tensor], g_c: Optional[Tensor]):
        n, mode, kind, p, mixed = ctx.spec
        xt, mem_in, mem_saved, h_in, acts, ins, masks, heads = ctx.saved
        w_tau, a, wi, wr, *ws = ctx.saved_tensors
        f, last, steps = ctx.f, len(ws) - 1, len(h_in)
        need = ctx.needs_input_grad
        t = ctx.ts.transpose(0, 1)
        jac = update_jacobian(heads, t, n, mode, a)
        dact = [_activation_jacobian(acts[k], masks[k], kind) if k > 0 else t for k in range(last + 1)]
        lstm = _Lstm(mem_saved, n, g_c if g_c is not None else torch.zeros_like(h_in[0])) if mixed else None
        w_h = ws[0][:, f:]
        dh = g_h if g_h is not None else torch.zeros_like(h_in[0])
        if g_seq is not None:
            dh = dh + g_seq[:, -1]
        dz_k: List[List[Tensor]] = [[] for _ in range(last + 1)]
        dH: List[Tensor] = []
        for i in range(steps - 1, -1, -1):
            dH.append(dh)
            dz = (dh.unsqueeze(1) * jac[i]).flatten(1)
            dz_k[last].append(dz)
            for k in range(last, 0, -1):
                dz = dz.mm(ws[k]) * dact[k][i]
                dz_k[k - 1].append(dz)
            if lstm is None:
                dh = _carry(g_seq, i, dz, w_h)
            else:
                dh = _carry(g_seq, i, lstm.step(i, dz.mm(w_h)), wr)
        rows = [_rows(d[::-1]) for d in dz_k]
        x_rows = xt.flatten(0, 1)
        grads: List[Optional[Tensor]] = []
        for k in range(last + 1):
            inp = torch.cat([x_rows, _rows(h_in)], 1) if k == 0 else _rows(ins[k])
            grads.extend(_weight_and_bias(rows[k], inp, need[10 + 2 * k], need[11 + 2 * k]))
        dx = rows[0].mm(ws[0][:, :f]) if need[1] else None
        g_wi = g_bi = g_wr = None
        if lstm is not None:
            g_wi, g_bi, g_wr = lstm.grads(need[7:10], x_rows, mem_in)
            if dx is not None:
                dx = dx + _rows(lstm.dz[::-1]).mm(wi)
        g_tau = g_a = None
        if mode == 2:
            saved = torch.stack([torch.stack([s[j] for s in heads]) for j in range(2)])
            g_tau, g_a = _pure_grads(need[5:7], dH, saved, t, a)
        if dx is not None:
            dx = dx.view(steps, -1, f).transpose(0, 1)
        dc = lstm.dc if lstm is not None and need[3] else None
        return (None, dx, dh if need[2] else None, dc, None, g_tau, g_a, g_wi, g_bi, g_wr, *grads)


class WiredBPTT(torch.autograd.Function):
    """Wired CfC sequence in layer order: apply(spec, x, h0, c0 | empty, ts [B, L, 1], w_tau, A,
    wi, bi, wr, s [K n, F], b [K n], w_rec [n, K n], *blocks) -> (states [B, L, n], h, c).

    spec = (n, mode, K, bounds, block_src, block_dst, mixed); see ``WiredCfC._prepare``."""

    @staticmethod
    def forward(ctx: Any, spec: Tuple, x: Tensor, h: Tensor, c: Tensor, ts: Tensor, w_tau: Tensor, a: Tensor,
                wi: Tensor, bi: Tensor, wr: Tensor, s: Tensor, b: Tensor, w_rec: Tensor,
                *blocks: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        n, mode, k, bounds, src, dst, mixed = spec
        xt = x.transpose(0, 1).contiguous()
        x_part = F.linear(xt, s, b)
        m_part = F.linear(xt, wi, bi) if mixed else xt
        offs = [k * o for o in bounds]
        mem_in: List[Tensor] = []
        mem_saved: List[List[Tensor]] = []
        h_in: List[Tensor] = []
        saved: List[List[List[Tensor]]] = [[] for _ in range(len(bounds) - 1)]  # [layer][step]
        outs: List[Tensor] = []
        for i in range(x.size(1)):
            if mixed:
                mem_in.append(h)
                h, c, sv = lstm_forward(torch.addmm(m_part[i], h, wr.t()), c, n)
                mem_saved.append(sv)
            h_in.append(h)
            pre = torch.addmm(x_part[i], h, w_rec)
            news: List[Tensor] = []
            for l in range(len(bounds) - 1):
                lo, hi = bounds[l], bounds[l + 1]
                z = pre[:, offs[l]: offs[l + 1]]
                for j in range(len(blocks)):
                    if dst[j] == l:
                        z = torch.addmm(z, news[src[j]], blocks[j])
                new, sv = update_forward(z, ts[:, i], hi - lo, mode, w_tau[lo:hi] if mode == 2 else w_tau,
                                         a[lo:hi] if mode == 2 else a)
                news.append(new)
                saved[l].append(sv)
            h = torch.cat(news, 1)
            outs.append(h)
        ctx.spec, ctx.ts = spec, ts
        ctx.saved = (xt, mem_in, mem_saved, h_in, saved, outs)
        ctx.save_for_backward(w_tau, a, wi, wr, s, w_rec, *blocks)
        return torch.stack(outs, 1), h, c

    @staticmethod
    @once_differentiable
    @_fp32_backward
    def backward(ctx: Any, g_seq: Optional[Tensor], g_h: Optional[Tensor], g_c: Optional[Tensor]):
        n, mode, k, bounds, src, dst, mixed = ctx.spec
        xt, mem_in, mem_saved, h_in, saved, outs = ctx.saved
        w_tau, a, wi, wr, s, w_rec, *blocks = ctx.saved_tensors
        layers, steps, need = len(bounds) - 1, len(h_in), ctx.needs_input_grad
        t = ctx.ts.transpose(0, 1)
        jac = [update_jacobian(saved[l], t, bounds[l + 1] - bounds[l], mode,
                               a[bounds[l]: bounds[l + 1]] if mode == 2 else a) for l in range(layers)]
        into = [[j for j in range(len(blocks)) if dst[j] == l] for l in range(layers)]
        blocks_t = [blk.t() for blk in blocks]
        lstm = _Lstm(mem_saved, n, g_c if g_c is not None else torch.zeros_like(h_in[0])) if mixed else None
        w_rec_t = w_rec.t()
        dh = g_h.clone() if g_h is not None else torch.zeros_like(h_in[0])
        if g_seq is not None:
            dh += g_seq[:, -1]
        dZ: List[Tensor] = []
        dH: List[Tensor] = []
        for i in range(steps - 1, -1, -1):
            dzs: List[Tensor] = [dh] * layers
            for l in range(layers - 1, -1, -1):  # dh is fresh each step: block gradients add in place
                dz = (dh[:, bounds[l]: bounds[l + 1]].unsqueeze(1) * jac[l][i]).flatten(1)
                dzs[l] = dz
                for j in into[l]:
                    dh[:, bounds[src[j]]: bounds[src[j] + 1]].addmm_(dz, blocks_t[j])
            dH.append(dh)
            dz = torch.cat(dzs, 1)
            dZ.append(dz)
            dh = _carry(g_seq, i, dz, w_rec_t) if lstm is None else _carry(g_seq, i, lstm.step(i, dz.mm(w_rec_t)), wr)
        dz_rows, x_rows = _rows(dZ[::-1]), xt.flatten(0, 1)
        g_s, g_b = _weight_and_bias(dz_rows, x_rows, need[10], need[11])
        g_rec = _rows(h_in).t().mm(dz_rows) if need[12] else None
        out_rows = _rows(outs)
        g_blocks = [out_rows[:, bounds[src[j]]: bounds[src[j] + 1]].t().mm(
            dz_rows[:, k * bounds[dst[j]]: k * bounds[dst[j] + 1]]) if need[13 + j] else None
            for j in range(len(blocks))]
        dx = dz_rows.mm(s) if need[1] else None
        g_wi = g_bi = g_wr = None
        if lstm is not None:
            g_wi, g_bi, g_wr = lstm.grads(need[7:10], x_rows, mem_in)
            if dx is not None:
                dx = dx + _rows(lstm.dz[::-1]).mm(wi)
        g_tau = g_a = None
        if mode == 2:
            zd = torch.stack([torch.cat([torch.stack([sv[j] for sv in saved[l]]) for l in range(layers)], 2)
                              for j in range(2)])
            g_tau, g_a = _pure_grads(need[5:7], dH, zd, t, a)
        if dx is not None:
            dx = dx.view(steps, -1, xt.size(2)).transpose(0, 1)
        dc = lstm.dc if lstm is not None and need[3] else None
        return (None, dx, dh if need[2] else None, dc, None, g_tau, g_a, g_wi, g_bi, g_wr, g_s, g_b, g_rec,
                *g_blocks)
