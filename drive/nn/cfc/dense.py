"""Closed-form continuous-time networks (CfC; Hasani et al., Nature Machine Intelligence 2022).

One CfC step maps the input I and the previous state x to the new state after an elapsed time t:

- ``mode="default"`` (CfC, Eq. 10): ``x = sigma(-f t) * g + (1 - sigma(-f t)) * h`` with
  ``g = tanh(ff1)``, ``h = tanh(ff2)`` and the liquid time gate ``sigma(time_a * t + time_b)``
  (so ``-f t`` of Eq. 10 is ``-(time_a t + time_b)``, the form ncps uses).
- ``mode="no_gate"`` (CfC-noGate): ``x = tanh(ff1) + sigma(time_a t + time_b) * tanh(ff2)``.
- ``mode="pure"`` (Cf-S, Eq. 9): ``x = B * exp(-(|w_tau| + |ff1|) t) * ff1 + A`` with ``B = -A``
  (ncps's parametrisation); init ``w_tau = 0``, ``A = 1`` (ncps overwrites it with xavier; we don't).
- ``mixed_memory=True`` (CfC-mmRNN): an LSTM cell updates (x, c) from I before each CfC step; the
  flat hidden state packs ``[x, c]``.

The heads ff1, ff2, time_a, time_b read a shared backbone of Linear + activation layers over
``cat(I, x)`` (``CfC``) or the synapses of a wiring (``WiredCfC``, in ``drive.nn.cfc.wired``). For
speed the input part of the first layer is computed for all time steps at once, the heads are one
fused Linear and LeCun-tanh's scales are folded into the weights once per call (cached while no
gradient is needed); eager training runs the hand-written BPTT of ``drive.nn.cfc.bptt``, TorchScript
the autograd loop. ``cfc_from_ncps`` (``drive.nn.cfc.ncps``) converts an ``ncps.torch.CfC`` exactly.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from drive.nn.cfc.base import CfCModule, MixedMemory, PreparedCache, check_config, needs_grad, register_pure
from drive.nn.cfc.bptt import DenseBPTT
from drive.nn.cfc.cell import ACTIVATIONS, SIGMOID, SIGMOID_FORM, activate, dropout_mask, lstm_update, update
from drive.nn.cfc.forward_loop import DenseSpec, dense_loop_weights, dense_run
from drive.nn.cfc.sigmoid_form import SigmoidForm, sigmoid_form_applies, uniform_time
from drive.nn.cfc.wired import WiredCfC
from drive.nn.registry import Family, register
from drive.nn.wiring import lane_keeping_ncp

__all__ = ["CfC", "CfCOptions"]


@dataclass(frozen=True)
class CfCOptions:
    """``cfc``: a closed-form continuous-time network (Hasani et al. 2022).

    Args:
        units: hidden units of the dense CfC (paper: 64); unused when ``wired``.
        mode: CfC variant ``default`` | ``no_gate`` | ``pure`` (Cf-S).
        mixed_memory: CfC with an LSTM memory cell (CfC-mmRNN).
        wired: CfC on the lane-keeping NCP wiring instead of dense units.
        wiring_seed: seed of the NCP wiring's random synapses (``wired`` only).
    """

    units: int = 64
    mode: str = "default"
    mixed_memory: bool = False
    wired: bool = False
    wiring_seed: int = 22222


@register("cfc", aliases=("drive.nn.cfc.CfC", "drive.nn.cfc.dense.CfC"), family=Family("cfc", CfCOptions))
class CfC(CfCModule):
    """Dense CfC over ``units`` neurons with a backbone of ``backbone_layers`` x ``backbone_units``.

    ``forward(x[B, L, F], hidden[B, H] = None, timespans[B, L] = None) -> (y[B, L, M], hidden[B, H])``;
    ``H = units`` (``2 units`` with mixed memory: ``[x, c]``), ``M = output_size`` (a Linear readout
    of the state) or ``units`` (the state itself). Backbone dropout acts after every backbone layer,
    a single one included (ncps drops it there). Parameters: ``layers`` = backbone Linears then the
    fused heads ``[ff1 | ff2 | time_a | time_b]`` (``[ff1]`` in pure mode; the first Linear reads
    ``cat(I, x)``); ``w_tau``, ``A`` (pure); ``memory`` (mixed); ``readout`` (output_size given).
    """

    __jit_ignored_attributes__ = ["_cache"]

    def __init__(
        self,
        input_size: int,
        units: int,
        output_size: Optional[int] = None,
        mode: str = "default",
        mixed_memory: bool = False,
        backbone_units: int = 128,
        backbone_layers: int = 1,
        backbone_activation: str = "lecun_tanh",
        backbone_dropout: float = 0.0,
    ) -> None:
        check_config(mode, input_size)
        if units < 1 or backbone_layers < 0 or (backbone_layers > 0 and backbone_units < 1):
            raise ValueError("units >= 1, backbone_layers >= 0 and backbone_units >= 1 are required")
        if backbone_activation not in ACTIVATIONS:
            raise ValueError(
                f"unknown backbone_activation {backbone_activation!r}; choose one of {ACTIVATIONS}"
            )
        if not 0.0 <= backbone_dropout < 1.0:
            raise ValueError(f"backbone_dropout must be in [0, 1), got {backbone_dropout}")
        super().__init__(
            input_size, units if output_size is None else output_size, units * (2 if mixed_memory else 1)
        )
        self.mode: str = mode
        self._config = dict(
            input_size=input_size,
            units=units,
            output_size=output_size,
            mode=mode,
            mixed_memory=mixed_memory,
            backbone_units=backbone_units,
            backbone_layers=backbone_layers,
            backbone_activation=backbone_activation,
            backbone_dropout=backbone_dropout,
        )
        self.units = int(units)
        self.mixed_memory = bool(mixed_memory)
        self.activation: str = backbone_activation
        self.dropout = float(backbone_dropout)
        self.backbone_layers = int(backbone_layers)
        heads = (1 if mode == "pure" else 4) * self.units
        sizes = [self.input_size + self.units] + [backbone_units] * backbone_layers + [heads]
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])
        for layer in self.layers:
            nn.init.xavier_uniform_(layer.weight)
        register_pure(self, mode, self.units)
        self.memory = MixedMemory(self.input_size, self.units) if mixed_memory else None
        self.readout = nn.Linear(self.units, self.output_size) if output_size is not None else None
        self._cache = PreparedCache()

    @classmethod
    def from_options(cls, features: int, options: CfCOptions) -> Union["CfC", WiredCfC]:
        """The ``cfc`` family's cell for ``features`` inputs: ``units`` dense neurons and a readout,
        or (``wired``) a :class:`WiredCfC` on the lane-keeping NCP."""
        o = options
        if o.wired:
            wiring = lane_keeping_ncp(seed=o.wiring_seed, input_dim=features)
            return WiredCfC(wiring=wiring, input_size=features, mode=o.mode, mixed_memory=o.mixed_memory)
        return cls(features, o.units, output_size=1, mode=o.mode, mixed_memory=o.mixed_memory)

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``CfC(**m.config())`` rebuilds the architecture."""
        return dict(self._config)

    def _prepare(self) -> List[Tensor]:
        """Weights as the loop uses them: ``[|w_tau|, A, W_in, b_in (+1 forget), W_rec]`` (LSTM; empty
        without mixed memory) then per layer (weight, bias) with LeCun-tanh's scales folded in:
        pre-activation layers get x0.666, every layer after an activation x1.7159 on its weight."""
        out: List[Tensor] = [self.w_tau.abs(), self.A]
        memory = self.memory
        if memory is not None:
            out += [
                memory.input_map.weight,
                memory.input_map.bias + memory.forget_offset,
                memory.recurrent_map.weight,
            ]
        else:
            out += [self.A[:0], self.A[:0], self.A[:0]]  # empty placeholders
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            w, b = layer.weight, layer.bias
            if self.activation == "lecun_tanh":  # lecun_tanh(x) = 1.7159 tanh(0.666 x)
                w = w * ((0.666 if i < last else 1.0) * (1.7159 if i > 0 else 1.0))
                b = b * 0.666 if i < last else b
            out += [w, b]
        return out

    @torch.jit.unused
    def _sigmoid_form(self, t: Tensor) -> List[Tensor]:
        """``_prepare``'s list in the form ``SigmoidForm`` gives (default mode, tanh-like backbone)."""
        layers = SigmoidForm.apply(
            self.input_size,
            self.units,
            t,
            self.activation == "lecun_tanh",
            *[v for layer in self.layers for v in (layer.weight, layer.bias)],
        )
        return [self.A[:0]] * 5 + list(layers)

    def _loop(
        self, x: Tensor, state: Tensor, ts: Tensor, prep: List[Tensor]
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """The recurrence with autograd (TorchScript, no-grad calls): (states [B, L, n], h, c)."""
        n, f = self.units, self.input_size
        w_tau, a, wi, bi, wr = prep[0], prep[1], prep[2], prep[3], prep[4]
        ws, bs = prep[5::2], prep[6::2]
        x_part = F.linear(x, ws[0][:, :f], bs[0]).unbind(1)  # input part of layer 1, all steps at once
        w_state = ws[0][:, f:].t()
        h, c = state[:, :n], state[:, n:]
        m_part: List[Tensor] = F.linear(x, wi, bi).unbind(1) if self.mixed_memory else []
        last = len(ws) - 1
        p = self.dropout if self.training else 0.0
        steps = ts.unbind(1)
        outs: List[Tensor] = []
        for i in range(x.size(1)):
            if self.mixed_memory:
                h, c, _ = lstm_update(torch.addmm(m_part[i], h, wr.t()), c, n)
            z = torch.addmm(x_part[i], h, w_state)
            for k in range(1, last + 1):
                z = activate(z, self.activation)
                if p > 0.0:
                    z = z * dropout_mask(z, p)
                z = F.linear(z, ws[k], bs[k])
            h = update(z, steps[i], n, self.mode, w_tau, a)[0]
            outs.append(h)
        return torch.stack(outs, 1), h, c

    @torch.jit.unused
    def _eager(self, x: Tensor, state: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Eager dispatch: hand-written BPTT when training, cached weights when no grad is needed."""
        n, f = self.units, self.input_size
        h, c = state[:, :n], state[:, n:]
        p = self.dropout if self.training else 0.0
        spec = DenseSpec(n, self.mode, self.activation, p, self.mixed_memory)
        grad = needs_grad(self, x, state)
        if grad and ts.requires_grad:  # elapsed-time gradients: only autograd has them
            return self._loop(x, state, ts, self._prepare())
        # the sigmoid form; without gradient only at t = 1 (cached) and over several steps (one step
        # gains less than its conversions cost)
        applies = sigmoid_form_applies(spec.mode, spec.activation, spec.dropout, spec.mixed)
        t = uniform_time(ts) if applies and (grad or x.size(1) > 1) else None
        if t is not None and (grad or bool(t == 1.0)):
            spec = DenseSpec(n, SIGMOID_FORM, SIGMOID, 0.0, False)
        sigmoid_form = spec.mode == SIGMOID_FORM
        if grad:
            weights = self._sigmoid_form(t) if sigmoid_form else self._prepare()
            return DenseBPTT.apply(spec, x, h, c, ts, *weights)
        with torch.no_grad():
            weights = self._cache.get(
                self,
                "loop_sigmoid" if sigmoid_form else "loop",
                lambda: (
                    dense_loop_weights(f, False, self._sigmoid_form(ts.new_ones(())))
                    if sigmoid_form
                    else dense_loop_weights(f, self.mixed_memory, self._prepare())
                ),
            )
            y, _, out = dense_run(spec, x, h, c, ts, weights)
            return y, out[1], out[2]

    def _outputs(self, seq: Tensor, h: Tensor, c: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        return seq, h, c
