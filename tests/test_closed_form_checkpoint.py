"""Converted policy checkpoints: load like any other, match a direct conversion, report fidelity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drive.checkpoint import load_policy, policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.evaluate.closed_form_fidelity import closed_form_report
from drive.nn.closed_form import ClosedFormLTC, convert
from drive.nn.families import build_policy
from drive.policy_drivers import load_driver


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory):
    from drive.sim.record import record_drive

    root = tmp_path_factory.mktemp("closed_form")
    torch.manual_seed(0)
    policy = build_policy("ncp_ltc", frame_period_s=1.0 / 30.0, positivity="softplus")
    src = save_policy(root / "ltc.ckpt", policy, policy_meta(policy, Preprocessing(), 30.0, "ncp_ltc"))
    rec = record_drive(root / "test-rec", seed=3, index=0, split="test", minutes=0.02)
    report = closed_form_report(
        src, "exact", root / "exact.ckpt", recordings=[rec], km=0.02, seed=1, rounds=2
    )
    return src, rec, report, root / "exact.ckpt"


def test_converted_checkpoint_loads_and_equals_a_direct_conversion(converted) -> None:
    src, _, _, out = converted
    source, _ = load_policy(src)
    policy, meta = load_policy(out)
    assert isinstance(policy.rnn, ClosedFormLTC) and policy.rnn.method == "exact"
    assert meta["family"] == "ncp_ltc+closed_form_exact" and meta["closed_form"]["source_family"] == "ncp_ltc"
    expected = convert(source, "exact")
    frames = torch.rand(2, 6, 3, 78, 200)
    timespans = torch.full((2, 6), 1.0 / 30.0)
    with torch.no_grad():
        y, h = policy(frames, None, timespans)
        y_ref, h_ref = expected(frames, None, timespans)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=0)
    torch.testing.assert_close(h, h_ref, rtol=0, atol=0)
    for name, value in source.head.state_dict().items():
        assert torch.equal(policy.head.state_dict()[name], value)


def test_fidelity_report_compares_both_policies_open_and_closed_loop(converted) -> None:
    _, rec, report, out = converted
    on_disk = json.loads(out.with_suffix(".fidelity.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert "Output MSE vs the ODE LTC" in out.with_suffix(".fidelity.md").read_text()
    row = report["open_loop"]["recordings"][0]
    assert row["recording"] == str(rec) and row["frames"] == report["open_loop"]["frames"] > 30
    # Exact conversion of a (random) NCP: close to the 6-unfold ODE, but not identical to it.
    assert 0.0 < report["open_loop"]["mse_vs_ode"] < 0.05
    assert report["speed"]["ode"]["step_ms"] > 0 and report["speed"]["forward_speedup"] > 0
    for name in ("ode", "closed_form"):
        assert report["closed_loop"][name]["km"] == pytest.approx(0.02, rel=0.05)
        assert "interventions_per_km" in report["closed_loop"][name]


def test_converted_policy_scripts_and_scripted_step_matches_eager(converted) -> None:
    policy, _ = load_policy(converted[3])
    scripted = torch.jit.script(policy)
    frame, dt = torch.rand(1, 3, 78, 200), torch.full((1,), 1.0 / 30.0)
    h_eager = h_script = policy.initial_state(1)
    with torch.no_grad():
        for _ in range(3):
            y_eager, h_eager = policy.step(frame, h_eager, dt)
            y_script, h_script = scripted.step(frame, h_script, dt)
    torch.testing.assert_close(y_script, y_eager, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(h_script, h_eager, rtol=1e-5, atol=1e-6)


def test_converted_checkpoint_drives_through_load_driver(converted) -> None:
    from drive.sim.closed_loop import evaluate

    driver = load_driver(converted[3])
    assert isinstance(driver.policy.rnn, ClosedFormLTC)
    metrics = evaluate(driver, km=0.01, seed=2).metrics
    assert metrics["km"] == pytest.approx(0.01, rel=0.05)


def test_cli_writes_an_approx_conversion(converted, capsys: pytest.CaptureFixture) -> None:
    from drive.cli import main

    src, rec, _, _ = converted
    out = Path(converted[3]).with_name("approx.pt")
    assert (
        main(
            [
                "closed-form",
                "--ckpt",
                str(src),
                "--method",
                "approx",
                "--out",
                str(out),
                "--recordings",
                str(rec),
                "--km",
                "0",
            ]
        )
        == 0
    )
    policy, meta = load_policy(out)
    assert policy.rnn.method == "approx" and policy.state_size == 2 * 19 + 1
    assert "closed_loop" not in json.loads(out.with_suffix(".fidelity.json").read_text())
    assert "speed-up" in capsys.readouterr().out


def test_only_ltc_policies_convert() -> None:
    with pytest.raises(ValueError, match="only an LTC converts"):
        convert(build_policy("lstm"), "exact")
    with pytest.raises(AttributeError):
        convert(torch.nn.LSTM(3, 4), "exact")
