"""Triton kernels of the LTC's fused semi-implicit solver (LTC Eq. 3, Algorithm 1), forward and backward,
and of the closed-form LTC's exact method (forward).

A sequence costs two launches forward and four backward, whatever its length:

* **inputs** (``inputs._inputs_fwd_kernel``, one program per block of ``BLOCK_R`` (row, step) pairs): the
  affine input map, the sensory synapses and the leak, for every step at once --
  ``u = input_w x + input_b``, ``s_fj = sigmoid(ssig_fj u_f + snsm_fj)``,
  ``n0_j = gleak vleak + sum_f s_fj sqn_fj``, ``d0_j = gleak + eps + sum_f s_fj sqd_fj + c_j`` with
  ``c_j = cm_j U / dt`` (the synapse tables built from the raw parameters on load: positivity,
  mask);
* **recurrence** (``_ltc_fwd_kernel``, one program per ``BLOCK_B`` batch rows) runs all L steps x U
  unfolds with the state ``v [BLOCK_B, NP]`` and the dense synapse tables ``[NP, NP]`` (pre i in
  rows, post j in columns; NP = N padded to a power of two, padding inert) in registers, and writes
  the outputs and the last state. Each unfold is the solver update of :mod:`drive.nn.ltc`
  (``drive.nn.ltc.solver.fused_solver`` in dense form), ``v'_j = (n_j + c_j v_j) / d_j`` with the
  sums over synapses ``n_j = n0_j + sum_i s_ij qn_ij``, ``d_j = d0_j + sum_i s_ij qd_ij``,
  ``s = sigmoid(v_i sig_ij + nsm_ij)`` and the tables sig = sigma mask, nsm = -sigma mu mask,
  qd = w+ mask, qn = qd erev (w+ = softplus(w) or w).

The same recurrence kernel runs the closed-form LTC's exact method (``CLOSED_FORM``; inference
only): the two sums are its total conductance G and current I (leak + sensory + recurrent) and each
of its substeps is the exact update of :mod:`drive.nn.closed_form.ltc` (Corollary 1;
``drive.nn.closed_form.scripted.exact_update``).

The forward stores the state entering every unfold (``v_in [K+1, B, N]``, K = L U; 19 floats per
row per unfold); the recurrence's backward walks the unfolds in reverse, recomputing s and d:

    gn = g / d,  gd = -g v' / d,  gx_ij = (gn_j qn_ij + gd_j qd_ij) s_ij (1 - s_ij),
    g <- sum_j gx_ij sig_ij + gn c

and the inputs' backward turns the gradients of n0, d0 and c into those of x, dt and the sensory,
leak and input-map parameters. Parameter gradients are accumulated per program in registers,
taken back through the tables' construction (mask, positivity) and written once as partial sums,
summed in a fixed order on the host side: deterministic.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from drive.nn.ltc.kernels.inputs import inputs_backward, inputs_forward
from drive.nn.ltc.kernels.synapses import _store_synapse_grads, _synapses

__all__ = ["LTCSequence", "ltc_forward", "sequence_forward"]


@triton.jit
def _rows(B, N: tl.constexpr, NP: tl.constexpr, BLOCK_B: tl.constexpr):
    """This program's batch rows: (rows, columns, mask, offsets into [.., B, N], into [.., B, 2N])."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, NP)
    m2 = (rows < B)[:, None] & (cols < N)[None, :]
    return rows, cols, m2, rows[:, None] * N + cols[None, :], rows[:, None] * (2 * N) + cols[None, :]


@triton.jit
def _table_tile(N: tl.constexpr, NP: tl.constexpr):
    ii = tl.arange(0, NP)[:, None]
    jj = tl.arange(0, NP)[None, :]
    return ii * N + jj, (ii < N) & (jj < N)


@triton.jit
def _ltc_fwd_kernel(
    v0_ptr,
    nd0_ptr,
    cm_ptr,
    sigma_ptr,
    mu_ptr,
    w_ptr,
    erev_ptr,
    mask_ptr,
    ow_ptr,
    ob_ptr,
    y_ptr,
    h_ptr,
    vin_ptr,
    B,
    L,
    U,
    N: tl.constexpr,
    NP: tl.constexpr,
    M: tl.constexpr,
    BLOCK_B: tl.constexpr,
    SAVE: tl.constexpr,
    CLOSED_FORM: tl.constexpr,
    SOFTPLUS: tl.constexpr,
):
    rows, cols, m2, off, off_nd = _rows(B, N, NP, BLOCK_B)
    tab, mm = _table_tile(N, NP)
    sig, nsm, qn, qd, _s, _m, _e, _k, _w, _d = _synapses(
        tab, mm, sigma_ptr, mu_ptr, w_ptr, erev_ptr, mask_ptr, SOFTPLUS
    )
    sig, nsm, qn, qd = sig[None, :, :], nsm[None, :, :], qn[None, :, :], qd[None, :, :]
    ow = tl.load(ow_ptr + cols, mask=cols < M, other=0.0)[None, :]
    ob = tl.load(ob_ptr + cols, mask=cols < M, other=0.0)[None, :]
    ym = (rows < B)[:, None] & (cols < M)[None, :]
    v = tl.load(v0_ptr + off, mask=m2, other=0.0)
    if SAVE:
        tl.store(vin_ptr + off, v, mask=m2)
    for t in range(L):
        step = t * B
        n0 = tl.load(nd0_ptr + step * (2 * N) + off_nd, mask=m2, other=0.0)
        d0 = tl.load(nd0_ptr + step * (2 * N) + N + off_nd, mask=m2, other=1.0)
        c = tl.load(cm_ptr + step * N + off, mask=m2, other=0.0)
        for u in range(U):
            s = tl.sigmoid(v[:, :, None] * sig + nsm)
            num = n0 + tl.sum(s * qn, axis=1)
            den = d0 + tl.sum(s * qd, axis=1)
            if CLOSED_FORM:  # num = I, den = G, c = -h/cm: v <- I/G + exp(-G h/cm) (v - I/G)
                mean = num / den
                v = mean + tl.exp(den * c) * (v - mean)
            else:
                v = (num + c * v) / den
            if SAVE:
                tl.store(vin_ptr + ((t * U + u + 1) * B) * N + off, v, mask=m2)
        tl.store(y_ptr + (rows[:, None] * L + t) * M + cols[None, :], v * ow + ob, mask=ym)
    tl.store(h_ptr + off, v, mask=m2)


@triton.jit
def _ltc_bwd_kernel(
    gy_ptr,
    gh_ptr,
    vin_ptr,
    nd0_ptr,
    cm_ptr,
    sigma_ptr,
    mu_ptr,
    w_ptr,
    erev_ptr,
    mask_ptr,
    ow_ptr,
    gv0_ptr,
    gnd0_ptr,
    gcm_ptr,
    part_ptr,
    B,
    L,
    U,
    N: tl.constexpr,
    NP: tl.constexpr,
    M: tl.constexpr,
    BLOCK_B: tl.constexpr,
    SOFTPLUS: tl.constexpr,
):
    """Partials per program (``4 N N + 2 M`` floats): sigma, mu, w, erev [N, N]; output_w, output_b [M]."""
    rows, cols, m2, off, off_nd = _rows(B, N, NP, BLOCK_B)
    tab, mm = _table_tile(N, NP)
    sig, nsm, qn, qd, _s, _m, _e, _k, _w, _d = _synapses(
        tab, mm, sigma_ptr, mu_ptr, w_ptr, erev_ptr, mask_ptr, SOFTPLUS
    )
    sig, nsm, qn, qd = sig[None, :, :], nsm[None, :, :], qn[None, :, :], qd[None, :, :]
    ow = tl.load(ow_ptr + cols, mask=cols < M, other=0.0)[None, :]
    ym = (rows < B)[:, None] & (cols < M)[None, :]
    g = tl.load(gh_ptr + off, mask=m2, other=0.0)
    acc_sig = tl.zeros([NP, NP], dtype=tl.float32)
    acc_nsm = tl.zeros([NP, NP], dtype=tl.float32)
    acc_qn = tl.zeros([NP, NP], dtype=tl.float32)
    acc_qd = tl.zeros([NP, NP], dtype=tl.float32)
    acc_ow = tl.zeros([NP], dtype=tl.float32)
    acc_ob = tl.zeros([NP], dtype=tl.float32)
    for tt in range(L):
        t = L - 1 - tt
        step = t * B
        gy = tl.load(gy_ptr + (rows[:, None] * L + t) * M + cols[None, :], mask=ym, other=0.0)
        acc_ow += tl.sum(gy * tl.load(vin_ptr + ((t + 1) * U * B) * N + off, mask=m2, other=0.0), axis=0)
        acc_ob += tl.sum(gy, axis=0)
        g += gy * ow
        d0 = tl.load(nd0_ptr + step * (2 * N) + N + off_nd, mask=m2, other=1.0)
        c = tl.load(cm_ptr + step * N + off, mask=m2, other=0.0)
        g_n0 = tl.zeros([BLOCK_B, NP], dtype=tl.float32)
        g_d0 = tl.zeros([BLOCK_B, NP], dtype=tl.float32)
        g_c = tl.zeros([BLOCK_B, NP], dtype=tl.float32)
        for uu in range(U):
            k = t * U + (U - 1 - uu)
            vb = tl.load(vin_ptr + (k * B) * N + off, mask=m2, other=0.0)
            va = tl.load(vin_ptr + ((k + 1) * B) * N + off, mask=m2, other=0.0)
            s = tl.sigmoid(vb[:, :, None] * sig + nsm)
            inv = 1.0 / (d0 + tl.sum(s * qd, axis=1))
            gn = g * inv
            gd = -g * va * inv
            gx = (gn[:, None, :] * qn + gd[:, None, :] * qd) * (s * (1.0 - s))
            g = tl.sum(gx * sig, axis=2) + gn * c
            g_n0 += gn
            g_d0 += gd
            g_c += gn * vb
            acc_qn += tl.sum(s * gn[:, None, :], axis=0)
            acc_qd += tl.sum(s * gd[:, None, :], axis=0)
            acc_sig += tl.sum(vb[:, :, None] * gx, axis=0)
            acc_nsm += tl.sum(gx, axis=0)
        tl.store(gnd0_ptr + step * (2 * N) + off_nd, g_n0, mask=m2)
        tl.store(gnd0_ptr + step * (2 * N) + N + off_nd, g_d0, mask=m2)
        tl.store(gcm_ptr + step * N + off, g_c, mask=m2)
    tl.store(gv0_ptr + off, g, mask=m2)
    part = part_ptr + tl.program_id(0) * (4 * N * N + 2 * M)
    _sig, _nsm, _qn, _qd, sigma, mu, erev, m, wp, dwp = _synapses(
        tab, mm, sigma_ptr, mu_ptr, w_ptr, erev_ptr, mask_ptr, SOFTPLUS
    )
    _store_synapse_grads(part, N * N, tab, mm, acc_sig, acc_nsm, acc_qn, acc_qd, sigma, mu, erev, m, wp, dwp)
    tl.store(part + 4 * N * N + cols, acc_ow, mask=cols < M)
    tl.store(part + 4 * N * N + M + cols, acc_ob, mask=cols < M)


def _launch_config(batch: int, n: int) -> Tuple[int, int, int]:
    """(NP, BLOCK_B, num_warps): one row per program until the batch fills the GPU several times
    over, then blocks of rows (fewer, fuller programs); warps sized to the [BLOCK_B, NP, NP] tile."""
    np_ = max(16, triton.next_power_of_2(n))
    block_b = 1 if batch <= 1024 else 2 if batch <= 4096 else 4
    tile = block_b * np_ * np_
    warps = 1 if tile <= 256 else 2 if tile <= 1024 else 4 if tile <= 4096 else 8
    return np_, block_b, warps


def _f32(t: Tensor) -> Tensor:
    return t.contiguous() if t.dtype == torch.float32 else t.float().contiguous()


def ltc_forward(
    v: Tensor,
    nd0: Tensor,
    cm_t: Tensor,
    synapses: Sequence[Tensor],
    output_map: Sequence[Tensor],
    unfolds: int,
    save: bool,
    softplus: bool,
    closed_form: bool = False,
) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """The recurrence: (y [B,L,M], last state [B,N], ``save``: v_in [K+1,B,N]). ``synapses`` = raw
    (sigma, mu, w, erev, mask) [N,N], ``output_map`` = (output_w, output_b) [M]; every input fp32,
    contiguous. ``closed_form``: the closed-form LTC's exact update instead (forward only; module
    docstring)."""
    length, batch, n = cm_t.shape
    m = output_map[0].numel()
    y = torch.empty((batch, length, m), dtype=torch.float32, device=v.device)
    h = torch.empty((batch, n), dtype=torch.float32, device=v.device)
    v_in = torch.empty((length * unfolds + 1, batch, n), dtype=torch.float32, device=v.device) if save else y
    if length == 0 or batch == 0:
        return y, h.copy_(v), (v_in if save else None)
    np_, block_b, warps = _launch_config(batch, n)
    _ltc_fwd_kernel[(triton.cdiv(batch, block_b),)](
        v,
        nd0,
        cm_t,
        *synapses,
        *output_map,
        y,
        h,
        v_in,
        batch,
        length,
        unfolds,
        N=n,
        NP=np_,
        M=m,
        BLOCK_B=block_b,
        SAVE=save,
        CLOSED_FORM=closed_form,
        SOFTPLUS=softplus,
        num_warps=warps,
    )
    return y, h, (v_in if save else None)


def sequence_forward(
    x: Tensor,
    v0: Tensor,
    ts: Tensor,
    unfolds: int,
    eps: float,
    softplus: bool,
    params: Sequence[Tensor],
    save: bool,
) -> Tuple[Tensor, Tensor, Tuple[Tensor, ...]]:
    """The two forward launches: (y [B,L,M], last state [B,N], what the backward needs -- or
    nothing without ``save``: the states entering each unfold are then not even stored)."""
    x, v0, ts = _f32(x), _f32(v0), _f32(ts).reshape(-1)
    params = tuple(_f32(p) for p in params)
    nd0, cm_t = inputs_forward(x, ts, params[:10], unfolds, eps, softplus)
    y, h, v_in = ltc_forward(v0, nd0, cm_t, params[10:15], params[15:], unfolds, save, softplus)
    return y, h, ((x, ts, v_in, nd0, cm_t, *params) if save else ())


class LTCSequence(torch.autograd.Function):
    """The LTC over a sequence, differentiable, in the four kernels of this module:
    ``apply(x [B,L,F], v0 [B,N], ts [B,L,1], unfolds, epsilon, softplus, *inputs, *synapses,
    *output_map)`` -> (y [B,L,M], last state [B,N]). The parameter groups are those
    :func:`inputs_forward` and :func:`ltc_forward` take, raw: the kernels apply positivity and masks.
    Without grad mode call :func:`sequence_forward` instead (``needs_input_grad`` is set by
    ``requires_grad`` alone, so ``apply`` would keep the per-unfold states for nothing)."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, v0: Tensor, ts: Tensor, unfolds: int, eps: float, softplus: bool, *params: Tensor
    ) -> Tuple[Tensor, Tensor]:
        ctx.like = (
            [(t.shape, t.dtype) for t in (x, v0, ts)] + [None] * 3 + [(p.shape, p.dtype) for p in params]
        )
        ctx.config = (unfolds, softplus)
        save = any(ctx.needs_input_grad)
        y, h, saved = sequence_forward(x, v0, ts, unfolds, eps, softplus, params, save)
        if save:
            ctx.save_for_backward(*saved)
        return y.to(x.dtype), h.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g_y: Tensor, g_h: Tensor) -> Tuple[Optional[Tensor], ...]:
        unfolds, softplus = ctx.config
        x, ts, v_in, nd0, cm_t, *params = ctx.saved_tensors
        inputs, synapses, output_w = params[:10], params[10:15], params[15]
        length, batch, n = cm_t.shape
        f, m = x.size(2), output_w.numel()
        np_, block_b, warps = _launch_config(batch, n)
        programs = triton.cdiv(batch, block_b)
        g_v0 = torch.empty_like(v_in[0])
        g_nd0 = torch.empty_like(nd0)
        g_cm = torch.empty_like(cm_t)
        part = torch.empty((programs, 4 * n * n + 2 * m), dtype=torch.float32, device=x.device)
        # four [NP, NP] gradient accumulators besides the tables: twice the warps of the forward
        _ltc_bwd_kernel[(programs,)](
            _f32(g_y),
            _f32(g_h),
            v_in,
            nd0,
            cm_t,
            *synapses,
            output_w,
            g_v0,
            g_nd0,
            g_cm,
            part,
            batch,
            length,
            unfolds,
            N=n,
            NP=np_,
            M=m,
            BLOCK_B=block_b,
            SOFTPLUS=softplus,
            num_warps=min(8, 2 * warps),
        )
        g_x, g_ts, part_in = inputs_backward(g_nd0, g_cm, x, ts, inputs, unfolds, softplus)
        g_in = part_in.sum(0).split([f * n] * 4 + [f, f, n, n, n])  # sensory sigma, mu, w, erev; ...
        g_rec = part.sum(0).split([n * n] * 4 + [m, m])  # sigma, mu, w, erev; output_w, output_b
        grads = [g_x, g_v0, g_ts, None, None, None, g_in[4], g_in[5], *g_in[:4], None, *g_in[6:]]
        grads += [*g_rec[:4], None, *g_rec[4:]]
        return tuple(
            g.view(like[0]).to(like[1]) if g is not None and need else None
            for g, need, like in zip(grads, ctx.needs_input_grad, ctx.like)
        )
