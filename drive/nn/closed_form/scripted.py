"""TorchScript functions of the closed-form LTC (equations and symbols: drive.nn.closed_form.ltc).

Shapes: B batch, L steps, N neurons, F inputs, M motor neurons, E present synapses; all times in
seconds. ``c`` holds the :class:`Constants` of :meth:`drive.nn.closed_form.ltc.ClosedFormLTC._derive`.

Matmuls with a small broadcast bias are written ``torch.mm(a, b).add_(bias)``: for these small
operands that is faster than ``addmm`` (which first copies the broadcast bias into its output). With
a full [B, N] bias ``addmm`` is faster; TorchScript keeps it whole only when beta or alpha is a
runtime value, else it splits it into mm + add (DecomposeOps). In-place ops only touch fresh results,
so autograd works.
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from drive.nn.torchscript import script

__all__ = [
    "Constants",
    "eq8_state",
    "exact_update",
    "approx_update",
    "exact_sequence",
    "exact_shared",
    "approx_sequence",
    "input_error",
    "exact_shared_sequence",
    "closed_form_sequence",
    "closed_form_step",
]


class Constants(NamedTuple):
    """What :meth:`drive.nn.closed_form.ltc.ClosedFormLTC._derive` computes from the parameters (E_s / E_r
    sensory / recurrent synapses, K the sensory fan-out). Fields a method does not use hold an
    empty tensor: ``leak_s`` .. ``rec_q_s`` exist for the exact method, ``grid_w`` ..
    ``shared_rec_q`` for its sequence at one shared dt (``exact_shared``)."""

    sens_pre: Tensor  # sensory pre_sigma scaled by input_w [F, Es] (input map folded in: ...
    # ... x @ sens_pre + sens_bias = sigma (input_w x + input_b - mu))
    sens_bias: Tensor  # sigma (input_b - mu) [Es]
    sens_q: Tensor  # sensory q [Es, 2N] = (w | w erev) in the post neuron's columns
    rec_pre: Tensor  # recurrent pre_sigma [N, Er]
    rec_bias: Tensor  # recurrent -sigma mu [Er]
    rec_q: Tensor  # recurrent q [Er, 2N]
    leak: Tensor  # leak [G | I] = [gleak | gleak vleak] [2N]
    neg_inv_cm2: Tensor  # -1/cm twice [2N]
    neg_inv_cm: Tensor  # -1/cm [N]
    rec_qg: Tensor  # rec_q's G half [Er, N], contiguous
    rec_qi: Tensor  # rec_q's I half [Er, N], contiguous
    leak_s: Tensor  # exact: leak x neg_inv_cm2 ([G | I] scaled by -1/cm: I / G unchanged, decay exp(G dt))
    sens_q_s: Tensor  # exact: sens_q x neg_inv_cm2
    rec_q_s: Tensor  # exact: rec_q x neg_inv_cm2
    grid_w: Tensor  # shared dt: the sensory affine map on the fan-out grid [K, F] (empty slots 0) ...
    grid_b: Tensor  # ... x_f grid_w + grid_b = sigma (input_w x_f + input_b - mu) [K, F]
    grid_q: Tensor  # shared dt: the grid's q, scaled [K F, 2(N+1)] (neuron N: the constant 1)
    shared_leak: Tensor  # shared dt: the scaled leak of N+1 neurons [2(N+1)]
    shared_rec_pre: Tensor  # shared dt: recurrent pre_sigma with -sigma mu as an extra row [N+1, Er]
    shared_rec_q: Tensor  # shared dt: recurrent q, scaled [Er, 2(N+1)]


def eq8_state(x0: Tensor, g: Tensor, i: Tensor, gc: Tensor, ic: Tensor, neg_t_over_cm: Tensor) -> Tensor:
    """CfC paper Eq. 8 per channel, conductance-weighted over a neuron's channels (module docstring).

    ``x~(t) = (i + e^{-g t / cm} (x0 gc - ic)) / g`` with ``g = sum_k G_k``, ``i = sum_k G_k E_k``,
    ``gc = sum_k G_k c_k``, ``ic = sum_k G_k c_k E_k``. All ``[B, N]`` except
    ``neg_t_over_cm = -t / cm`` (broadcastable); t is the time since x0; g > 0 (the leak
    conductance is clamped at 1e-30: a neuron without conductance keeps x0).
    """
    # i - e (ic - x0 gc) as two addcmul: five ops in all
    return (
        torch.addcmul(i, torch.exp(g * neg_t_over_cm), torch.addcmul(ic, x0, gc, value=-1.0), value=-1.0) / g
    )


@script
def exact_update(
    v: Tensor,
    g0: Tensor,
    i0: Tensor,
    neg_h_over_cm: Optional[Tensor],
    pre_sigma: Tensor,
    neg_sigma_mu: Tensor,
    q_g: Tensor,
    q_i: Tensor,
    substeps: int,
) -> Tensor:
    """One step of Corollary 1 on the E present synapses, recurrent activations re-evaluated
    ``substeps`` times. v ``[B, N]``; g0 / i0 ``[B, N]`` leak + sensory conductance / current;
    synapse e (pre i -> post j) enters through pre_sigma ``[N, E]`` (sigma_e in row i),
    neg_sigma_mu ``[E]``, q_g and q_i ``[E, N]`` (w_e and w_e erev_e in column j).
    ``neg_h_over_cm = -h / cm`` ``[B, N]`` (h = dt / substeps); None: g0, i0, q_g and q_i are already
    scaled by ``-h / cm`` (a dt shared by all rows): G and I arrive as -G h/cm and -I h/cm, whose
    ratio is still I / G, one multiplication fewer per evaluation."""
    for _ in range(substeps):
        s = torch.mm(v, pre_sigma).add_(neg_sigma_mu).sigmoid_()
        g = torch.mm(s, q_g).add_(g0)
        mean = torch.mm(s, q_i).add_(i0).div_(g)
        v = torch.lerp(mean, v, torch.exp(g if neg_h_over_cm is None else g * neg_h_over_cm))
    return v


@script
def approx_update(
    v: Tensor,
    x0: Tensor,
    neg_t_over_cm: Tensor,
    base: Tensor,
    base_c: Tensor,
    pre_sigma: Tensor,
    neg_sigma_mu: Tensor,
    q: Tensor,
) -> Tensor:
    """Eq. 8 at ``-t / cm`` ``[B, N]`` (t seconds since x0 ``[B, N]``), recurrent presynaptic
    signals v ``[B, N]``; base / base_c ``[B, 2N]`` leak + sensory [G | I] and complement-weighted
    [G c | I c]; synapses as in :func:`exact_update`, q ``[E, 2N]`` = [q_g | q_i]."""
    s = torch.mm(v, pre_sigma).add_(neg_sigma_mu).sigmoid_()
    g, i = torch.mm(s, q).add_(base).chunk(2, 1)
    gc, ic = torch.mm(torch.addcmul(s, s, s, value=-1.0), q).add_(base_c).chunk(2, 1)  # weights s (1 - s)
    return eq8_state(x0, g, i, gc, ic, neg_t_over_cm)


@script
def exact_sequence(
    v: Tensor,
    gi0: Tensor,
    neg_h_over_cm: Optional[Tensor],
    pre_sigma: Tensor,
    neg_sigma_mu: Tensor,
    q_g: Tensor,
    q_i: Tensor,
    substeps: int,
) -> Tensor:
    """:func:`exact_update` over gi0 ``[B, L, 2N]`` (= [g0 | i0] per step) with ``-h / cm``
    ``[L, B, N]`` (or None: everything pre-scaled) -> states ``[L, B, N]``."""
    states: List[Tensor] = []
    g0, i0 = gi0.chunk(2, 2)
    if neg_h_over_cm is None:  # (one substep at a shared dt runs in exact_shared instead)
        for bg, bi in zip(g0.unbind(1), i0.unbind(1)):
            v = exact_update(v, bg, bi, None, pre_sigma, neg_sigma_mu, q_g, q_i, substeps)
            states.append(v)
    else:
        for bg, bi, nh in zip(g0.unbind(1), i0.unbind(1), neg_h_over_cm.unbind(0)):
            v = exact_update(v, bg, bi, nh, pre_sigma, neg_sigma_mu, q_g, q_i, substeps)
            states.append(v)
    return torch.stack(states)


@script
def exact_shared(v: Tensor, gi0: Tensor, pre_sigma: Tensor, q: Tensor, dt: float) -> Tensor:
    """The exact kernel at one dt for all rows and steps, one substep, on :class:`Constants`
    ``shared_rec_pre`` / ``shared_rec_q``: v ``[B, N+1]`` with v[:, N] = 1 (its row of pre_sigma
    holds -sigma mu, so one product gives sigma (v - mu)); gi0 ``[L, B, 2(N+1)]`` the per-step
    leak + sensory [-G h/cm | -I h/cm], contiguous -> states ``[L, B, N+1]`` (column N stays 1).
    Per step: one product for the activations, one for [G | I] with its bias and q scaled by dt
    (``alpha``: a runtime value, so TorchScript keeps ``addmm`` whole instead of decomposing it
    into ``mm`` + ``add``, which it does when beta and alpha are constants, e.g. once frozen)."""
    states: List[Tensor] = []
    for base in gi0.unbind(0):
        g, i = torch.addmm(base, torch.mm(v, pre_sigma).sigmoid_(), q, alpha=dt).chunk(2, 1)
        v = torch.lerp(i.div(g), v, torch.exp(g))
        states.append(v)
    return torch.stack(states)


@script
def approx_sequence(
    v: Tensor,
    x0: Tensor,
    gi0: Tensor,
    gic0: Tensor,
    neg_t_over_cm: Tensor,
    pre_sigma: Tensor,
    neg_sigma_mu: Tensor,
    q: Tensor,
) -> Tensor:
    """:func:`approx_update` over gi0 / gic0 ``[B, L, 2N]`` and ``-t / cm`` ``[L, B, N]`` (t: seconds
    since x0 at the end of every step) -> states ``[L, B, N]``."""
    states: List[Tensor] = []
    for base, base_c, nt in zip(gi0.unbind(1), gic0.unbind(1), neg_t_over_cm.unbind(0)):
        v = approx_update(v, x0, nt, base, base_c, pre_sigma, neg_sigma_mu, q)
        states.append(v)
    return torch.stack(states)


@script
def input_error(x: Tensor, times: Optional[Tensor], hidden: Optional[Tensor] = None) -> Tuple[int, float]:
    """Validation with two reductions: (0 ok | 1 non-finite x | 2 times not finite and > 0 |
    3 non-finite hidden, the shared value of ``times`` or -1.0 if it varies; None counts as 1.0).
    The sum of x and hidden is accumulated in float64, so finite fp32 values cannot overflow it."""
    if x.dtype == torch.float64:
        finite = bool(torch.isfinite(x).all())
        if finite and hidden is not None:
            if not bool(torch.isfinite(hidden).all()):
                return 3, -1.0
    else:
        total = x.sum(dtype=torch.float64)
        if hidden is not None:
            total = total + hidden.sum(dtype=torch.float64)
        finite = math.isfinite(float(total))
        if not finite and hidden is not None:
            if math.isfinite(float(x.sum(dtype=torch.float64))):
                return 3, -1.0
    if not finite:
        return 1, -1.0
    if times is None:
        return 0, 1.0
    lo, hi = torch.aminmax(times)
    low, high = float(lo), float(hi)
    if not (low > 0.0 and high < math.inf):
        return 2, -1.0
    return 0, low if low == high else -1.0


@script
def exact_shared_sequence(
    x: Tensor, hidden: Tensor, c: Constants, output_w: Tensor, output_b: Tensor, shared: float
) -> Tuple[Tensor, Tensor]:
    """The exact method over a sequence at one shared dt ``shared`` (one substep): the sensory
    activations of all steps as one broadcast affine map on the fan-out grid and one sigmoid (no
    one-hot product), their [G | I] with the leak as one product scaled by dt, laid out step-major
    so that each step's bias is contiguous, then :func:`exact_shared` -> (y ``[B, L, M]``, hidden)."""
    batch, length, features = x.size(0), x.size(1), x.size(2)
    n = c.neg_inv_cm.size(0)
    x_steps = x.transpose(0, 1).reshape(length * batch, 1, features)  # rows in (step, batch) order
    s = torch.addcmul(c.grid_b, x_steps, c.grid_w).sigmoid_().view(length * batch, -1)
    gi0 = torch.addmm(c.shared_leak, s, c.grid_q, beta=shared, alpha=shared).view(length, batch, 2 * n + 2)
    v = torch.cat([hidden, torch.ones(batch, 1, dtype=hidden.dtype, device=hidden.device)], 1)
    states = exact_shared(v, gi0, c.shared_rec_pre, c.shared_rec_q, shared)
    y = torch.addcmul(output_b, states[:, :, : output_w.size(0)], output_w).transpose(0, 1)
    return y, states[-1][:, :n].contiguous()


@script
def closed_form_sequence(
    x: Tensor,
    hidden: Tensor,
    timespans: Optional[Tensor],
    c: Constants,
    output_w: Tensor,
    output_b: Tensor,
    exact: bool,
    substeps: int,
) -> Tuple[Tensor, Tensor, int]:
    """Either method over a sequence: x ``[B, L, F]``, hidden ``[B, H]``, timespans ``[B, L]``
    seconds or None (1.0), c = :meth:`ClosedFormLTC._derive` -> (y ``[B, L, M]``, hidden ``[B, H]``,
    error code of :func:`input_error`; the outputs are meaningless unless it is 0).

    The input-only terms (leak + sensory [G | I], the input map folded into the sensory constants)
    are computed for all steps at once; with one dt for all rows and steps (>= 1 us) and one
    substep the exact method takes :func:`exact_shared_sequence`."""
    error, shared = input_error(x, timespans, hidden)
    batch, length, features = x.size(0), x.size(1), x.size(2)
    n = c.neg_inv_cm.size(0)
    if exact and shared >= 1e-6 and substeps == 1:
        y, last = exact_shared_sequence(x, hidden, c, output_w, output_b, shared)
        return y, last, error
    s = torch.mm(x.reshape(batch * length, features), c.sens_pre).add_(c.sens_bias).sigmoid_()
    if exact and shared >= 1e-6:  # several substeps at one dt: the -1/cm-scaled constants times h
        h = shared / float(substeps)
        gi0 = torch.addmm(c.leak_s, s, c.sens_q_s, beta=h, alpha=h).view(batch, length, 2 * n)
        q = c.rec_q_s * h
        states = exact_sequence(hidden, gi0, None, c.rec_pre, c.rec_bias, q[:, :n], q[:, n:], substeps)
        return (
            torch.addcmul(output_b, states[:, :, : output_w.size(0)], output_w).transpose(0, 1),
            states[-1],
            error,
        )
    gi0 = torch.mm(s, c.sens_q).add_(c.leak).view(batch, length, 2 * n)
    if timespans is None:
        dt = torch.ones(length, batch, 1, dtype=x.dtype, device=x.device)
    else:
        dt = timespans.transpose(0, 1).unsqueeze(2).to(x.dtype)
    if exact:
        states = exact_sequence(
            hidden,
            gi0,
            dt * (c.neg_inv_cm / float(substeps)),
            c.rec_pre,
            c.rec_bias,
            c.rec_qg,
            c.rec_qi,
            substeps,
        )
        last = states[-1]
    else:
        gic0 = gi0 - torch.mm(s * s, c.sens_q).view(batch, length, 2 * n)
        x0 = hidden[:, n : 2 * n]
        elapsed = torch.cumsum(dt, 0) + hidden[:, 2 * n :]  # [L, B, 1] seconds since x0
        states = approx_sequence(
            hidden[:, :n], x0, gi0, gic0, elapsed * c.neg_inv_cm, c.rec_pre, c.rec_bias, c.rec_q
        )
        last = torch.cat([states[-1], x0, elapsed[-1]], dim=1)
    return torch.addcmul(output_b, states[:, :, : output_w.size(0)], output_w).transpose(0, 1), last, error


@script
def closed_form_step(
    x: Tensor,
    hidden: Tensor,
    dt: Tensor,
    c: Constants,
    output_w: Tensor,
    output_b: Tensor,
    exact: bool,
    substeps: int,
    check: bool = True,
) -> Tuple[Tensor, Tensor, int]:
    """One step of either method as a single scripted call (batch-1 latency): x ``[B, F]``, hidden
    ``[B, H]``, dt ``[B]`` seconds, c = :meth:`ClosedFormLTC._derive` -> (y ``[B, M]``, hidden,
    error code of :func:`input_error`, 0 without ``check``)."""
    error = input_error(x, dt, hidden)[0] if check else 0
    s = torch.mm(x, c.sens_pre).add_(c.sens_bias).sigmoid_()
    if dt.dtype != x.dtype:
        dt = dt.to(x.dtype)
    dt = dt.unsqueeze(1)
    n = c.neg_inv_cm.size(0)
    if exact and substeps == 1:  # [G | I] scaled by -1/cm: the sensory, then the recurrent product
        recurrent = torch.addmm(c.rec_bias, hidden, c.rec_pre).sigmoid_()
        g, i = torch.addmm(c.leak_s, s, c.sens_q_s).addmm_(recurrent, c.rec_q_s).chunk(2, 1)
        state = torch.lerp(i.div(g), hidden, torch.exp(g * dt))
    else:
        base = torch.mm(s, c.sens_q).add_(c.leak)
        if exact:
            g0, i0 = base.chunk(2, 1)
            state = exact_update(
                hidden,
                g0,
                i0,
                dt * (c.neg_inv_cm / float(substeps)),
                c.rec_pre,
                c.rec_bias,
                c.rec_qg,
                c.rec_qi,
                substeps,
            )
        else:
            x0 = hidden[:, n : 2 * n]
            elapsed = hidden[:, 2 * n :] + dt
            v = approx_update(
                hidden[:, :n],
                x0,
                elapsed * c.neg_inv_cm,
                base,
                base - torch.mm(s * s, c.sens_q),
                c.rec_pre,
                c.rec_bias,
                c.rec_q,
            )
            state = torch.cat([v, x0, elapsed], dim=1)
    return torch.addcmul(output_b, state[:, : output_w.size(0)], output_w), state, error
