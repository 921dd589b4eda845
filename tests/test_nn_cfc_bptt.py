"""The hand-written CfC BPTT (drive.nn.cfc.bptt) gives autograd's gradients; weight caching is safe."""

import pytest
import torch

from drive.nn.cfc import MODES, CfC, WiredCfC
from drive.nn.wiring import NCP


def small_wiring():
    return NCP(
        4,
        3,
        2,
        sensory_fanout=2,
        inter_fanout=2,
        recurrent_command_synapses=3,
        motor_fanin=2,
        seed=3,
        input_dim=5,
    )


def make(kind, mode, mixed, **kw):
    torch.manual_seed(0)
    if kind == "dense":
        m = CfC(5, 6, output_size=2, mode=mode, mixed_memory=mixed, backbone_units=7, **kw)
    else:
        m = WiredCfC(
            small_wiring(),
            mode=mode,
            mixed_memory=mixed,
            output_size=2 if mixed else None,
            ncps_compatible=kind == "wired_ncps",
        )
    with torch.no_grad():
        for p in m.parameters():  # off the init (pure: w_tau = 0, A = 1) so every term matters
            p.add_(0.3 * torch.randn_like(p))
    return m


def grads(m, x, h, ts, autograd_path):
    """Parameter, input and hidden gradients of a loss on every output and the final state."""
    m.zero_grad()
    x, h = x.clone().requires_grad_(), h.clone().requires_grad_()
    if autograd_path:  # elapsed times requiring grad send eager calls down the autograd loop
        ts = ts.clone().requires_grad_()
    torch.manual_seed(11)  # same dropout masks on both paths
    y, hn = m(x, h, ts)
    (y.pow(2).sum() + (hn * torch.linspace(-1, 1, hn.size(1))).sum()).backward()
    return [p.grad.clone() for p in m.parameters()] + [x.grad, h.grad, y.detach(), hn.detach()]


def graph_nodes(y):
    """Names of every autograd node behind y."""
    seen, todo = set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(n for n, _ in node.next_functions)
    return {n.name() for n in seen}


@pytest.mark.parametrize("kind", ["dense", "wired", "wired_ncps"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mixed", [False, True])
def test_fast_backward_equals_autograd(kind, mode, mixed):
    m = make(kind, mode, mixed)
    x, ts = torch.randn(3, 6, 5), torch.rand(3, 6) * 2 + 0.05
    h = 0.5 * torch.randn(3, m.state_size)
    for fast, ref in zip(grads(m, x, h, ts, False), grads(m, x, h, ts, True)):
        torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu", "tanh"])
def test_fast_backward_with_two_layers_dropout_and_each_activation(activation):
    m = make(
        "dense", "default", False, backbone_layers=2, backbone_activation=activation, backbone_dropout=0.3
    ).train()
    x, ts = torch.randn(4, 5, 5), torch.rand(4, 5) + 0.1
    h = torch.randn(4, m.state_size)
    fast, ref = grads(m, x, h, ts, False), grads(m, x, h, ts, True)
    assert (fast[-2] - m.eval()(x, h, ts)[0]).abs().max() > 1e-3  # dropout was active
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layers", [0, 1, 2])
@pytest.mark.parametrize("activation", ["lecun_tanh", "tanh"])
@pytest.mark.parametrize("t", [None, 0.5])
def test_sigmoid_form_at_uniform_time_equals_autograd(layers, activation, t):
    """Default mode at one elapsed time for all samples and steps runs the sigmoid form (the state
    carried as (x + 1) / 2, heads folded): outputs and every gradient equal the autograd loop's."""
    m = make("dense", "default", False, backbone_layers=layers, backbone_activation=activation)
    x, h = torch.randn(3, 6, 5), 0.5 * torch.randn(3, m.state_size)
    ts = torch.full((3, 6), 1.0 if t is None else t)
    fast = grads(m, x, h, None if t is None else ts, False)
    y, _ = m(x, h, None if t is None else ts)
    assert "SigmoidFormBackward" in graph_nodes(y)
    for a, b in zip(fast, grads(m, x, h, ts, True)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # inference: the sigmoid form at t = 1 (cached), the tanh loop otherwise
        torch.testing.assert_close(m(x, h, None if t is None else ts)[0], fast[-2], rtol=1e-5, atol=1e-6)


def test_sigmoid_form_passes_gradcheck_in_float64():
    m = make("dense", "default", False, backbone_layers=2).double()
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    h = (0.5 * torch.randn(2, m.state_size, dtype=torch.float64)).requires_grad_()
    ts = torch.full((2, 3), 0.7, dtype=torch.float64)

    def run(x, h, *ps):
        out = torch.func.functional_call(m, dict(zip(names, ps)), (x, h, ts))
        return out[0], out[1]

    assert "SigmoidFormBackward" in graph_nodes(run(x, h, *params)[0])
    assert torch.autograd.gradcheck(run, (x, h, *params), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["dense", "wired"])
@pytest.mark.parametrize("mode", MODES)
def test_fast_backward_passes_gradcheck_in_float64(kind, mode):
    m = make(kind, mode, kind == "dense").double()  # the LSTM backward is shared: checked on dense
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in m.parameters()]
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    h = (0.5 * torch.randn(2, m.state_size, dtype=torch.float64)).requires_grad_()
    ts = torch.rand(2, 3, dtype=torch.float64) + 0.1

    def run(x, h, *ps):
        out = torch.func.functional_call(m, dict(zip(names, ps)), (x, h, ts))
        return out[0], out[1]

    assert torch.autograd.gradcheck(run, (x, h, *params), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["dense", "wired"])
def test_cached_weights_follow_optimizer_steps_and_load_state_dict(kind):
    m = make(kind, "default", True).eval()
    x = torch.randn(2, 4, 5)
    with torch.no_grad():
        before = m(x)[0]
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m(x)[0].pow(2).sum().backward()
    opt.step()
    with torch.no_grad():
        after = m(x)[0]
        fresh = torch.func.functional_call(m, {k: v.clone() for k, v in m.state_dict().items()}, (x,))[0]
    assert (after - before).abs().max() > 1e-4
    torch.testing.assert_close(after, fresh, rtol=0, atol=0)
    other = make(kind, "default", True).eval()
    with torch.no_grad():
        other.weight.mul_(-1.0) if kind == "wired" else other.layers[0].weight.mul_(-1.0)
        m.load_state_dict(other.state_dict())
        torch.testing.assert_close(m(x)[0], other(x)[0], rtol=0, atol=0)


def test_the_cell_runs_in_float32_under_autocast_with_the_fast_backward():
    torch.manual_seed(0)
    m = CfC(5, 6, mixed_memory=True, backbone_units=7)
    x = torch.randn(2, 3, 5)
    want = grads(m, x, torch.zeros(2, 12), torch.ones(2, 3), False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, _ = m(x)
        assert y.dtype == torch.float32 and y.grad_fn.name() == "DenseBPTTBackward"
        got = grads(m, x, torch.zeros(2, 12), torch.ones(2, 3), False)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
