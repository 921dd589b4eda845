"""Wirings: NCP construction rules, the lane-keeping preset, serialisation, picture."""

import json

import numpy as np
import pytest

from drive.nn.wiring import (
    NCP,
    AutoNCP,
    FullyConnected,
    Random,
    Wiring,
    as_wiring,
    lane_keeping_ncp,
    plot_wiring,
)


def test_lane_keeping_preset_has_252_synapses_and_1065_paper_parameters():
    w = lane_keeping_ncp()
    assert (w.units, w.input_dim, w.output_dim) == (19, 32, 1)
    assert w.sensory_synapse_count == 32 * 6
    assert w.synapse_count == 12 * 4 + 6 + 6
    assert w.total_synapse_count == 252
    assert w.paper_parameter_count == 3 * 19 + 4 * 252 == 1065


@pytest.mark.parametrize("seed", range(8))
def test_lane_keeping_synapse_count_does_not_depend_on_the_seed(seed):
    assert lane_keeping_ncp(seed=seed).total_synapse_count == 252


def test_lane_keeping_preset_is_about_70_percent_excitatory():
    pols = np.concatenate(
        [m[m != 0] for w in map(lane_keeping_ncp, range(5)) for m in (w.adjacency, w.sensory_adjacency)]
    )
    assert 0.65 < np.mean(pols > 0) < 0.75


def test_ncp_layers_are_ordered_motor_command_inter_and_connect_only_forward():
    w = lane_keeping_ncp()
    motor, command, inter = range(0, 1), range(1, 7), range(7, 19)
    assert [name for name, _ in w.layers] == ["inter", "command", "motor"]
    assert w.neurons_of_layer(0) == list(inter) and w.neurons_of_layer(2) == list(motor)
    assert [w.neuron_type(i) for i in (0, 1, 7)] == ["motor", "command", "inter"]
    a = w.adjacency != 0
    assert not w.sensory_adjacency[:, :7].any()  # sensory -> inter only
    assert not a[np.ix_(inter, inter)].any() and not a[np.ix_(inter, motor)].any()
    assert not a[motor, :].any()  # motor neurons have no outgoing synapses
    assert a[np.ix_(command, command)].sum() == 6  # the recurrent command synapses
    assert (a[np.ix_(inter, command)].sum(axis=1) == 4).all()
    assert (a[np.ix_(command, motor)].sum(axis=0) == 6).all()


def test_ncp_fills_in_neurons_the_fanout_missed():
    # 2 sensory inputs with fanout 1 can reach at most 2 of 6 inter neurons: the rest get fill-ins.
    w = NCP(
        6, 4, 2, sensory_fanout=1, inter_fanout=1, recurrent_command_synapses=0, motor_fanin=1, input_dim=2
    )
    inter, command = w.neurons_of_layer(0), w.neurons_of_layer(1)
    assert (np.abs(w.sensory_adjacency[:, inter]).sum(axis=0) >= 1).all()
    assert (np.abs(w.adjacency[np.ix_(inter, command)]).sum(axis=0) >= 1).all()
    assert (np.abs(w.adjacency[np.ix_(command, [0, 1])]).sum(axis=1) >= 1).all()


def test_autoncp_follows_the_ncps_recipe():
    w = AutoNCP(19, 1, sparsity=0.5, input_dim=32)
    assert len(w.neurons_of_layer(1)) == 7 and len(w.neurons_of_layer(0)) == 11
    assert w.sensory_synapse_count == 32 * 5
    # motor_fanin = int(7 * 0.5) = 3 draws, then the 4 unused command neurons are filled in.
    assert np.abs(w.adjacency[np.ix_(w.neurons_of_layer(1), [0])]).sum() == 7


def test_same_seed_same_wiring_other_seed_other_wiring():
    assert lane_keeping_ncp(seed=3) == lane_keeping_ncp(seed=3)
    assert lane_keeping_ncp(seed=3) != lane_keeping_ncp(seed=4)


def test_fully_connected_and_random_counts():
    fc = FullyConnected(8, 2, input_dim=3)
    assert (fc.synapse_count, fc.sensory_synapse_count, fc.output_dim) == (64, 24, 2)
    assert FullyConnected(8, self_connections=False, input_dim=3).synapse_count == 56
    r = Random(10, 2, sparsity=0.75, input_dim=4)
    assert (r.synapse_count, r.sensory_synapse_count) == (25, 10)


def test_json_round_trip_gives_identical_matrices_and_layers():
    for w in (
        lane_keeping_ncp(),
        AutoNCP(12, 2, input_dim=5),
        FullyConnected(4, 1, input_dim=2),
        Random(6, 2, 0.5, input_dim=3),
    ):
        back = Wiring.from_json(json.dumps(json.loads(w.to_json())))
        assert np.array_equal(back.adjacency, w.adjacency) and back.adjacency.dtype == np.int8
        assert np.array_equal(back.sensory_adjacency, w.sensory_adjacency)
        assert back.layers == w.layers and back.output_dim == w.output_dim and back == w
        assert back.kind == w.kind and back.params == w.params
        assert as_wiring(w.to_dict()) == w


def test_invalid_wirings_are_rejected_with_clear_errors():
    with pytest.raises(ValueError, match="sensory_fanout"):
        NCP(
            4,
            3,
            1,
            sensory_fanout=5,
            inter_fanout=2,
            recurrent_command_synapses=1,
            motor_fanin=1,
            input_dim=3,
        )
    with pytest.raises(ValueError, match="polarities"):
        Wiring(np.full((2, 2), 2), np.zeros((1, 2)), output_dim=1)
    with pytest.raises(ValueError, match="missing key"):
        Wiring.from_dict({"units": 2})
    with pytest.raises(ValueError, match="outputs"):
        AutoNCP(5, 3, input_dim=2)
    with pytest.raises(TypeError):
        as_wiring(19)


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "ncp.png"
    plot_wiring(lane_keeping_ncp(), str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
