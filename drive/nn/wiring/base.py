"""``Wiring``: a fixed wiring given by its polarity matrices, checked at construction, with its
structure queries and JSON round trip; ``as_wiring`` and ``check_wiring_buffers`` for the modules
built on one. The conventions (neuron order, polarity, layers) are in :mod:`drive.nn.wiring`.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["Wiring", "as_wiring", "check_wiring_buffers"]

Layers = List[Tuple[str, List[int]]]


class Wiring:
    """A fixed wiring given by its polarity matrices (conventions: :mod:`drive.nn.wiring`)."""

    def __init__(
        self,
        adjacency: Any,
        sensory_adjacency: Any,
        output_dim: int,
        layers: Optional[Sequence[Tuple[str, Sequence[int]]]] = None,
        kind: str = "Wiring",
        params: Optional[Dict[str, Any]] = None,
    ) -> None:
        adj = np.asarray(adjacency)
        sens = np.asarray(sensory_adjacency)
        if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
            raise ValueError(f"adjacency must be square [N, N], got shape {adj.shape}")
        units = adj.shape[0]
        if sens.ndim != 2 or sens.shape[1] != units:
            raise ValueError(f"sensory_adjacency must be [F, {units}], got shape {sens.shape}")
        for name, m in (("adjacency", adj), ("sensory_adjacency", sens)):
            if not np.all(np.isin(m, (-1, 0, 1))):
                raise ValueError(f"{name} entries must be polarities -1, 0 or +1")
        if not 1 <= int(output_dim) <= units:
            raise ValueError(f"output_dim must be in 1..{units}, got {output_dim}")
        self.adjacency: np.ndarray = adj.astype(np.int8)
        self.sensory_adjacency: np.ndarray = sens.astype(np.int8)
        self.units: int = int(units)
        self.input_dim: int = int(sens.shape[0])
        self.output_dim: int = int(output_dim)
        if layers is None:
            layers = [("all", list(range(units)))]
        self.layers: Layers = [(str(n), [int(i) for i in idx]) for n, idx in layers]
        covered = sorted(i for _, idx in self.layers for i in idx)
        if covered != list(range(units)):
            raise ValueError("layers must partition the neurons 0..N-1")
        self.kind = kind
        self.params: Dict[str, Any] = dict(params or {})

    # -- structure -------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def neurons_of_layer(self, layer_id: int) -> List[int]:
        """Neuron indices of layer ``layer_id`` (0 = first layer after the sensory inputs)."""
        return list(self.layers[layer_id][1])

    def neuron_type(self, neuron: int) -> str:
        for name, idx in self.layers:
            if neuron in idx:
                if name == "all":
                    return "motor" if neuron < self.output_dim else "hidden"
                return name
        raise ValueError(f"neuron {neuron} not in 0..{self.units - 1}")

    @property
    def synapse_count(self) -> int:
        """Synapses between neurons (non-zero entries of ``adjacency``)."""
        return int(np.count_nonzero(self.adjacency))

    @property
    def sensory_synapse_count(self) -> int:
        """Synapses from the inputs to the neurons (non-zero entries of ``sensory_adjacency``)."""
        return int(np.count_nonzero(self.sensory_adjacency))

    @property
    def total_synapse_count(self) -> int:
        return self.synapse_count + self.sensory_synapse_count

    @property
    def paper_parameter_count(self) -> int:
        """The papers' count: 3 per neuron (cm, gleak, vleak) + 4 per synapse (w, erev, mu, sigma),
        sensory synapses included; the input/output affine maps are not counted."""
        return 3 * self.units + 4 * self.total_synapse_count

    def mask(self) -> np.ndarray:
        """float32 [N, N] 0/1 presence of each synapse."""
        return np.abs(self.adjacency).astype(np.float32)

    def sensory_mask(self) -> np.ndarray:
        """float32 [F, N] 0/1 presence of each sensory synapse."""
        return np.abs(self.sensory_adjacency).astype(np.float32)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Wiring)
            and self.output_dim == other.output_dim
            and np.array_equal(self.adjacency, other.adjacency)
            and np.array_equal(self.sensory_adjacency, other.sensory_adjacency)
            and self.layers == other.layers
        )

    def __repr__(self) -> str:
        return (
            f"{self.kind}(units={self.units}, input_dim={self.input_dim}, output_dim={self.output_dim}, "
            f"synapses={self.synapse_count}, sensory_synapses={self.sensory_synapse_count})"
        )

    # -- serialisation ---------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """JSON-able dict holding the matrices (the truth) and how they were generated."""
        return {
            "kind": self.kind,
            "params": dict(self.params),
            "units": self.units,
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "layers": [[name, list(idx)] for name, idx in self.layers],
            "adjacency": self.adjacency.tolist(),
            "sensory_adjacency": self.sensory_adjacency.tolist(),
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Wiring":
        try:
            w = Wiring(
                np.array(d["adjacency"], dtype=np.int64).reshape(d["units"], d["units"]),
                np.array(d["sensory_adjacency"], dtype=np.int64).reshape(d["input_dim"], d["units"]),
                output_dim=d["output_dim"],
                layers=[(n, idx) for n, idx in d["layers"]],
                kind=d.get("kind", "Wiring"),
                params=d.get("params", {}),
            )
        except KeyError as e:
            raise ValueError(f"wiring dict is missing key {e}") from None
        return w

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "Wiring":
        return cls.from_dict(json.loads(text))


def as_wiring(wiring: Any) -> Wiring:
    """Accept a ``Wiring`` or its JSON dict (as stored in configs and checkpoints)."""
    if isinstance(wiring, Wiring):
        return wiring
    if isinstance(wiring, dict):
        return Wiring.from_dict(wiring)
    raise TypeError(f"expected a Wiring or its dict, got {type(wiring).__name__}")


def check_wiring_buffers(module: Any, state_dict: Dict[str, Any], prefix: str, names: Sequence[str]) -> None:
    """Refuse a state_dict whose wiring buffers (masks, polarities) differ from ``module``'s: loading
    weights must never silently rewire a network. Call from ``_load_from_state_dict``."""
    for name in names:
        theirs, ours = state_dict.get(prefix + name), getattr(module, name)
        if theirs is not None and (
            theirs.shape != ours.shape or not bool((theirs.to(ours.device, ours.dtype) == ours).all())
        ):
            raise ValueError(
                f"wiring mismatch: the state_dict's {prefix + name} (shape {tuple(theirs.shape)}) "
                f"differs from this module's wiring (shape {tuple(ours.shape)}); build the module "
                "from the checkpoint's wiring instead"
            )
