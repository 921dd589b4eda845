"""Closed-form LTC kernels against scipy's ODE solutions (closed-form appendix Cor. 1, CfC Lemma 1)."""

from __future__ import annotations

from typing import Dict, List

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from drive.nn.closed_form import ClosedFormLTC
from drive.nn.wiring import FullyConnected, Random, Wiring, lane_keeping_ncp

RTOL, ATOL = 1e-10, 1e-12


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _numpy_params(module: ClosedFormLTC) -> Dict[str, np.ndarray]:
    return {k: v.detach().double().numpy() for k, v in module.effective_parameters().items()}


def _ode_rhs(p: Dict[str, np.ndarray], u: np.ndarray):
    """The conductance LTC (LTC paper Eq. 1) with the mapped input u = input_w x + input_b held."""
    sens = _sigmoid(p["sensory_sigma"] * (u[:, None] - p["sensory_mu"]))

    def rhs(_t: float, v: np.ndarray) -> np.ndarray:
        s = _sigmoid(p["sigma"] * (v[:, None] - p["mu"]))
        current = p["gleak"] * (p["vleak"] - v)
        current = current + (p["w"] * s * (p["erev"] - v[None, :])).sum(0)
        current = current + (p["sensory_w"] * sens * (p["sensory_erev"] - v[None, :])).sum(0)
        return current / p["cm"]

    return rhs


def _scipy_trajectory(module: ClosedFormLTC, x: np.ndarray, dts: np.ndarray, v0: np.ndarray) -> np.ndarray:
    """ODE solution at the end of every interval; input x[k] is held over interval k. -> [L, N]"""
    p = _numpy_params(module)
    v, out = v0.astype(np.float64), []
    for xk, dt in zip(x, dts):
        u = p["input_w"] * xk + p["input_b"]
        sol = solve_ivp(_ode_rhs(p, u), (0.0, float(dt)), v, method="DOP853", rtol=RTOL, atol=ATOL)
        v = sol.y[:, -1]
        out.append(v)
    return np.stack(out)


def _one_neuron(method: str, erev: float = 1.0, vleak: float = -0.3) -> ClosedFormLTC:
    """One neuron with two sensory synapses (one excitatory, one inhibitory) and no recurrence."""
    wiring = Wiring(np.zeros((1, 1)), np.array([[1], [-1]]), output_dim=1)
    m = ClosedFormLTC(wiring, method=method).double()
    with torch.no_grad():
        m.gleak.fill_(0.35)
        m.vleak.fill_(vleak)
        m.cm.fill_(0.6)
        m.sensory_w.copy_(torch.tensor([[1.3], [0.7]]))
        m.sensory_sigma.copy_(torch.tensor([[4.0], [6.0]]))
        m.sensory_mu.copy_(torch.tensor([[0.2], [-0.1]]))
        m.sensory_erev.copy_(torch.tensor([[erev], [-erev]]))
    return m


def _sampling(regular: bool, length: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    dts = np.full(length, 0.25) if regular else rng.uniform(0.01, 1.5, size=length)
    return rng.normal(0.0, 1.0, size=(length, 2)), dts


@pytest.mark.parametrize("regular", [True, False], ids=["regular", "irregular"])
def test_exact_one_neuron_matches_scipy_for_piecewise_constant_input(regular: bool) -> None:
    m = _one_neuron("exact")
    x, dts = _sampling(regular)
    v0 = np.array([0.8])
    reference = _scipy_trajectory(m, x, dts, v0)
    hidden = torch.from_numpy(v0[None])
    y, _ = m(torch.tensor(x[None]), hidden, torch.tensor(dts[None]))
    err = np.abs(y[0, :, 0].detach().numpy() - reference[:, 0])
    assert err.max() < 1e-6
    assert np.ptp(reference[:, 0]) > 0.3  # the input really moves the neuron


@pytest.mark.parametrize("regular", [True, False], ids=["regular", "irregular"])
def test_approx_one_neuron_stays_within_lemma1_bound(regular: bool) -> None:
    # Lemma 1's symmetry assumption: the synapse and the leak share the reversal potential A.
    a = 0.4
    m = _one_neuron("approx", erev=a, vleak=a)
    with torch.no_grad():
        m.sensory_w[1] = 0.0  # a single synapse, as in the lemma
    x, dts = _sampling(regular, seed=1)
    x0 = -1.5
    reference = _scipy_trajectory(m, x, dts, np.array([x0]))[:, 0]
    hidden = torch.tensor([[x0, x0, 0.0]], dtype=torch.float64)
    y, final = m(torch.tensor(x[None]), hidden, torch.tensor(dts[None]))
    approx = y[0, :, 0].detach().numpy()
    t = np.cumsum(dts)
    w_tau = 0.35 / 0.6
    bound = abs(x0 - a) * np.exp(-w_tau * t)
    err = np.abs(reference - approx)
    assert np.all(err <= bound + 1e-12)
    assert err.max() > 1e-2  # Eq. 8 is an approximation, not the solution
    assert final[0, 2].item() == pytest.approx(t[-1])


def _network(seed: int = 3) -> ClosedFormLTC:
    torch.manual_seed(seed)
    return ClosedFormLTC(FullyConnected(4, output_dim=1, seed=seed, input_dim=2), method="exact").double()


def test_exact_network_converges_to_ode_solution_as_dt_shrinks() -> None:
    m = _network()
    rng = np.random.default_rng(5)
    x, dts = rng.normal(0.0, 1.0, size=(6, 2)), rng.uniform(0.3, 1.2, size=6)
    reference = _scipy_trajectory(m, x, dts, np.zeros(4))
    errors: List[float] = []
    for substeps in (1, 4, 16, 64):
        m.substeps = substeps
        states, h = [], torch.zeros(1, 4, dtype=torch.float64)
        for xk, dt in zip(x, dts):
            _, h = m.step(torch.tensor(xk[None]), h, torch.tensor([dt]))
            states.append(h[0].detach().numpy())
        errors.append(float(np.abs(np.stack(states) - reference).max()))
    print("max |v - v_ode| for 1, 4, 16, 64 substeps:", errors)
    assert errors[0] > 1e-3  # holding the recurrent activations over a whole step is not exact
    for coarse, fine in zip(errors, errors[1:]):
        assert fine < coarse / 3.0  # first order: about 4x smaller per 4x finer step
    assert errors[-1] < 5e-3


@pytest.mark.parametrize("substeps", [1, 3])
@pytest.mark.parametrize("wiring", ["lane_keeping", "fully_connected", "random"])
@pytest.mark.parametrize("dt", [None, 0.25], ids=["no-timespans", "regular"])
def test_exact_sequence_at_one_dt_equals_stepping(wiring: str, dt, substeps: int) -> None:
    """The shared-dt sequence kernels (one substep: sensory activations on the fan-out grid, a
    constant neuron carrying -sigma mu; several: constants scaled by dt / substeps) give the per-step
    kernel's states (per-row dt), in float64, batch > 1. The random wiring has uneven fan-outs (empty
    grid slots) and an input without synapses."""
    torch.manual_seed(4)
    w = {
        "lane_keeping": lane_keeping_ncp,
        "fully_connected": lambda: FullyConnected(5, output_dim=2, seed=2, input_dim=3),
        "random": lambda: Random(6, output_dim=2, sparsity=0.6, seed=3, input_dim=4),
    }[wiring]()
    if wiring == "random":
        w.sensory_adjacency[1] = 0  # input 1 reaches no neuron
        fanout = np.count_nonzero(w.sensory_adjacency, axis=1)
        assert fanout.max() > fanout[fanout > 0].min()
    m = ClosedFormLTC(w, method="exact", substeps=substeps).double()
    with torch.no_grad():  # a state that moves: random inputs, a random start, a random input map
        m.input_w.uniform_(0.5, 2.0)
        m.input_b.uniform_(-0.5, 0.5)
    batch, length = 3, 12
    x = torch.randn(batch, length, m.input_size, dtype=torch.float64)
    h0 = torch.rand(batch, m.state_size, dtype=torch.float64) - 0.5
    timespans = None if dt is None else torch.full((batch, length), dt, dtype=torch.float64)
    y, last = m(x, h0, timespans)
    h, outs = h0, []
    for k in range(length):
        out, h = m.step(x[:, k], h, torch.full((batch,), 1.0 if dt is None else dt, dtype=torch.float64))
        outs.append(out)
    torch.testing.assert_close(y, torch.stack(outs, 1), rtol=0, atol=1e-12)
    torch.testing.assert_close(last, h, rtol=0, atol=1e-12)
    assert last.is_contiguous() and last.shape == (batch, m.state_size)
    assert float((last - h0).abs().max().detach()) > 1e-2


@pytest.mark.parametrize("method", ["exact", "approx"])
def test_scripted_module_matches_eager_with_irregular_timespans(method: str) -> None:
    torch.manual_seed(0)
    m = ClosedFormLTC(FullyConnected(5, output_dim=2, seed=1, input_dim=3), method=method)
    scripted = torch.jit.script(m)
    x, ts = torch.randn(3, 12, 3), torch.rand(3, 12) * 2.0 + 0.05
    y, h = m(x, None, ts)
    ys, hs = scripted(x, None, ts)
    assert torch.equal(y, ys) and torch.equal(h, hs)
    hidden, outs = scripted.initial_state(3), []
    for k in range(12):
        yk, hidden = scripted.step(x[:, k], hidden, ts[:, k])
        outs.append(yk)
    torch.testing.assert_close(torch.stack(outs, 1), y, rtol=0, atol=1e-6)
    assert h.shape == (3, m.state_size) and m.state_size == (5 if method == "exact" else 11)


@pytest.mark.parametrize("bad", [0.0, -0.1, float("nan"), float("inf")])
def test_step_rejects_non_positive_or_non_finite_dt(bad: float) -> None:
    scripted = torch.jit.script(ClosedFormLTC(FullyConnected(3, output_dim=1, input_dim=2)))
    with pytest.raises(
        torch.jit.Error, match="must be finite and > 0"
    ):  # scripted code re-raises as jit.Error
        scripted.step(torch.zeros(2, 2), scripted.initial_state(2), torch.tensor([1.0, bad]))


def test_forward_rejects_non_finite_input() -> None:
    m = ClosedFormLTC(FullyConnected(3, output_dim=1, input_dim=2), method="approx")
    x = torch.zeros(1, 4, 2)
    x[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        m(x)


def test_config_rebuilds_the_architecture() -> None:
    m = ClosedFormLTC(FullyConnected(4, output_dim=1, input_dim=2), method="exact", substeps=3)
    rebuilt = type(m)(**m.config())
    assert rebuilt.config() == m.config()
    assert torch.equal(rebuilt.mask, m.mask) and rebuilt.state_size == 4
    with pytest.raises(ValueError, match="method"):
        ClosedFormLTC(FullyConnected(4, output_dim=1, input_dim=2), method="rk4")


def test_convert_copies_the_ltc_effective_parameters_and_agrees_with_its_ode() -> None:
    from drive.nn.closed_form import convert
    from drive.nn.ltc import LTC
    from drive.nn.wiring import lane_keeping_ncp

    torch.manual_seed(4)
    ltc = LTC(lane_keeping_ncp(), ode_unfolds=6, positivity="softplus")
    closed = convert(ltc, "exact", substeps=6)
    for name, value in ltc.effective_parameters().items():
        torch.testing.assert_close(closed.effective_parameters()[name], value, rtol=0, atol=0)
    x = torch.tanh(torch.cumsum(torch.randn(4, 40, 32) * 0.4, 1))
    ts = torch.rand(4, 40) + 0.5
    with torch.no_grad():
        y_ode6, _ = ltc(x, None, ts)
        y_cf6, _ = closed(x, None, ts)
        ltc.ode_unfolds, closed.substeps = 200, 200  # both discretisations converge to the same ODE
        y_ode, _ = ltc(x, None, ts)
        y_cf, _ = closed(x, None, ts)
    assert (y_cf - y_ode).abs().max() < 5e-3 < (y_ode6 - y_ode).abs().max()

    def rms(a: torch.Tensor) -> float:
        return float(a.pow(2).mean().sqrt())

    # At 6 evaluations of the recurrent synapses per step the exact kernel is the better solver.
    assert rms(y_cf6 - y_ode) < 0.75 * rms(y_ode6 - y_ode)


@pytest.mark.parametrize("method", ["exact", "approx"])
def test_a_neuron_trained_to_zero_capacitance_is_the_limit_not_nan(method: str) -> None:
    """``positivity: clip`` can train a neuron's cm to exactly 0 (the demo's LTC did): its closed form
    is the limit cm -> 0+ (the neuron at its equilibrium at once), not NaN, in sequence and step."""
    from drive.nn.closed_form import convert
    from drive.nn.ltc import LTC

    torch.manual_seed(4)
    ltc = LTC(lane_keeping_ncp(), ode_unfolds=6, positivity="clip")
    x = torch.tanh(torch.cumsum(torch.randn(2, 30, 32) * 0.4, 1))
    ts = torch.full((2, 30), 0.1)
    outputs = {}
    for cm in (0.0, 1e-7):
        with torch.no_grad():
            ltc.cm[3] = cm
        closed = convert(ltc, method)
        with torch.no_grad():
            y, hidden = closed(x, None, ts)
            y_step, _ = closed.step(x[:, 0], closed.initial_state(2), ts[:, 0])
        assert torch.isfinite(y).all() and torch.isfinite(hidden).all() and torch.isfinite(y_step).all()
        outputs[cm] = y
    torch.testing.assert_close(outputs[0.0], outputs[1e-7], rtol=0, atol=1e-4)


def test_autocast_keeps_the_closed_form_in_fp32() -> None:
    torch.manual_seed(8)
    m = ClosedFormLTC(FullyConnected(4, output_dim=1, input_dim=3))
    x = torch.randn(2, 5, 3)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, h = m(x)
            y1, h1 = m.step(x[:, 0], m.initial_state(2), torch.ones(2))
        assert y.dtype == h.dtype == y1.dtype == torch.float32
        torch.testing.assert_close(y, m(x)[0], rtol=0, atol=0)
        # forward folds the shared dt into its constants, step scales per row: equal up to rounding
        torch.testing.assert_close(y1, m(x[:, :1])[0][:, 0], rtol=0, atol=1e-6)


def test_cached_constants_follow_parameter_updates() -> None:
    torch.manual_seed(2)
    m = ClosedFormLTC(FullyConnected(4, output_dim=1, input_dim=3))
    other = ClosedFormLTC(**m.config())
    x, dt = torch.randn(2, 6, 3), torch.full((2,), 0.7)

    def fresh(state: Dict[str, torch.Tensor]) -> torch.Tensor:  # a module that never ran: no cache
        rebuilt = ClosedFormLTC(**m.config())
        rebuilt.load_state_dict(state)
        return rebuilt(x)[0]

    with torch.no_grad():
        before = m(x)[0]
        m.step(x[:, 0], m.initial_state(2), dt)  # both paths fill the inference cache
        m.sensory_w.mul_(3.0)  # in place, as an optimizer step does
        m.input_b.add_(0.5)  # folded into the sensory constants
        after = m(x)[0]
        assert (after - before).abs().max() > 1e-2
        torch.testing.assert_close(after, fresh(m.state_dict()), rtol=0, atol=0)
        y1 = m.step(x[:, 0], m.initial_state(2), dt)[0]
        torch.testing.assert_close(y1, m(x[:, :1], None, dt[:, None])[0][:, 0], rtol=0, atol=1e-6)
        m.load_state_dict(other.state_dict())  # copies into the same storage
        torch.testing.assert_close(m(x)[0], other(x)[0], rtol=0, atol=0)


@pytest.mark.parametrize("method", ["exact", "approx"])
def test_gradients_through_the_in_place_kernels_match_finite_differences(method: str) -> None:
    torch.manual_seed(0)
    m = ClosedFormLTC(FullyConnected(5, output_dim=2, seed=1, input_dim=3), method=method).double()
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    for ts in (None, torch.rand(2, 4, dtype=torch.float64) + 0.3):  # shared dt (pre-scaled) and per-row dt
        params = (m.cm, m.w, m.sensory_mu, m.sensory_sigma, m.input_w, m.input_b)
        grads = torch.autograd.grad(m(x, None, ts)[0].sum(), params)
        for p, g in zip(params, grads):
            idx = tuple(
                int(k) for k in (p.detach() * m.mask if p is m.w else p.detach()).abs().argmax().reshape(1)
            )
            idx = np.unravel_index(idx[0], p.shape)
            with torch.no_grad():
                p[idx] += 1e-6
                up = m(x, None, ts)[0].sum()
                p[idx] -= 2e-6
                down = m(x, None, ts)[0].sum()
                p[idx] += 1e-6
            assert abs(float(g[idx]) - float(up - down) / 2e-6) < 1e-6 * max(1.0, abs(float(g[idx])))
            assert abs(float(g[idx])) > 1e-6


def test_loading_weights_of_another_wiring_is_an_error():
    from drive.nn.wiring import NCP

    a = ClosedFormLTC(NCP(4, 3, 1, 2, 2, 2, 2, seed=0, input_dim=3))
    with pytest.raises(ValueError, match="wiring mismatch"):
        ClosedFormLTC(NCP(4, 3, 1, 2, 2, 2, 2, seed=1, input_dim=3)).load_state_dict(a.state_dict())
    ClosedFormLTC(**a.config()).load_state_dict(a.state_dict())
