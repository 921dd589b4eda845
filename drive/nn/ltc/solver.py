"""The LTC's fused semi-implicit Euler solver (the update of :mod:`drive.nn.ltc`, LTC Eq. 3) over a
whole sequence, on the list of present synapses, and its hand-written reverse pass.

``fused_solver`` and ``fused_solver_backward`` are scripted functions: :class:`drive.nn.ltc.LTC`
calls the forward from TorchScript (autograd differentiates it there) and, in eager training,
``_FusedSolver`` pairs the two so the gradient of K = L * ode_unfolds unfolds is one reverse loop
plus a few batched matmuls instead of an autograd graph of ~2,000 tiny nodes. The caller
precomputes the terms that depend only on the inputs. The Triton kernels of
:mod:`drive.nn.ltc.kernels` compute the same on CUDA in dense form.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from drive.nn.torchscript import script

__all__ = ["fused_solver", "fused_solver_backward"]


def fused_solver(
    v: Tensor,
    nd0: Tensor,
    cm_t: Tensor,
    pre_sigma: Tensor,
    neg_sm: Tensor,
    q: Tensor,
    unfolds: int,
    save: bool,
) -> Tuple[Tensor, Tensor]:
    """The solver over a whole sequence on the E present synapses.

    v [B,N] initial state; nd0 [L,B,2N] = [gleak vleak + S_num | gleak + S_den + cm/h + eps] and
    cm_t [L,B,N] = cm/h per step; synapse e (pre i -> post j) enters through pre_sigma [N,E]
    (sigma_e in row i), neg_sm [E] = -sigma_e mu_e, and q [E,2N] (w_e erev_e and w_e in columns j
    and N + j). Per unfold: x = v pre_sigma + neg_sm, s = sigmoid(x), [n | d] = nd0 + s q,
    v <- (n + cm_t v) / d. Returns the states after each step [L,B,N] and, when ``save``, the
    state entering each unfold plus the final one [K+1,B,N] (K = L * unfolds; the backward
    recomputes s and d from them in two batched matmuls), else an empty tensor.
    """
    n = v.size(1)
    states: List[Tensor] = []
    v_in: List[Tensor] = [v]
    for t in range(nd0.size(0)):
        base = nd0[t]
        c = cm_t[t]
        for _ in range(unfolds):
            s = torch.sigmoid(torch.addmm(neg_sm, v, pre_sigma))
            nd = torch.addmm(base, s, q)
            v = torch.addcmul(nd[:, :n], c, v) / nd[:, n:]
            if save:
                v_in.append(v)
        states.append(v)
    return torch.stack(states), torch.stack(v_in) if save else v.new_empty(0)


def fused_solver_backward(
    g_states: Tensor,
    v_in: Tensor,
    nd0: Tensor,
    cm_t: Tensor,
    pre_sigma: Tensor,
    neg_sm: Tensor,
    q: Tensor,
    unfolds: int,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Reverse pass of ``fused_solver``: gradients w.r.t. (v, nd0, cm_t, pre_sigma, neg_sm, q).

    Per unfold v' = n / d: [dn | dd] = g [1/d | -v'/d], ds = [dn | dd] q^T, dx = ds s (1 - s),
    dv = dx pre_sigma^T + cm_t dn; parameter gradients are summed over all unfolds at the end.
    """
    length = g_states.size(0)
    batch = g_states.size(1)
    n = g_states.size(2)
    k_total = length * unfolds
    v_before = v_in[:k_total]
    sigs = torch.sigmoid(torch.addmm(neg_sm, v_before.reshape(k_total * batch, n), pre_sigma))
    den = torch.mm(sigs, q[:, n:]).view(length, unfolds, batch, n) + nd0[:, :, n:].unsqueeze(1)
    inv_d = 1.0 / den.view(k_total, batch, n)
    factors = torch.cat([inv_d, -v_in[1:] * inv_d], 2)
    sigs = sigs.view(k_total, batch, -1)
    f_list = factors.view(k_total, batch, 2, n).unbind(0)
    ds_list = (sigs - sigs * sigs).unbind(0)
    q_t = q.t()
    ps_t = pre_sigma.t()
    gv = torch.zeros_like(g_states[0])
    g_nds: List[Tensor] = []
    g_xs: List[Tensor] = []
    for t in range(length - 1, -1, -1):
        gv = gv + g_states[t]
        c = cm_t[t]
        for u in range(unfolds - 1, -1, -1):
            k = t * unfolds + u
            g_nd = (f_list[k] * gv.unsqueeze(1)).view(batch, 2 * n)
            g_x = torch.mm(g_nd, q_t) * ds_list[k]
            gv = torch.addcmul(torch.mm(g_x, ps_t), g_nd[:, :n], c)
            g_nds.append(g_nd)
            g_xs.append(g_x)
    g_nd_all = torch.stack(g_nds).flip(0)
    g_x_all = torch.stack(g_xs).flip(0)
    g_nd0 = g_nd_all.view(length, unfolds, batch, 2 * n).sum(1)
    g_cm_t = (g_nd_all[:, :, :n] * v_before).view(length, unfolds, batch, n).sum(1)
    g_q = torch.mm(sigs.reshape(k_total * batch, -1).t(), g_nd_all.reshape(k_total * batch, 2 * n))
    g_pre_sigma = torch.mm(v_before.reshape(k_total * batch, n).t(), g_x_all.reshape(k_total * batch, -1))
    g_neg_sm = g_x_all.sum([0, 1])
    return gv, g_nd0, g_cm_t, g_pre_sigma, g_neg_sm, g_q


fused_solver = script(fused_solver)
fused_solver_backward = script(fused_solver_backward)


class _FusedSolver(torch.autograd.Function):
    """``fused_solver`` with a hand-written backward (eager mode only)."""

    @staticmethod
    def forward(
        ctx: Any,
        v: Tensor,
        nd0: Tensor,
        cm_t: Tensor,
        pre_sigma: Tensor,
        neg_sm: Tensor,
        q: Tensor,
        unfolds: int,
    ) -> Tensor:
        states, v_in = fused_solver(v, nd0, cm_t, pre_sigma, neg_sm, q, unfolds, True)
        ctx.save_for_backward(v_in, nd0, cm_t, pre_sigma, neg_sm, q)
        ctx.unfolds = unfolds
        return states

    @staticmethod
    def backward(ctx: Any, g_states: Tensor) -> Tuple[Optional[Tensor], ...]:
        v_in, nd0, cm_t, pre_sigma, neg_sm, q = ctx.saved_tensors
        grads = fused_solver_backward(
            g_states.contiguous(), v_in, nd0, cm_t, pre_sigma, neg_sm, q, ctx.unfolds
        )
        return tuple(g if need else None for g, need in zip(grads, ctx.needs_input_grad)) + (None,)
