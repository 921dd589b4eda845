"""Recurrent baselines of the lane-keeping papers: LSTM and CT-RNN, with drive's recurrent contract.

Both follow ``forward(x[B,L,F], hidden[B,H]=None, timespans[B,L]=None) -> (y[B,L,M], hidden[B,H])``
and ``step(x[B,F], hidden[B,H], dt[B])``; hidden is one flat fp32 tensor.

Parameter counts for the papers' 64 units, 32 inputs, 1 output (NCP slides' table):
- CT-RNN: W_in 64x32 + W_rec 64x64 + bias 64 = 6,208 (the count the issue quotes; tau is fixed),
  plus the linear readout 64 + 1 = 6,273 ("RNN trainable parameters" in the slides). Ours: 6,273.
- LSTM: Keras's LSTM has one bias per gate: 4*64*(32+64+1) = 24,832 + readout 65 = 24,897 (slides).
  torch's ``nn.LSTM`` (used here for its fused kernels) has two redundant bias vectors
  (b_ih + b_hh); b_hh is held at zero and frozen, so the trainable count is the slides' 24,897.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from drive.nn.checks import check_hidden, check_sequence

__all__ = ["LSTM", "CTRNN"]


class LSTM(nn.Module):
    """LSTM (Hochreiter & Schmidhuber 1997) of ``units`` cells and a linear readout to
    ``output_size``. The flat hidden is cat(h, c) [B, 2 units]. Discrete time: timespans are
    validated and then ignored (the papers' LSTM baseline sees one frame per step)."""

    def __init__(self, input_size: int, units: int = 64, output_size: int = 1) -> None:
        super().__init__()
        self.check_values: bool = True  # value checks on inputs (drive.nn.checks.skip_value_checks)
        if min(input_size, units, output_size) < 1:
            raise ValueError("input_size, units and output_size must be >= 1")
        self.input_size: int = int(input_size)
        self.units: int = int(units)
        self.output_size: int = int(output_size)
        self.state_size: int = 2 * int(units)
        self.lstm = nn.LSTM(input_size, units, batch_first=True)
        with torch.no_grad():  # one bias per gate, as in the papers' Keras LSTM
            self.lstm.bias_hh_l0.zero_()
        self.lstm.bias_hh_l0.requires_grad_(False)
        self.readout = nn.Linear(units, output_size)

    def config(self) -> Dict[str, Any]:
        return {"input_size": self.input_size, "units": self.units, "output_size": self.output_size}

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        w = self.readout.weight
        return torch.zeros(batch, self.state_size, dtype=w.dtype, device=w.device)

    def forward(self, x: Tensor, hidden: Optional[Tensor] = None,
                timespans: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """x [B,L,F] -> (y [B,L,M], cat(h, c) [B, 2 units])."""
        check_sequence(x, timespans, self.input_size, self.check_values, hidden)
        hidden = check_hidden(hidden, x, self.state_size)
        h0 = hidden[:, : self.units].unsqueeze(0).contiguous()
        c0 = hidden[:, self.units:].unsqueeze(0).contiguous()
        out, (h, c) = self.lstm(x, (h0, c0))
        return self.readout(out), torch.cat([h[0], c[0]], 1)

    @torch.jit.export
    def step(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """x [B,F], hidden [B, 2 units], dt [B] -> (y [B,M], hidden)."""
        y, h = self.forward(x.unsqueeze(1), hidden, dt.reshape(-1, 1))
        return y.squeeze(1), h


class CTRNN(nn.Module):
    """Continuous-time RNN (Funahashi & Nakamura 1993) as in the NCP papers' baseline:

        dh/dt = -h / tau + tanh(W_in x + W_rec h + b),    y = W_out h + b_out

    integrated with ``ode_unfolds`` explicit Euler steps of dt / ode_unfolds per RNN step
    (dt = the step's elapsed seconds, 1.0 when timespans is None; the authors' code used 6 steps
    of 0.1). ``tau`` is fixed (not trained), as in the papers' count of 6,208 (+65 readout)."""

    def __init__(self, input_size: int, units: int = 64, output_size: int = 1, ode_unfolds: int = 6,
                 tau: float = 1.0) -> None:
        super().__init__()
        self.check_values: bool = True  # value checks on inputs (drive.nn.checks.skip_value_checks)
        if min(input_size, units, output_size, ode_unfolds) < 1:
            raise ValueError("input_size, units, output_size and ode_unfolds must be >= 1")
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        self.input_size: int = int(input_size)
        self.units: int = int(units)
        self.output_size: int = int(output_size)
        self.state_size: int = int(units)
        self.ode_unfolds: int = int(ode_unfolds)
        self.tau: float = float(tau)
        self.input_map = nn.Linear(input_size, units)
        self.recurrent = nn.Linear(units, units, bias=False)
        self.readout = nn.Linear(units, output_size)

    def config(self) -> Dict[str, Any]:
        return {"input_size": self.input_size, "units": self.units, "output_size": self.output_size,
                "ode_unfolds": self.ode_unfolds, "tau": self.tau}

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        w = self.readout.weight
        return torch.zeros(batch, self.state_size, dtype=w.dtype, device=w.device)

    def forward(self, x: Tensor, hidden: Optional[Tensor] = None,
                timespans: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """x [B,L,F], timespans [B,L] seconds -> (y [B,L,M], h [B, units])."""
        ts = check_sequence(x, timespans, self.input_size, self.check_values, hidden)
        h = check_hidden(hidden, x, self.state_size)
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

    @torch.jit.export
    def step(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """x [B,F], hidden [B, units], dt [B] seconds -> (y [B,M], hidden)."""
        y, h = self.forward(x.unsqueeze(1), hidden, dt.reshape(-1, 1))
        return y.squeeze(1), h
