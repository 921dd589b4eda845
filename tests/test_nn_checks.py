"""drive.nn.checks: every recurrent module validates its inputs with the same one-sync check."""

import pytest
import torch

from drive.nn import LTC, CfC, WiredCfC
from drive.nn.baselines import CTRNN, LSTM
from drive.nn.wiring import NCP

F = 3


def modules():
    ncp = NCP(
        4,
        3,
        2,
        sensory_fanout=2,
        inter_fanout=2,
        recurrent_command_synapses=3,
        motor_fanin=2,
        seed=0,
        input_dim=F,
    )
    return {
        "LTC": LTC(ncp),
        "CfC": CfC(F, 5),
        "WiredCfC": WiredCfC(ncp),
        "LSTM": LSTM(F, 8),
        "CTRNN": CTRNN(F, 8),
    }


@pytest.mark.parametrize("name", list(modules()))
def test_extreme_finite_inputs_pass_and_cancelling_infinities_do_not(name):
    m = modules()[name]
    big = torch.full(
        (2, 64, F), torch.finfo(torch.float32).max
    )  # an fp32 sum of these overflows; float64 does not
    with torch.no_grad():
        m(big)
        m(-big, timespans=torch.full((2, 64), 1e-30))
    x = torch.zeros(2, 4, F)
    x[0, 0, 0], x[1, 2, 1] = float("inf"), float("-inf")
    with pytest.raises(ValueError, match="input contains NaN or infinite values"):
        m(x)
    with pytest.raises(ValueError, match="input contains NaN or infinite values"):
        m(x, timespans=torch.ones(2, 4))
    dt = torch.ones(2, 4)
    dt[0, 1], dt[1, 3] = float("inf"), 0.0  # log: +inf and -inf, whose sum is NaN
    with pytest.raises(ValueError, match=r"elapsed time \(timespans / dt\) must be finite and > 0"):
        m(torch.zeros(2, 4, F), timespans=dt)
    with pytest.raises(
        ValueError, match=r"expected x \[B, L, F\] with F = 3 input features, got shape \[2, 4, 2\]"
    ):
        m(torch.zeros(2, 4, 2))
    with pytest.raises(ValueError, match=r"expected timespans \[B, L\] = \[2, 4\], got shape \[2, 3\]"):
        m(torch.zeros(2, 4, F), timespans=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"expected hidden \[B, \d+\] with B = 2"):
        m(torch.zeros(2, 4, F), torch.zeros(3, m.state_size))


@pytest.mark.parametrize("name", list(modules()))
def test_validating_inputs_that_require_grad_warns_nothing(name):
    """The value check reads one scalar back; on a graph tensor (features from a trained head) that
    must not build graph nodes or warn about converting a grad-requiring tensor."""
    import warnings

    m = modules()[name]
    x = torch.rand(2, 4, F, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for ts in (None, torch.full((2, 4), 0.5, requires_grad=True)):
            y, _ = m(x, timespans=ts)
            y.sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())


def _with_closed_form():
    out = modules()
    from drive.nn.closed_form import convert

    out["ClosedForm-exact"] = convert(out["LTC"], "exact")
    out["ClosedForm-approx"] = convert(out["LTC"], "approx")
    return out


@pytest.mark.parametrize("name", list(_with_closed_form()))
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_hidden_state_is_refused_in_forward_and_step(name, bad):
    """A NaN (or inf) hidden state used to pass silently and give NaN outputs: now the same clear
    ValueError as for a non-finite input, in forward (with and without timespans) and in step."""
    m = _with_closed_form()[name]
    hidden = m.initial_state(2).clone()
    hidden[1, 0] = bad
    match = "hidden state contains NaN or infinite values"
    with torch.no_grad():
        with pytest.raises(ValueError, match=match):
            m(torch.zeros(2, 4, F), hidden)
        with pytest.raises(ValueError, match=match):
            m(torch.zeros(2, 4, F), hidden, torch.ones(2, 4))
        with pytest.raises(ValueError, match=match):
            m.step(torch.zeros(2, F), hidden, torch.ones(2))
        # a finite hidden state still runs, and a bad input is still named as the input
        y, h = m.step(torch.zeros(2, F), m.initial_state(2), torch.ones(2))
        assert bool(torch.isfinite(y).all()) and bool(torch.isfinite(h).all())
        x = torch.zeros(2, 4, F)
        x[0, 0, 0] = float("nan")
        with pytest.raises(ValueError, match="input contains (NaN|non-finite)"):
            m(x, hidden)


@pytest.mark.parametrize("name", ["LTC", "CfC", "LSTM"])
def test_non_finite_hidden_is_refused_by_the_scripted_module(name):
    m = torch.jit.script(modules()[name])
    hidden = m.initial_state(1).clone()
    hidden[0, -1] = float("nan")
    with pytest.raises(Exception, match="hidden state contains NaN or infinite values"):
        m.step(torch.zeros(1, F), hidden, torch.ones(1))


def test_skipped_value_checks_skip_the_hidden_check_too():
    """A wrapper that validates values itself (the deployed policy) turns the checks off: no
    read-back at all, so a NaN hidden then runs (and is the wrapper's to handle)."""
    from drive.nn.checks import skip_value_checks

    m = modules()["CfC"]
    skip_value_checks(m)
    hidden = m.initial_state(1).clone()
    hidden[0, 0] = float("nan")
    y, _ = m.step(torch.zeros(1, F), hidden, torch.ones(1))
    assert not bool(torch.isfinite(y).all())
