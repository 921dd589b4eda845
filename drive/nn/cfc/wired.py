"""``WiredCfC``: a CfC whose neurons and synapses are those of a wiring (see ``drive.nn.cfc.cell`` for
the cell equations and ``docs/cfc.md`` for the wiring semantics and the differences from ncps)."""

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from drive.nn.cfc.base import CfCModule, MixedMemory, PreparedCache, check_config, needs_grad, register_pure
from drive.nn.cfc.bptt import WiredBPTT
from drive.nn.cfc.cell import lstm_update, update
from drive.nn.cfc.forward_loop import WiredSpec, wired_loop_weights, wired_run
from drive.nn.registry import register
from drive.nn.wiring import Wiring, as_wiring, check_wiring_buffers

__all__ = ["WiredCfC"]


def _layers(wiring: Wiring) -> Tuple[np.ndarray, np.ndarray, List[int]]:
    """(layer of each neuron id [N], the neuron ids in layer order [N], the layers' sizes)."""
    layer_of = np.empty(wiring.units, np.int64)
    for layer, (_, idx) in enumerate(wiring.layers):
        layer_of[idx] = layer
    order = np.concatenate([np.asarray(idx, np.int64) for _, idx in wiring.layers])
    return layer_of, order, [len(idx) for _, idx in wiring.layers]


def _synapses(
    wiring: Wiring, layer_of: np.ndarray, k: int, self_connections: bool, ncps_compatible: bool
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per head (K): which synapses exist and their polarity -- (mask [K, N, N], sensory mask
    [K, F, N], sign [K, N, N], sensory sign [K, F, N]) -- and the output neurons' ids (class
    docstring for the two semantics)."""
    n = wiring.units
    pre, post = layer_of[:, None], layer_of[None, :]
    adj, sens = wiring.adjacency.astype(np.float32), wiring.sensory_adjacency.astype(np.float32)
    if ncps_compatible:
        same, nxt = (pre == post).astype(np.float32), (pre == post - 1).astype(np.float32)
        first = np.broadcast_to((layer_of == 0)[None, :], sens.shape).astype(np.float32)
        syn, dense = np.abs(adj) * nxt + same, nxt + same
        mask = np.stack([syn, syn, dense, dense][:k])
        smask = np.stack([np.abs(sens) * first, np.abs(sens) * first, first, first][:k])
        return (
            mask,
            smask,
            np.zeros_like(mask),
            np.zeros_like(smask),
            np.asarray(wiring.layers[-1][1], np.int64),
        )
    syn = np.maximum(np.abs(adj), np.eye(n, dtype=np.float32)) if self_connections else np.abs(adj)
    sign = np.stack([adj, adj, 0 * adj, 0 * adj][:k])
    ssign = np.stack([sens, sens, 0 * sens, 0 * sens][:k])
    return np.stack([syn] * k), np.stack([np.abs(sens)] * k), sign, ssign, np.arange(wiring.output_dim)


@register(
    "wired_cfc",
    aliases=("drive.nn.cfc.WiredCfC", "drive.nn.wired_cfc.WiredCfC", "drive.nn.cfc.wired.WiredCfC"),
)
class WiredCfC(CfCModule):
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

    __jit_ignored_attributes__ = ["_cache"]
    block_src: List[int]  # feed-forward blocks (source layer -> destination layer), for TorchScript
    block_dst: List[int]

    def __init__(
        self,
        wiring: Union[Wiring, Dict[str, Any]],
        input_size: Optional[int] = None,
        mode: str = "default",
        mixed_memory: bool = False,
        output_size: Optional[int] = None,
        self_connections: bool = True,
        ncps_compatible: bool = False,
    ) -> None:
        wiring = as_wiring(wiring)
        if input_size is not None and int(input_size) != wiring.input_dim:
            raise ValueError(f"input_size={input_size} but the wiring has {wiring.input_dim} sensory inputs")
        check_config(mode, wiring.input_dim)
        motors = len(wiring.layers[-1][1]) if ncps_compatible else wiring.output_dim  # without readout
        super().__init__(
            wiring.input_dim,
            motors if output_size is None else int(output_size),
            wiring.units * (2 if mixed_memory else 1),
        )
        self.mode: str = mode
        self.wiring = wiring
        self._config = dict(
            wiring=wiring.to_dict(),
            input_size=wiring.input_dim,
            mode=mode,
            mixed_memory=mixed_memory,
            output_size=output_size,
            self_connections=self_connections,
            ncps_compatible=ncps_compatible,
        )
        n, f, k = wiring.units, wiring.input_dim, 1 if mode == "pure" else 4
        self.units, self.heads = n, k
        self.mixed_memory = bool(mixed_memory)
        layer_of, order, sizes = _layers(wiring)
        self.bounds: List[int] = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        mask, smask, sign, ssign, out_ids = _synapses(wiring, layer_of, k, self_connections, ncps_compatible)
        for name, value in (("mask", mask), ("sensory_mask", smask), ("sign", sign), ("sensory_sign", ssign)):
            self.register_buffer(name, torch.tensor(value))
        self._register_layer_order(layer_of, order, sizes, mask, out_ids)
        self._init_parameters(mask, smask, layer_of, sizes)
        register_pure(self, mode, n)
        self.memory = MixedMemory(f, n) if mixed_memory else None
        self._register_memory_masks(smask[0], mask[0], order, ncps_compatible)
        self.readout = nn.Linear(len(out_ids), self.output_size) if output_size is not None else None
        self._cache = PreparedCache()

    def _register_layer_order(
        self, layer_of: np.ndarray, order: np.ndarray, sizes: List[int], mask: np.ndarray, out_ids: np.ndarray
    ) -> None:
        """The buffers that put neurons in layer order (the loops run layer by layer) and the
        feed-forward blocks between layers."""
        n, k = self.units, self.heads
        pos = np.argsort(order)  # layer-order position of each neuron id
        self.register_buffer("order", torch.tensor(order), persistent=False)
        self.register_buffer("position", torch.tensor(pos), persistent=False)
        self.register_buffer("out_index", torch.tensor(pos[out_ids]), persistent=False)
        # feed-forward (new state) entries: pre-synaptic layer before the post-synaptic one
        self.register_buffer(
            "recurrent_part",
            torch.tensor((layer_of[order][:, None] >= layer_of[order][None, :]).astype(np.float32)),
            persistent=False,
        )
        rows = [
            h * n + p
            for layer in range(len(sizes))
            for h in range(k)
            for p in range(self.bounds[layer], self.bounds[layer + 1])
        ]
        self.register_buffer("fused_rows", torch.tensor(rows, dtype=torch.int64), persistent=False)
        ff = (mask.sum(0) > 0) & (layer_of[:, None] < layer_of[None, :])
        blocks = sorted(
            {(int(layer_of[i]), int(layer_of[j])) for i, j in zip(*np.nonzero(ff))}, key=lambda b: b[1]
        )
        self.block_src = [b[0] for b in blocks]
        self.block_dst = [b[1] for b in blocks]

    def _register_memory_masks(
        self, sensory: np.ndarray, synapses: np.ndarray, order: np.ndarray, ncps_compatible: bool
    ) -> None:
        """Mixed memory: the LSTM's input and recurrent maps see what the heads see (``sensory``
        [F, N], ``synapses`` [N, N] presence), densely in ncps's cell; its rows in layer order."""
        n, f = self.units, self.input_size
        dense = ncps_compatible
        gate_in = np.ones((n, f), np.float32) if dense else sensory.T
        gate_rec = np.ones((n, n), np.float32) if dense else synapses.T
        self.register_buffer("memory_mask", torch.tensor(np.tile(gate_in, (4, 1))), persistent=False)
        self.register_buffer(
            "memory_recurrent_mask", torch.tensor(np.tile(gate_rec, (4, 1))), persistent=False
        )
        self.register_buffer(
            "memory_rows", torch.tensor([g * n + int(i) for g in range(4) for i in order]), persistent=False
        )

    def _init_parameters(
        self, mask: np.ndarray, smask: np.ndarray, layer_of: np.ndarray, sizes: List[int]
    ) -> None:
        """``weight``, ``sensory_weight``, ``bias``: xavier-like per post-synaptic neuron (fan-in = its
        active inputs), Linear-like bias."""
        n, f, k = self.units, self.input_size, self.heads
        fan_in = torch.tensor(mask[0].sum(0) + smask[0].sum(0)).clamp(min=1.0)
        bound = (6.0 / (fan_in + torch.tensor(sizes, dtype=torch.float32)[layer_of])).sqrt()
        self.weight = nn.Parameter((torch.rand(k, n, n) * 2 - 1) * bound)
        self.sensory_weight = nn.Parameter((torch.rand(k, f, n) * 2 - 1) * bound)
        self.bias = nn.Parameter((torch.rand(k, n) * 2 - 1) / fan_in.sqrt())

    def _load_from_state_dict(
        self, state_dict: Dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        check_wiring_buffers(self, state_dict, prefix, ("mask", "sensory_mask", "sign", "sensory_sign"))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs (wiring as its dict): ``WiredCfC(**m.config())`` rebuilds it."""
        return dict(self._config)

    def effective_weights(self) -> Tuple[Tensor, Tensor]:
        """(weight [K, N, N], sensory_weight [K, F, N]) as used: polarity applied, masks applied."""
        w, s = self.weight, self.sensory_weight
        w = (w * (1.0 - self.sign.abs()) + w.abs() * self.sign) * self.mask
        s = (s * (1.0 - self.sensory_sign.abs()) + s.abs() * self.sensory_sign) * self.sensory_mask
        return w, s

    def _prepare(self) -> List[Tensor]:
        """Weights in layer order as the loop uses them: ``[|w_tau|, A, W_in, b_in (+1 forget), W_rec]``
        (LSTM, masked; empty without mixed memory), sensory ``s`` [K n, F], bias [K n], the recurrent
        (previous-state) weight [n, K n], then one [src, K dst] block per feed-forward layer pair."""
        n, k, order = self.units, self.heads, self.order
        w, s = self.effective_weights()
        w = w.index_select(1, order).index_select(2, order)
        w_rec = (w * self.recurrent_part).permute(0, 2, 1).reshape(k * n, n).index_select(0, self.fused_rows)
        s = (
            s.index_select(2, order)
            .permute(0, 2, 1)
            .reshape(k * n, self.input_size)
            .index_select(0, self.fused_rows)
        )
        b = self.bias.index_select(1, order).reshape(k * n).index_select(0, self.fused_rows)
        w_tau, a = self.w_tau, self.A
        if self.mode == "pure":
            w_tau, a = w_tau.abs().index_select(0, order), a.index_select(0, order)
        out: List[Tensor] = [w_tau, a]
        memory = self.memory
        if memory is not None:
            wi = (memory.input_map.weight * self.memory_mask).index_select(0, self.memory_rows)
            bi = (memory.input_map.bias + memory.forget_offset).index_select(0, self.memory_rows)
            wr = (memory.recurrent_map.weight * self.memory_recurrent_mask).index_select(0, self.memory_rows)
            out += [wi, bi, wr.index_select(1, order)]
        else:
            out += [b[:0], b[:0], b[:0]]  # empty placeholders
        out += [s, b, w_rec.t().contiguous()]
        bounds = self.bounds
        for j in range(len(self.block_src)):
            src, dst = self.block_src[j], self.block_dst[j]
            blk = w[:, bounds[src] : bounds[src + 1], bounds[dst] : bounds[dst + 1]]
            out.append(blk.permute(0, 2, 1).reshape(-1, bounds[src + 1] - bounds[src]).t().contiguous())
        return out

    def _loop(
        self, x: Tensor, state: Tensor, ts: Tensor, prep: List[Tensor]
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """The recurrence with autograd (TorchScript, no-grad calls), layer order: (states, h, c)."""
        n, k, bounds = self.units, self.heads, self.bounds
        w_tau, a, wi, bi, wr, s, b, w_rec = (
            prep[0],
            prep[1],
            prep[2],
            prep[3],
            prep[4],
            prep[5],
            prep[6],
            prep[7],
        )
        blocks = prep[8:]
        x_part = F.linear(x, s, b).unbind(1)
        h = state[:, :n].index_select(1, self.order)
        c = state[:, n:].index_select(1, self.order) if self.mixed_memory else state[:, n:]
        m_part: List[Tensor] = F.linear(x, wi, bi).unbind(1) if self.mixed_memory else []
        steps = ts.unbind(1)
        layer_rows = [k * (bounds[layer + 1] - bounds[layer]) for layer in range(len(bounds) - 1)]
        outs: List[Tensor] = []
        for i in range(x.size(1)):
            if self.mixed_memory:
                h, c, _ = lstm_update(torch.addmm(m_part[i], h, wr.t()), c, n)
            pre = torch.addmm(x_part[i], h, w_rec).split(layer_rows, 1)
            news: List[Tensor] = []
            for layer in range(len(bounds) - 1):
                lo, hi = bounds[layer], bounds[layer + 1]
                z = pre[layer]
                for j in range(len(blocks)):
                    if self.block_dst[j] == layer:
                        z = torch.addmm(z, news[self.block_src[j]], blocks[j])
                if self.mode == "pure":  # per-neuron parameters of this layer
                    news.append(update(z, steps[i], hi - lo, self.mode, w_tau[lo:hi], a[lo:hi])[0])
                else:
                    news.append(update(z, steps[i], hi - lo, self.mode, w_tau, a)[0])
            h = torch.cat(news, 1)
            outs.append(h)
        return torch.stack(outs, 1), h, c

    @torch.jit.unused
    def _eager(self, x: Tensor, state: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Eager dispatch: hand-written BPTT when training, cached weights when no grad is needed."""
        if ts.requires_grad:  # elapsed-time gradients: only autograd has them
            return self._loop(x, state, ts, self._prepare())
        n = self.units
        h = state[:, :n].index_select(1, self.order)
        c = state[:, n:].index_select(1, self.order) if self.mixed_memory else state[:, n:]
        spec = WiredSpec(
            n, self.mode, self.heads, self.bounds, self.block_src, self.block_dst, self.mixed_memory
        )
        if not needs_grad(self, x, state):
            with torch.no_grad():
                weights = self._cache.get(
                    self, "loop", lambda: wired_loop_weights(self.mixed_memory, self._prepare())
                )
                outs, h, c = wired_run(spec, x, h, c, ts, weights)[1][:3]
                return torch.stack(outs, 1), h, c
        return WiredBPTT.apply(spec, x, h, c, ts, *self._prepare())

    def _outputs(self, seq: Tensor, h: Tensor, c: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """Layer order -> the motor neurons' outputs and the hidden state in neuron-id order."""
        c = c.index_select(1, self.position) if self.mixed_memory else c
        return seq.index_select(2, self.out_index), h.index_select(1, self.position), c
