"""Generated wirings: ``NCP`` (Lechner et al. 2020; ncps's construction rules), ``AutoNCP`` (an
NCP from a neuron budget), ``FullyConnected``, ``Random`` and ``lane_keeping_ncp()``, the
lane-keeping papers' network. Each is a :class:`~drive.nn.wiring.base.Wiring` whose ``kind`` and
``params`` record how it was generated; the same seed gives the same matrices.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from drive.nn.wiring.base import Wiring

__all__ = ["NCP", "AutoNCP", "FullyConnected", "Random", "lane_keeping_ncp"]


def _polarity(rng: np.random.Generator, excitatory_fraction: float) -> int:
    return 1 if rng.random() < excitatory_fraction else -1


def _polarities(rng: np.random.Generator, shape: Tuple[int, ...], excitatory_fraction: float) -> np.ndarray:
    return np.where(rng.random(shape) < excitatory_fraction, 1, -1).astype(np.int8)


def _check_fraction(excitatory_fraction: float) -> None:
    if not 0.0 <= excitatory_fraction <= 1.0:
        raise ValueError(f"excitatory_fraction must be in [0, 1], got {excitatory_fraction}")


def _check_ncp(
    inter: int,
    command: int,
    motor: int,
    input_dim: int,
    sensory_fanout: int,
    inter_fanout: int,
    recurrent_command_synapses: int,
    motor_fanin: int,
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


class _Draw:
    """The random synapses of an NCP, drawn from one generator; each synapse's polarity is drawn
    right after it (excitatory with probability ``excitatory_fraction``)."""

    def __init__(self, rng: np.random.Generator, excitatory_fraction: float) -> None:
        self.rng, self.excitatory_fraction = rng, excitatory_fraction

    def _synapse(self, m: np.ndarray, pre: int, post: int) -> None:
        m[pre, post] = _polarity(self.rng, self.excitatory_fraction)

    def project(self, m: np.ndarray, src: np.ndarray, dst: np.ndarray, fanout: int, fill_fanin: int) -> None:
        """Each source onto ``fanout`` distinct targets of ``m[source, target]``; every target left
        unreached then gets ``fill_fanin`` synapses from distinct random sources (rules 1, 2, 4)."""
        reached = set()
        for s in src:
            for d in self.rng.choice(dst, size=fanout, replace=False):
                self._synapse(m, s, d)
                reached.add(int(d))
        for d in dst:
            if int(d) not in reached:
                for s in self.rng.choice(src, size=fill_fanin, replace=False):
                    self._synapse(m, s, d)

    def recurrent(self, adj: np.ndarray, command: np.ndarray, count: int) -> None:
        """``count`` distinct command -> command synapses, self-loops allowed (rule 3)."""
        n = len(command)
        for p in self.rng.choice(n * n, size=count, replace=False):
            self._synapse(adj, command[p // n], command[p % n])


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
        sizes = (inter, command, motor, input_dim)
        _check_ncp(*sizes, sensory_fanout, inter_fanout, recurrent_command_synapses, motor_fanin)
        _check_fraction(excitatory_fraction)
        draw = _Draw(np.random.default_rng(seed), excitatory_fraction)
        n = inter + command + motor
        motor_ids = np.arange(0, motor)
        command_ids = np.arange(motor, motor + command)
        inter_ids = np.arange(motor + command, n)
        adj = np.zeros((n, n), np.int8)
        sens = np.zeros((input_dim, n), np.int8)
        # rules 1-4 of the class docstring, in this order (the seed's draws depend on it)
        fill = int(np.clip(input_dim * sensory_fanout // inter, 1, input_dim))
        draw.project(sens, np.arange(input_dim), inter_ids, sensory_fanout, fill)
        fill = int(np.clip(inter * inter_fanout // command, 1, inter))
        draw.project(adj, inter_ids, command_ids, inter_fanout, fill)
        draw.recurrent(adj, command_ids, recurrent_command_synapses)
        # rule 4 is rule 2 read backwards: each motor neuron draws its command neurons, and a command
        # neuron left out draws motor targets (the transposed view writes command -> motor synapses)
        fill = int(np.clip(motor * motor_fanin // command, 1, motor))
        draw.project(adj.T, motor_ids, command_ids, motor_fanin, fill)
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
