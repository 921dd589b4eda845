"""``cfc_from_ncps``: an ``ncps.torch.CfC`` (dense or wired, trained weights) as the equivalent drive
module (``drive.nn.cfc.CfC`` / ``drive.nn.cfc.WiredCfC``); see ``docs/cfc.md`` for the mapping."""

from typing import Any, List, Optional, Union

import numpy as np
import torch
from torch import nn

from drive.nn.cfc.dense import CfC
from drive.nn.cfc.wired import WiredCfC
from drive.nn.wiring import Wiring

__all__ = ["cfc_from_ncps"]

_NCPS_ACTIVATIONS = {"LeCun": "lecun_tanh", "Tanh": "tanh", "ReLU": "relu", "GELU": "gelu", "SiLU": "silu"}


def _ncps_wiring(wiring: Any) -> Wiring:
    """An ncps.wirings.Wiring (built) as a drive Wiring with the same matrices and layers."""
    names = (
        ["inter", "command", "motor"]
        if wiring.num_layers == 3
        else [f"layer{i}" for i in range(wiring.num_layers)]
    )
    if wiring.num_layers == 1:
        names = ["all"]
    layers = [(names[i], [int(j) for j in wiring.get_neurons_of_layer(i)]) for i in range(wiring.num_layers)]
    return Wiring(
        wiring.adjacency_matrix,
        wiring.sensory_adjacency_matrix,
        output_dim=wiring.output_dim,
        layers=layers,
        kind="ncps." + type(wiring).__name__,
    )


def _heads(cell: Any, pure: bool) -> List[Any]:
    return [cell.ff1] if pure else [cell.ff1, cell.ff2, cell.time_a, cell.time_b]


def _wired(module: Any, cell: Any, output_size: Optional[int]) -> WiredCfC:
    """An ncps WiredCfCCell's weights scattered into a ``WiredCfC(ncps_compatible=True)``."""
    pure = cell._layers[0].mode == "pure"
    mixed = bool(module.use_mixed)
    wiring = _ncps_wiring(cell._wiring)
    out = WiredCfC(
        wiring, mode=cell._layers[0].mode, mixed_memory=mixed, output_size=output_size, ncps_compatible=True
    )
    out.weight.zero_()
    out.sensory_weight.zero_()
    previous: List[int] = []
    for index, layer in enumerate(cell._layers):
        ids = wiring.neurons_of_layer(index)
        n_in = layer.input_size
        for k, head in enumerate(_heads(layer, pure)):
            w = head.weight.detach()
            if index == 0:
                out.sensory_weight[k][:, ids] = w[:, :n_in].t()
            else:
                out.weight[k][np.ix_(previous, ids)] = w[:, :n_in].t()
            out.weight[k][np.ix_(ids, ids)] = w[:, n_in:].t()
            out.bias[k, ids] = head.bias.detach()
        if pure:
            out.w_tau[ids] = layer.w_tau.detach().reshape(-1)
            out.A[ids] = layer.A.detach().reshape(-1)
        previous = ids
    if mixed:  # ncps orders the LSTM's rows by layer, drive by neuron id
        order = torch.tensor(np.concatenate([idx for _, idx in wiring.layers]), dtype=torch.int64)
        rows = torch.cat([g * wiring.units + order for g in range(4)])
        out.memory.input_map.weight[rows] = module.lstm.input_map.weight.detach()
        out.memory.input_map.bias[rows] = module.lstm.input_map.bias.detach()
        rec = torch.zeros_like(out.memory.recurrent_map.weight)
        rec[rows.unsqueeze(1), order.unsqueeze(0)] = module.lstm.recurrent_map.weight.detach()
        out.memory.recurrent_map.weight.copy_(rec)
    return out


def _dense(module: Any, cell: Any, output_size: Optional[int]) -> CfC:
    """An ncps CfCCell's backbone and heads as a dense ``CfC`` (heads stacked ``[ff1|ff2|time_a|time_b]``)."""
    pure = cell.mode == "pure"
    mixed = bool(module.use_mixed)
    linears = [m for m in (cell.backbone or []) if isinstance(m, nn.Linear)]
    acts = [type(m).__name__ for m in (cell.backbone or []) if type(m).__name__ in _NCPS_ACTIVATIONS]
    drops = [m.p for m in (cell.backbone or []) if isinstance(m, nn.Dropout)]
    out = CfC(
        cell.input_size,
        cell.hidden_size,
        output_size=output_size,
        mode=cell.mode,
        mixed_memory=mixed,
        backbone_units=linears[0].out_features if linears else 128,
        backbone_layers=len(linears),
        backbone_activation=_NCPS_ACTIVATIONS[acts[0]] if acts else "lecun_tanh",
        backbone_dropout=drops[0] if drops else 0.0,
    )
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
    return out


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
    proj = module.fc if isinstance(module.fc, nn.Linear) else None
    output_size = None if proj is None else proj.out_features
    if hasattr(cell, "_layers"):
        out: Union[CfC, WiredCfC] = _wired(module, cell, output_size)
    else:
        out = _dense(module, cell, output_size)
    if proj is not None:
        if proj.in_features != out.readout.in_features:
            raise ValueError(
                f"the ncps module cannot run: its proj_size Linear expects {proj.in_features} "
                f"features but its last layer gives {out.readout.in_features}"
            )
        out.readout.load_state_dict(proj.state_dict())
    return out.train(module.training)
