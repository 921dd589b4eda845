"""Closed-form LTC: a trained LTC run without an ODE solver (docs/closed_form.md).

The LTC in conductance form (REFERENCE.md §3; LTC paper Eq. 1) for post-synaptic neuron j:

    cm_j dv_j/dt = gleak_j (vleak_j - v_j) + sum_i w_ij s_ij (erev_ij - v_j)
                                           + sum_f sensory_w_fj s_fj (sensory_erev_fj - v_j),
    s_ij = sigmoid(sigma_ij (v_i - mu_ij)),  s_fj = sigmoid(sensory_sigma_fj (u_f - mu_fj)),
    u = input_w x + input_b,                 y = output_w v[:M] + output_b.

Write it as a sum over "channels" k of one neuron (the leak and every synapse):
``cm dv/dt = sum_k G_k (E_k - v)`` with conductance G_k (gleak, or w s) and reversal E_k (vleak,
or erev). With the presynaptic activations s held constant the ODE is linear,
``dv/dt = -a v + b`` with ``a = G / cm``, ``b = I / cm``, ``G = sum_k G_k``, ``I = sum_k G_k E_k``.

``exact`` (closed-form appendix, Theorem 1 / Corollary 1 for the conductance LTC): over one step of
elapsed time dt the activations are held at their values at the start of the step (piecewise-constant
input: exact for the sensory synapses, a zero-order hold for the recurrent ones) and the linear ODE
is solved exactly::

    v(t + dt) = e^{-a dt} v(t) + b dt phi(a dt),  phi(z) = (1 - e^{-z}) / z = -expm1(-z) / z, phi(0) = 1,

which is Corollary 1's ``e^{-a dt} (v - b/a) + b/a`` rearranged so that a -> 0 is exact (v + b dt)
and a dt >> 1 has no cancellation. ``substeps`` > 1 re-evaluates the recurrent activations within a
step (sensory ones stay exact); the error to the true ODE shrinks as dt / substeps -> 0.

``approx`` (CfC paper Eq. 8 / Algorithm 1): no recursion in time; every neuron is the Eq. 8
expression of the time t since its initial state x0, evaluated at the presynaptic signals of time t.
Per channel k (CfC paper's symbols -> LTC parameters): w_tau = gleak/cm (Alg. 1's 1/tau),
f(I) = w s / cm (conductance rate), f(-I) = 1 - s = sigmoid(-sigma (v_pre - mu)) (Alg. 1's
complement), A = erev (the leak channel: f = 0, f(-I) = 1, A = vleak), and the channel's exponent is
the neuron's total rate a(t) = w_tau + sum_k f_k (Eq. 8's w_tau + f(I(t)) for one synapse)::

    x~_k(t) = (x0 - E_k) e^{-a(t) t} c_k + E_k,   c_leak = 1, c_synapse = 1 - s.

Algorithm 1 accumulates the per-synapse terms (``x^_i +=``); a literal sum counts x0 once per
synapse, so the terms are combined as the conductance-weighted mean ``x~ = sum_k G_k x~_k / G``: with
a constant input it tends to the exact equilibrium I/G, and since every c_k is in [0, 1] Lemma 1's
bound ``|x(t) - x~(t)| <= |x0 - A| e^{-w_tau t}`` holds for a neuron with one synapse whose reversal
equals vleak (Lemma 1's symmetry assumption). The hidden state therefore carries
``[v (N), x0 (N), t (1)]``; recurrent presynaptic signals are the neurons' values at the start of
the step (Alg. 1 feeds recorded LTC activity instead). The memory of x0 fades as e^{-w_tau t}.

The parameters are the LTC's *effective* values (positivity map and masks already applied), under the
LTC's names, so ``effective_parameters()`` of a converted module equals the source's.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from drive.nn.wiring import Wiring, as_wiring

__all__ = ["ClosedFormLTC", "convert", "exact_step", "eq8_state", "METHODS", "PARAMETER_NAMES"]

METHODS = ("exact", "approx")
NEURON_PARAMETERS = ("gleak", "vleak", "cm")
SYNAPSE_PARAMETERS = ("w", "sigma", "mu", "erev")
SENSORY_PARAMETERS = ("sensory_w", "sensory_sigma", "sensory_mu", "sensory_erev")
AFFINE_PARAMETERS = ("input_w", "input_b", "output_w", "output_b")
PARAMETER_NAMES = NEURON_PARAMETERS + SYNAPSE_PARAMETERS + SENSORY_PARAMETERS + AFFINE_PARAMETERS


def exact_step(v: Tensor, g_total: Tensor, i_total: Tensor, cm: Tensor, dt: Tensor) -> Tensor:
    """Exact solution of ``cm dv/dt = i_total - g_total v`` after ``dt`` (closed-form appendix,
    Corollary 1): ``e^{-a dt} v + b dt phi(a dt)``, ``a = g_total/cm``, ``b = i_total/cm``.

    Shapes broadcast (e.g. v, g_total, i_total ``[B, N]``, cm ``[N]``, dt ``[B, 1]``); g_total >= 0.
    """
    z = g_total / cm * dt
    positive = z > 0
    z_safe = torch.where(positive, z, torch.ones_like(z))
    phi = torch.where(positive, -torch.expm1(-z_safe) / z_safe, torch.ones_like(z))
    return v * torch.exp(-z) + i_total / cm * dt * phi


def eq8_state(
    x0: Tensor, g_total: Tensor, i_total: Tensor, g_comp: Tensor, i_comp: Tensor, cm: Tensor, t: Tensor
) -> Tensor:
    """CfC paper Eq. 8 per channel, conductance-weighted over a neuron's channels (module docstring).

    ``x~(t) = (i_total + e^{-(g_total/cm) t} (x0 g_comp - i_comp)) / g_total`` where
    ``g_comp = sum_k G_k c_k`` and ``i_comp = sum_k G_k c_k E_k``; a neuron with no conductance
    keeps x0. Shapes broadcast like :func:`exact_step`; t is the time since x0.
    """
    driven = g_total > 0
    g_safe = torch.where(driven, g_total, torch.ones_like(g_total))
    decay = torch.exp(-(g_total / cm) * t)
    return torch.where(driven, (i_total + decay * (x0 * g_comp - i_comp)) / g_safe, x0)


class ClosedFormLTC(nn.Module):
    """An LTC evaluated in closed form (``method`` "exact" or "approx"; module docstring).

    Args:
        wiring: :class:`drive.nn.wiring.Wiring` or its JSON dict (N neurons, F inputs, M motors).
        method: "exact" (Corollary 1 per step, hidden ``[B, N]``) or "approx" (CfC Eq. 8,
            hidden ``[B, 2N + 1]`` = v, x0, elapsed time).
        substeps: exact only: recurrent activations re-evaluated this many times per step.

    Parameters carry the LTC's names and effective values (set by :func:`convert`); a module built
    directly starts from the LTC's initial ranges (REFERENCE.md §3) with erev = wiring polarity.
    ``forward(x[B, L, F], hidden=None, timespans=None[B, L] seconds) -> (y[B, L, M], hidden)``.
    """

    def __init__(self, wiring: Any, method: str = "exact", substeps: int = 1) -> None:
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if int(substeps) < 1 or (method == "approx" and int(substeps) != 1):
            raise ValueError(f"substeps must be >= 1 (and 1 for approx), got {substeps}")
        self.wiring: Wiring = as_wiring(wiring)
        n, f, m = self.wiring.units, self.wiring.input_dim, self.wiring.output_dim
        self.method: str = method
        self.exact: bool = method == "exact"
        self.substeps: int = int(substeps)
        self.units: int = n
        self.input_size: int = f
        self.output_size: int = m
        self.state_size: int = n if self.exact else 2 * n + 1
        polarity = torch.as_tensor(self.wiring.adjacency, dtype=torch.float32)
        sensory_polarity = torch.as_tensor(self.wiring.sensory_adjacency, dtype=torch.float32)
        self.register_buffer("mask", polarity.abs())
        self.register_buffer("sensory_mask", sensory_polarity.abs())

        def uniform(shape: Tuple[int, ...], low: float, high: float) -> nn.Parameter:
            return nn.Parameter(torch.empty(shape).uniform_(low, high))

        self.gleak = uniform((n,), 0.001, 1.0)
        self.vleak = uniform((n,), -0.2, 0.2)
        self.cm = uniform((n,), 0.4, 0.6)
        self.w = nn.Parameter(torch.empty(n, n).uniform_(0.001, 1.0) * self.mask)
        self.sigma = uniform((n, n), 3.0, 8.0)
        self.mu = uniform((n, n), 0.3, 0.8)
        self.erev = nn.Parameter(polarity.clone())
        self.sensory_w = nn.Parameter(torch.empty(f, n).uniform_(0.001, 1.0) * self.sensory_mask)
        self.sensory_sigma = uniform((f, n), 3.0, 8.0)
        self.sensory_mu = uniform((f, n), 0.3, 0.8)
        self.sensory_erev = nn.Parameter(sensory_polarity.clone())
        self.input_w = nn.Parameter(torch.ones(f))
        self.input_b = nn.Parameter(torch.zeros(f))
        self.output_w = nn.Parameter(torch.ones(m))
        self.output_b = nn.Parameter(torch.zeros(m))

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``ClosedFormLTC(**m.config())`` rebuilds the architecture."""
        return {"wiring": self.wiring.to_dict(), "method": self.method, "substeps": self.substeps}

    def effective_parameters(self) -> Dict[str, Tensor]:
        """The values the closed form uses (masks applied), under the LTC's names."""
        out = {name: getattr(self, name) for name in PARAMETER_NAMES}
        out["w"] = self.w * self.mask
        out["sensory_w"] = self.sensory_w * self.sensory_mask
        return out

    # -- the two halves of the conductance sum -------------------------------------------------
    def _sensory(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Sensory channels of inputs ``x[..., F]`` -> (G, I, G_comp, I_comp) each ``[..., N]``."""
        u = x * self.input_w + self.input_b
        s = torch.sigmoid(self.sensory_sigma * (u.unsqueeze(-1) - self.sensory_mu))
        ws = s * (self.sensory_w * self.sensory_mask)
        g, i = ws.sum(-2), (ws * self.sensory_erev).sum(-2)
        if self.exact:
            return g, i, g, i
        wsc = ws * (1.0 - s)
        return g, i, wsc.sum(-2), (wsc * self.sensory_erev).sum(-2)

    def _advance(self, state: Tensor, sens: Tuple[Tensor, Tensor, Tensor, Tensor], dt: Tensor) -> Tensor:
        """One step of elapsed time ``dt[B]`` from hidden ``state[B, H]`` given sensory channels."""
        n = self.units
        w = self.w * self.mask
        w_erev = w * self.erev
        leak_i = self.gleak * self.vleak
        if self.exact:
            v = state
            h = (dt / float(self.substeps)).unsqueeze(-1)
            for _ in range(self.substeps):
                s = torch.sigmoid(self.sigma * (v.unsqueeze(-1) - self.mu))
                g = self.gleak + sens[0] + (s * w).sum(1)
                i = leak_i + sens[1] + (s * w_erev).sum(1)
                v = exact_step(v, g, i, self.cm, h)
            return v
        v, x0, t = state[:, :n], state[:, n : 2 * n], state[:, 2 * n :] + dt.unsqueeze(-1)
        s = torch.sigmoid(self.sigma * (v.unsqueeze(-1) - self.mu))
        ws = s * w
        wsc = ws * (1.0 - s)
        g = self.gleak + sens[0] + ws.sum(1)
        i = leak_i + sens[1] + (ws * self.erev).sum(1)
        gc = self.gleak + sens[2] + wsc.sum(1)
        ic = leak_i + sens[3] + (wsc * self.erev).sum(1)
        return torch.cat([eq8_state(x0, g, i, gc, ic, self.cm, t), x0, t], dim=1)

    def _readout(self, state: Tensor) -> Tensor:
        return state[:, : self.output_size] * self.output_w + self.output_b

    def _check_hidden(self, hidden: Tensor, batch: int) -> None:
        if hidden.dim() != 2 or hidden.shape[0] != batch or hidden.shape[1] != self.state_size:
            raise ValueError(f"ClosedFormLTC: hidden must be [B, {self.state_size}] for this method and batch")

    # -- the recurrent-module contract ---------------------------------------------------------
    def forward(
        self, x: Tensor, hidden: Optional[Tensor] = None, timespans: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """``x[B, L, F]``, hidden ``[B, H]`` or None, timespans ``[B, L]`` seconds (None: 1.0)
        -> (``y[B, L, M]``, hidden ``[B, H]``)."""
        if x.dim() != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"ClosedFormLTC: x must be [B, L, {self.input_size}]")
        if not bool(torch.isfinite(x).all()):
            raise ValueError("ClosedFormLTC: input has non-finite values")
        batch, length = x.shape[0], x.shape[1]
        if timespans is None:
            timespans = torch.ones(batch, length, dtype=x.dtype, device=x.device)
        if timespans.dim() != 2 or timespans.shape[0] != batch or timespans.shape[1] != length:
            raise ValueError("ClosedFormLTC: timespans must be [B, L]")
        if not bool(((timespans > 0) & torch.isfinite(timespans)).all()):
            raise ValueError("ClosedFormLTC: elapsed time must be finite and > 0")
        state = self.initial_state(batch).to(x.dtype) if hidden is None else hidden
        self._check_hidden(state, batch)
        g, i, gc, ic = self._sensory(x)
        outputs: List[Tensor] = []
        for k in range(length):
            state = self._advance(state, (g[:, k], i[:, k], gc[:, k], ic[:, k]), timespans[:, k].to(x.dtype))
            outputs.append(self._readout(state))
        return torch.stack(outputs, dim=1), state

    @torch.jit.export
    def step(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """One step: ``x[B, F]``, hidden ``[B, H]``, dt ``[B]`` seconds -> (``y[B, M]``, hidden)."""
        if x.dim() != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"ClosedFormLTC.step: x must be [B, {self.input_size}]")
        self._check_hidden(hidden, x.shape[0])
        if not bool(torch.isfinite(x).all()):
            raise ValueError("ClosedFormLTC.step: input has non-finite values")
        if dt.dim() != 1 or dt.shape[0] != x.shape[0] or not bool(((dt > 0) & torch.isfinite(dt)).all()):
            raise ValueError("ClosedFormLTC.step: dt must be [B], finite and > 0")
        state = self._advance(hidden, self._sensory(x), dt.to(x.dtype))
        return self._readout(state), state

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        """Zeros ``[batch, state_size]`` fp32 on the module's device (approx: x0 = 0 at t = 0)."""
        return torch.zeros(batch, self.state_size, device=self.gleak.device)


def convert(ltc: nn.Module, method: str = "exact", substeps: int = 1) -> ClosedFormLTC:
    """Closed-form copy of a trained LTC (``drive.nn.ltc.LTC``): same wiring, its effective
    parameter values (``ltc.effective_parameters()``), same device and dtype; the LTC is unchanged."""
    wiring = getattr(ltc, "wiring", None)
    if wiring is None:
        wiring = ltc.config()["wiring"]
    out = ClosedFormLTC(wiring, method=method, substeps=substeps)
    values = ltc.effective_parameters()
    missing = [name for name in PARAMETER_NAMES if name not in values]
    if missing:
        raise ValueError(f"convert: the LTC's effective_parameters() lacks {missing}")
    with torch.no_grad():
        for name in PARAMETER_NAMES:
            src = values[name].detach()
            dst = getattr(out, name)
            if src.shape != dst.shape:
                raise ValueError(f"convert: {name} has shape {tuple(src.shape)}, wiring expects {tuple(dst.shape)}")
            dst.data = src.clone().to(dst.device)
    ref = values["gleak"]
    return out.to(device=ref.device, dtype=ref.dtype)
