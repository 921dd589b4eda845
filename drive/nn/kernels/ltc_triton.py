"""Triton kernels of the LTC's fused semi-implicit solver (LTC Eq. 3, Algorithm 1), forward and backward,
and of the closed-form LTC's exact method (forward).

One program owns ``BLOCK_B`` batch rows and runs the whole recurrence (L steps x U unfolds): the
state ``v [BLOCK_B, NP]`` and the dense synapse tables ``[NP, NP]`` (pre i in rows, post j in
columns; NP = N padded to a power of two, padding inert) stay in registers, so a sequence costs
one launch instead of ~4 per unfold. Per unfold (``drive.nn.ltc_solver.fused_solver`` in dense form):

    x_ij = v_i sig_ij + nsm_ij,   s = sigmoid(x)
    n_j  = nd0n_j + sum_i s_ij qn_ij,   d_j = nd0d_j + sum_i s_ij qd_ij,   v'_j = (n_j + c_j v_j) / d_j

The same forward kernel runs the closed-form LTC's exact method (``CLOSED_FORM``; inference only):
the two sums are its total conductance G and current I (leak + sensory + recurrent) and each of its
substeps is ``v' = I/G + exp(-G h / cm) (v - I/G)`` (closed-form appendix, Corollary 1: LTC Eq. 1
solved with the activations held over h; ``drive.nn.closed_form.kernels.exact_update``).

The forward stores the state entering every unfold (``v_in [K+1, B, N]``, K = L U; 19 floats per
row per unfold); the backward walks the unfolds in reverse, recomputing s and d from them:

    gn = g / d,  gd = -g v' / d,  gx_ij = (gn_j qn_ij + gd_j qd_ij) s_ij (1 - s_ij),
    g <- sum_j gx_ij sig_ij + gn c

and accumulates the table gradients of its rows in registers, written once per program as
partial sums (summed on the host side in a fixed order: deterministic).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

__all__ = ["LTCFusedSolve", "ltc_forward", "ltc_backward"]


@triton.jit
def _rows(B, N: tl.constexpr, NP: tl.constexpr, BLOCK_B: tl.constexpr):
    """This program's batch rows: (mask, offsets into [.., B, N], offsets into [.., B, 2N])."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, NP)
    m2 = (rows < B)[:, None] & (cols < N)[None, :]
    return m2, rows[:, None] * N + cols[None, :], rows[:, None] * (2 * N) + cols[None, :]


@triton.jit
def _tables(sig_ptr, nsm_ptr, qn_ptr, qd_ptr, N: tl.constexpr, NP: tl.constexpr):
    """The four [N, N] synapse tables as [1, NP, NP] register tiles (padding 0: inert), with the
    tile's offsets and mask (to write table gradients)."""
    ii = tl.arange(0, NP)[:, None]
    jj = tl.arange(0, NP)[None, :]
    mm = (ii < N) & (jj < N)
    tab = ii * N + jj
    sig = tl.load(sig_ptr + tab, mask=mm, other=0.0)[None, :, :]
    nsm = tl.load(nsm_ptr + tab, mask=mm, other=0.0)[None, :, :]
    qn = tl.load(qn_ptr + tab, mask=mm, other=0.0)[None, :, :]
    qd = tl.load(qd_ptr + tab, mask=mm, other=0.0)[None, :, :]
    return sig, nsm, qn, qd, tab, mm


@triton.jit
def _ltc_fwd_kernel(
    v0_ptr,
    nd0_ptr,
    cm_ptr,
    sig_ptr,
    nsm_ptr,
    qn_ptr,
    qd_ptr,
    states_ptr,
    vin_ptr,
    B,
    L,
    U,
    N: tl.constexpr,
    NP: tl.constexpr,
    BLOCK_B: tl.constexpr,
    SAVE: tl.constexpr,
    CLOSED_FORM: tl.constexpr,
):
    m2, off, off_nd = _rows(B, N, NP, BLOCK_B)
    sig, nsm, qn, qd, _tab, _mm = _tables(sig_ptr, nsm_ptr, qn_ptr, qd_ptr, N, NP)
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
        tl.store(states_ptr + step * N + off, v, mask=m2)


@triton.jit
def _ltc_bwd_kernel(
    gs_ptr,
    vin_ptr,
    nd0_ptr,
    cm_ptr,
    sig_ptr,
    nsm_ptr,
    qn_ptr,
    qd_ptr,
    gv0_ptr,
    gnd0_ptr,
    gcm_ptr,
    gsig_ptr,
    gnsm_ptr,
    gqn_ptr,
    gqd_ptr,
    B,
    L,
    U,
    N: tl.constexpr,
    NP: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    m2, off, off_nd = _rows(B, N, NP, BLOCK_B)
    sig, nsm, qn, qd, tab, mm = _tables(sig_ptr, nsm_ptr, qn_ptr, qd_ptr, N, NP)
    g = tl.zeros([BLOCK_B, NP], dtype=tl.float32)
    acc_sig = tl.zeros([NP, NP], dtype=tl.float32)
    acc_nsm = tl.zeros([NP, NP], dtype=tl.float32)
    acc_qn = tl.zeros([NP, NP], dtype=tl.float32)
    acc_qd = tl.zeros([NP, NP], dtype=tl.float32)
    for tt in range(L):
        t = L - 1 - tt
        step = t * B
        g += tl.load(gs_ptr + step * N + off, mask=m2, other=0.0)
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
    part = tl.program_id(0) * N * N + tab
    tl.store(gsig_ptr + part, acc_sig, mask=mm)
    tl.store(gnsm_ptr + part, acc_nsm, mask=mm)
    tl.store(gqn_ptr + part, acc_qn, mask=mm)
    tl.store(gqd_ptr + part, acc_qd, mask=mm)


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
    sig: Tensor,
    nsm: Tensor,
    qn: Tensor,
    qd: Tensor,
    unfolds: int,
    save: bool,
    closed_form: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """states [L,B,N] and (``save``) v_in [K+1,B,N]; every input fp32, contiguous. ``closed_form``:
    the closed-form LTC's exact update instead (forward only; module docstring)."""
    length, batch, n = cm_t.shape
    states = torch.empty((length, batch, n), dtype=torch.float32, device=v.device)
    v_in = (
        torch.empty((length * unfolds + 1, batch, n), dtype=torch.float32, device=v.device)
        if save
        else states
    )
    if length == 0 or batch == 0:
        return states, (v_in if save else None)
    np_, block_b, warps = _launch_config(batch, n)
    grid = (triton.cdiv(batch, block_b),)
    _ltc_fwd_kernel[grid](
        v,
        nd0,
        cm_t,
        sig,
        nsm,
        qn,
        qd,
        states,
        v_in,
        batch,
        length,
        unfolds,
        N=n,
        NP=np_,
        BLOCK_B=block_b,
        SAVE=save,
        CLOSED_FORM=closed_form,
        num_warps=warps,
    )
    return states, (v_in if save else None)


def ltc_backward(
    g_states: Tensor,
    v_in: Tensor,
    nd0: Tensor,
    cm_t: Tensor,
    sig: Tensor,
    nsm: Tensor,
    qn: Tensor,
    qd: Tensor,
    unfolds: int,
) -> Tuple[Tensor, ...]:
    """Gradients w.r.t. (v, nd0, cm_t, sig, nsm, qn, qd)."""
    length, batch, n = cm_t.shape
    dev = v_in.device
    np_, block_b, warps = _launch_config(batch, n)
    programs = triton.cdiv(batch, block_b)
    g_v = torch.empty((batch, n), dtype=torch.float32, device=dev)
    g_nd0 = torch.empty_like(nd0)
    g_cm = torch.empty_like(cm_t)
    parts = torch.zeros((4, programs, n, n), dtype=torch.float32, device=dev)
    # the backward carries four [NP, NP] gradient accumulators besides the tile: twice the warps
    # (registers) of the forward
    _ltc_bwd_kernel[(programs,)](
        g_states,
        v_in,
        nd0,
        cm_t,
        sig,
        nsm,
        qn,
        qd,
        g_v,
        g_nd0,
        g_cm,
        parts[0],
        parts[1],
        parts[2],
        parts[3],
        batch,
        length,
        unfolds,
        N=n,
        NP=np_,
        BLOCK_B=block_b,
        num_warps=min(8, 2 * warps),
    )
    g_sig, g_nsm, g_qn, g_qd = parts.sum(1).unbind(0)
    return g_v, g_nd0, g_cm, g_sig, g_nsm, g_qn, g_qd


class LTCFusedSolve(torch.autograd.Function):
    """The fused solver as two Triton kernels (forward, backward); inputs as in :func:`ltc_forward`."""

    @staticmethod
    def forward(
        ctx: Any,
        v: Tensor,
        nd0: Tensor,
        cm_t: Tensor,
        sig: Tensor,
        nsm: Tensor,
        qn: Tensor,
        qd: Tensor,
        unfolds: int,
    ) -> Tensor:
        dtype = v.dtype
        args = [_f32(a) for a in (v, nd0, cm_t, sig, nsm, qn, qd)]
        save = any(ctx.needs_input_grad[:7])
        states, v_in = ltc_forward(*args, unfolds=unfolds, save=save)
        if save:
            ctx.save_for_backward(v_in, *args[1:])
        ctx.unfolds = unfolds
        ctx.dtypes = [a.dtype for a in (v, nd0, cm_t, sig, nsm, qn, qd)]
        return states.to(dtype)

    @staticmethod
    def backward(ctx: Any, g_states: Tensor) -> Tuple[Optional[Tensor], ...]:
        v_in, nd0, cm_t, sig, nsm, qn, qd = ctx.saved_tensors
        grads = ltc_backward(_f32(g_states), v_in, nd0, cm_t, sig, nsm, qn, qd, ctx.unfolds)
        out = [g.to(dt) if need else None for g, dt, need in zip(grads, ctx.dtypes, ctx.needs_input_grad)]
        return tuple(out) + (None,)
