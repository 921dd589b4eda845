"""LTC: the ODE it solves, its bounds, its gradients, its contract."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.integrate import solve_ivp

from drive.nn.ltc import INIT_RANGES, LTC
from drive.nn.ltc.solver import _FusedSolver
from drive.nn.wiring import NCP, FullyConnected, Random, lane_keeping_ncp


def small_ncp(seed=0):
    return NCP(
        4,
        3,
        2,
        sensory_fanout=2,
        inter_fanout=2,
        recurrent_command_synapses=3,
        motor_fanin=2,
        seed=seed,
        input_dim=3,
    )


def randomise(m, seed=0):
    """Trained-looking parameters: erev and vleak anywhere in [-2, 2], etc."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name in ("erev", "sensory_erev", "vleak", "input_b", "output_b"):
                p.copy_(torch.rand(p.shape, generator=g, dtype=p.dtype) * 4 - 2)
            else:
                p.mul_(torch.rand(p.shape, generator=g, dtype=p.dtype) + 0.5)
    return m


def ltc_rhs(eff, u, n):
    """dv/dt of the conductance-form LTC ODE with effective parameters (numpy, input u held)."""
    s_act = eff["sensory_w"] / (1 + np.exp(-eff["sensory_sigma"] * (u[:, None] - eff["sensory_mu"])))
    s_num = (s_act * eff["sensory_erev"]).sum(0)
    s_den = s_act.sum(0)

    def rhs(_t, v):
        act = eff["w"] / (1 + np.exp(-eff["sigma"] * (v[:, None] - eff["mu"])))
        current = eff["gleak"] * (eff["vleak"] - v) + (act * eff["erev"]).sum(0) - act.sum(0) * v
        return (current + s_num - s_den * v) / eff["cm"]

    return rhs


def test_many_unfolds_converge_to_the_radau_solution_of_the_ltc_ode():
    torch.manual_seed(0)
    m = randomise(LTC(small_ncp(), ode_unfolds=1)).double()
    eff = {k: v.detach().numpy() for k, v in m.effective_parameters().items()}
    x = torch.randn(1, 6, 3, dtype=torch.double)
    dts = torch.tensor([[0.3, 1.0, 0.05, 2.0, 0.7, 0.4]], dtype=torch.double)
    v = np.zeros(m.state_size)
    reference = []
    for t in range(x.size(1)):
        u = x[0, t].numpy() * eff["input_w"] + eff["input_b"]
        sol = solve_ivp(
            ltc_rhs(eff, u, m.state_size), (0.0, float(dts[0, t])), v, method="Radau", rtol=1e-10, atol=1e-12
        )
        v = sol.y[:, -1]
        reference.append(v)
    reference = np.stack(reference)
    errors = []
    for unfolds in (20, 200, 2000):
        m.ode_unfolds = unfolds
        with torch.no_grad():
            y, h = m(x, timespans=dts)
        states_err = np.abs(h[0].numpy() - reference[-1]).max()
        out_err = np.abs(y[0, :, :].numpy() - (reference[:, :2] * eff["output_w"] + eff["output_b"])).max()
        errors.append(max(states_err, out_err))
    assert errors[2] < 2e-4
    assert errors[0] / errors[2] > 30  # first-order convergence (x100 unfolds -> ~x100 smaller error)


def test_state_stays_within_theorem_2_bounds_for_huge_inputs():
    torch.manual_seed(1)
    m = randomise(LTC(lane_keeping_ncp(), ode_unfolds=3), seed=1)
    eff = m.effective_parameters()
    x = (torch.rand(4, 40, 32) * 2 - 1) * 1e3
    h0 = torch.rand(4, 19) * 2 - 1
    dts = torch.rand(4, 40) * 10 + 1e-3
    with torch.no_grad():
        states = torch.stack([m(x[:, : t + 1], h0, dts[:, : t + 1])[1] for t in range(0, 40, 3)])
    inf = torch.tensor(float("inf"))

    def incoming(erev, mask, fill, reduce):
        return reduce(torch.where(mask.bool(), erev, fill), 0).values

    lo = torch.minimum(
        torch.minimum(
            incoming(eff["erev"], m.mask, inf, torch.min),
            incoming(eff["sensory_erev"], m.sensory_mask, inf, torch.min),
        ),
        eff["vleak"],
    )
    hi = torch.maximum(
        torch.maximum(
            incoming(eff["erev"], m.mask, -inf, torch.max),
            incoming(eff["sensory_erev"], m.sensory_mask, -inf, torch.max),
        ),
        eff["vleak"],
    )
    assert torch.isfinite(lo).all() and torch.isfinite(hi).all()
    lo, hi = torch.minimum(lo, h0), torch.maximum(hi, h0)
    assert (states >= lo - 1e-5).all() and (states <= hi + 1e-5).all()
    assert torch.isfinite(states).all()
    assert (states.amax(dim=(0, 1)) - states.amin(dim=(0, 1))).mean() > 0.3  # the states do move


def test_gradients_reach_every_parameter_and_no_absent_synapse():
    torch.manual_seed(2)
    m = LTC(lane_keeping_ncp())
    x = torch.randn(3, 5, 32)
    y, h = m(x, torch.rand(3, 19), torch.rand(3, 5) + 0.5)
    (y.square().sum() + h.sum()).backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    for name in ("w", "sigma", "mu", "erev"):
        assert (getattr(m, name).grad[m.mask == 0] == 0).all(), name
        assert (getattr(m, name).grad[m.mask == 1] != 0).float().mean() > 0.9, name
    for name in ("sensory_w", "sensory_sigma", "sensory_mu", "sensory_erev"):
        assert (getattr(m, name).grad[m.sensory_mask == 0] == 0).all(), name


def test_hand_written_backward_passes_gradcheck_in_double():
    torch.manual_seed(3)
    b, n, length, e = 2, 4, 3, 7
    dd = dict(dtype=torch.double)
    cm_t = torch.rand(length, b, n, **dd) + 0.5
    nd0 = torch.cat([torch.randn(length, b, n, **dd), cm_t + torch.rand(length, b, n, **dd) + 0.5], 2)
    q = torch.rand(e, 2 * n, **dd)
    q[:, :n] *= torch.randn(e, n, **dd)
    args = [torch.randn(b, n, **dd), nd0, cm_t, torch.randn(n, e, **dd) * 3, torch.randn(e, **dd), q]
    args = [a.requires_grad_() for a in args]
    assert torch.autograd.gradcheck(lambda *a: _FusedSolver.apply(*a, 2), args)


def test_eager_manual_backward_equals_scripted_autograd():
    torch.manual_seed(4)
    m = randomise(LTC(small_ncp()))
    s = torch.jit.script(m)
    x, h0, dts = torch.randn(3, 7, 3), torch.randn(3, 9), torch.rand(3, 7) + 0.1
    grads = []
    for module in (m, s):
        m.zero_grad()
        y, h = module(x, h0, dts)
        (y.square().sum() + (h * torch.arange(9.0)).sum()).backward()
        grads.append({k: p.grad.clone() for k, p in m.named_parameters()})
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], rtol=1e-4, atol=1e-5)


def test_scripted_equals_eager_for_forward_and_step():
    torch.manual_seed(5)
    m = randomise(LTC(lane_keeping_ncp()))
    s = torch.jit.script(m)
    x, dts = torch.randn(2, 6, 32), torch.rand(2, 6) + 0.2
    with torch.no_grad():
        ye, he = m(x, None, dts)
        ys, hs = s(x, None, dts)
        torch.testing.assert_close(ys, ye, rtol=0, atol=1e-6)
        h = s.initial_state(2)
        steps = []
        for t in range(6):
            y, h = s.step(x[:, t], h, dts[:, t])
            steps.append(y)
    torch.testing.assert_close(torch.stack(steps, 1), ye, rtol=0, atol=1e-6)
    torch.testing.assert_close(h, he, rtol=0, atol=1e-6)


def test_batched_irregular_timespans_equal_per_sample_runs():
    torch.manual_seed(6)
    m = randomise(LTC(small_ncp()))
    x, dts = torch.randn(3, 5, 3), torch.rand(3, 5) * 2 + 0.01
    with torch.no_grad():
        y, h = m(x, timespans=dts)
        for i in range(3):
            yi, hi = m(x[i : i + 1], timespans=dts[i : i + 1])
            torch.testing.assert_close(yi, y[i : i + 1], rtol=0, atol=1e-6)
        y_fast, _ = m(x, timespans=dts / 10)
    assert (y_fast - y).abs().max() > 1e-3  # elapsed time matters
    torch.testing.assert_close(m(x, timespans=dts.double())[0], y)  # any float dtype of timespans
    assert m(x)[0].shape == (3, 5, 2)


@pytest.mark.parametrize("dt", [0.0, -0.1, float("nan"), float("inf")])
def test_non_positive_or_non_finite_dt_is_a_clear_error(dt):
    m = LTC(small_ncp())
    dts = torch.ones(2, 4)
    dts[1, 2] = dt
    with pytest.raises(ValueError, match="elapsed time"):
        m(torch.randn(2, 4, 3), timespans=dts)
    with pytest.raises((ValueError, torch.jit.Error), match="elapsed time"):
        torch.jit.script(m).step(torch.randn(2, 3), torch.zeros(2, 9), dts[:, 2])


def test_bad_inputs_are_clear_errors():
    m = LTC(small_ncp())
    x = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match="NaN"):
        m(torch.where(torch.rand(2, 4, 3) > 0.9, torch.nan, x).index_fill(1, torch.tensor([0]), torch.nan))
    with pytest.raises(ValueError, match="3 input features"):
        m(torch.randn(2, 4, 5))
    with pytest.raises(ValueError, match="hidden"):
        m(x, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="timespans"):
        m(x, timespans=torch.ones(2, 3))
    with pytest.raises(ValueError, match="input_size"):
        LTC(small_ncp(), input_size=7)


def test_loading_weights_of_another_wiring_is_an_error():
    a, b = LTC(small_ncp(seed=0)), LTC(small_ncp(seed=1))
    with pytest.raises(ValueError, match="wiring mismatch"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="wiring mismatch"):
        LTC(lane_keeping_ncp()).load_state_dict(a.state_dict())
    rebuilt = LTC(**json.loads(json.dumps(a.config())))
    rebuilt.load_state_dict(a.state_dict())
    x = torch.randn(1, 3, 3)
    torch.testing.assert_close(rebuilt(x)[0], a(x)[0])


def test_masks_are_buffers_not_parameters():
    m = LTC(lane_keeping_ncp())
    names = dict(m.named_parameters())
    assert "mask" not in names and "sensory_mask" not in names
    assert {"mask", "sensory_mask"} <= set(m.state_dict())
    assert int(m.mask.sum()) == 60 and int(m.sensory_mask.sum()) == 192


def test_softplus_init_puts_effective_values_in_the_paper_ranges():
    torch.manual_seed(7)
    eff = LTC(FullyConnected(30, 2, input_dim=10), positivity="softplus").effective_parameters()
    for name in ("gleak", "cm", "vleak", "w", "sigma", "mu", "sensory_w", "sensory_sigma", "sensory_mu"):
        lo, hi = INIT_RANGES[name]
        assert eff[name].min() >= lo - 1e-5 and eff[name].max() <= hi + 1e-5, name
        assert eff[name].max() - eff[name].min() > 0.5 * (hi - lo), name


def test_effective_parameters_apply_positivity_and_masks():
    m = randomise(LTC(Random(6, 2, 0.5, input_dim=3), positivity="softplus"))
    eff = m.effective_parameters()
    torch.testing.assert_close(eff["w"], F.softplus(m.w) * m.mask)
    torch.testing.assert_close(eff["cm"], F.softplus(m.cm))
    assert (eff["erev"][m.mask == 0] == 0).all()


def test_clip_mode_uses_raw_values_and_apply_constraints_clips():
    m = LTC(small_ncp(), positivity="clip")
    with torch.no_grad():
        m.w.fill_(-0.3)
        m.gleak[0] = -1.0
    m.apply_constraints()
    assert (m.w == 0).all() and m.gleak[0] == 0 and (m.cm > 0.39).all()
    torch.testing.assert_close(m.effective_parameters()["cm"], m.cm)


def test_autocast_keeps_the_cell_in_fp32():
    torch.manual_seed(8)
    m = LTC(small_ncp())
    x = torch.randn(2, 4, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, h = m(x)
    assert y.dtype == torch.float32 and h.dtype == torch.float32
    torch.testing.assert_close(y, m(x)[0])
