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
``cat(I, x)`` (``CfC``) or the synapses of a wiring (``WiredCfC``). For speed the input part of the
first layer is computed for all time steps at once, the heads are one fused Linear and LeCun-tanh's
scales are folded into the weights once per call.

``WiredCfC`` honours the whole wiring (ncps drops the recurrent command synapses and polarity, its
issue #53): see its docstring. ``cfc_from_ncps`` converts an ``ncps.torch.CfC`` exactly.
"""

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from drive.nn.wiring import Wiring, as_wiring

__all__ = ["CfC", "WiredCfC", "cfc_from_ncps", "MODES", "ACTIVATIONS"]

MODES = ("default", "no_gate", "pure")
ACTIVATIONS = ("lecun_tanh", "tanh", "relu", "gelu", "silu")


def _activate(x: Tensor, kind: int) -> Tensor:
    """Backbone activation by code (lecun_tanh arrives pre-scaled, so it is a plain tanh here)."""
    if kind <= 1:
        return torch.tanh(x)
    if kind == 2:
        return torch.relu(x)
    if kind == 3:
        return F.gelu(x)
    return F.silu(x)


def _cfc_update(z: Tensor, t: Tensor, n: int, mode: int, w_tau: Tensor, a: Tensor) -> Tensor:
    """New state [B, n] from fused head pre-activations z [B, K n] and elapsed time t [B, 1].

    mode 0 default (Eq. 10), 1 no_gate, 2 pure (Eq. 9; z = ff1, w_tau = |w_tau| already)."""
    if mode == 2:
        decay = torch.exp(-t * (w_tau + z.abs()))
        return torch.addcmul(a, a * decay, z, value=-1.0)
    ff1, ff2, time_a, time_b = z.split(n, 1)  # one SplitBackward instead of four zero-filled slices
    gate = torch.sigmoid(torch.addcmul(time_b, time_a, t))
    if mode == 0:
        return torch.lerp(torch.tanh(ff1), torch.tanh(ff2), gate)
    return torch.addcmul(torch.tanh(ff1), gate, torch.tanh(ff2))


def _lstm_update(z: Tensor, c: Tensor, n: int) -> Tuple[Tensor, Tensor]:
    """ncps's LSTMCell given z = W_in I + b + W_rec x (+1 already added to the forget gate)."""
    act, gates = z.split([n, 3 * n], 1)
    input_gate, forget_gate, output_gate = torch.sigmoid(gates).split(n, 1)
    c = torch.addcmul(forget_gate * c, torch.tanh(act), input_gate)
    return torch.tanh(c) * output_gate, c


def _check_sequence(x: Tensor, timespans: Optional[Tensor], input_size: int) -> Tensor:
    """Validate x [B, L, F] and timespans [B, L]; return elapsed time as [B, L, 1] fp32."""
    if x.dim() != 3 or x.size(2) != input_size:
        raise ValueError("expected input [B, L, " + str(input_size) + "], got " + str(x.shape))
    if not bool(torch.isfinite(x).all()):
        raise ValueError("input contains NaN or inf")
    b, steps = x.size(0), x.size(1)
    if timespans is None:
        return torch.ones(1, 1, 1, dtype=x.dtype, device=x.device).expand(b, steps, 1)
    if timespans.dim() != 2 or timespans.size(0) != b or timespans.size(1) != steps:
        raise ValueError("expected timespans [B, L] = [" + str(b) + ", " + str(steps) + "], got "
                         + str(timespans.shape))
    if not bool(((timespans > 0) & torch.isfinite(timespans)).all()):
        raise ValueError("timespans (elapsed seconds) must be finite and > 0")
    return timespans.to(x.dtype).unsqueeze(2)


def _check_hidden(hidden: Optional[Tensor], x: Tensor, state_size: int) -> Tensor:
    if hidden is None:
        return torch.zeros(x.size(0), state_size, dtype=x.dtype, device=x.device)
    if hidden.dim() != 2 or hidden.size(0) != x.size(0) or hidden.size(1) != state_size:
        raise ValueError("expected hidden [B, " + str(state_size) + "] with B = " + str(x.size(0))
                         + ", got " + str(hidden.shape))
    return hidden


def _check_config(mode: str, input_size: int) -> int:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    if input_size < 1:
        raise ValueError(f"input_size must be >= 1, got {input_size}")
    return MODES.index(mode)


def _register_pure(module: nn.Module, mode: str, units: int) -> None:
    """Cf-S's per-neuron ``w_tau`` (init 0) and ``A`` (init 1) as parameters in pure mode; empty
    non-persistent buffers otherwise, so the scripted code sees tensors either way."""
    for name, value in (("w_tau", 0.0), ("A", 1.0)):
        if mode == "pure":
            module.register_parameter(name, nn.Parameter(torch.full((units,), value)))
        else:
            module.register_buffer(name, torch.zeros(0), persistent=False)


class _MixedMemory(nn.Module):
    """The LSTM memory of CfC-mmRNN (ncps's LSTMCell: xavier/orthogonal, biases U(-0.1, 0.1),
    forget-gate offset +1). Gate order: input activation, input gate, forget gate, output gate."""

    def __init__(self, input_size: int, units: int) -> None:
        super().__init__()
        self.input_map = nn.Linear(input_size, 4 * units)
        self.recurrent_map = nn.Linear(units, 4 * units, bias=False)
        nn.init.xavier_uniform_(self.input_map.weight)
        nn.init.uniform_(self.input_map.bias, -0.1, 0.1)
        nn.init.orthogonal_(self.recurrent_map.weight)
        self.register_buffer("forget_offset", torch.cat([torch.zeros(2 * units), torch.ones(units),
                                                         torch.zeros(units)]), persistent=False)


class CfC(nn.Module):
    """Dense CfC over ``units`` neurons with a backbone of ``backbone_layers`` x ``backbone_units``.

    ``forward(x[B, L, F], hidden[B, H] = None, timespans[B, L] = None) -> (y[B, L, M], hidden[B, H])``;
    ``H = units`` (``2 units`` with mixed memory: ``[x, c]``), ``M = output_size`` (a Linear readout
    of the state) or ``units`` (the state itself). Backbone dropout acts after every backbone layer,
    a single one included (ncps drops it there). Parameters: ``layers`` = backbone Linears then the
    fused heads ``[ff1 | ff2 | time_a | time_b]`` (``[ff1]`` in pure mode; the first Linear reads
    ``cat(I, x)``); ``w_tau``, ``A`` (pure); ``memory`` (mixed); ``readout`` (output_size given).
    """

    def __init__(self, input_size: int, units: int, output_size: Optional[int] = None, mode: str = "default",
                 mixed_memory: bool = False, backbone_units: int = 128, backbone_layers: int = 1,
                 backbone_activation: str = "lecun_tanh", backbone_dropout: float = 0.0) -> None:
        super().__init__()
        self.mode_id = _check_config(mode, input_size)
        if units < 1 or backbone_layers < 0 or (backbone_layers > 0 and backbone_units < 1):
            raise ValueError("units >= 1, backbone_layers >= 0 and backbone_units >= 1 are required")
        if backbone_activation not in ACTIVATIONS:
            raise ValueError(f"unknown backbone_activation {backbone_activation!r}; choose one of {ACTIVATIONS}")
        if not 0.0 <= backbone_dropout < 1.0:
            raise ValueError(f"backbone_dropout must be in [0, 1), got {backbone_dropout}")
        self._config = dict(input_size=input_size, units=units, output_size=output_size, mode=mode,
                            mixed_memory=mixed_memory, backbone_units=backbone_units,
                            backbone_layers=backbone_layers, backbone_activation=backbone_activation,
                            backbone_dropout=backbone_dropout)
        self.input_size, self.units = int(input_size), int(units)
        self.state_size = self.units * (2 if mixed_memory else 1)
        self.output_size = self.units if output_size is None else int(output_size)
        self.mixed_memory = bool(mixed_memory)
        self.activation_id = ACTIVATIONS.index(backbone_activation)
        self.dropout = float(backbone_dropout)
        self.backbone_layers = int(backbone_layers)
        heads = (1 if mode == "pure" else 4) * self.units
        sizes = [self.input_size + self.units] + [backbone_units] * backbone_layers + [heads]
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])
        for layer in self.layers:
            nn.init.xavier_uniform_(layer.weight)
        _register_pure(self, mode, self.units)
        self.memory = _MixedMemory(self.input_size, self.units) if mixed_memory else None
        self.readout = nn.Linear(self.units, self.output_size) if output_size is not None else None

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``CfC(**m.config())`` rebuilds the architecture."""
        return dict(self._config)

    def _weights(self) -> Tuple[List[Tensor], List[Tensor]]:
        """Per-layer (weight, bias) with LeCun-tanh's scales folded in: pre-activation layers get
        x0.666 and every layer after an activation x1.7159 on its weight."""
        ws: List[Tensor] = []
        bs: List[Tensor] = []
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            w, b = layer.weight, layer.bias
            if self.activation_id == 0:
                # lecun_tanh(x) = 1.7159 tanh(0.666 x)
                scale = (0.666 if i < last else 1.0) * (1.7159 if i > 0 else 1.0)
                w = w * scale
                b = b * 0.666 if i < last else b
            ws.append(w)
            bs.append(b)
        return ws, bs

    def forward(self, x: Tensor, hidden: Optional[Tensor] = None,
                timespans: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """x [B, L, F], hidden [B, H], timespans [B, L] elapsed seconds (None: 1.0) ->
        (y [B, L, M], hidden [B, H])."""
        ts = _check_sequence(x, timespans, self.input_size)
        state = _check_hidden(hidden, x, self.state_size)
        n, f = self.units, self.input_size
        ws, bs = self._weights()
        # input part of the first layer for all steps at once: [B, L, D1]
        x_part = F.linear(x, ws[0][:, :f], bs[0]).unbind(1)
        w_state = ws[0][:, f:].t().contiguous()
        w_tau, a = self.w_tau.abs(), self.A
        h = state[:, :n]
        memory = self.memory
        c = state[:, n:]
        m_part: List[Tensor] = []
        w_mem = w_state
        if memory is not None:
            m_part = F.linear(x, memory.input_map.weight, memory.input_map.bias + memory.forget_offset).unbind(1)
            w_mem = memory.recurrent_map.weight.t().contiguous()
        last = len(ws) - 1
        p = self.dropout if self.training else 0.0
        steps = ts.unbind(1)
        outs: List[Tensor] = []
        for i in range(x.size(1)):
            if memory is not None:
                h, c = _lstm_update(torch.addmm(m_part[i], h, w_mem), c, n)
            z = torch.addmm(x_part[i], h, w_state)
            for k in range(1, last + 1):
                z = _activate(z, self.activation_id)
                if p > 0.0:
                    z = F.dropout(z, p, True)
                z = F.linear(z, ws[k], bs[k])
            h = _cfc_update(z, steps[i], n, self.mode_id, w_tau, a)
            outs.append(h)
        y = torch.stack(outs, 1)
        if self.readout is not None:
            y = self.readout(y)
        new_state = torch.cat([h, c], 1) if memory is not None else h
        return y, new_state

    @torch.jit.export
    def step(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """One step: x [B, F], hidden [B, H], dt [B] seconds -> (y [B, M], hidden [B, H])."""
        y, h = self.forward(x.unsqueeze(1), hidden, dt.reshape(-1, 1))
        return y.squeeze(1), h

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        """Zeros [batch, H] fp32 on the module's device."""
        return torch.zeros(batch, self.state_size, device=self.layers[0].weight.device)


class WiredCfC(nn.Module):
    """CfC whose neurons and synapses are those of a wiring (NCP, AutoNCP, FullyConnected, ...).

    Each neuron j is one CfC unit (Eq. 10 / Eq. 9); its heads ff1, ff2, time_a, time_b read only
    its pre-synaptic inputs: sensory features i with ``sensory_adjacency[i, j] != 0``, neurons i with
    ``adjacency[i, j] != 0`` and (``self_connections=True``, default) its own previous state, the
    CfC analogue of the LTC's leak. Layers are updated in signal-flow order within a step (as in
    ncps), so a synapse from an earlier layer delivers that neuron's *new* state and every other one
    (command -> command recurrence, feedback, self) the *previous* state.

    Polarity: the ff1/ff2 weight of a synapse with polarity p is ``|w| * p`` (time_a/time_b are
    masked but unsigned: like an LTC conductance they set the time constant, not the direction), so
    an excitatory synapse can only push the post-synaptic state up through g and h and an inhibitory
    one only down, as erev = +-1 does in an LTC. A neuron's own state is unsigned unless the wiring
    has a self-synapse. With mixed memory the LSTM's input/recurrent maps are masked the same way.

    ``ncps_compatible=True`` reproduces ncps's WiredCfCCell (for ``cfc_from_ncps``): each layer sees
    the previous layer through |adjacency| for ff1/ff2 and densely for time_a/time_b, its own layer
    densely, no polarity, a dense LSTM, and the output is the whole last layer.

    Parameters (neuron-id order, pre-synaptic first): ``weight`` [K, N, N], ``sensory_weight``
    [K, F, N], ``bias`` [K, N] with heads K = (ff1, ff2, time_a, time_b) or (ff1,) in pure mode;
    ``w_tau``, ``A`` [N] (pure). Buffers ``mask``/``sign`` [K, N, N], ``sensory_mask``/
    ``sensory_sign`` [K, F, N]. Hidden [B, N] (``[x, c]`` [B, 2N] with mixed memory) in neuron-id
    order (motor first); y [B, L, M] = motor neurons, or a Linear of them to ``output_size``.
    """

    block_src: List[int]  # feed-forward blocks (source layer -> destination layer), for TorchScript
    block_dst: List[int]

    def __init__(self, wiring: Union[Wiring, Dict[str, Any]], input_size: Optional[int] = None,
                 mode: str = "default", mixed_memory: bool = False, output_size: Optional[int] = None,
                 self_connections: bool = True, ncps_compatible: bool = False) -> None:
        super().__init__()
        wiring = as_wiring(wiring)
        if input_size is not None and int(input_size) != wiring.input_dim:
            raise ValueError(f"input_size={input_size} but the wiring has {wiring.input_dim} sensory inputs")
        self.mode_id = _check_config(mode, wiring.input_dim)
        self.wiring = wiring
        self._config = dict(wiring=wiring.to_dict(), input_size=wiring.input_dim, mode=mode,
                            mixed_memory=mixed_memory, output_size=output_size,
                            self_connections=self_connections, ncps_compatible=ncps_compatible)
        n, f, k = wiring.units, wiring.input_dim, 1 if mode == "pure" else 4
        self.input_size, self.units, self.heads = f, n, k
        self.state_size = n * (2 if mixed_memory else 1)
        layer_of = np.empty(n, np.int64)
        for l, (_, idx) in enumerate(wiring.layers):
            layer_of[idx] = l
        order = np.concatenate([np.asarray(idx, np.int64) for _, idx in wiring.layers])
        sizes = [len(idx) for _, idx in wiring.layers]
        self.bounds: List[int] = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        pre, post = layer_of[:, None], layer_of[None, :]
        adj, sens = wiring.adjacency.astype(np.float32), wiring.sensory_adjacency.astype(np.float32)
        if ncps_compatible:
            same, nxt = (pre == post).astype(np.float32), (pre == post - 1).astype(np.float32)
            first = np.broadcast_to((layer_of == 0)[None, :], sens.shape).astype(np.float32)
            syn, dense = np.abs(adj) * nxt + same, nxt + same
            mask = np.stack([syn, syn, dense, dense][:k])
            smask = np.stack([np.abs(sens) * first, np.abs(sens) * first, first, first][:k])
            sign, ssign = np.zeros_like(mask), np.zeros_like(smask)
            out_ids = np.asarray(wiring.layers[-1][1], np.int64)
        else:
            syn = np.maximum(np.abs(adj), np.eye(n, dtype=np.float32)) if self_connections else np.abs(adj)
            mask, smask = np.stack([syn] * k), np.stack([np.abs(sens)] * k)
            sign = np.stack([adj, adj, 0 * adj, 0 * adj][:k])
            ssign = np.stack([sens, sens, 0 * sens, 0 * sens][:k])
            out_ids = np.arange(wiring.output_dim)
        self.register_buffer("mask", torch.tensor(mask))
        self.register_buffer("sensory_mask", torch.tensor(smask))
        self.register_buffer("sign", torch.tensor(sign))
        self.register_buffer("sensory_sign", torch.tensor(ssign))
        pos = np.argsort(order)  # layer-order position of each neuron id
        self.register_buffer("order", torch.tensor(order), persistent=False)
        self.register_buffer("position", torch.tensor(pos), persistent=False)
        self.register_buffer("out_index", torch.tensor(pos[out_ids]), persistent=False)
        # feed-forward (new state) entries: pre-synaptic layer before the post-synaptic one
        self.register_buffer("recurrent_part", torch.tensor((layer_of[order][:, None] >= layer_of[order][None, :])
                                                            .astype(np.float32)), persistent=False)
        rows = [h * n + p for l in range(len(sizes)) for h in range(k) for p in range(self.bounds[l], self.bounds[l + 1])]
        self.register_buffer("fused_rows", torch.tensor(rows, dtype=torch.int64), persistent=False)
        ff = (mask.sum(0) > 0) & (pre < post)
        blocks = sorted({(int(layer_of[i]), int(layer_of[j])) for i, j in zip(*np.nonzero(ff))}, key=lambda b: b[1])
        self.block_src = [b[0] for b in blocks]
        self.block_dst = [b[1] for b in blocks]
        # init: xavier-like per post-synaptic neuron (fan-in = its active inputs), Linear-like bias
        fan_in = torch.tensor(mask[0].sum(0) + smask[0].sum(0)).clamp(min=1.0)
        bound = (6.0 / (fan_in + torch.tensor(sizes, dtype=torch.float32)[layer_of])).sqrt()
        self.weight = nn.Parameter((torch.rand(k, n, n) * 2 - 1) * bound)
        self.sensory_weight = nn.Parameter((torch.rand(k, f, n) * 2 - 1) * bound)
        self.bias = nn.Parameter((torch.rand(k, n) * 2 - 1) / fan_in.sqrt())
        _register_pure(self, mode, n)
        self.memory = _MixedMemory(f, n) if mixed_memory else None
        gate_mask = [np.tile(np.abs(sens).T if not ncps_compatible else np.ones((n, f), np.float32), (4, 1)),
                     np.tile(syn.T if not ncps_compatible else np.ones((n, n), np.float32), (4, 1))]
        self.register_buffer("memory_mask", torch.tensor(gate_mask[0]), persistent=False)
        self.register_buffer("memory_recurrent_mask", torch.tensor(gate_mask[1]), persistent=False)
        self.register_buffer("memory_rows", torch.tensor([g * n + int(i) for g in range(4) for i in order]),
                             persistent=False)
        motor = len(out_ids)
        self.output_size = motor if output_size is None else int(output_size)
        self.readout = nn.Linear(motor, self.output_size) if output_size is not None else None

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs (wiring as its dict): ``WiredCfC(**m.config())`` rebuilds it."""
        return dict(self._config)

    def effective_weights(self) -> Tuple[Tensor, Tensor]:
        """(weight [K, N, N], sensory_weight [K, F, N]) as used: polarity applied, masks applied."""
        w, s = self.weight, self.sensory_weight
        w = (w * (1.0 - self.sign.abs()) + w.abs() * self.sign) * self.mask
        s = (s * (1.0 - self.sensory_sign.abs()) + s.abs() * self.sensory_sign) * self.sensory_mask
        return w, s

    def forward(self, x: Tensor, hidden: Optional[Tensor] = None,
                timespans: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """x [B, L, F], hidden [B, H], timespans [B, L] elapsed seconds (None: 1.0) ->
        (y [B, L, M], hidden [B, H])."""
        ts = _check_sequence(x, timespans, self.input_size)
        state = _check_hidden(hidden, x, self.state_size)
        n, k, order = self.units, self.heads, self.order
        w, s = self.effective_weights()
        w = w.index_select(1, order).index_select(2, order)  # layer order
        w_rec = (w * self.recurrent_part).permute(0, 2, 1).reshape(k * n, n).index_select(0, self.fused_rows)
        w_rec = w_rec.t().contiguous()
        s = s.index_select(2, order).permute(0, 2, 1).reshape(k * n, self.input_size).index_select(0, self.fused_rows)
        b = self.bias.index_select(1, order).reshape(k * n).index_select(0, self.fused_rows)
        x_part = F.linear(x, s, b).unbind(1)
        bounds = self.bounds
        blocks: List[Tensor] = []
        for j in range(len(self.block_src)):
            src, dst = self.block_src[j], self.block_dst[j]
            blk = w[:, bounds[src]: bounds[src + 1], bounds[dst]: bounds[dst + 1]]
            blocks.append(blk.permute(0, 2, 1).reshape(-1, bounds[src + 1] - bounds[src]).t().contiguous())
        w_tau, a = self.w_tau, self.A
        if self.mode_id == 2:
            w_tau, a = w_tau.abs().index_select(0, order), a.index_select(0, order)
        h = state[:, :n].index_select(1, order)
        c = state[:, n:].index_select(1, order) if self.memory is not None else state[:, n:]
        memory = self.memory
        m_part: List[Tensor] = []
        w_mem = w_rec
        if memory is not None:
            wi = (memory.input_map.weight * self.memory_mask).index_select(0, self.memory_rows)
            bi = (memory.input_map.bias + memory.forget_offset).index_select(0, self.memory_rows)
            m_part = F.linear(x, wi, bi).unbind(1)
            wr = (memory.recurrent_map.weight * self.memory_recurrent_mask).index_select(0, self.memory_rows)
            w_mem = wr.index_select(1, order).t().contiguous()
        steps = ts.unbind(1)
        layer_rows = [k * (bounds[l + 1] - bounds[l]) for l in range(len(bounds) - 1)]
        outs: List[Tensor] = []
        for i in range(x.size(1)):
            if memory is not None:
                h, c = _lstm_update(torch.addmm(m_part[i], h, w_mem), c, n)
            pre = torch.addmm(x_part[i], h, w_rec).split(layer_rows, 1)
            news: List[Tensor] = []
            for l in range(len(bounds) - 1):
                lo, hi = bounds[l], bounds[l + 1]
                z = pre[l]
                for j in range(len(blocks)):
                    if self.block_dst[j] == l:
                        z = torch.addmm(z, news[self.block_src[j]], blocks[j])
                if self.mode_id == 2:
                    news.append(_cfc_update(z, steps[i], hi - lo, 2, w_tau[lo:hi], a[lo:hi]))
                else:
                    news.append(_cfc_update(z, steps[i], hi - lo, self.mode_id, w_tau, a))
            h = torch.cat(news, 1)
            outs.append(h)
        y = torch.stack(outs, 1).index_select(2, self.out_index)
        if self.readout is not None:
            y = self.readout(y)
        h = h.index_select(1, self.position)
        new_state = torch.cat([h, c.index_select(1, self.position)], 1) if memory is not None else h
        return y, new_state

    @torch.jit.export
    def step(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """One step: x [B, F], hidden [B, H], dt [B] seconds -> (y [B, M], hidden [B, H])."""
        y, h = self.forward(x.unsqueeze(1), hidden, dt.reshape(-1, 1))
        return y.squeeze(1), h

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        """Zeros [batch, H] fp32 on the module's device."""
        return torch.zeros(batch, self.state_size, device=self.weight.device)


_NCPS_ACTIVATIONS = {"LeCun": "lecun_tanh", "Tanh": "tanh", "ReLU": "relu", "GELU": "gelu", "SiLU": "silu"}


def _ncps_wiring(wiring: Any) -> Wiring:
    """An ncps.wirings.Wiring (built) as a drive Wiring with the same matrices and layers."""
    names = ["inter", "command", "motor"] if wiring.num_layers == 3 else [f"layer{i}" for i in range(wiring.num_layers)]
    if wiring.num_layers == 1:
        names = ["all"]
    layers = [(names[i], [int(j) for j in wiring.get_neurons_of_layer(i)]) for i in range(wiring.num_layers)]
    return Wiring(wiring.adjacency_matrix, wiring.sensory_adjacency_matrix, output_dim=wiring.output_dim,
                  layers=layers, kind="ncps." + type(wiring).__name__)


def _heads(cell: Any, pure: bool) -> List[Any]:
    return [cell.ff1] if pure else [cell.ff1, cell.ff2, cell.time_a, cell.time_b]


@torch.no_grad()
def cfc_from_ncps(module: Any) -> Union[CfC, WiredCfC]:
    """Convert an ``ncps.torch.CfC`` (dense or wired, any mode, mixed memory, ``proj_size``) with its
    weights into the drive module computing the same outputs (within float rounding) in eval mode.

    Mapping: dense -> ``CfC`` (backbone Linears then the heads stacked as ``[ff1|ff2|time_a|time_b]``;
    ncps applies backbone dropout only from the second layer on, drive after every layer, so training
    mode differs). Wired -> ``WiredCfC(ncps_compatible=True)``: ncps's per-layer weight columns are
    scattered into the neuron-indexed ``weight``/``sensory_weight``. Hidden states: ncps orders a
    wired state by layer (inter, command, motor) and passes mixed memory as a tuple ``(h, c)``; drive
    uses neuron ids (motor first) and one flat ``[h, c]`` tensor. ncps's ``batch_first=False`` and
    ``return_sequences=False`` are wrapper options that drive does not carry (y is [B, L, M]).
    """
    cell = module.rnn_cell
    pure = cell._layers[0].mode == "pure" if hasattr(cell, "_layers") else cell.mode == "pure"
    proj = module.fc if isinstance(module.fc, nn.Linear) else None
    mixed = bool(module.use_mixed)
    if hasattr(cell, "_layers"):
        wiring = _ncps_wiring(cell._wiring)
        out = WiredCfC(wiring, mode=cell._layers[0].mode, mixed_memory=mixed,
                       output_size=None if proj is None else proj.out_features, ncps_compatible=True)
        out.weight.zero_()
        out.sensory_weight.zero_()
        previous: List[int] = []
        for l, layer in enumerate(cell._layers):
            ids = wiring.neurons_of_layer(l)
            n_in = layer.input_size
            for k, head in enumerate(_heads(layer, pure)):
                w = head.weight.detach()
                if l == 0:
                    out.sensory_weight[k][:, ids] = w[:, :n_in].t()
                else:
                    out.weight[k][np.ix_(previous, ids)] = w[:, :n_in].t()
                out.weight[k][np.ix_(ids, ids)] = w[:, n_in:].t()
                out.bias[k, ids] = head.bias.detach()
            if pure:
                out.w_tau[ids] = layer.w_tau.detach().reshape(-1)
                out.A[ids] = layer.A.detach().reshape(-1)
            previous = ids
        if mixed:
            order = torch.tensor(np.concatenate([idx for _, idx in wiring.layers]), dtype=torch.int64)
            n = wiring.units
            rows = torch.cat([g * n + order for g in range(4)])
            out.memory.input_map.weight[rows] = module.lstm.input_map.weight.detach()
            out.memory.input_map.bias[rows] = module.lstm.input_map.bias.detach()
            rec = torch.zeros_like(out.memory.recurrent_map.weight)
            rec[rows.unsqueeze(1), order.unsqueeze(0)] = module.lstm.recurrent_map.weight.detach()
            out.memory.recurrent_map.weight.copy_(rec)
    else:
        linears = [m for m in (cell.backbone or []) if isinstance(m, nn.Linear)]
        acts = [type(m).__name__ for m in (cell.backbone or []) if type(m).__name__ in _NCPS_ACTIVATIONS]
        drops = [m.p for m in (cell.backbone or []) if isinstance(m, nn.Dropout)]
        out = CfC(cell.input_size, cell.hidden_size, output_size=None if proj is None else proj.out_features,
                  mode=cell.mode, mixed_memory=mixed,
                  backbone_units=linears[0].out_features if linears else 128, backbone_layers=len(linears),
                  backbone_activation=_NCPS_ACTIVATIONS[acts[0]] if acts else "lecun_tanh",
                  backbone_dropout=drops[0] if drops else 0.0)
        for mine, theirs in zip(out.layers, linears):
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)
        heads = _heads(cell, pure)
        out.layers[-1].weight.copy_(torch.cat([h.weight for h in heads]))
        out.layers[-1].bias.copy_(torch.cat([h.bias for h in heads]))
        if pure:
            out.w_tau.copy_(cell.w_tau.reshape(-1))
            out.A.copy_(cell.A.reshape(-1))
        if mixed:
            out.memory.load_state_dict(module.lstm.state_dict())
    if proj is not None:
        if proj.in_features != out.readout.in_features:
            raise ValueError(f"the ncps module cannot run: its proj_size Linear expects {proj.in_features} "
                             f"features but its last layer gives {out.readout.in_features}")
        out.readout.load_state_dict(proj.state_dict())
    return out.train(module.training)
