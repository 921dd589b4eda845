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
- ``plot_wiring(wiring, path)`` writes a PNG of the graph by layer, edges coloured by polarity.

Generators: ``NCP`` (sensory -> inter -> command -> motor with fill-in synapses for unreached
neurons and recurrent command synapses), ``AutoNCP``, ``FullyConnected``, ``Random``, and
``lane_keeping_ncp()``: the paper's lane-keeping network (32 sensory, 12 inter, 6 command, 1 motor,
fanouts 6/4/6/6, 70% excitatory) with 252 synapses, 3*19 + 4*252 = 1,065 parameters in the paper's
count (``paper_parameter_count``).

The package: ``base`` holds ``Wiring`` (the data, its checks and serialisation), ``as_wiring`` and
``check_wiring_buffers``; ``generators`` the generated wirings above; ``plot`` draws one
(matplotlib loads only when a wiring is drawn).
"""

from drive.nn.wiring.base import Wiring, as_wiring, check_wiring_buffers
from drive.nn.wiring.generators import NCP, AutoNCP, FullyConnected, Random, lane_keeping_ncp
from drive.nn.wiring.plot import plot_wiring

__all__ = [
    "Wiring",
    "NCP",
    "AutoNCP",
    "FullyConnected",
    "Random",
    "lane_keeping_ncp",
    "as_wiring",
    "check_wiring_buffers",
    "plot_wiring",
]
