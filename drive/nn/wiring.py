"""Wirings: which neuron talks to which, and with what polarity (NCP, Lechner et al. 2020).

A wiring is plain data, fixed at construction (the sensory input size is a constructor argument, so
there is no lazy ``build()``):

- ``units`` N, ``input_dim`` F (sensory features), ``output_dim`` M (motor neurons).
- ``adjacency``: ``np.ndarray`` int8 [N, N]; ``adjacency[i, j]`` is the polarity of the synapse from
  pre-synaptic neuron i to post-synaptic neuron j: +1 excitatory, -1 inhibitory, 0 absent.
- ``sensory_adjacency``: int8 [F, N], same convention, from input feature i to neuron j.
- Neuron order is motor, command, inter: motor neurons are indices 0..M-1 (the outputs).
- ``layers``: list of ``(name, [neuron indices])`` in signal-flow order, e.g.
  ``[("inter", [7..18]), ("command", [1..6]), ("motor", [0])]`` for an NCP and
  ``[("all", [0..N-1])]`` for unstructured wirings. ``num_layers``, ``neurons_of_layer(k)`` and
  ``neuron_type(i)`` ("motor" / "command" / "inter" / "hidden") read it.
- ``synapse_count`` (between neurons) and ``sensory_synapse_count`` (inputs -> neurons).
- ``to_dict()`` / ``Wiring.from_dict(d)``, ``to_json()`` / ``Wiring.from_json(s)``: the matrices are
  the truth (a round trip gives identical matrices and layers, independent of numpy's RNG);
  ``kind`` and ``params`` record how the wiring was generated.
- ``plot(path)`` writes a PNG of the graph by layer, edges coloured by polarity.

Generators: ``NCP`` (sensory -> inter -> command -> motor with fill-in synapses for unreached
neurons and recurrent command synapses), ``AutoNCP``, ``FullyConnected``, ``Random``, and
``lane_keeping_ncp()``: the paper's lane-keeping network (32 sensory, 12 inter, 6 command, 1 motor,
fanouts 6/4/6/6, 70% excitatory) with 252 synapses, 3*19 + 4*252 = 1,065 parameters in the paper's
count (``paper_parameter_count``).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "Wiring",
    "NCP",
    "AutoNCP",
    "FullyConnected",
    "Random",
    "lane_keeping_ncp",
    "as_wiring",
    "check_wiring_buffers",
]

Layers = List[Tuple[str, List[int]]]


class Wiring:
    """A fixed wiring given by its polarity matrices (see the module docstring for conventions)."""

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

    # -- picture ---------------------------------------------------------------------------
    def plot(self, path: str, title: Optional[str] = None) -> None:
        """Write a PNG of the graph by layer, edges coloured by polarity
        (:func:`drive.nn.wiring_plot.plot_wiring`)."""
        # matplotlib loads only when a wiring is drawn (start-up time: ~1 s for every importer of drive.nn)
        from drive.nn.wiring_plot import plot_wiring

        plot_wiring(self, path, title)


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


def _polarity(rng: np.random.Generator, excitatory_fraction: float) -> int:
    return 1 if rng.random() < excitatory_fraction else -1


def _polarities(rng: np.random.Generator, shape: Tuple[int, ...], excitatory_fraction: float) -> np.ndarray:
    return np.where(rng.random(shape) < excitatory_fraction, 1, -1).astype(np.int8)


def _check_fraction(excitatory_fraction: float) -> None:
    if not 0.0 <= excitatory_fraction <= 1.0:
        raise ValueError(f"excitatory_fraction must be in [0, 1], got {excitatory_fraction}")


class NCP(Wiring):
    """Neural Circuit Policy wiring (Lechner et al. 2020): sensory -> inter -> command -> motor.

    Neurons are ordered motor [0, motor), command, inter. Construction (ncps's rules):
    1. each sensory input synapses onto ``sensory_fanout`` distinct inter neurons; every inter neuron
       left unreached gets ``clip(F * sensory_fanout // inter, 1, F)`` synapses from random inputs;
    2. each inter neuron onto ``inter_fanout`` distinct command neurons; unreached command neurons get
       ``clip(inter * inter_fanout // command, 1, command)`` synapses from random inter neurons;
    3. ``recurrent_command_synapses`` distinct command -> command synapses (self-loops allowed);
       ncps draws them with replacement, so collisions can silently give fewer;
    4. each motor neuron receives ``motor_fanin`` distinct command neurons; command neurons left
       without a motor target get ``clip(motor * motor_fanin // command, 1, motor)`` motor targets.
    Each synapse is excitatory with probability ``excitatory_fraction`` (ncps: 0.5; the authors'
    lane-keeping code: 0.7). ``input_dim`` is the number of sensory features F.
    """

    def __init__(
        self,
        inter: int,
        command: int,
        motor: int,
        sensory_fanout: int,
        inter_fanout: int,
        recurrent_command_synapses: int,
        motor_fanin: int,
        seed: int = 22222,
        excitatory_fraction: float = 0.5,
        *,
        input_dim: int,
    ) -> None:
        for name, v, hi in (
            ("sensory_fanout", sensory_fanout, inter),
            ("inter_fanout", inter_fanout, command),
            ("motor_fanin", motor_fanin, command),
        ):
            if not 1 <= v <= hi:
                raise ValueError(f"{name}={v} must be in 1..{hi}")
        if min(inter, command, motor, input_dim) < 1:
            raise ValueError("inter, command, motor and input_dim must all be >= 1")
        if not 0 <= recurrent_command_synapses <= command * command:
            raise ValueError(f"recurrent_command_synapses must be in 0..{command * command}")
        _check_fraction(excitatory_fraction)
        rng = np.random.default_rng(seed)
        n = inter + command + motor
        motor_ids = np.arange(0, motor)
        command_ids = np.arange(motor, motor + command)
        inter_ids = np.arange(motor + command, n)
        adj = np.zeros((n, n), np.int8)
        sens = np.zeros((input_dim, n), np.int8)

        def connect(m: np.ndarray, src_ids: np.ndarray, dst_ids: np.ndarray, fanout: int) -> set:
            reached = set()
            for s in src_ids:
                for d in rng.choice(dst_ids, size=fanout, replace=False):
                    m[s, d] = _polarity(rng, excitatory_fraction)
                    reached.add(int(d))
            return reached

        def fill_in_targets(
            m: np.ndarray, src_ids: np.ndarray, dst_ids: np.ndarray, reached: set, fanin: int
        ) -> None:
            for d in dst_ids:
                if int(d) not in reached:
                    for s in rng.choice(src_ids, size=fanin, replace=False):
                        m[s, d] = _polarity(rng, excitatory_fraction)

        sensory_ids = np.arange(input_dim)
        reached = connect(sens, sensory_ids, inter_ids, sensory_fanout)
        fill_in_targets(
            sens,
            sensory_ids,
            inter_ids,
            reached,
            int(np.clip(input_dim * sensory_fanout // inter, 1, input_dim)),
        )
        reached = connect(adj, inter_ids, command_ids, inter_fanout)
        fill_in_targets(
            adj, inter_ids, command_ids, reached, int(np.clip(inter * inter_fanout // command, 1, inter))
        )
        pairs = rng.choice(command * command, size=recurrent_command_synapses, replace=False)
        for p in pairs:
            adj[command_ids[p // command], command_ids[p % command]] = _polarity(rng, excitatory_fraction)
        used = set()
        for d in motor_ids:
            for s in rng.choice(command_ids, size=motor_fanin, replace=False):
                adj[s, d] = _polarity(rng, excitatory_fraction)
                used.add(int(s))
        fanout = int(np.clip(motor * motor_fanin // command, 1, motor))
        for s in command_ids:
            if int(s) not in used:
                for d in rng.choice(motor_ids, size=fanout, replace=False):
                    adj[s, d] = _polarity(rng, excitatory_fraction)
        super().__init__(
            adj,
            sens,
            output_dim=motor,
            layers=[
                ("inter", inter_ids.tolist()),
                ("command", command_ids.tolist()),
                ("motor", motor_ids.tolist()),
            ],
            kind="NCP",
            params=dict(
                inter=inter,
                command=command,
                motor=motor,
                sensory_fanout=sensory_fanout,
                inter_fanout=inter_fanout,
                recurrent_command_synapses=recurrent_command_synapses,
                motor_fanin=motor_fanin,
                seed=seed,
                excitatory_fraction=excitatory_fraction,
                input_dim=input_dim,
            ),
        )


class AutoNCP(NCP):
    """An NCP from a neuron budget (ncps's recipe): command = max(int(0.4 (units - outputs)), 1),
    inter = the rest; with density d = 1 - sparsity: sensory_fanout = max(int(inter d), 1),
    inter_fanout = motor_fanin = max(int(command d), 1), recurrent = max(int(2 command d), 1)."""

    def __init__(
        self,
        units: int,
        outputs: int,
        sparsity: float = 0.5,
        seed: int = 22222,
        excitatory_fraction: float = 0.5,
        *,
        input_dim: int,
    ) -> None:
        if outputs >= units - 2:
            raise ValueError(f"outputs must be < units - 2 (units={units}, outputs={outputs})")
        if not 0.1 <= sparsity <= 0.9:
            raise ValueError(f"sparsity must be in [0.1, 0.9], got {sparsity}")
        density = 1.0 - sparsity
        command = max(int(0.4 * (units - outputs)), 1)
        inter = units - outputs - command
        super().__init__(
            inter,
            command,
            outputs,
            sensory_fanout=max(int(inter * density), 1),
            inter_fanout=max(int(command * density), 1),
            recurrent_command_synapses=max(int(command * density * 2), 1),
            motor_fanin=max(int(command * density), 1),
            seed=seed,
            excitatory_fraction=excitatory_fraction,
            input_dim=input_dim,
        )
        self.kind = "AutoNCP"
        self.params.update(units=units, outputs=outputs, sparsity=sparsity)


class FullyConnected(Wiring):
    """Every input to every neuron and every neuron to every neuron (optionally without
    self-connections); polarity excitatory with probability ``excitatory_fraction`` (ncps: 2/3)."""

    def __init__(
        self,
        units: int,
        output_dim: Optional[int] = None,
        seed: int = 1111,
        excitatory_fraction: float = 2.0 / 3.0,
        self_connections: bool = True,
        *,
        input_dim: int,
    ) -> None:
        _check_fraction(excitatory_fraction)
        rng = np.random.default_rng(seed)
        adj = _polarities(rng, (units, units), excitatory_fraction)
        if not self_connections:
            np.fill_diagonal(adj, 0)
        super().__init__(
            adj,
            _polarities(rng, (input_dim, units), excitatory_fraction),
            output_dim=output_dim or units,
            kind="FullyConnected",
            params=dict(
                units=units,
                output_dim=output_dim or units,
                seed=seed,
                excitatory_fraction=excitatory_fraction,
                self_connections=self_connections,
                input_dim=input_dim,
            ),
        )


class Random(Wiring):
    """A random fraction ``1 - sparsity`` of all neuron->neuron and input->neuron synapses."""

    def __init__(
        self,
        units: int,
        output_dim: Optional[int] = None,
        sparsity: float = 0.0,
        seed: int = 1111,
        excitatory_fraction: float = 2.0 / 3.0,
        *,
        input_dim: int,
    ) -> None:
        if not 0.0 <= sparsity < 1.0:
            raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
        _check_fraction(excitatory_fraction)
        rng = np.random.default_rng(seed)

        def sample(rows: int) -> np.ndarray:
            m = np.zeros(rows * units, np.int8)
            keep = rng.choice(rows * units, size=int(round(rows * units * (1.0 - sparsity))), replace=False)
            m[keep] = _polarities(rng, (keep.size,), excitatory_fraction)
            return m.reshape(rows, units)

        super().__init__(
            sample(units),
            sample(input_dim),
            output_dim=output_dim or units,
            kind="Random",
            params=dict(
                units=units,
                output_dim=output_dim or units,
                sparsity=sparsity,
                seed=seed,
                excitatory_fraction=excitatory_fraction,
                input_dim=input_dim,
            ),
        )


def lane_keeping_ncp(seed: int = 22222, input_dim: int = 32) -> NCP:
    """The NCP of the lane-keeping papers: 32 sensory features, 12 inter, 6 command, 1 motor neuron,
    sensory fanout 6, inter fanout 4, 6 recurrent command synapses, motor fanin 6, 70% excitatory.
    192 sensory + 48 inter->command + 6 recurrent + 6 command->motor = 252 synapses (the authors'
    code; the paper says 253), 3*19 + 4*252 = 1,065 parameters in the paper's count."""
    return NCP(
        12,
        6,
        1,
        sensory_fanout=6,
        inter_fanout=4,
        recurrent_command_synapses=6,
        motor_fanin=6,
        seed=seed,
        excitatory_fraction=0.7,
        input_dim=input_dim,
    )
