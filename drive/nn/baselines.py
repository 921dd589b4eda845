"""Recurrent baselines of the lane-keeping papers: LSTM and CT-RNN; and ``Stateless``, the ``cnn``
family's pass-through. All three follow drive's recurrent contract (:mod:`drive.nn.contract`).

Parameter counts for the papers' 64 units, 32 inputs, 1 output (NCP slides' table):
- CT-RNN: W_in 64x32 + W_rec 64x64 + bias 64 = 6,208 (the count the issue quotes; tau is fixed),
  plus the linear readout 64 + 1 = 6,273 ("RNN trainable parameters" in the slides). Ours: 6,273.
- LSTM: Keras's LSTM has one bias per gate: 4*64*(32+64+1) = 24,832 + readout 65 = 24,897 (slides).
  torch's ``nn.LSTM`` (used here for its fused kernels) has two redundant bias vectors
  (b_ih + b_hh); b_hh is held at zero and frozen, so the trainable count is the slides' 24,897.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch
from torch import Tensor, nn

from drive.nn.contract import RecurrentModule
from drive.nn.registry import Family, register

__all__ = ["LSTM", "CTRNN", "Stateless", "RNNOptions", "CNNOptions"]


@dataclass(frozen=True)
class RNNOptions:
    """``lstm`` and ``ctrnn``: a dense recurrent baseline with a linear readout.

    Args:
        units: hidden units (paper: 64).
    """

    units: int = 64


@dataclass(frozen=True)
class CNNOptions:
    """``cnn``: the feed-forward PilotNet CNN has no options."""


@register("lstm", aliases=("drive.nn.baselines.LSTM",), family=Family("lstm", RNNOptions))
class LSTM(RecurrentModule):
    """LSTM (Hochreiter & Schmidhuber 1997) of ``units`` cells and a linear readout to
    ``output_size``. The flat hidden is cat(h, c) [B, 2 units]. Discrete time: timespans are
    validated and then ignored (the papers' LSTM baseline sees one frame per step)."""

    def __init__(self, input_size: int, units: int = 64, output_size: int = 1) -> None:
        if min(input_size, units, output_size) < 1:
            raise ValueError("input_size, units and output_size must be >= 1")
        super().__init__(input_size, output_size, 2 * int(units))
        self.units: int = int(units)
        self.lstm = nn.LSTM(input_size, units, batch_first=True)
        with torch.no_grad():  # one bias per gate, as in the papers' Keras LSTM
            self.lstm.bias_hh_l0.zero_()
        self.lstm.bias_hh_l0.requires_grad_(False)
        self.readout = nn.Linear(units, output_size)

    @classmethod
    def from_options(cls, features: int, options: RNNOptions) -> "LSTM":
        """The ``lstm`` family's cell: ``units`` cells, one output."""
        return cls(features, options.units)

    def config(self) -> Dict[str, Any]:
        return {"input_size": self.input_size, "units": self.units, "output_size": self.output_size}

    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        """x [B,L,F] -> (y [B,L,M], cat(h, c) [B, 2 units]); ts is not used."""
        h0 = hidden[:, : self.units].unsqueeze(0).contiguous()
        c0 = hidden[:, self.units :].unsqueeze(0).contiguous()
        out, (h, c) = self.lstm(x, (h0, c0))
        return self.readout(out), torch.cat([h[0], c[0]], 1)


@register("ctrnn", aliases=("drive.nn.baselines.CTRNN",), family=Family("ctrnn", RNNOptions))
class CTRNN(RecurrentModule):
    """Continuous-time RNN (Funahashi & Nakamura 1993) as in the NCP papers' baseline:

        dh/dt = -h / tau + tanh(W_in x + W_rec h + b),    y = W_out h + b_out

    integrated with ``ode_unfolds`` explicit Euler steps of dt / ode_unfolds per RNN step
    (dt = the step's elapsed seconds, 1.0 when timespans is None; the authors' code used 6 steps
    of 0.1). ``tau`` is fixed (not trained), as in the papers' count of 6,208 (+65 readout)."""

    def __init__(
        self, input_size: int, units: int = 64, output_size: int = 1, ode_unfolds: int = 6, tau: float = 1.0
    ) -> None:
        if min(input_size, units, output_size, ode_unfolds) < 1:
            raise ValueError("input_size, units, output_size and ode_unfolds must be >= 1")
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        super().__init__(input_size, output_size, units)
        self.units: int = int(units)
        self.ode_unfolds: int = int(ode_unfolds)
        self.tau: float = float(tau)
        self.input_map = nn.Linear(input_size, units)
        self.recurrent = nn.Linear(units, units, bias=False)
        self.readout = nn.Linear(units, output_size)

    @classmethod
    def from_options(cls, features: int, options: RNNOptions) -> "CTRNN":
        """The ``ctrnn`` family's cell: ``units`` neurons, one output."""
        return cls(features, options.units)

    def config(self) -> Dict[str, Any]:
        return {
            "input_size": self.input_size,
            "units": self.units,
            "output_size": self.output_size,
            "ode_unfolds": self.ode_unfolds,
            "tau": self.tau,
        }

    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        """x [B,L,F], elapsed seconds ts [B,L,1] -> (y [B,L,M], h [B, units])."""
        h = hidden
        drive = self.input_map(x)
        h_step = ts / float(self.ode_unfolds)
        w_rec = self.recurrent.weight.t()
        states = []
        for t in range(x.size(1)):
            inp = drive[:, t]
            dt = h_step[:, t]
            for _ in range(self.ode_unfolds):
                h = h + dt * (torch.tanh(torch.addmm(inp, h, w_rec)) - h / self.tau)
            states.append(h)
        return self.readout(torch.stack(states, 1)), h


@register(
    "stateless", aliases=("drive.nn.policy.Stateless",), family=Family("cnn", CNNOptions, head="pilotnet")
)
class Stateless(RecurrentModule):
    """The contract with no memory: ``y = x``, hidden ``[B, 0]`` (the ``cnn`` family's compartment)."""

    def __init__(self, input_size: int = 1) -> None:
        super().__init__(input_size, input_size, 0)

    @classmethod
    def from_options(cls, features: int, options: CNNOptions) -> "Stateless":
        """The ``cnn`` family's compartment: the PilotNet head's output passes through."""
        return cls(features)

    def config(self) -> Dict[str, Any]:
        return {"input_size": self.input_size}

    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        return x, hidden
