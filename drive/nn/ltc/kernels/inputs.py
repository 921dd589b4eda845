"""Triton kernels of the LTC's input side, for every (row, step) pair of a sequence at once: the
affine input map, the sensory synapses, the leak and cm/h (the input-only terms of the update in
:mod:`drive.nn.ltc`; the sum the TorchScript path computes with two matmuls), forward and backward.
:mod:`drive.nn.ltc.kernels.recurrence` runs the recurrence on what they produce."""

from __future__ import annotations

from typing import Sequence, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from drive.nn.ltc.kernels.synapses import _positive, _store_synapse_grads, _synapses

__all__ = ["BLOCK_R", "inputs_forward", "inputs_backward"]

BLOCK_R = 32  # (row, step) pairs per program


@triton.jit
def _leak(gleak_ptr, vleak_ptr, cm_ptr, cols, cmask, SOFTPLUS: tl.constexpr):
    gl, dgl = _positive(tl.load(gleak_ptr + cols, mask=cmask, other=0.0), SOFTPLUS)
    vl = tl.load(vleak_ptr + cols, mask=cmask, other=0.0)
    cm, dcm = _positive(tl.load(cm_ptr + cols, mask=cmask, other=0.0), SOFTPLUS)
    return gl, dgl, vl, cm, dcm


@triton.jit
def _pairs(B, L, N: tl.constexpr, NP: tl.constexpr, BLOCK_R: tl.constexpr):
    """This program's (row, step) pairs r = b L + t (x's order): (r, mask of r, offsets of (t, b)
    into [L, B, N], the [BLOCK_R, NP] mask, the columns and their mask)."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rmask = r < B * L
    b = r // L
    cols = tl.arange(0, NP)
    cmask = cols < N
    tb = (r - b * L) * B + b
    return r, rmask, tb, rmask[:, None] & cmask[None, :], cols, cmask


@triton.jit
def _inputs_fwd_kernel(
    x_ptr,
    ts_ptr,
    iw_ptr,
    ib_ptr,
    ssigma_ptr,
    smu_ptr,
    sw_ptr,
    serev_ptr,
    smask_ptr,
    gleak_ptr,
    vleak_ptr,
    cm_ptr,
    nd0_ptr,
    cmt_ptr,
    B,
    L,
    F,
    UF,
    eps,
    N: tl.constexpr,
    NP: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SOFTPLUS: tl.constexpr,
):
    r, rmask, tb, m2, cols, cmask = _pairs(B, L, N, NP, BLOCK_R)
    gl, _dgl, vl, cm, _dcm = _leak(gleak_ptr, vleak_ptr, cm_ptr, cols, cmask, SOFTPLUS)
    num = tl.zeros([BLOCK_R, NP], dtype=tl.float32)
    den = tl.zeros([BLOCK_R, NP], dtype=tl.float32)
    for f in range(F):
        u = tl.load(x_ptr + r * F + f, mask=rmask, other=0.0) * tl.load(iw_ptr + f) + tl.load(ib_ptr + f)
        sig, nsm, qn, qd, _s, _m, _e, _k, _w, _d = _synapses(
            f * N + cols, cmask, ssigma_ptr, smu_ptr, sw_ptr, serev_ptr, smask_ptr, SOFTPLUS
        )
        s = tl.sigmoid(u[:, None] * sig[None, :] + nsm[None, :])
        num += s * qn[None, :]
        den += s * qd[None, :]
    c = cm[None, :] * (UF / tl.load(ts_ptr + r, mask=rmask, other=1.0))[:, None]
    out = tb[:, None] * (2 * N) + cols[None, :]
    tl.store(nd0_ptr + out, (gl * vl)[None, :] + num, mask=m2)
    tl.store(nd0_ptr + out + N, (gl + eps)[None, :] + den + c, mask=m2)
    tl.store(cmt_ptr + tb[:, None] * N + cols[None, :], c, mask=m2)


@triton.jit
def _inputs_bwd_kernel(
    gnd0_ptr,
    gcmt_ptr,
    x_ptr,
    ts_ptr,
    iw_ptr,
    ib_ptr,
    ssigma_ptr,
    smu_ptr,
    sw_ptr,
    serev_ptr,
    smask_ptr,
    gleak_ptr,
    vleak_ptr,
    cm_ptr,
    gx_ptr,
    gts_ptr,
    part_ptr,
    B,
    L,
    F,
    UF,
    N: tl.constexpr,
    NP: tl.constexpr,
    BLOCK_R: tl.constexpr,
    SOFTPLUS: tl.constexpr,
):
    """Partials per program (``4 F N + 2 F + 3 N`` floats): sensory sigma, mu, w, erev [F, N];
    input_w, input_b [F]; gleak, vleak, cm [N]."""
    r, rmask, tb, m2, cols, cmask = _pairs(B, L, N, NP, BLOCK_R)
    gl, dgl, vl, cm, dcm = _leak(gleak_ptr, vleak_ptr, cm_ptr, cols, cmask, SOFTPLUS)
    out = tb[:, None] * (2 * N) + cols[None, :]
    gn0 = tl.load(gnd0_ptr + out, mask=m2, other=0.0)
    gd0 = tl.load(gnd0_ptr + out + N, mask=m2, other=0.0)
    gc = tl.load(gcmt_ptr + tb[:, None] * N + cols[None, :], mask=m2, other=0.0) + gd0  # c is in d0 too
    ts = tl.load(ts_ptr + r, mask=rmask, other=1.0)
    k = UF / ts  # c = cm k
    tl.store(gts_ptr + r, -tl.sum(gc * cm[None, :], axis=1) * k / ts, mask=rmask)
    part = part_ptr + tl.program_id(0) * (4 * F * N + 2 * F + 3 * N)
    leak = part + 4 * F * N + 2 * F
    tl.store(leak + cols, tl.sum(gn0 * vl[None, :] + gd0, axis=0) * dgl, mask=cmask)
    tl.store(leak + N + cols, tl.sum(gn0, axis=0) * gl, mask=cmask)
    tl.store(leak + 2 * N + cols, tl.sum(gc * k[:, None], axis=0) * dcm, mask=cmask)
    for f in range(F):
        xf = tl.load(x_ptr + r * F + f, mask=rmask, other=0.0)
        iw = tl.load(iw_ptr + f)
        u = xf * iw + tl.load(ib_ptr + f)
        offs = f * N + cols
        sig, nsm, qn, qd, sigma, mu, erev, m, wp, dwp = _synapses(
            offs, cmask, ssigma_ptr, smu_ptr, sw_ptr, serev_ptr, smask_ptr, SOFTPLUS
        )
        s = tl.sigmoid(u[:, None] * sig[None, :] + nsm[None, :])
        ga = (gn0 * qn[None, :] + gd0 * qd[None, :]) * (s * (1.0 - s))
        gu = tl.sum(ga * sig[None, :], axis=1)
        tl.store(gx_ptr + r * F + f, gu * iw, mask=rmask)
        tl.store(part + 4 * F * N + f, tl.sum(gu * xf, axis=0))
        tl.store(part + 4 * F * N + F + f, tl.sum(gu, axis=0))
        _store_synapse_grads(
            part,
            F * N,
            offs,
            cmask,
            tl.sum(ga * u[:, None], axis=0),
            tl.sum(ga, axis=0),
            tl.sum(s * gn0, axis=0),
            tl.sum(s * gd0, axis=0),
            sigma,
            mu,
            erev,
            m,
            wp,
            dwp,
        )


def inputs_forward(x: Tensor, ts: Tensor, inputs: Sequence[Tensor], unfolds: int, eps: float, softplus: bool):
    """(nd0 [L,B,2N], cm_t [L,B,N]) from x [B,L,F], ts [B*L] and the raw input-side parameters
    (input_w, input_b, sensory sigma, mu, w, erev, mask, gleak, vleak, cm)."""
    batch, length, f = x.shape
    n = inputs[-1].numel()
    nd0 = torch.empty((length, batch, 2 * n), dtype=torch.float32, device=x.device)
    cm_t = torch.empty((length, batch, n), dtype=torch.float32, device=x.device)
    if length == 0 or batch == 0:
        return nd0, cm_t
    grid = (triton.cdiv(batch * length, BLOCK_R),)
    _inputs_fwd_kernel[grid](
        x,
        ts,
        *inputs,
        nd0,
        cm_t,
        batch,
        length,
        f,
        float(unfolds),
        float(eps),
        N=n,
        NP=max(16, triton.next_power_of_2(n)),
        BLOCK_R=BLOCK_R,
        SOFTPLUS=softplus,
        num_warps=4,
    )
    return nd0, cm_t


def inputs_backward(
    g_nd0: Tensor, g_cm: Tensor, x: Tensor, ts: Tensor, inputs: Sequence[Tensor], unfolds: int, softplus: bool
) -> Tuple[Tensor, Tensor, Tensor]:
    """(g_x [B,L,F], g_ts [B*L], partial parameter gradients [programs, 4FN + 2F + 3N]) from the
    gradients of nd0 and cm_t; arguments as :func:`inputs_forward`'s."""
    batch, length, f = x.shape
    n = inputs[-1].numel()
    pairs = triton.cdiv(batch * length, BLOCK_R)
    part = torch.empty((pairs, 4 * f * n + 2 * f + 3 * n), dtype=torch.float32, device=x.device)
    g_x = torch.empty_like(x)
    g_ts = torch.empty_like(ts)
    _inputs_bwd_kernel[(pairs,)](
        g_nd0,
        g_cm,
        x,
        ts,
        *inputs,
        g_x,
        g_ts,
        part,
        batch,
        length,
        f,
        float(unfolds),
        N=n,
        NP=max(16, triton.next_power_of_2(n)),
        BLOCK_R=BLOCK_R,
        SOFTPLUS=softplus,
        num_warps=4,
    )
    return g_x, g_ts, part
