"""Files written by an earlier drive still load, compute what they computed then, and drive (issue 23).

``tests/fixtures/compat/`` holds checkpoints of every family written by ``drive fit``, a closed-form
conversion and TorchScript exports, made by ``tools/make_compat_fixtures.py`` *before* the code
was reorganised, with the outputs the public loaders gave on fixed frames then. A moved or renamed
class, a changed state-dict key or a changed update equation fails here.

Equality: with the torch version and CPU capability that recorded the references (and one thread,
as they were recorded) every output must be bitwise equal. On another torch or CPU the convolution
and matmul kernels (oneDNN/MKL pick them by instruction set) sum in another order, so float32
results may differ in the last bits; each output then agrees to rtol 1e-4, atol 1e-6 -- float32
rounding (6e-8 relative per op) grown over the ~30 ops of the head and 8 recurrent steps stays
orders of magnitude below that, while any change of a weight, an equation or a state layout moves
curvature by far more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch

from drive.checkpoint import load_policy
from drive.drivers import load_driver
from drive.sim.closed_loop import evaluate

FIXTURES = Path(__file__).parent / "fixtures" / "compat"
INFO = json.loads((FIXTURES / "reference.json").read_text())
REFERENCE = dict(np.load(FIXTURES / "reference.npz"))
INPUTS = dict(np.load(FIXTURES / "inputs.npz"))
CHECKPOINTS = [f for f in INFO["files"] if not f.endswith(".ts")]
EXPORTS = [f for f in INFO["files"] if f.endswith(".ts")]
SAME_PLATFORM = (
    INFO["torch"] == torch.__version__ and INFO["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
)


def _assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} != recorded {want.shape}"
    if SAME_PLATFORM:
        assert np.array_equal(got, want), (
            f"{what}: not bitwise equal, max |diff| {np.abs(got - want).max():.3g}"
        )
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=what)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(INFO["threads"])
    yield
    torch.set_num_threads(threads)


def test_fixtures_cover_every_family_and_format() -> None:
    families = set()
    for name in CHECKPOINTS:
        meta = torch.load(FIXTURES / name, map_location="cpu", weights_only=True)["drive"]
        families.add(meta["family"])
        assert meta["policy_config"]["rnn"]["class"].startswith("drive.nn.")
    assert {"ncp_ltc", "cfc", "lstm", "ctrnn", "cnn", "ncp_ltc+closed_form_exact"} <= families
    classes = {
        torch.load(FIXTURES / n, map_location="cpu", weights_only=True)["drive"]["policy_config"]["rnn"][
            "class"
        ]
        for n in CHECKPOINTS
    }
    assert {
        "drive.nn.cfc.CfC",
        "drive.nn.wired_cfc.WiredCfC",
        "drive.nn.ltc.LTC",
        "drive.nn.closed_form.ClosedFormLTC",
    } <= classes
    assert EXPORTS, "no TorchScript export among the fixtures"


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_checkpoint_outputs_equal_the_recorded_ones(name: str, one_thread) -> None:
    policy, meta = load_policy(FIXTURES / name)
    views = torch.from_numpy(INPUTS["views"]).permute(0, 3, 1, 2).float() / 255.0
    dts = torch.from_numpy(INPUTS["dt_s"])
    with torch.no_grad():
        curvature, hidden = policy(views.unsqueeze(0), None, dts.unsqueeze(0))
        h = policy.initial_state(1)
        steps = []
        for view, dt in zip(views, dts):
            c, h = policy.step(view.unsqueeze(0), h, dt.reshape(1))
            steps.append(c)
    _assert_same(curvature.numpy(), REFERENCE[f"{name}/forward"], f"{name} forward")
    _assert_same(hidden.numpy(), REFERENCE[f"{name}/hidden"], f"{name} hidden")
    _assert_same(torch.cat(steps).numpy(), REFERENCE[f"{name}/step"], f"{name} step loop")
    assert np.abs(REFERENCE[f"{name}/forward"]).max() > 0  # the references are not trivially zero


_EXPORT_SCRIPT = """
import sys, numpy as np, torch
from drive.export.runtime import load_exported
torch.set_num_threads(int(sys.argv[3]))
frames = np.load(sys.argv[1])["frames"]
out = {}
for path in sys.argv[4:]:
    policy = load_exported(path)
    hidden = policy.initial_state(1)
    steps = []
    with torch.no_grad():
        for frame in frames:
            curvature, hidden, status = policy.step(frame, hidden)
            steps.append(torch.cat([curvature.reshape(-1), status.reshape(-1).float()]))
    name = path.rsplit("/", 1)[-1]
    out[name + "/step"] = torch.stack(steps).numpy()
    out[name + "/hidden"] = hidden.numpy()
np.savez(sys.argv[2], **out)
"""


def test_exports_load_in_a_fresh_process_and_give_the_recorded_outputs(tmp_path: Path) -> None:
    result = tmp_path / "exports.npz"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        [
            sys.executable,
            "-c",
            _EXPORT_SCRIPT,
            str(FIXTURES / "inputs.npz"),
            str(result),
            str(INFO["threads"]),
            *[str(FIXTURES / n) for n in EXPORTS],
        ],
        check=True,
        env=env,
        timeout=600,
    )
    got: Dict[str, np.ndarray] = dict(np.load(result))
    for name in EXPORTS:
        for part in ("step", "hidden"):
            _assert_same(got[f"{name}/{part}"], REFERENCE[f"{name}/{part}"], f"{name} {part}")


@pytest.mark.parametrize("name", CHECKPOINTS + EXPORTS)
def test_every_fixture_drives_the_world(name: str) -> None:
    driver = load_driver(FIXTURES / name)
    result = evaluate(driver, km=0.1, seed=0, fps=1.0 / driver.nominal_dt_s)  # the rate it was trained at
    assert result.metrics["km"] == pytest.approx(0.1, abs=0.01)
    assert np.isfinite(result.metrics["lateral_rms_m"])


def test_every_class_path_written_before_the_cfc_package_still_loads(tmp_path: Path, one_thread) -> None:
    """Checkpoints from before ``drive/nn/cfc/`` name ``drive.nn.cfc.CfC``, ``drive.nn.wired_cfc.WiredCfC``
    (the fixtures) or, older still, ``drive.nn.cfc.WiredCfC``: the last one, rewritten into a fixture."""
    ckpt = torch.load(FIXTURES / "cfc_wired_mixed.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["drive"]["policy_config"]["rnn"]["class"] == "drive.nn.wired_cfc.WiredCfC"
    ckpt["drive"]["policy_config"]["rnn"]["class"] = "drive.nn.cfc.WiredCfC"
    torch.save(ckpt, tmp_path / "old.ckpt")
    policy, _ = load_policy(tmp_path / "old.ckpt")
    views = torch.from_numpy(INPUTS["views"]).permute(0, 3, 1, 2).float() / 255.0
    with torch.no_grad():
        curvature, _ = policy(views.unsqueeze(0), None, torch.from_numpy(INPUTS["dt_s"]).unsqueeze(0))
    _assert_same(
        curvature.numpy(), REFERENCE["cfc_wired_mixed.ckpt/forward"], "drive.nn.cfc.WiredCfC forward"
    )


@pytest.mark.parametrize("name", EXPORTS)
def test_exporting_the_fixture_checkpoint_again_gives_the_recorded_export_outputs(
    name: str, tmp_path: Path
) -> None:
    """Today's export code on the checkpoint the fixture export was made from: same file behaviour."""
    from drive.export import export_policy

    source = FIXTURES / (name[: -len(".ts")] + ".ckpt")
    out = export_policy(source, tmp_path / name, format="torchscript")
    result = tmp_path / "exports.npz"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        [
            sys.executable,
            "-c",
            _EXPORT_SCRIPT,
            str(FIXTURES / "inputs.npz"),
            str(result),
            str(INFO["threads"]),
            str(out),
        ],
        check=True,
        env=env,
        timeout=600,
    )
    got = dict(np.load(result))
    for part in ("step", "hidden"):
        _assert_same(got[f"{name}/{part}"], REFERENCE[f"{name}/{part}"], f"{name} re-exported {part}")
