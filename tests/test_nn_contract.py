"""The recurrent-module contract (drive.nn.contract), checked the same way on every registered class:
the configurations below and each model family's cell with its default options."""

from __future__ import annotations

from typing import Callable, Dict

import pytest
import torch

from drive.nn.baselines import CTRNN, LSTM, Stateless
from drive.nn.cfc import CfC, WiredCfC
from drive.nn.closed_form import ClosedFormLTC, convert
from drive.nn.contract import RecurrentModule
from drive.nn.ltc import LTC
from drive.nn.policy import build_rnn, rnn_spec
from drive.nn.registry import classes, families, name_of
from drive.nn.wiring import NCP

F = 4


def _wiring() -> NCP:
    return NCP(
        3,
        3,
        1,
        sensory_fanout=2,
        inter_fanout=2,
        recurrent_command_synapses=2,
        motor_fanin=2,
        seed=3,
        input_dim=F,
    )


MAKERS: Dict[str, Callable[[], RecurrentModule]] = {
    "ltc": lambda: LTC(_wiring()),
    "cfc": lambda: CfC(F, 5, output_size=2, mixed_memory=True),
    "wired_cfc": lambda: WiredCfC(_wiring(), mode="pure"),
    "lstm": lambda: LSTM(F, 6, 2),
    "ctrnn": lambda: CTRNN(F, 6, 1, ode_unfolds=3),
    "closed_form_ltc": lambda: convert(LTC(_wiring()), "approx"),
    "stateless": lambda: Stateless(F),
}
# every family's cell as drive fit builds it (a new family is checked without an edit here)
MAKERS.update(
    {
        f"family:{name}": (lambda fam=fam: fam.cell.from_options(F, fam.options()))
        for name, fam in families().items()
    }
)


def make(name: str) -> RecurrentModule:
    torch.manual_seed(0)
    return MAKERS[name]().eval()


def _inputs(b: int = 3, length: int = 5):
    g = torch.Generator().manual_seed(1)
    return torch.randn(b, length, F, generator=g), torch.rand(b, length, generator=g) + 0.2


def test_every_registered_class_is_checked() -> None:
    assert {type(make(n)) for n in MAKERS} == set(classes().values())
    for name in MAKERS:
        m = make(name)
        assert isinstance(m, RecurrentModule)
        assert name.startswith("family:") or name_of(type(m)) == name


@pytest.mark.parametrize("name", list(MAKERS))
def test_initial_state_is_fp32_on_the_modules_device(name: str) -> None:
    m = make(name)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        h = m.initial_state(2)
    finally:
        torch.set_default_dtype(default)
    assert h.dtype == torch.float32 and h.shape == (2, m.state_size) and h.device.type == "cpu"
    assert not h.any()
    meta = m.to("meta")  # a second device every machine has: the state follows the module there
    assert meta.initial_state(2).device.type == "meta"
    assert meta.initial_state(2).dtype == torch.float32


@pytest.mark.parametrize("name", list(MAKERS))
def test_under_bf16_autocast_the_cell_runs_in_fp32(name: str) -> None:
    m = make(name)
    x, ts = _inputs()
    with torch.no_grad():
        y, h = m(x, None, ts)
        ys, hs = m.step(x[:, 0], m.initial_state(3), ts[:, 0])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y_amp, h_amp = m(x, None, ts)
            y_bf, h_bf = m(x.bfloat16(), None, ts)  # a bf16 input (an autocast head's features)
            ys_amp, hs_amp = m.step(x[:, 0], m.initial_state(3), ts[:, 0])
    for t in (y_amp, h_amp, y_bf, h_bf, ys_amp, hs_amp):
        assert t.dtype == torch.float32
    # autocast is off inside: fp32 inputs give exactly the fp32 results
    assert torch.equal(y_amp, y) and torch.equal(h_amp, h)
    assert torch.equal(ys_amp, ys) and torch.equal(hs_amp, hs)
    torch.testing.assert_close(y_bf, y, rtol=0.05, atol=0.05)  # bf16 input rounding only


@pytest.mark.parametrize("name", list(MAKERS))
def test_bad_shapes_and_values_are_value_errors(name: str) -> None:
    m = make(name)
    x, ts = _inputs(2, 4)
    h = m.initial_state(2)
    bad_shapes = [
        (lambda: m(x[..., :-1]), r"expected x \[B, L, F\] with F = 4"),
        (lambda: m(x, torch.zeros(2, m.state_size + 1)), r"expected hidden \[B, %d\]" % m.state_size),
        (lambda: m(x, torch.zeros(3, m.state_size)), r"expected hidden \[B, %d\] with B = 2" % m.state_size),
        (lambda: m(x, None, ts[:, :3]), r"expected timespans \[B, L\] = \[2, 4\]"),
        (lambda: m.step(x[:, 0, :-1], h, ts[:, 0]), r"expected x \[B, F\] with F = 4"),
        (lambda: m.step(x[:, 0], h, ts[:1, 0]), r"expected dt \[B\] with B = 2"),
        (lambda: m.step(x[:, 0], h, ts[:, :1]), r"expected dt \[B\]"),
    ]
    for call, message in bad_shapes:
        with pytest.raises(ValueError, match=message):
            call()
    nan_x = x.clone()
    nan_x[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match="input contains (NaN|non-finite)"):
        m(nan_x, None, ts)
    with pytest.raises(ValueError, match="elapsed time"):
        m(x, None, ts.index_fill(1, torch.tensor([2]), 0.0))
    with pytest.raises(ValueError, match="elapsed time"):
        m.step(x[:, 0], h, torch.tensor([1.0, -1.0]))
    if m.state_size:  # Stateless has no state to poison
        nan_h = h.clone()
        nan_h[0, -1] = float("nan")
        for call in (lambda: m(x, nan_h, ts), lambda: m(x, nan_h), lambda: m.step(x[:, 0], nan_h, ts[:, 0])):
            with pytest.raises(ValueError, match="hidden state contains NaN or infinite values"):
                call()


@pytest.mark.parametrize("name", list(MAKERS))
def test_step_is_one_step_of_forward_and_the_scripted_module_agrees(name: str) -> None:
    m = make(name)
    s = torch.jit.script(m)
    x, ts = _inputs()
    with torch.no_grad():
        y, h = m(x, None, ts)
        y_s, h_s = s(x, None, ts)
        hidden, hidden_s, steps, steps_s = m.initial_state(3), s.initial_state(3), [], []
        for t in range(x.size(1)):
            out, hidden = m.step(x[:, t], hidden, ts[:, t])
            out_s, hidden_s = s.step(x[:, t], hidden_s, ts[:, t])
            steps.append(out)
            steps_s.append(out_s)
        y_unit, _ = m(x)  # timespans None: 1.0 per step, also as [B, L, 1]
        y_col, _ = m(x, None, torch.ones(3, x.size(1), 1))
    assert y.shape == (3, x.size(1), m.output_size) and h.shape == (3, m.state_size)
    assert y.dtype == h.dtype == torch.float32
    torch.testing.assert_close(torch.stack(steps, 1), y, rtol=0, atol=1e-6)
    torch.testing.assert_close(hidden, h, rtol=0, atol=1e-6)
    torch.testing.assert_close(y_s, y, rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.stack(steps_s, 1), y, rtol=0, atol=1e-6)
    torch.testing.assert_close(hidden_s, h, rtol=0, atol=1e-6)
    torch.testing.assert_close(y_col, y_unit, rtol=0, atol=0)
    assert s.initial_state(2).dtype == torch.float32


@pytest.mark.parametrize("name", list(MAKERS))
def test_config_and_registered_name_rebuild_a_module_with_the_same_outputs(name: str) -> None:
    m = make(name)
    spec = rnn_spec(m)
    assert spec["class"] == name_of(type(m))
    torch.manual_seed(123)  # another init: the outputs below come from the copied weights
    rebuilt = build_rnn(spec).eval()
    assert type(rebuilt) is type(m) and rebuilt.config() == m.config()
    rebuilt.load_state_dict(m.state_dict())
    x, ts = _inputs()
    with torch.no_grad():
        y, h = m(x, None, ts)
        y2, h2 = rebuilt(x, None, ts)
    assert torch.equal(y, y2) and torch.equal(h, h2)


def test_closed_form_built_directly_starts_in_the_ltcs_init_ranges() -> None:
    from drive.nn.ltc import INIT_RANGES

    torch.manual_seed(0)
    m = ClosedFormLTC(_wiring())
    for name, (lo, hi) in INIT_RANGES.items():
        value = getattr(m, name).detach()
        mask = None if value.dim() == 1 else m.sensory_mask if name.startswith("sensory") else m.mask
        present = value if mask is None else value[mask > 0]
        assert present.numel() and float(present.min()) >= lo and float(present.max()) <= hi, name
        if mask is not None:
            assert not value[mask == 0].any(), name  # absent synapses hold 0


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning], ids=["torch-2.11", "later"])
def test_torchscripts_deprecation_notice_is_silenced_under_either_category(category) -> None:
    """torch 2.11 (the GPU machines', the oldest drive supports) announces TorchScript's deprecation
    as a DeprecationWarning, later versions as a FutureWarning; a filter on one category let the
    other reach the stderr of every `drive export` / `drive evaluate` on torch 2.11 (seen there:
    the CLI's one-line errors became five lines). Other warnings still pass."""
    import warnings

    from drive.nn.torchscript import quiet_torchscript

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_torchscript():
            warnings.warn("`torch.jit.script` is deprecated. Please switch", category, stacklevel=1)
            warnings.warn("something else", category, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something else"]
