"""The LTC recurrent module (:class:`LTC`; the equations are :mod:`drive.nn.ltc`'s docstring).

Speed: everything that depends only on the inputs (the affine map, the sensory numerator and
denominator, cm/h) is computed for all time steps at once; the sequential unfold loop is the scripted
solver of :mod:`drive.nn.ltc.solver`, and in eager training its gradient is that module's
hand-written backward (``_FusedSolver``) instead of an autograd graph of ~2,000 tiny nodes. Scripted
modules differentiate the same solver with autograd. CUDA runs the Triton kernels of
:mod:`drive.nn.ltc.kernels` where they apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from drive.nn.contract import RecurrentModule
from drive.nn.ltc import kernels  # fused Triton kernels where they apply (CUDA)
from drive.nn.ltc.solver import _FusedSolver, fused_solver
from drive.nn.registry import Family, register
from drive.nn.wiring import Wiring, as_wiring, check_wiring_buffers, lane_keeping_ncp

__all__ = [
    "LTC",
    "DEFAULT_POSITIVITY",
    "NCPLTCOptions",
    "INIT_RANGES",
    "POSITIVE",
    "CELL_PARAMETERS",
    "MAPPING_PARAMETERS",
    "register_synapses",
]

# The cell's parameters (LTC Eq. 1, ncps's names) and the affine input / output maps around it.
CELL_PARAMETERS = ("gleak", "vleak", "cm", "w", "sigma", "mu", "erev")
CELL_PARAMETERS += ("sensory_w", "sensory_sigma", "sensory_mu", "sensory_erev")
MAPPING_PARAMETERS = ("input_w", "input_b", "output_w", "output_b")

# Init ranges of the effective (post-positivity) values, as in ncps / the authors' code.
INIT_RANGES: Dict[str, Tuple[float, float]] = {
    "gleak": (0.001, 1.0),
    "vleak": (-0.2, 0.2),
    "cm": (0.4, 0.6),
    "w": (0.001, 1.0),
    "sigma": (3.0, 8.0),
    "mu": (0.3, 0.8),
    "sensory_w": (0.001, 1.0),
    "sensory_sigma": (3.0, 8.0),
    "sensory_mu": (0.3, 0.8),
}
POSITIVE = ("gleak", "cm", "w", "sensory_w")


def _inverse_softplus(y: Tensor) -> Tensor:
    return y + torch.log(-torch.expm1(-y))


def register_synapses(module: nn.Module, prefix: str, mask: Tensor) -> None:
    """Index the present synapses of ``mask [rows, N]`` (non-zero entries, row-major) as buffers of
    ``module`` (derived from the wiring, not saved): ``<prefix>_pre`` / ``_post`` / ``_flat`` [E] (pre
    row, post column, flat index) and the one-hot incidence ``<prefix>_pre_onehot`` [rows, E] and
    ``<prefix>_post_onehot`` [E, N] (float32). The LTC and the closed-form LTC index synapses this way."""
    pre, post = mask.ne(0).nonzero(as_tuple=True)
    rows, cols = mask.shape
    module.register_buffer(prefix + "_pre", pre, persistent=False)
    module.register_buffer(prefix + "_post", post, persistent=False)
    module.register_buffer(prefix + "_flat", pre * cols + post, persistent=False)
    pre_onehot = F.one_hot(pre, rows).t().float().contiguous()
    module.register_buffer(prefix + "_pre_onehot", pre_onehot, persistent=False)
    module.register_buffer(prefix + "_post_onehot", F.one_hot(post, cols).float(), persistent=False)


# The papers' and ncps's positivity: w, cm and gleak used as they are and clipped at 0 after every
# optimizer step (drive.train.module does it; a bare LTC's user calls apply_constraints()).
DEFAULT_POSITIVITY = "clip"


@dataclass(frozen=True)
class NCPLTCOptions:
    """``ncp_ltc``: an LTC on the 19-neuron lane-keeping NCP wiring.

    Args:
        ode_unfolds: fused-solver unfolds per step (paper: 6).
        positivity: LTC positivity of w, cm, gleak: ``clip`` (after each optimizer step) or ``softplus``.
        wiring_seed: seed of the NCP wiring's random synapses.
    """

    ode_unfolds: int = 6
    positivity: str = DEFAULT_POSITIVITY
    wiring_seed: int = 22222


@register("ltc", aliases=("drive.nn.ltc.LTC",), family=Family("ncp_ltc", NCPLTCOptions))
class LTC(RecurrentModule):
    """LTC sequence module on a wiring (equations: :mod:`drive.nn.ltc`).

    Args:
        wiring: a ``Wiring`` (or its JSON dict); F = ``wiring.input_dim``, N = ``wiring.units``,
            M = ``wiring.output_dim``.
        input_size: optional check that it equals ``wiring.input_dim``.
        ode_unfolds: fused-solver steps per RNN step (the papers use 6).
        epsilon: added to the solver's denominator.
        positivity: "clip" (the default, :data:`DEFAULT_POSITIVITY`: w, sensory_w, cm, gleak used as
            they are; call ``apply_constraints()`` after every optimizer step) or "softplus" (they
            pass through softplus, positive without clipping).

    ``forward(x[B,L,F], hidden[B,N]=None, timespans[B,L]=None) -> (y[B,L,M], hidden[B,N])``;
    timespans are the elapsed seconds of each step (None = 1.0). Parameters are initialised so the
    effective values lie in ncps's ranges (``INIT_RANGES``); erev = the wiring's polarity.
    """

    def __init__(
        self,
        wiring: Union[Wiring, Dict[str, Any]],
        input_size: Optional[int] = None,
        ode_unfolds: int = 6,
        epsilon: float = 1e-8,
        positivity: str = DEFAULT_POSITIVITY,
    ) -> None:
        wiring = as_wiring(wiring)
        if input_size is not None and input_size != wiring.input_dim:
            raise ValueError(f"input_size={input_size} but the wiring has {wiring.input_dim} sensory inputs")
        if positivity not in ("softplus", "clip"):
            raise ValueError(f"positivity must be 'softplus' or 'clip', got {positivity!r}")
        if ode_unfolds < 1:
            raise ValueError(f"ode_unfolds must be >= 1, got {ode_unfolds}")
        super().__init__(wiring.input_dim, wiring.output_dim, wiring.units)
        self.wiring = wiring
        self.ode_unfolds: int = int(ode_unfolds)
        self.epsilon: float = float(epsilon)
        self.positivity: str = positivity
        self.softplus: bool = positivity == "softplus"
        n, f, m = wiring.units, wiring.input_dim, wiring.output_dim
        shapes = {
            "gleak": (n,),
            "vleak": (n,),
            "cm": (n,),
            "w": (n, n),
            "sigma": (n, n),
            "mu": (n, n),
            "sensory_w": (f, n),
            "sensory_sigma": (f, n),
            "sensory_mu": (f, n),
        }
        for name, shape in shapes.items():
            lo, hi = INIT_RANGES[name]
            value = torch.rand(shape) * (hi - lo) + lo
            if self.softplus and name in POSITIVE:
                value = _inverse_softplus(value)
            self.register_parameter(name, nn.Parameter(value))
        self.erev = nn.Parameter(torch.tensor(wiring.adjacency, dtype=torch.float32))
        self.sensory_erev = nn.Parameter(torch.tensor(wiring.sensory_adjacency, dtype=torch.float32))
        self.input_w = nn.Parameter(torch.ones(f))
        self.input_b = nn.Parameter(torch.zeros(f))
        self.output_w = nn.Parameter(torch.ones(m))
        self.output_b = nn.Parameter(torch.zeros(m))
        self.register_buffer("mask", torch.tensor(wiring.mask()))
        self.register_buffer("sensory_mask", torch.tensor(wiring.sensory_mask()))
        register_synapses(self, "syn", self.mask)
        register_synapses(self, "sens", self.sensory_mask)

    @classmethod
    def from_options(cls, features: int, options: NCPLTCOptions) -> "LTC":
        """The ``ncp_ltc`` family's cell for ``features`` inputs: the lane-keeping NCP."""
        return cls(
            lane_keeping_ncp(seed=options.wiring_seed, input_dim=features),
            input_size=features,
            ode_unfolds=options.ode_unfolds,
            positivity=options.positivity,
        )

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``LTC(**m.config())`` rebuilds the architecture."""
        return {
            "wiring": self.wiring.to_dict(),
            "input_size": self.input_size,
            "ode_unfolds": self.ode_unfolds,
            "epsilon": self.epsilon,
            "positivity": self.positivity,
        }

    def _load_from_state_dict(
        self, state_dict: Dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        check_wiring_buffers(self, state_dict, prefix, ("mask", "sensory_mask"))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _positive(self, p: Tensor) -> Tensor:
        return F.softplus(p) if self.softplus else p

    def effective_parameters(self) -> Dict[str, Tensor]:
        """The values the ODE uses: positivity applied; per-synapse entries of absent synapses are 0."""
        mask, smask = self.mask, self.sensory_mask
        return {
            "gleak": self._positive(self.gleak),
            "vleak": self.vleak,
            "cm": self._positive(self.cm),
            "w": self._positive(self.w) * mask,
            "sigma": self.sigma * mask,
            "mu": self.mu * mask,
            "erev": self.erev * mask,
            "sensory_w": self._positive(self.sensory_w) * smask,
            "sensory_sigma": self.sensory_sigma * smask,
            "sensory_mu": self.sensory_mu * smask,
            "sensory_erev": self.sensory_erev * smask,
            "input_w": self.input_w,
            "input_b": self.input_b,
            "output_w": self.output_w,
            "output_b": self.output_b,
        }

    @torch.no_grad()
    def apply_constraints(self) -> None:
        """Clip mode: project w, sensory_w, cm, gleak onto >= 0 (call after each optimizer step)."""
        if not self.softplus:
            for name in POSITIVE:
                getattr(self, name).clamp_(min=0.0)

    @torch.jit.unused
    @torch.no_grad()
    def calibrate_inputs(self, features: Tensor) -> None:
        """Data-dependent init of the sensory affine map ``u = input_w * x + input_b`` (LTC Eq. 1).

        features: ``[N, F]`` sample of the inputs. Feature f gets ``input_w = 1 / (std_f * sigma_f)``
        and ``input_b = mu_f - mean_f * input_w``, with ``mu_f``, ``sigma_f`` the mean centre and slope
        of its sensory synapses: one standard deviation of the feature moves its sigmoids' argument
        by about one, so the sample spans their working range instead of saturating them. A feature
        that does not vary keeps ``input_w`` and is centred. Only the parameters' values change.
        """
        x = features.reshape(-1, self.input_size).float()
        mean, std = x.mean(0), x.std(0)
        smask = self.sensory_mask.abs() > 0  # [F, N]
        count = smask.sum(1).clamp_min(1).to(x.dtype)
        mu = (self.sensory_mu * smask).sum(1) / count
        slope = (self.sensory_sigma.abs() * smask).sum(1) / count
        ok = (std > 1e-6) & (smask.sum(1) > 0)
        w = torch.where(ok, 1.0 / (std.clamp_min(1e-6) * slope.clamp_min(1e-3)), self.input_w)
        self.input_w.copy_(w)
        self.input_b.copy_(torch.where(smask.sum(1) > 0, mu - mean * w, self.input_b))

    @torch.jit.unused
    @torch.no_grad()
    def input_saturation(self, features: Tensor, low: float = 0.02, high: float = 0.98) -> Tensor:
        """Fraction of (sample, present sensory synapse) pairs whose sigmoid is < ``low`` or > ``high``."""
        x = features.reshape(-1, self.input_size).float()
        u = x * self.input_w + self.input_b
        s = torch.sigmoid(self.sensory_sigma.unsqueeze(0) * (u.unsqueeze(2) - self.sensory_mu.unsqueeze(0)))
        present = self.sensory_mask.abs() > 0
        flat = s[:, present]
        return ((flat < low) | (flat > high)).float().mean()

    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        """x [B,L,F], hidden [B,N], elapsed seconds ts [B,L,1] -> (y [B,L,M], hidden [B,N])."""
        if not torch.jit.is_scripting():  # eager on CUDA: the whole sequence in the Triton kernels
            if kernels.use_kernels(x, self.state_size):
                return self._sequence_kernels(x, hidden, ts)
        timespans = ts[:, :, 0]
        batch, length = x.size(0), x.size(1)
        n = self.state_size
        gleak = self._positive(self.gleak)
        cm = self._positive(self.cm)
        # Everything that depends only on the inputs, for all steps at once, time-major [L,B,...].
        sw = self._positive(self.sensory_w)
        u = (x * self.input_w + self.input_b).transpose(0, 1).reshape(length * batch, self.input_size)
        s_pre_sigma = self.sensory_sigma.index_select(1, self.sens_post) * self.sens_pre_onehot
        s_neg_sm = -(self.sensory_sigma * self.sensory_mu).flatten().index_select(0, self.sens_flat)
        s_q = torch.cat(
            [
                (sw * self.sensory_erev).index_select(0, self.sens_pre) * self.sens_post_onehot,
                sw.index_select(0, self.sens_pre) * self.sens_post_onehot,
            ],
            1,
        )
        base = torch.cat([gleak * self.vleak, gleak + self.epsilon])
        nd_s = torch.addmm(base, torch.sigmoid(torch.addmm(s_neg_sm, u, s_pre_sigma)), s_q).view(
            length, batch, 2 * n
        )
        cm_t = cm * (float(self.ode_unfolds) / timespans.transpose(0, 1).unsqueeze(2))
        nd0 = torch.cat([nd_s[:, :, :n], nd_s[:, :, n:] + cm_t], 2)
        if not torch.jit.is_scripting():  # eager: the hand-written backward
            states = self._solve_eager(hidden, nd0, cm_t)
        else:
            pre_sigma, neg_sm, q = self._synapse_lists()
            states = fused_solver(hidden, nd0, cm_t, pre_sigma, neg_sm, q, self.ode_unfolds, False)[0]
        y = states[:, :, : self.output_size] * self.output_w + self.output_b
        return y.transpose(0, 1), states[-1]

    def _synapse_lists(self) -> Tuple[Tensor, Tensor, Tensor]:
        """The recurrent synapses as a list of the E present ones (the mask decides which exist), the
        list solver's form: pre_sigma [N, E], -sigma mu [E], q [E, 2N] = (w erev | w) in the post
        neuron's columns."""
        w = self._positive(self.w)
        pre_sigma = self.sigma.index_select(1, self.syn_post) * self.syn_pre_onehot
        neg_sm = -(self.sigma * self.mu).flatten().index_select(0, self.syn_flat)
        q = torch.cat(
            [
                (w * self.erev).index_select(0, self.syn_pre) * self.syn_post_onehot,
                w.index_select(0, self.syn_pre) * self.syn_post_onehot,
            ],
            1,
        )
        return pre_sigma, neg_sm, q

    @torch.jit.unused
    def _solve_eager(self, hidden: Tensor, nd0: Tensor, cm_t: Tensor) -> Tensor:
        """The list solver with its hand-written backward (or none, without gradients)."""
        pre_sigma, neg_sm, q = self._synapse_lists()
        if not torch.is_grad_enabled():
            return fused_solver(hidden, nd0, cm_t, pre_sigma, neg_sm, q, self.ode_unfolds, False)[0]
        return _FusedSolver.apply(hidden, nd0, cm_t, pre_sigma, neg_sm, q, self.ode_unfolds)

    @torch.jit.unused
    def _sequence_kernels(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        """The whole sequence in the fused Triton kernels (:func:`drive.nn.ltc.kernels.ltc_sequence`): the
        raw parameters go in, positivity and masks are applied on load."""
        return kernels.ltc_sequence(
            x,
            hidden,
            ts,
            (self.input_w, self.input_b, self.sensory_sigma, self.sensory_mu, self.sensory_w)
            + (self.sensory_erev, self.sensory_mask, self.gleak, self.vleak, self.cm),
            (self.sigma, self.mu, self.w, self.erev, self.mask),
            (self.output_w, self.output_b),
            self.ode_unfolds,
            self.epsilon,
            self.softplus,
        )
