"""Import models from the reference library ``ncps`` (1.0.1): ``from_ncps(module)``.

``from_ncps`` turns an ``ncps.torch.LTC`` / ``LTCCell`` (and, through ``drive.nn.cfc.cfc_from_ncps``,
an ``ncps.torch.CfC``) with its wiring and trained weights into the drive module that computes the
same outputs (within 1e-5 in fp32) on the same inputs. ``wiring_from_ncps`` converts a built
``ncps.wirings.Wiring``.

Where ncps deviates from the papers, and how the LTC mapping handles it:
- Positivity: ncps's ``LTC`` wrapper defaults to ``implicit_param_constraints=True`` (w, sensory_w,
  cm, gleak pass through softplus inside the cell) while ``LTCCell`` defaults to False (clip with
  ``apply_weight_constraints()``): the defaults differ between cell and wrapper. The papers clip.
  drive maps the wrapper's choice to ``positivity="softplus"`` / ``"clip"`` and copies the raw
  parameters, so the effective values are identical.
- Init: ncps draws the raw parameters from the papers' ranges and then softplus-maps them, so its
  effective w, cm, gleak start in softplus(range) (e.g. gleak in [0.69, 1.31], not [0.001, 1]).
  drive initialises the effective values in the papers' ranges (irrelevant after conversion).
- Masks: ncps stores them as Parameters ``sparsity_mask`` / ``sensory_sparsity_mask`` (so loading a
  state_dict silently rewires the network); drive keeps them as buffers ``mask`` / ``sensory_mask``
  derived from the wiring and refuses a state_dict with a different mask.
- Input/output maps: ncps's "linear" mapping has no bias and any other value none at all; drive
  always has the affine maps, set here to the identity parts ncps lacks (same outputs).
- Elapsed time: ncps's wrapper only handles a scalar or per-sample elapsed time with B == N
  (batched timespans crash or broadcast wrongly, ncps issues #81-#83) and 0 gives NaN; drive takes
  timespans [B, L] and rejects dt <= 0.
- ncps's ``batch_first=False`` / ``return_sequences=False`` are layout options of its wrapper; drive
  is always batch-first and returns the whole sequence (take ``y[:, -1]``).
- ``mixed_memory=True`` LTCs have no drive equivalent (the papers' LTC has no LSTM memory): refused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from drive.nn.cfc import cfc_from_ncps
from drive.nn.ltc import CELL_PARAMETERS, LTC, MAPPING_PARAMETERS
from drive.nn.wiring import Wiring

__all__ = ["from_ncps", "wiring_from_ncps"]


def wiring_from_ncps(wiring: Any) -> Wiring:
    """A built ``ncps.wirings.Wiring`` as a drive ``Wiring`` with the same matrices (neuron ids kept;
    an ncps NCP's layers become ("inter", ...), ("command", ...), ("motor", ...))."""
    if not wiring.is_built():
        raise ValueError(
            "the ncps wiring is not built (its input size is unknown); call wiring.build(F) first"
        )
    if wiring.num_layers == 3:
        names = ["inter", "command", "motor"]
    elif wiring.num_layers == 1:
        names = ["all"]
    else:
        names = [f"layer{i}" for i in range(wiring.num_layers)]
    layers = [(names[i], [int(j) for j in wiring.get_neurons_of_layer(i)]) for i in range(wiring.num_layers)]
    return Wiring(
        wiring.adjacency_matrix,
        wiring.sensory_adjacency_matrix,
        output_dim=wiring.output_dim,
        layers=layers,
        kind="ncps." + type(wiring).__name__,
    )


@torch.no_grad()
def _ltc_from_ncps(cell: Any, softplus: bool) -> LTC:
    params = cell._params
    out = LTC(
        wiring_from_ncps(cell._wiring),
        ode_unfolds=int(cell._ode_unfolds),
        epsilon=float(cell._epsilon),
        positivity="softplus" if softplus else "clip",
    )
    for name in CELL_PARAMETERS:
        getattr(out, name).copy_(params[name])
    for name in MAPPING_PARAMETERS:
        if name in params:
            getattr(out, name).copy_(params[name])
    for ncps_name, ours in (("sparsity_mask", out.mask), ("sensory_sparsity_mask", out.sensory_mask)):
        if not torch.equal(params[ncps_name].detach().to(ours.dtype), ours):
            raise ValueError(f"the ncps module's {ncps_name} no longer matches its wiring; cannot convert")
    return out.train(cell.training)


def from_ncps(module: nn.Module) -> nn.Module:
    """Convert an ``ncps.torch`` LTC, LTCCell or CfC (with its weights) into the drive module.

    LTC -> ``drive.nn.LTC`` (same wiring, ode_unfolds, epsilon, positivity); CfC ->
    ``drive.nn.cfc.cfc_from_ncps`` (dense ``CfC`` or ``WiredCfC``). Outputs match ncps within 1e-5
    for the same x, initial state and elapsed times (drive takes timespans [B, L] in seconds).
    """
    kind = type(module).__name__
    if kind == "LTC" and hasattr(module, "rnn_cell"):
        if getattr(module, "use_mixed", False):
            raise NotImplementedError("ncps LTC with mixed_memory=True has no drive equivalent")
        return _ltc_from_ncps(module.rnn_cell, bool(module.rnn_cell._implicit_param_constraints))
    if kind == "LTCCell":
        return _ltc_from_ncps(module, bool(module._implicit_param_constraints))
    if kind == "CfC" and hasattr(module, "rnn_cell"):
        return cfc_from_ncps(module)
    raise TypeError(f"from_ncps expects an ncps.torch LTC, LTCCell or CfC, got {kind}")
