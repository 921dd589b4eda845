"""Scripted kernels of the closed-form LTC (equations and symbols: drive.nn.closed_form).

Shapes: B batch, L steps, N neurons, F inputs, M motor neurons, E present synapses; all times in
seconds. ``c`` is the constant list of :meth:`drive.nn.closed_form.ClosedFormLTC._derive`.

Every kernel calls addmm with beta = alpha = ``one``, a run-time 1.0 (``ClosedFormLTC.one``):
TorchScript's DecomposeOps pass splits an addmm whose beta and alpha are the constant 1 into
mm + add, one more dispatch per matmul in a loop that is dispatch bound.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["exact_step", "eq8_state", "exact_update", "approx_update", "exact_sequence", "approx_sequence",
           "input_error", "closed_form_sequence", "closed_form_step"]


def exact_step(v: Tensor, g: Tensor, i: Tensor, neg_h_over_cm: Tensor) -> Tensor:
    """Exact solution of ``cm dv/dt = i - g v`` after ``h`` (closed-form appendix, Corollary 1):
    ``e^{-a h} (v - b/a) + b/a`` with ``a = g / cm``, ``b/a = i / g``, as one ``lerp``.

    v, i ``[B, N]``; g ``[B, N]`` > 0 (callers clamp the leak conductance at 1e-30, so a neuron
    without conductance keeps v: i = 0, e^0 = 1); ``neg_h_over_cm = -h / cm`` broadcastable.
    ``i / g`` is a conductance-weighted mean of reversal potentials, so nothing cancels for a -> 0.
    """
    return torch.lerp(i / g, v, torch.exp(g * neg_h_over_cm))


def eq8_state(x0: Tensor, g: Tensor, i: Tensor, gc: Tensor, ic: Tensor, neg_t_over_cm: Tensor) -> Tensor:
    """CfC paper Eq. 8 per channel, conductance-weighted over a neuron's channels (module docstring).

    ``x~(t) = (i + e^{-g t / cm} (x0 gc - ic)) / g`` with ``g = sum_k G_k``, ``i = sum_k G_k E_k``,
    ``gc = sum_k G_k c_k``, ``ic = sum_k G_k c_k E_k``. All ``[B, N]`` except
    ``neg_t_over_cm = -t / cm`` (broadcastable); t is the time since x0; g > 0 as in :func:`exact_step`
    (a neuron without conductance keeps x0).
    """
    # i - e (ic - x0 gc) as two addcmul: five ops in all
    return torch.addcmul(i, torch.exp(g * neg_t_over_cm), torch.addcmul(ic, x0, gc, value=-1.0), value=-1.0) / g


@torch.jit.script
def exact_update(v: Tensor, base: Tensor, neg_h_over_cm: Optional[Tensor], pre_sigma: Tensor, neg_sigma_mu: Tensor,
                 q: Tensor, substeps: int, one: float) -> Tensor:
    """One step of Corollary 1 on the E present synapses, recurrent activations re-evaluated
    ``substeps`` times. v ``[B, N]``; base ``[B, 2N]`` leak + sensory [conductance | current];
    synapse e (pre i -> post j) enters through pre_sigma ``[N, E]`` (sigma_e in row i),
    neg_sigma_mu ``[E]`` and q ``[E, 2N]`` (w_e in column j, w_e erev_e in column N + j).
    ``neg_h_over_cm = -h / cm`` ``[B, N]`` (h = dt / substeps); None: base and q are already scaled
    by ``-h / cm`` (a dt shared by all rows), so [G | I] arrive as [-G h/cm | -I h/cm], whose
    ratio is still I / G: one multiplication fewer per evaluation. ``one`` = 1.0 (module docstring)."""
    for _ in range(substeps):
        s = torch.addmm(neg_sigma_mu, v, pre_sigma, beta=one, alpha=one).sigmoid_()
        g, i = torch.addmm(base, s, q, beta=one, alpha=one).chunk(2, 1)
        if neg_h_over_cm is None:
            v = torch.lerp(i / g, v, torch.exp(g))
        else:
            v = exact_step(v, g, i, neg_h_over_cm)
    return v


@torch.jit.script
def approx_update(v: Tensor, x0: Tensor, neg_t_over_cm: Tensor, base: Tensor, base_c: Tensor,
                  pre_sigma: Tensor, neg_sigma_mu: Tensor, q: Tensor, one: float) -> Tensor:
    """Eq. 8 at ``-t / cm`` ``[B, N]`` (t seconds since x0 ``[B, N]``), recurrent presynaptic
    signals v ``[B, N]``; base / base_c ``[B, 2N]`` leak + sensory [G | I] and complement-weighted
    [G c | I c]; synapses as in :func:`exact_update`."""
    s = torch.addmm(neg_sigma_mu, v, pre_sigma, beta=one, alpha=one).sigmoid_()
    g, i = torch.addmm(base, s, q, beta=one, alpha=one).chunk(2, 1)
    gc, ic = torch.addmm(base_c, torch.addcmul(s, s, s, value=-1.0), q, beta=one, alpha=one).chunk(2, 1)  # s (1 - s)
    return eq8_state(x0, g, i, gc, ic, neg_t_over_cm)


@torch.jit.script
def exact_sequence(v: Tensor, gi0: Tensor, neg_h_over_cm: Optional[Tensor], pre_sigma: Tensor,
                   neg_sigma_mu: Tensor, q: Tensor, substeps: int, one: float) -> Tensor:
    """:func:`exact_update` over gi0 ``[B, L, 2N]`` with ``-h / cm`` ``[L, B, N]`` (or None: gi0 and q
    pre-scaled) -> states ``[L, B, N]``."""
    states: List[Tensor] = []
    if neg_h_over_cm is None and substeps == 1:  # the common case, without the inner loop (~5% faster)
        for base in gi0.unbind(1):
            s = torch.addmm(neg_sigma_mu, v, pre_sigma, beta=one, alpha=one).sigmoid_()
            g, i = torch.addmm(base, s, q, beta=one, alpha=one).chunk(2, 1)
            v = torch.lerp(i / g, v, torch.exp(g))
            states.append(v)
    elif neg_h_over_cm is None:
        for base in gi0.unbind(1):
            v = exact_update(v, base, None, pre_sigma, neg_sigma_mu, q, substeps, one)
            states.append(v)
    else:
        for base, nh in zip(gi0.unbind(1), neg_h_over_cm.unbind(0)):
            v = exact_update(v, base, nh, pre_sigma, neg_sigma_mu, q, substeps, one)
            states.append(v)
    return torch.stack(states)


@torch.jit.script
def approx_sequence(v: Tensor, x0: Tensor, gi0: Tensor, gic0: Tensor, neg_t_over_cm: Tensor, pre_sigma: Tensor,
                    neg_sigma_mu: Tensor, q: Tensor, one: float) -> Tensor:
    """:func:`approx_update` over gi0 / gic0 ``[B, L, 2N]`` and ``-t / cm`` ``[L, B, N]`` (t: seconds
    since x0 at the end of every step) -> states ``[L, B, N]``."""
    states: List[Tensor] = []
    for base, base_c, nt in zip(gi0.unbind(1), gic0.unbind(1), neg_t_over_cm.unbind(0)):
        v = approx_update(v, x0, nt, base, base_c, pre_sigma, neg_sigma_mu, q, one)
        states.append(v)
    return torch.stack(states)


@torch.jit.script
def input_error(x: Tensor, times: Optional[Tensor]) -> Tuple[int, float]:
    """Validation with two reductions: (0 ok | 1 non-finite x | 2 times not finite and > 0, the
    shared value of ``times`` or -1.0 if it varies; None counts as 1.0). x's sum is accumulated in
    float64, so a finite fp32 input cannot overflow it."""
    if x.dtype == torch.float64:
        finite = bool(torch.isfinite(x).all())
    else:
        finite = math.isfinite(float(x.sum(dtype=torch.float64)))
    if not finite:
        return 1, -1.0
    if times is None:
        return 0, 1.0
    lo, hi = torch.aminmax(times)
    low, high = float(lo), float(hi)
    if not (low > 0.0 and high < math.inf):
        return 2, -1.0
    return 0, low if low == high else -1.0


@torch.jit.script
def closed_form_sequence(x: Tensor, hidden: Tensor, timespans: Optional[Tensor], c: List[Tensor], output_w: Tensor,
                         output_b: Tensor, exact: bool, substeps: int, one: float) -> Tuple[Tensor, Tensor, int]:
    """Either method over a sequence: x ``[B, L, F]``, hidden ``[B, H]``, timespans ``[B, L]``
    seconds or None (1.0), c = :meth:`ClosedFormLTC._derive`, ``one`` = 1.0 (module docstring)
    -> (y ``[B, L, M]``, hidden ``[B, H]``, error code of :func:`input_error`; the outputs are
    meaningless unless it is 0).

    The input-only terms (leak + sensory [G | I], the input map folded into the sensory constants)
    are one matmul, one sigmoid and one matmul for all steps at once. With one dt for all rows and
    steps (>= 1 us) the exact kernel runs on constants pre-scaled by -h / cm."""
    error, shared = input_error(x, timespans)
    batch, length, features = x.size(0), x.size(1), x.size(2)
    n = c[8].size(0)
    s = torch.addmm(c[1], x.reshape(batch * length, features), c[0], beta=one, alpha=one).sigmoid_()
    if exact and shared >= 1e-6:
        scale = c[7] * (shared / float(substeps))
        gi0 = torch.addmm(c[6] * scale, s, c[2] * scale, beta=one, alpha=one).view(batch, length, 2 * n)
        states = exact_sequence(hidden, gi0, None, c[3], c[4], c[5] * scale, substeps, one)
        return torch.addcmul(output_b, states[:, :, : output_w.size(0)], output_w).transpose(0, 1), states[-1], error
    gi0 = torch.addmm(c[6], s, c[2], beta=one, alpha=one).view(batch, length, 2 * n)
    if timespans is None:
        dt = torch.ones(length, batch, 1, dtype=x.dtype, device=x.device)
    else:
        dt = timespans.transpose(0, 1).unsqueeze(2).to(x.dtype)
    if exact:
        states = exact_sequence(hidden, gi0, dt * (c[8] / float(substeps)), c[3], c[4], c[5], substeps, one)
        last = states[-1]
    else:
        gic0 = gi0 - torch.mm(s * s, c[2]).view(batch, length, 2 * n)
        x0 = hidden[:, n : 2 * n]
        elapsed = torch.cumsum(dt, 0) + hidden[:, 2 * n :]  # [L, B, 1] seconds since x0
        states = approx_sequence(hidden[:, :n], x0, gi0, gic0, elapsed * c[8], c[3], c[4], c[5], one)
        last = torch.cat([states[-1], x0, elapsed[-1]], dim=1)
    return torch.addcmul(output_b, states[:, :, : output_w.size(0)], output_w).transpose(0, 1), last, error


@torch.jit.script
def closed_form_step(x: Tensor, hidden: Tensor, dt: Tensor, c: List[Tensor], output_w: Tensor, output_b: Tensor,
                     exact: bool, substeps: int, one: float) -> Tuple[Tensor, Tensor, int]:
    """One step of either method as a single scripted call (batch-1 latency): x ``[B, F]``, hidden
    ``[B, H]``, dt ``[B]`` seconds, c = :meth:`ClosedFormLTC._derive` -> (y ``[B, M]``, hidden,
    error code of :func:`input_error`)."""
    error = input_error(x, dt)[0]
    s = torch.addmm(c[1], x, c[0], beta=one, alpha=one).sigmoid_()
    base = torch.addmm(c[6], s, c[2], beta=one, alpha=one)
    if dt.dtype != x.dtype:
        dt = dt.to(x.dtype)
    dt = dt.unsqueeze(1)
    if exact:
        nh = dt * c[8] if substeps == 1 else dt * (c[8] / float(substeps))
        state = exact_update(hidden, base, nh, c[3], c[4], c[5], substeps, one)
    else:
        n = c[8].size(0)
        x0 = hidden[:, n : 2 * n]
        elapsed = hidden[:, 2 * n :] + dt
        v = approx_update(hidden[:, :n], x0, elapsed * c[8], base, base - torch.mm(s * s, c[2]), c[3], c[4], c[5], one)
        state = torch.cat([v, x0, elapsed], dim=1)
    return torch.addcmul(output_b, state[:, : output_w.size(0)], output_w), state, error
