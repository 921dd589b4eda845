"""Hand-written backpropagation through time for CfC sequences (eager training fast path).

Autograd over a CfC loop records ~20 small nodes per step and computes every weight gradient one
step at a time; at CfC's sizes that is all dispatch overhead. These ``autograd.Function``s instead

1. run the forward loop once without a graph, keeping each step's activations;
2. turn them, for all steps at once, into the local derivatives of every element-wise stage (the
   head update of Eq. 9/10, the backbone activations with their dropout masks, the LSTM cell);
3. run the reverse recurrence for the *state* gradient only: per step one broadcast multiply per
   element-wise stage and one matmul per weight on the state path;
4. form all weight gradients after the loop as a few large matmuls over the [L*B, ...] rows.

The loops themselves (``drive.nn.cfc_bptt_loops``) run as TorchScript functions. The math is that
of ``drive.nn.cfc_cells``; tests compare both paths' gradients and run ``gradcheck`` in float64.
Elapsed times get no gradient (callers fall back to autograd when one is needed); double backward
is not supported.
"""

import functools
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from drive.nn.cfc_bptt_loops import compiled, dense_backward, dense_forward, wired_backward, wired_forward


def update_jacobian(saved: Sequence[List[Tensor]], t: Tensor, n: int, mode: int, a: Tensor) -> Tensor:
    """d new state / d z for all steps: [L, B, K, n] (the update is diagonal per head); saved[step]
    as returned by ``update_forward``, t [L, B, 1]."""
    if mode == 3:  # L = lerp(s1, s2, s3), s = sigmoid(z); computed in place over the stacked copy
        s = torch.stack([sv[0] for sv in saved])  # (each large fresh tensor costs cache misses)
        s1, s2, s3 = s.split(n, 2)
        diff = s2 - s1
        torch.addcmul(s2, s2, s2, value=-1.0, out=s2).mul_(s3)  # s2 (1 - s2) s3
        torch.addcmul(s1, s1, s1, value=-1.0, out=s1).addcmul_(s1, s3, value=-1.0)  # s1 (1 - s1) (1 - s3)
        torch.addcmul(s3, s3, s3, value=-1.0, out=s3).mul_(diff)  # s3 (1 - s3) (s2 - s1)
        return s.view(s.shape[:2] + (3, n))
    if mode == 2:
        z, decay = (torch.stack([s[i] for s in saved]) for i in range(2))
        return (a * decay * (t * z.abs() - 1.0)).unsqueeze(2)
    g, h, s = (torch.stack([sv[i] for sv in saved]) for i in range(3))
    ds = s * (1.0 - s) * (h - g if mode == 0 else h)
    dg = (1.0 - s) * (1.0 - g * g) if mode == 0 else 1.0 - g * g
    return torch.stack([dg, s * (1.0 - h * h), ds * t, ds], 2)


def lstm_jacobian(saved: Sequence[List[Tensor]], n: int) -> List[Tensor]:
    """For all steps [L, B, ...]: dc/dh_new, d z[:3n]/dc [L, B, 3, n], d z[3n:]/dh_new, forget gate."""
    c, act, sg, tc = (torch.stack([s[i] for s in saved]) for i in range(4))
    ig, fg, og = sg[..., :n], sg[..., n: 2 * n], sg[..., 2 * n:]
    dsg = sg * (1.0 - sg)
    to_c = torch.stack([ig * (1.0 - act * act), act * dsg[..., :n], c * dsg[..., n: 2 * n]], 2)
    return [og * (1.0 - tc * tc), to_c, tc * dsg[..., 2 * n:], fg]


def _activation_jacobian(v: Tensor, masks: List[Tensor], kind: int) -> Tensor:
    """Backbone activation (times dropout mask) derivative for all steps [L, B, D]; v (stacked, left
    intact) holds the output (tanh, sigmoid, relu) or the input (gelu, silu)."""
    if kind <= 1:
        d = 1.0 - v * v
    elif kind == 5:
        d = torch.addcmul(v, v, v, value=-1.0)
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
            dz.sum(0) if need_b else None)


def _start(ctx: Any, g_seq: Optional[Tensor], g_h: Optional[Tensor], g_c: Optional[Tensor], like: Tensor):
    """(time-major g_seq, fresh dh for the last step, dc) from the output gradients."""
    g = g_seq.transpose(0, 1) if g_seq is not None else None
    dh = g_h.clone() if g_h is not None else torch.zeros_like(like)
    if g is not None:
        dh += g[-1]
    return g, dh, g_c if g_c is not None else torch.zeros_like(like)


def _lstm_grads(need: Tuple[bool, ...], dzm: List[Tensor], x_rows: Tensor, mem_in: List[Tensor]):
    """Gradients of the LSTM's (input weight, bias, recurrent weight); need = needs_input_grad[7:10]."""
    dz = _rows(dzm[::-1])
    g_wi, g_bi = _weight_and_bias(dz, x_rows, need[0], need[1])
    return dz, g_wi, g_bi, dz.t().mm(_rows(mem_in)) if need[2] else None


def _pure_grads(need: Tuple[bool, ...], dH: List[Tensor], z: Tensor, decay: Tensor, t: Tensor, a: Tensor):
    """Gradients of |w_tau| and A (pure mode) from the state gradients (reverse order) and the
    stacked z, decay [L, B, n]; need = needs_input_grad[5:7]."""
    d = torch.stack(dH[::-1])
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


def dense_loop_weights(f: int, mixed: bool, prep: Sequence[Tensor]) -> Tuple:
    """``CfC._prepare``'s list as the loop takes it: (W_1 input part, b_1, W_1 state part^T,
    [W_k^T], [b_k] for k >= 2, W_lstm_in, b_lstm_in, W_lstm_rec^T, |w_tau|, A)."""
    w_tau, a, wi, bi, wr = prep[:5]
    ws, bs = list(prep[5::2]), list(prep[6::2])
    return (ws[0][:, :f], bs[0], ws[0][:, f:].t().contiguous(), [w.t().contiguous() for w in ws[1:]], bs[1:],
            wi, bi, wr.t().contiguous() if mixed else wr, w_tau, a)


def uniform_time(ts: Tensor) -> Optional[Tensor]:
    """The elapsed time shared by every sample and step of ts [B, L, 1] as a 0-dim tensor, or None
    when they differ (no timespans given: the expanded ones of ``check_sequence``, no sync)."""
    if ts.numel() == 0:
        return None
    t = ts[0, 0, 0]
    if ts.stride(0) == 0 and ts.stride(1) == 0:
        return t
    return t if bool((ts == t).all()) else None


def sigmoid_form_applies(mode: int, kind: int, p: float, mixed: bool) -> bool:
    """Whether ``SigmoidForm`` can rewrite this dense CfC (default mode, tanh-like backbone, no
    dropout, no mixed memory; the elapsed time must also be uniform)."""
    return mode == 0 and kind <= 1 and p == 0.0 and not mixed


@functools.lru_cache(maxsize=16)
def _sigmoid_maps(shapes: Tuple[Tuple[int, int], ...], f: int, lecun: bool, dtype: torch.dtype,
                  device: torch.device) -> List[Tuple[Tensor, Tensor, float]]:
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
            out[i] = torch.cat([v[: 2 * n] * 2.0, torch.addcmul(v[3 * n:], v[2 * n: 3 * n], t)])
        ctx.shapes = [v.shape for v in out]
        return tuple(out)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: Optional[Tensor]):
        n, t, maps = ctx.n, ctx.t, ctx.maps
        g = [t.new_zeros(shape) if v is None else v for v, shape in zip(grads, ctx.shapes)]
        for i in (-2, -1):
            gate = g[i][2 * n:]
            g[i] = torch.cat([g[i][: 2 * n] * 2.0, gate * t, gate])
        out: List[Optional[Tensor]] = [None, None, None, None]
        for k, (c, u, p) in enumerate(maps):
            gw, gb = g[2 * k], g[2 * k + 1]
            out += [(gw * c).addr_(gb, u, alpha=-p), gb * p]
        return tuple(out)


def _loop(fn: Callable, xt: Tensor) -> Callable:
    """The compiled loop, or the plain function for a single step (TorchScript's call overhead then
    exceeds the step's work)."""
    return fn if xt.size(0) == 1 else compiled(fn)


def dense_run(spec: Tuple, x: Tensor, h: Tensor, c: Tensor, ts: Tensor, lw: Tuple) -> Tuple[Tensor, Tensor, Tuple]:
    """Run the dense loop: (states [B, L, n], time-major x, what ``dense_forward`` returns); lw from
    ``dense_loop_weights``. In the sigmoid form (mode 3) the loop carries L = (x + 1) / 2: h enters
    converted and the states and the last state leave as x (the lists keep L)."""
    n, mode, kind, p, mixed = spec
    w_in, b0, w_h, ws_t, bs, wi, bi, wr_t, w_tau, a = lw
    xt = x.transpose(0, 1).contiguous()
    m_part = F.linear(xt, wi, bi) if mixed else xt
    if mode == 3:
        h = torch.add(h, 1.0).mul_(0.5)
    out = _loop(dense_forward, xt)(F.linear(xt, w_in, b0), m_part, h, c, ts.transpose(0, 1), w_h, ws_t, bs,
                                   wr_t, w_tau, a, n, mode, kind, p, mixed)
    y = torch.stack(out[0], 1)
    if mode == 3:
        y.mul_(2.0).sub_(1.0)
        out = (out[0], out[1] * 2.0 - 1.0) + out[2:]
    return y, xt, out


def wired_loop_weights(mixed: bool, prep: Sequence[Tensor]) -> Tuple:
    """``WiredCfC._prepare``'s list as the loop takes it (the LSTM's recurrent weight transposed)."""
    return (*prep[:4], prep[4].t().contiguous() if mixed else prep[4], *prep[5:8], list(prep[8:]))


def wired_run(spec: Tuple, x: Tensor, h: Tensor, c: Tensor, ts: Tensor, lw: Tuple) -> Tuple[Tensor, Tuple]:
    """Run the wired loop: (time-major x, what ``wired_forward`` returns)."""
    n, mode, k, bounds, src, dst, mixed = spec
    w_tau, a, wi, bi, wr_t, s, b, w_rec, blocks = lw
    xt = x.transpose(0, 1).contiguous()
    m_part = F.linear(xt, wi, bi) if mixed else xt
    return xt, _loop(wired_forward, xt)(F.linear(xt, s, b), m_part, h, c, ts.transpose(0, 1), w_rec, blocks,
                                        bounds, src, dst, k, wr_t, w_tau, a, mode, mixed)


class DenseBPTT(torch.autograd.Function):
    """Dense CfC sequence: apply(spec, x [B, L, F], h0 [B, n], c0 [B, n] | empty, ts [B, L, 1],
    w_tau, A, wi, bi, wr, w0, b0, w1, b1, ...) -> (states [B, L, n], h [B, n], c [B, n] | empty).

    spec = (n, mode, activation code, dropout p, mixed); weights as prepared by ``CfC._prepare``."""

    @staticmethod
    def forward(ctx: Any, spec: Tuple, x: Tensor, h: Tensor, c: Tensor, ts: Tensor, w_tau: Tensor, a: Tensor,
                wi: Tensor, bi: Tensor, wr: Tensor, *wb: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        n, mode, kind, p, mixed = spec
        ws = list(wb[0::2])
        f = x.size(2)
        y, xt, (outs, h, c, h_in, mem_in, mem_saved, acts, ins, masks, heads) = dense_run(
            spec, x, h, c, ts, dense_loop_weights(f, mixed, [w_tau, a, wi, bi, wr, *wb]))
        ctx.spec, ctx.f, ctx.ts = spec, f, ts
        ctx.saved = (xt, mem_in, mem_saved, h_in, acts, ins, masks, heads)
        ctx.save_for_backward(w_tau, a, wi, wr, *ws)
        return y, h, c

    @staticmethod
    @once_differentiable
    @_fp32_backward
    def backward(ctx: Any, g_seq: Optional[Tensor], g_h: Optional[Tensor], g_c: Optional[Tensor]):
        n, mode, kind, p, mixed = ctx.spec
        xt, mem_in, mem_saved, h_in, acts, ins, masks, heads = ctx.saved
        w_tau, a, wi, wr, *ws = ctx.saved_tensors
        f, last, steps, need = ctx.f, len(ws) - 1, len(h_in), ctx.needs_input_grad
        t = ctx.ts.transpose(0, 1)
        g, dh, dc = _start(ctx, g_seq, g_h, g_c, h_in[0])
        if mode == 3:  # gradients with respect to L = (x + 1) / 2 (g is doubled inside the loop)
            dh.mul_(2.0)
        stacked = [torch.stack(v) for v in acts]
        dact = [_activation_jacobian(stacked[k], masks[k], kind) for k in range(last)]
        ins_rows = [stacked[k].flatten(0, 1) if kind not in (3, 4) and not masks[k] else _rows(ins[k])
                    for k in range(last)]  # saved outputs without dropout are the next layer's inputs
        dz_k, dzm, dH, dh, dc = compiled(dense_backward)(
            dh, dc, g, update_jacobian(heads, t, n, mode, a), dact, ws[1:], ws[0][:, f:].contiguous(), wr,
            lstm_jacobian(mem_saved, n) if mixed else [], mode == 2, 2.0 if mode == 3 else 1.0)
        rows = [_rows(d[::-1]) for d in dz_k]
        x_rows = xt.flatten(0, 1)
        grads: List[Optional[Tensor]] = []
        for k in range(last + 1):
            if k == 0:  # W_1 reads [x, h]: two products instead of one over a concatenated copy
                g_w = torch.cat([rows[0].t().mm(x_rows), rows[0].t().mm(_rows(h_in))], 1) if need[10] else None
                grads.extend((g_w, _weight_and_bias(rows[0], x_rows, False, need[11])[1]))
            else:
                grads.extend(_weight_and_bias(rows[k], ins_rows[k - 1], need[10 + 2 * k], need[11 + 2 * k]))
        dx = rows[0].mm(ws[0][:, :f]) if need[1] else None
        g_wi = g_bi = g_wr = None
        if mixed:
            dzm_rows, g_wi, g_bi, g_wr = _lstm_grads(need[7:10], dzm, x_rows, mem_in)
            if dx is not None:
                dx = dx + dzm_rows.mm(wi)
        g_tau = g_a = None
        if mode == 2:
            z, decay = (torch.stack([s[j] for s in heads]) for j in range(2))
            g_tau, g_a = _pure_grads(need[5:7], dH, z, decay, t, a)
        if dx is not None:
            dx = dx.view(steps, -1, f).transpose(0, 1)
        if mode == 3:
            dh = dh * 0.5
        return (None, dx, dh if need[2] else None, dc if mixed and need[3] else None, None, g_tau, g_a,
                g_wi, g_bi, g_wr, *grads)


class WiredBPTT(torch.autograd.Function):
    """Wired CfC sequence in layer order: apply(spec, x, h0, c0 | empty, ts [B, L, 1], w_tau, A,
    wi, bi, wr, s [K n, F], b [K n], w_rec [n, K n], *blocks) -> (states [B, L, n], h, c).

    spec = (n, mode, K, bounds, block_src, block_dst, mixed); see ``WiredCfC._prepare``."""

    @staticmethod
    def forward(ctx: Any, spec: Tuple, x: Tensor, h: Tensor, c: Tensor, ts: Tensor, w_tau: Tensor, a: Tensor,
                wi: Tensor, bi: Tensor, wr: Tensor, s: Tensor, b: Tensor, w_rec: Tensor,
                *blocks: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        xt, (outs, h, c, h_in, mem_in, mem_saved, saved) = wired_run(
            spec, x, h, c, ts, wired_loop_weights(spec[-1], [w_tau, a, wi, bi, wr, s, b, w_rec, *blocks]))
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
        g, dh, dc = _start(ctx, g_seq, g_h, g_c, h_in[0])
        jac = [update_jacobian(saved[l], t, bounds[l + 1] - bounds[l], mode,
                               a[bounds[l]: bounds[l + 1]] if mode == 2 else a) for l in range(layers)]
        dZ, dzm, dH, dh, dc = compiled(wired_backward)(
            dh, dc, g, jac, [blk.t().contiguous() for blk in blocks], bounds, src, dst, w_rec.t().contiguous(), wr,
            lstm_jacobian(mem_saved, n) if mixed else [], mode == 2)
        dz_rows, x_rows = _rows(dZ[::-1]), xt.flatten(0, 1)
        g_s, g_b = _weight_and_bias(dz_rows, x_rows, need[10], need[11])
        g_rec = _rows(h_in).t().mm(dz_rows) if need[12] else None
        out_rows = _rows(outs)
        g_blocks = [out_rows[:, bounds[src[j]]: bounds[src[j] + 1]].t().mm(
            dz_rows[:, k * bounds[dst[j]]: k * bounds[dst[j] + 1]]) if need[13 + j] else None
            for j in range(len(blocks))]
        dx = dz_rows.mm(s) if need[1] else None
        g_wi = g_bi = g_wr = None
        if mixed:
            dzm_rows, g_wi, g_bi, g_wr = _lstm_grads(need[7:10], dzm, x_rows, mem_in)
            if dx is not None:
                dx = dx + dzm_rows.mm(wi)
        g_tau = g_a = None
        if mode == 2:
            z, decay = (torch.cat([torch.stack([sv[j] for sv in saved[l]]) for l in range(layers)], 2)
                        for j in range(2))
            g_tau, g_a = _pure_grads(need[5:7], dH, z, decay, t, a)
        if dx is not None:
            dx = dx.view(steps, -1, xt.size(2)).transpose(0, 1)
        return (None, dx, dh if need[2] else None, dc if mixed and need[3] else None, None, g_tau, g_a,
                g_wi, g_bi, g_wr, g_s, g_b, g_rec, *g_blocks)
