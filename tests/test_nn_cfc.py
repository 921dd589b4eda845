"""CfC (dense and wired) against the paper's equations, the wiring, and the recurrent-module contract."""

import json

import numpy as np
import pytest
import torch

from drive.nn.cfc import MODES, CfC, WiredCfC
from drive.nn.wiring import NCP, Wiring, lane_keeping_ncp


def lecun(x):
    return 1.7159 * torch.tanh(0.666 * x)


def cfc_eq(mode, heads, t, n, w_tau=None, a=None):
    """Eq. 10 (default), CfC-noGate, Eq. 9 (pure, B = -A) from head pre-activations."""
    if mode == "pure":
        f = heads[:, :n]
        return -a * torch.exp(-(w_tau.abs() + f.abs()) * t) * f + a
    g, h = torch.tanh(heads[:, :n]), torch.tanh(heads[:, n : 2 * n])
    f_t = -(heads[:, 2 * n : 3 * n] * t + heads[:, 3 * n :])  # sigma(-f t) of Eq. 10
    if mode == "no_gate":
        return g + (1 - torch.sigmoid(f_t)) * h
    return torch.sigmoid(f_t) * g + (1 - torch.sigmoid(f_t)) * h


def lstm_ref(mem, x, h, c):
    z = x @ mem.input_map.weight.T + mem.input_map.bias + h @ mem.recurrent_map.weight.T
    i, ig, fg, og = z.chunk(4, 1)
    c = c * torch.sigmoid(fg + 1.0) + torch.tanh(i) * torch.sigmoid(ig)
    return torch.tanh(c) * torch.sigmoid(og), c


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mixed", [False, True])
def test_dense_cfc_matches_the_papers_equations(mode, mixed):
    torch.manual_seed(0)
    m = CfC(5, 6, output_size=2, mode=mode, mixed_memory=mixed, backbone_units=7, backbone_layers=2).eval()
    if mode == "pure":
        with torch.no_grad():
            m.w_tau.uniform_(-1, 1)
            m.A.uniform_(-2, 2)
    x, ts = torch.randn(3, 4, 5), torch.rand(3, 4) * 2 + 0.1
    h, c = torch.randn(3, 6), torch.randn(3, 6)
    y, hid = m(x, torch.cat([h, c], 1) if mixed else h, ts)
    outs = []
    for t in range(4):
        if mixed:
            h, c = lstm_ref(m.memory, x[:, t], h, c)
        z = torch.cat([x[:, t], h], 1)
        for layer in m.layers[:-1]:
            z = lecun(layer(z))
        h = cfc_eq(
            mode, m.layers[-1](z), ts[:, t : t + 1], 6, getattr(m, "w_tau", None), getattr(m, "A", None)
        )
        outs.append(m.readout(h))
    torch.testing.assert_close(y, torch.stack(outs, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(hid, torch.cat([h, c], 1) if mixed else h, atol=1e-5, rtol=1e-5)


def test_pure_mode_keeps_its_own_init():
    m = CfC(3, 4, mode="pure")
    assert torch.equal(m.w_tau, torch.zeros(4)) and torch.equal(m.A, torch.ones(4))
    assert len(m.layers[-1].weight) == 4  # only ff1 in Cf-S


def wired_reference(m, wiring, x, ts, mode):
    """Per-neuron loop over the wiring: polarity |w| * p, new state from earlier layers, old otherwise."""
    adj = torch.tensor(wiring.adjacency, dtype=torch.float32)
    sens = torch.tensor(wiring.sensory_adjacency, dtype=torch.float32)
    k = 1 if mode == "pure" else 4
    w = torch.stack(
        [
            torch.where(adj != 0, m.weight[i].abs() * adj, m.weight[i]) if i < 2 else m.weight[i]
            for i in range(k)
        ]
    )
    s = torch.stack(
        [
            torch.where(sens != 0, m.sensory_weight[i].abs() * sens, 0 * sens)
            if i < 2
            else m.sensory_weight[i] * (sens != 0)
            for i in range(k)
        ]
    )
    present = (adj != 0) | torch.eye(wiring.units, dtype=torch.bool)
    layer_of = {j: layer for layer, (_, idx) in enumerate(wiring.layers) for j in idx}
    h = torch.zeros(x.size(0), wiring.units)
    ys = []
    for t in range(x.size(1)):
        new = h.clone()
        for _, idx in wiring.layers:
            for j in idx:
                src = [new[:, i] if layer_of[i] < layer_of[j] else h[:, i] for i in range(wiring.units)]
                src = torch.stack(src, 1) * present[:, j]
                heads = torch.stack(
                    [m.bias[i, j] + x[:, t] @ s[i][:, j] + src @ w[i][:, j] for i in range(k)], 1
                )
                wt = m.w_tau[j : j + 1] if mode == "pure" else None
                a = m.A[j : j + 1] if mode == "pure" else None
                new[:, j] = cfc_eq(mode, heads, ts[:, t : t + 1], 1, wt, a)[:, 0]
        h = new
        ys.append(h[:, : wiring.output_dim])
    return torch.stack(ys, 1), h


@pytest.mark.parametrize("mode", MODES)
def test_wired_cfc_matches_a_per_neuron_reference_of_the_wiring(mode):
    torch.manual_seed(1)
    wiring = NCP(
        4,
        3,
        2,
        sensory_fanout=2,
        inter_fanout=2,
        recurrent_command_synapses=4,
        motor_fanin=2,
        seed=3,
        input_dim=3,
    )
    m = WiredCfC(wiring, mode=mode)
    x, ts = torch.randn(2, 3, 3), torch.rand(2, 3) + 0.2
    y, h = m(x, None, ts)
    with torch.no_grad():
        y_ref, h_ref = wired_reference(m, wiring, x, ts, mode)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h, h_ref, atol=1e-5, rtol=1e-5)


def rewired(wiring, adjacency):
    return Wiring(adjacency, wiring.sensory_adjacency, wiring.output_dim, wiring.layers)


def same_parameters(a, b):
    b.load_state_dict(
        {k: v for k, v in a.state_dict().items() if "mask" not in k and "sign" not in k}, strict=False
    )
    return b


@pytest.mark.parametrize("compatible", [False, True])
def test_recurrent_command_synapses_matter_unless_ncps_compatible(compatible):
    torch.manual_seed(2)
    wiring = lane_keeping_ncp()
    command = wiring.neurons_of_layer(1)
    no_rec = wiring.adjacency.copy()
    no_rec[np.ix_(command, command)] = 0
    assert np.count_nonzero(wiring.adjacency) - np.count_nonzero(no_rec) == 6
    a = WiredCfC(wiring, ncps_compatible=compatible)
    b = same_parameters(a, WiredCfC(rewired(wiring, no_rec), ncps_compatible=compatible))
    x = torch.randn(2, 6, 32)
    diff = (a(x)[0] - b(x)[0]).abs().max().item()
    assert diff == 0.0 if compatible else diff > 1e-4


@pytest.mark.parametrize("compatible", [False, True])
def test_synapse_polarity_matters_unless_ncps_compatible(compatible):
    torch.manual_seed(3)
    wiring = lane_keeping_ncp()
    a = WiredCfC(wiring, ncps_compatible=compatible)
    b = same_parameters(a, WiredCfC(rewired(wiring, -wiring.adjacency), ncps_compatible=compatible))
    x = torch.randn(2, 6, 32)
    diff = (a(x)[0] - b(x)[0]).abs().max().item()
    assert diff == 0.0 if compatible else diff > 1e-4


def test_effective_weights_keep_the_polarity_through_training():
    torch.manual_seed(4)
    wiring = lane_keeping_ncp()
    m = WiredCfC(wiring)
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    for _ in range(3):
        opt.zero_grad()
        m(torch.randn(4, 5, 32))[0].pow(2).sum().backward()
        opt.step()
    w, s = m.effective_weights()
    adj, sens = torch.tensor(wiring.adjacency), torch.tensor(wiring.sensory_adjacency)
    for head in (0, 1):
        assert torch.all(w[head] * adj >= 0) and torch.all(s[head] * sens >= 0)
    assert torch.all(w[2][(adj == 0) & ~torch.eye(19, dtype=torch.bool)] == 0)


def test_gradients_reach_every_parameter_and_no_absent_synapse():
    torch.manual_seed(5)
    m = WiredCfC(lane_keeping_ncp(), mixed_memory=True, output_size=2)
    m(torch.randn(3, 5, 32), None, torch.rand(3, 5) + 0.1)[0].pow(2).sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert torch.all(m.weight.grad[m.mask == 0] == 0)
    assert torch.all(m.sensory_weight.grad[m.sensory_mask == 0] == 0)
    assert torch.all(m.memory.recurrent_map.weight.grad[m.memory_recurrent_mask == 0] == 0)


def test_backbone_dropout_works_with_one_layer_in_train_mode_only():
    torch.manual_seed(6)
    m = CfC(8, 16, backbone_layers=1, backbone_dropout=0.5)
    plain = CfC(8, 16, backbone_layers=1)
    plain.load_state_dict(m.state_dict())
    x = torch.randn(2, 4, 8)
    assert (m.train()(x)[0] - m(x)[0]).abs().max() > 1e-3
    torch.testing.assert_close(m.eval()(x)[0], plain.eval()(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize(
    "make, regular",
    [
        (lambda: CfC(6, 8, output_size=2, mixed_memory=True, backbone_activation="gelu"), False),
        (lambda: CfC(6, 8, mode="pure", backbone_layers=0), False),
        (lambda: WiredCfC(NCP(5, 4, 2, 2, 2, 3, 2, input_dim=6), mode="no_gate", mixed_memory=True), False),
        (lambda: WiredCfC(NCP(5, 4, 2, 2, 2, 3, 2, input_dim=6)), False),
        (lambda: CfC(6, 8, output_size=2), True),  # eager runs the sigmoid form, TorchScript the tanh loop
        (lambda: CfC(6, 8, backbone_layers=2, backbone_activation="tanh"), True),
    ],
)
def test_scripted_equals_eager_and_step_equals_forward(make, regular):
    torch.manual_seed(7)
    m = make().eval()
    s = torch.jit.script(m)
    x, ts = torch.randn(3, 5, 6), torch.ones(3, 5) if regular else torch.rand(3, 5) + 0.05
    y, h = m(x, None, None if regular else ts)
    ys, hs = s(x, None, ts)
    torch.testing.assert_close(ys, y, rtol=0, atol=1e-6)
    torch.testing.assert_close(hs, h, rtol=0, atol=1e-6)
    state = s.initial_state(3)
    assert state.shape == (3, m.state_size) and state.dtype == torch.float32 and not state.any()
    for t in range(5):
        yt, state = s.step(x[:, t], state, ts[:, t])
        torch.testing.assert_close(yt, y[:, t], rtol=0, atol=1e-5)
    torch.testing.assert_close(state, h, rtol=0, atol=1e-5)


def test_timespans_work_for_every_batch_size_and_rows_are_independent():
    torch.manual_seed(8)
    m = WiredCfC(lane_keeping_ncp()).eval()
    x, ts = torch.randn(5, 4, 32), torch.rand(5, 4) * 3 + 0.01
    y, _ = m(x, None, ts)
    for b in range(5):
        torch.testing.assert_close(m(x[b : b + 1], None, ts[b : b + 1])[0], y[b : b + 1], rtol=0, atol=1e-6)
    assert (y - m(x)[0]).abs().max() > 1e-4  # elapsed time is used


@pytest.mark.parametrize("scripted", [False, True])
def test_bad_inputs_are_clear_errors(scripted):
    m = CfC(4, 5)
    m = torch.jit.script(m) if scripted else m
    x = torch.randn(2, 3, 4)
    cases = [
        (dict(timespans=torch.zeros(2, 3)), "timespans"),
        (dict(timespans=torch.full((2, 3), float("nan"))), "timespans"),
        (dict(timespans=torch.full((2, 3), float("inf"))), "timespans"),
        (dict(timespans=torch.ones(3)), r"timespans \[B, L\]"),
        (dict(x=torch.randn(2, 3, 5)), r"x \[B, L, F\] with F = 4 input features"),
        (dict(x=x.clone().index_fill_(1, torch.tensor([1]), float("nan"))), "NaN"),
        (dict(hidden=torch.zeros(2, 4)), r"hidden \[B, 5\]"),
    ]
    for kw, msg in cases:
        args = dict(x=x, hidden=None, timespans=None)
        args.update(kw)
        with pytest.raises((ValueError, RuntimeError, torch.jit.Error), match=msg):
            m(args["x"], args["hidden"], args["timespans"])
    with pytest.raises(ValueError, match="mode"):
        CfC(4, 5, mode="fast")
    with pytest.raises(ValueError, match="input_size"):
        WiredCfC(lane_keeping_ncp(), input_size=31)


def test_config_is_json_and_rebuilds_the_same_architecture():
    for m in (
        CfC(4, 5, output_size=1, mode="no_gate", mixed_memory=True, backbone_layers=2),
        WiredCfC(lane_keeping_ncp(), mode="pure", output_size=1),
    ):
        cfg = json.loads(json.dumps(m.config()))
        rebuilt = type(m)(**cfg)
        rebuilt.load_state_dict(m.state_dict())
        x = torch.randn(2, 3, m.input_size)
        torch.testing.assert_close(rebuilt(x)[0], m(x)[0], rtol=0, atol=0)
    assert WiredCfC(lane_keeping_ncp()).config()["wiring"] == lane_keeping_ncp().to_dict()


def test_loading_weights_of_another_wiring_or_polarity_is_an_error():
    a = WiredCfC(lane_keeping_ncp(seed=0))
    with pytest.raises(ValueError, match="wiring mismatch.*mask"):
        WiredCfC(lane_keeping_ncp(seed=1)).load_state_dict(a.state_dict())
    flipped = WiredCfC(rewired(lane_keeping_ncp(seed=0), -lane_keeping_ncp(seed=0).adjacency))
    with pytest.raises(ValueError, match="wiring mismatch.*sign"):
        flipped.load_state_dict(a.state_dict())
    assert torch.equal(flipped.sign, -a.sign)  # the refused load left the module as it was
