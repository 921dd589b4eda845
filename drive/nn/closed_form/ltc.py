"""Closed-form LTC: a trained LTC run without an ODE solver (docs/closed_form.md).

Start from the LTC in conductance form (LTC paper Eq. 1; written out in :mod:`drive.nn.ltc`, whose
symbols are used here: s_ij the recurrent and s_fj the sensory synapses' sigmoid activations).
Write it as a sum over "channels" k of one neuron (the leak and every synapse):
``cm dv/dt = sum_k G_k (E_k - v)`` with conductance G_k (gleak, or w s) and reversal E_k (vleak,
or erev). With the presynaptic activations s held constant the ODE is linear,
``dv/dt = -a v + b`` with ``a = G / cm``, ``b = I / cm``, ``G = sum_k G_k``, ``I = sum_k G_k E_k``.

``exact`` (closed-form appendix, Theorem 1 / Corollary 1 for the conductance LTC): over one step of
elapsed time dt the activations are held at their values at the start of the step (piecewise-constant
input: exact for the sensory synapses, a zero-order hold for the recurrent ones) and the linear ODE
is solved exactly::

    v(t + dt) = e^{-a dt} (v(t) - b/a) + b/a = lerp(I/G, v(t), e^{-G dt / cm})        (Corollary 1)

where b/a = I/G is a conductance-weighted mean of reversal potentials (bounded, so nothing cancels
as a -> 0; the leak conductance and the capacitance are clamped at 1e-30). ``substeps`` > 1
re-evaluates the recurrent activations within a step (sensory ones stay exact); the error to the
true ODE shrinks as dt / substeps -> 0.

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

Speed (CPU inference is dispatch bound: ops on [16, 19] tensors cost their call, not their
arithmetic): at one shared dt the input-only terms of all steps are one broadcast affine map on the
sensory fan-out grid, one in-place sigmoid and one product; the sequential loop is a scripted kernel
of seven ops per step (mm, sigmoid_, addmm, chunk, div, exp, lerp: the constants are scaled by
-1 / cm, which leaves I / G unchanged, and dt enters as the product's alpha); validation is two
reductions inside the same scripted call. In eager inference (grad disabled) the constants derived
from the parameters are cached and rebuilt when a parameter changes (version or storage), so a
batch-1 ``step`` is one scripted call of 15 tensor ops. A scripted module re-derives them on every
call (TorchScript cannot read tensor versions) unless frozen, as every export runtime does.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch
from torch import Tensor, nn

from drive.nn.checks import check_hidden, check_step
from drive.nn.closed_form.scripted import Constants, closed_form_sequence, closed_form_step, input_error
from drive.nn.contract import RecurrentModule
from drive.nn.ltc import CELL_PARAMETERS, INIT_RANGES, MAPPING_PARAMETERS, kernels, register_synapses
from drive.nn.registry import register
from drive.nn.wiring import Wiring, as_wiring, check_wiring_buffers

__all__ = ["ClosedFormLTC", "METHODS", "PARAMETER_NAMES"]

METHODS = ("exact", "approx")
PARAMETER_NAMES = CELL_PARAMETERS + MAPPING_PARAMETERS  # the LTC's, under the same names


def _with_constant_neuron(q: Tensor) -> Tensor:
    """[G | I] columns ``[E, 2N]`` -> ``[E, 2(N+1)]``: a zero column for the constant neuron N after
    each half."""
    n = q.size(1) // 2
    zero_col = torch.zeros(q.size(0), 1, dtype=q.dtype, device=q.device)
    return torch.cat([q[:, :n], zero_col, q[:, n:], zero_col], 1)


@register(
    "closed_form_ltc",
    aliases=("drive.nn.closed_form.ClosedFormLTC", "drive.nn.closed_form.ltc.ClosedFormLTC"),
)
class ClosedFormLTC(RecurrentModule):
    """An LTC evaluated in closed form (``method`` "exact" or "approx"; module docstring).

    Args:
        wiring: :class:`drive.nn.wiring.Wiring` or its JSON dict (N neurons, F inputs, M motors).
        method: "exact" (Corollary 1 per step, hidden ``[B, N]``) or "approx" (CfC Eq. 8,
            hidden ``[B, 2N + 1]`` = v, x0, seconds since x0).
        substeps: exact only: recurrent activations re-evaluated this many times per step.

    Parameters carry the LTC's names and *effective* values (set by :func:`convert`); only the
    wiring's synapses are evaluated (entries of absent synapses are ignored). A module built directly
    starts from the LTC's initial ranges (drive.nn.ltc.INIT_RANGES, as ncps's LTCCell) with erev = the
    wiring's polarity.
    ``forward(x[B, L, F], hidden=None, timespans=None[B, L] seconds) -> (y[B, L, M], hidden)``.
    """

    def __init__(self, wiring: Any, method: str = "exact", substeps: int = 1) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if int(substeps) < 1 or (method == "approx" and int(substeps) != 1):
            raise ValueError(f"substeps must be >= 1 (and 1 for approx), got {substeps}")
        wiring = as_wiring(wiring)
        n, f, m = wiring.units, wiring.input_dim, wiring.output_dim
        # the kernels validate the values in the same call (input_error): the contract checks shapes;
        # check_values off skips step's value checks (forward's reductions also pick its kernel: they run)
        super().__init__(f, m, n if method == "exact" else 2 * n + 1, kernel_checks=True)
        self.wiring: Wiring = wiring
        self.method: str = method
        self.exact: bool = method == "exact"
        self.substeps: int = int(substeps)
        self.units: int = n
        polarity = torch.as_tensor(self.wiring.adjacency, dtype=torch.float32)
        sensory_polarity = torch.as_tensor(self.wiring.sensory_adjacency, dtype=torch.float32)
        self.register_buffer("mask", polarity.abs())
        self.register_buffer("sensory_mask", sensory_polarity.abs())
        register_synapses(self, "syn", polarity)
        register_synapses(self, "sens", sensory_polarity)
        # the shared-dt kernel's sensory grid [K, F]: synapse e of input f in slot (rank of e among f's
        # synapses, f); K = the largest fan-out (slots past an input's fan-out stay empty)
        pre = sensory_polarity.ne(0).nonzero()[:, 0]
        fanout = torch.bincount(pre, minlength=f)
        first = torch.cumsum(fanout, 0) - fanout
        self.fanout: int = max(int(fanout.max()), 1) if pre.numel() else 1
        rank = torch.arange(pre.numel()) - first[pre]
        self.register_buffer("sens_slot", rank * f + pre, persistent=False)

        def init(name: str, mask: Tensor) -> None:  # the LTC's range of the effective value (INIT_RANGES)
            value = torch.empty(mask.shape).uniform_(*INIT_RANGES[name])
            self.register_parameter(name, nn.Parameter(value * mask))  # absent synapses 0

        for name in ("gleak", "vleak", "cm"):
            init(name, torch.ones(n))
        for name in ("w", "sigma", "mu"):
            init(name, self.mask)
        self.erev = nn.Parameter(polarity.clone())
        for name in ("sensory_w", "sensory_sigma", "sensory_mu"):
            init(name, self.sensory_mask)
        self.sensory_erev = nn.Parameter(sensory_polarity.clone())
        self.input_w = nn.Parameter(torch.ones(f))
        self.input_b = nn.Parameter(torch.zeros(f))
        self.output_w = nn.Parameter(torch.ones(m))
        self.output_b = nn.Parameter(torch.zeros(m))
        self._cache = []
        self._cache_key = []

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``ClosedFormLTC(**m.config())`` rebuilds the architecture."""
        return {"wiring": self.wiring.to_dict(), "method": self.method, "substeps": self.substeps}

    def effective_parameters(self) -> Dict[str, Tensor]:
        """The values the closed form uses, under the LTC's names (absent synapses masked to 0)."""
        out = {name: getattr(self, name) for name in PARAMETER_NAMES}
        for name in ("w", "sigma", "mu", "erev"):
            out[name] = out[name] * self.mask
        for name in ("sensory_w", "sensory_sigma", "sensory_mu", "sensory_erev"):
            out[name] = out[name] * self.sensory_mask
        return out

    def _load_from_state_dict(
        self, state_dict: Dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        check_wiring_buffers(self, state_dict, prefix, ("mask", "sensory_mask"))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # -- constants derived from the parameters ---------------------------------------------------
    def _synapses(
        self,
        sigma: Tensor,
        mu: Tensor,
        w: Tensor,
        erev: Tensor,
        flat: Tensor,
        pre_onehot: Tensor,
        post_onehot: Tensor,
    ) -> List[Tensor]:
        """[pre_sigma [rows, E], -sigma mu [E], q [E, 2N] = (w | w erev) in the post neuron's columns]."""
        sig = sigma.flatten().index_select(0, flat)
        qg = post_onehot * w.flatten().index_select(0, flat).unsqueeze(1)
        qi = qg * erev.flatten().index_select(0, flat).unsqueeze(1)
        return [pre_onehot * sig, -sig * mu.flatten().index_select(0, flat), torch.cat([qg, qi], 1)]

    def _derive(self, sequence: bool = True) -> Constants:
        """The :class:`~drive.nn.closed_form.scripted.Constants` of the parameters (field by field there).

        The exact method adds [G | I] scaled by -1/cm (``leak_s``, ``sens_q_s``, ``rec_q_s``), whose
        ratio I / G is unchanged, so that a step's decay is ``exp(G dt)``; for a sequence (a single
        step does not use them) also the exact kernel at one shared dt
        (``closed_form.scripted.exact_shared``), scaled alike, on [G | I] of N+1 neurons: neuron N is a
        constant 1 that carries the recurrent -sigma mu term through the product (no synapse reaches
        it and its leak G and I are equal, so its closed-form value is exactly 1 at every step);
        ``grid_w`` / ``grid_b`` are the sensory affine map on the grid ``[K, F]`` (slot (k, f):
        input f's k-th synapse, ``sens_slot``; empty slots 0). Fields not derived hold an empty tensor.

        The leak conductance is clamped at 1e-30 (the kernels divide by the total conductance), and
        so is the capacitance (``positivity: clip`` trains some to 0; their neurons then sit at their
        equilibrium I / G at once, as the ODE's solver has them, instead of turning to NaN)."""
        sens = self._synapses(
            self.sensory_sigma,
            self.sensory_mu,
            self.sensory_w,
            self.sensory_erev,
            self.sens_flat,
            self.sens_pre_onehot,
            self.sens_post_onehot,
        )
        rec = self._synapses(
            self.sigma, self.mu, self.w, self.erev, self.syn_flat, self.syn_pre_onehot, self.syn_post_onehot
        )
        gleak = self.gleak.clamp_min(1e-30)
        neg_inv_cm = -1.0 / self.cm.clamp_min(1e-30)  # a neuron without capacitance: v = I / G at once
        n = self.units
        sens_pre = self.input_w.unsqueeze(1) * sens[0]
        sens_bias = torch.addmv(sens[1], sens[0].t(), self.input_b)
        leak, neg_inv_cm2 = torch.cat([gleak, gleak * self.vleak]), torch.cat([neg_inv_cm, neg_inv_cm])
        rec_qg, rec_qi = rec[2][:, :n].contiguous(), rec[2][:, n:].contiguous()
        none = gleak[:0]
        leak_s = sens_q_s = rec_q_s = none
        grid_w = grid_b = grid_q = shared_leak = shared_rec_pre = shared_rec_q = none
        if self.exact:
            leak_s, sens_q_s, rec_q_s = leak * neg_inv_cm2, sens[2] * neg_inv_cm2, rec[2] * neg_inv_cm2
            if sequence:
                grid_w, grid_b, grid_q, shared_leak, shared_rec_pre, shared_rec_q = self._shared_dt(
                    sens_pre, sens_bias, leak_s, sens_q_s, rec[0], rec[1], rec_q_s
                )
        return Constants(
            sens_pre,
            sens_bias,
            sens[2],
            rec[0],
            rec[1],
            rec[2],
            leak,
            neg_inv_cm2,
            neg_inv_cm,
            rec_qg,
            rec_qi,
            leak_s,
            sens_q_s,
            rec_q_s,
            grid_w,
            grid_b,
            grid_q,
            shared_leak,
            shared_rec_pre,
            shared_rec_q,
        )

    def _shared_dt(
        self,
        sens_pre: Tensor,
        sens_bias: Tensor,
        leak_s: Tensor,
        sens_q_s: Tensor,
        rec_pre: Tensor,
        rec_neg_sm: Tensor,
        rec_q_s: Tensor,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The exact kernel's constants at one shared dt (:meth:`_derive`): the sensory map on the
        fan-out grid (``grid_w``, ``grid_b``, ``grid_q``) and the tables of N+1 neurons, the last a
        constant 1 (``shared_leak``, ``shared_rec_pre``, ``shared_rec_q``)."""
        n = self.units
        slots = self.fanout * self.input_size
        a = sens_pre.sum(0)  # one non-zero per column of the [F, Es] one-hot map: its input's sigma input_w
        grid = [
            torch.zeros(slots, dtype=a.dtype, device=a.device).index_copy(0, self.sens_slot, t)
            for t in (a, sens_bias)
        ]
        grid_w, grid_b = (
            grid[0].view(self.fanout, self.input_size),
            grid[1].view(self.fanout, self.input_size),
        )
        grid_q = torch.zeros(slots, 2 * n + 2, dtype=a.dtype, device=a.device).index_copy(
            0, self.sens_slot, _with_constant_neuron(sens_q_s)
        )
        minus_one = -torch.ones(1, dtype=leak_s.dtype, device=leak_s.device)  # constant neuron's G and I
        shared_leak = torch.cat([leak_s[:n], minus_one, leak_s[n:], minus_one])
        shared_rec_pre = torch.cat([rec_pre, rec_neg_sm.unsqueeze(0)])
        return grid_w, grid_b, grid_q, shared_leak, shared_rec_pre, _with_constant_neuron(rec_q_s)

    def _constants(self, sequence: bool = True) -> Constants:
        if torch.jit.is_scripting():
            return self._derive(sequence)
        return self._cached_constants()

    @torch.jit.unused
    def _cached_constants(self) -> Constants:
        """``_derive()``, cached in inference until a parameter changes (in place or its storage)."""
        if torch.is_grad_enabled() or torch.compiler.is_compiling() or torch.compiler.is_exporting():
            return self._derive()  # training, or traced by torch.export / torch.compile: no storage to key on
        key = [
            k for t in self._parameters.values() for k in (t.data_ptr(), t._version)
        ]  # not getattr: 10x faster
        if key != self._cache_key:
            self._cache, self._cache_key = self._derive(), key
        return self._cache

    # -- the recurrent-module contract (drive.nn.contract; the shape checks are the base's) -------
    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        """``x[B, L, F]``, hidden ``[B, H]``, elapsed seconds ``ts[B, L, 1]`` -> (``y[B, L, M]``, hidden)."""
        if not torch.jit.is_scripting():
            if self.exact and kernels.use_kernels(x, self.units) and not self._needs_grad(x, hidden):
                return self._sequence_fused(x, hidden, ts)
        y, last, error = closed_form_sequence(
            x, hidden, ts[:, :, 0], self._constants(), self.output_w, self.output_b, self.exact, self.substeps
        )
        self._raise(error)
        return y, last

    @torch.jit.unused
    def _needs_grad(self, x: Tensor, hidden: Tensor) -> bool:
        if not torch.is_grad_enabled():
            return False
        return x.requires_grad or hidden.requires_grad or any(p.requires_grad for p in self.parameters())

    @torch.jit.unused
    def _sequence_fused(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        """The exact method in one Triton kernel (:func:`drive.nn.ltc.kernels.closed_form_solve`; CUDA,
        inference): the input terms for all steps at once, then the recurrence with the state and
        the synapse tables in registers, instead of ~6 launches per step and substep."""
        timespans = ts[:, :, 0]
        self._raise(input_error(x, timespans, hidden)[0])
        c = self._constants()
        batch, length, n = x.size(0), x.size(1), self.units
        s = torch.mm(x.reshape(batch * length, self.input_size), c.sens_pre).add_(c.sens_bias).sigmoid_()
        gi0 = torch.addmm(c.leak, s, c.sens_q).view(batch, length, 2 * n).transpose(0, 1)
        neg_h_over_cm = timespans.transpose(0, 1).unsqueeze(2) * (c.neg_inv_cm / float(self.substeps))
        synapses = (self.sigma, self.mu, self.w, self.erev, self.mask)
        return kernels.closed_form_solve(
            hidden, gi0, neg_h_over_cm, synapses, (self.output_w, self.output_b), self.substeps
        )

    @torch.jit.export
    def step(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """One step in one scripted call: ``x[B, F]``, hidden ``[B, H]``, dt ``[B]`` seconds
        -> (``y[B, M]``, hidden)."""
        if not torch.jit.is_scripting():
            if torch.is_autocast_enabled(x.device.type):
                return self._step_fp32(x, hidden, dt)
        check_step(x, dt, self.input_size)
        check_hidden(hidden, x, self.state_size)
        y, state, error = closed_form_step(
            x,
            hidden,
            dt,
            self._constants(False),
            self.output_w,
            self.output_b,
            self.exact,
            self.substeps,
            self.check_values,
        )
        self._raise(error)
        return y, state

    def _raise(self, error: int) -> None:
        """Errors found by :func:`input_error` inside the kernel call (one call, no separate checks)."""
        if error == 1:
            raise ValueError("ClosedFormLTC input contains non-finite values")
        if error == 2:
            raise ValueError("elapsed time (timespans / dt) must be finite and > 0")
        if error == 3:
            raise ValueError(
                "hidden state contains NaN or infinite values (start from initial_state, "
                "or reset the rows that diverged)"
            )
