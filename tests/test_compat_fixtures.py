"""Files written by an earlier drive still load, compute what they computed then, and drive (issue 23).

``tests/fixtures/compat/`` holds checkpoints of every family written by ``drive fit``, a closed-form
conversion and TorchScript exports, made by ``tools/make_compat_fixtures.py`` *before* the code
was reorganised, with the outputs the public loaders gave on fixed frames then. A moved or renamed
class, a changed state-dict key or a changed update equation fails here.

Equality (``tests/compat_reference.py``, one comparison for every test here): on every machine,
each output within 3e-5 of its reference's largest magnitude (the measured spread between CPUs and
kernels, and the changes this still catches, are stated there and shown by
``tests/test_compat_mutations.py``). Bitwise only on request: ``DRIVE_COMPAT_BITWISE=1`` on a
machine whose fingerprint is the one in ``fixtures/compat/machine.json``; asked for on another
machine, the comparisons skip saying which part of the fingerprint differs (docs/deploy.md,
"Compatibility fixtures").

The two TorchScript files were re-exported from the fixture checkpoints on 2026-11-27 (issue 32):
the exporter of 2026-11-25 wrote every resize mode of ``F.interpolate`` into the file, among them
``aten::_upsample_lanczos2d_aa``, which torch 2.11 (the oldest supported) lacks, so the files did
not load there. Today's exporter writes only the resize it runs; the re-exported files give the
recorded outputs bitwise on the machine that recorded them (the references were kept), as
:func:`test_exporting_the_fixture_checkpoint_again_gives_the_recorded_export_outputs` checks for
any export of today's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch
from compat_reference import (
    CHECKPOINTS,
    EXPORTS,
    FIXTURES,
    INFO,
    REFERENCE,
    assert_matches,
    bitwise_skip_reason,
    checkpoint_outputs,
    export_mismatch,
    resize_rounding_differs,
    views_and_dts,
)

from drive.checkpoint import load_policy
from drive.export import export_policy
from drive.policy_drivers import load_driver
from drive.sim.closed_loop import evaluate

pytestmark = pytest.mark.kernels  # numbers recorded on another machine; exports in fresh processes

BITWISE_SKIP = bitwise_skip_reason()
compares = pytest.mark.skipif(BITWISE_SKIP is not None, reason=str(BITWISE_SKIP))


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


@compares
@pytest.mark.parametrize("name", CHECKPOINTS)
def test_checkpoint_outputs_equal_the_recorded_ones(name: str, one_thread) -> None:
    policy, meta = load_policy(FIXTURES / name)
    got = checkpoint_outputs(policy)
    assert_matches(got["forward"], REFERENCE[f"{name}/forward"], f"{name} forward")
    assert_matches(got["hidden"], REFERENCE[f"{name}/hidden"], f"{name} hidden")
    assert_matches(got["step"], REFERENCE[f"{name}/step"], f"{name} step loop")
    assert np.abs(REFERENCE[f"{name}/forward"]).max() > 0  # the references are not trivially zero


_EXPORT_SCRIPT = """
import sys, numpy as np, torch
sys.path.insert(0, sys.argv[4])
from compat_reference import export_outputs
from drive.export.runtime import load_exported
torch.set_num_threads(int(sys.argv[3]))
frames = np.load(sys.argv[1])["frames"]
out = {}
for path in sys.argv[5:]:
    name = path.rsplit("/", 1)[-1]
    for part, value in export_outputs(load_exported(path), frames).items():
        out[name + "/" + part] = value
np.savez(sys.argv[2], **out)
"""


def _exports_in_a_fresh_process(paths, result: Path) -> Dict[str, np.ndarray]:
    """Each exported file loaded and stepped over the recorded camera frames in a new interpreter
    (nothing of drive's imported before the file loads, as on a car)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        [
            sys.executable,
            "-c",
            _EXPORT_SCRIPT,
            str(FIXTURES / "inputs.npz"),
            str(result),
            str(INFO["threads"]),
            str(Path(__file__).resolve().parent),
            *[str(p) for p in paths],
        ],
        check=True,
        env=env,
        timeout=600,
    )
    return dict(np.load(result))


@compares
def test_exports_load_in_a_fresh_process_and_give_the_recorded_outputs(tmp_path: Path) -> None:
    rounding = resize_rounding_differs()
    if rounding:
        pytest.skip(rounding)
    got = _exports_in_a_fresh_process([FIXTURES / n for n in EXPORTS], tmp_path / "exports.npz")
    for name in EXPORTS:
        outputs = {part: got[f"{name}/{part}"] for part in ("step", "hidden")}
        problem = export_mismatch(outputs, name, name)
        assert problem is None, problem


@pytest.mark.parametrize("name", CHECKPOINTS + EXPORTS)
def test_every_fixture_drives_the_world(name: str) -> None:
    driver = load_driver(FIXTURES / name)
    result = evaluate(driver, km=0.1, seed=0, fps=1.0 / driver.nominal_dt_s)  # the rate it was trained at
    assert result.metrics["km"] == pytest.approx(0.1, abs=0.01)
    assert np.isfinite(result.metrics["lateral_rms_m"])


@compares
def test_every_class_path_written_before_the_cfc_package_still_loads(tmp_path: Path, one_thread) -> None:
    """Checkpoints from before ``drive/nn/cfc/`` name ``drive.nn.cfc.CfC``, ``drive.nn.wired_cfc.WiredCfC``
    (the fixtures) or, older still, ``drive.nn.cfc.WiredCfC``: the last one, rewritten into a fixture."""
    ckpt = torch.load(FIXTURES / "cfc_wired_mixed.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["drive"]["policy_config"]["rnn"]["class"] == "drive.nn.wired_cfc.WiredCfC"
    ckpt["drive"]["policy_config"]["rnn"]["class"] = "drive.nn.cfc.WiredCfC"
    torch.save(ckpt, tmp_path / "old.ckpt")
    policy, _ = load_policy(tmp_path / "old.ckpt")
    views, dts = views_and_dts()
    with torch.no_grad():
        curvature, _ = policy(views.unsqueeze(0), None, dts.unsqueeze(0))
    assert_matches(
        curvature.numpy(), REFERENCE["cfc_wired_mixed.ckpt/forward"], "drive.nn.cfc.WiredCfC forward"
    )


@compares
@pytest.mark.parametrize("name", EXPORTS)
def test_exporting_the_fixture_checkpoint_again_gives_the_recorded_export_outputs(
    name: str, tmp_path: Path
) -> None:
    """Today's export code on the checkpoint the fixture export was made from: same file behaviour."""
    rounding = resize_rounding_differs()
    if rounding:
        pytest.skip(rounding)
    source = FIXTURES / (name[: -len(".ts")] + ".ckpt")
    out = export_policy(source, tmp_path / name, format="torchscript")
    got = _exports_in_a_fresh_process([out], tmp_path / "exports.npz")
    outputs = {part: got[f"{name}/{part}"] for part in ("step", "hidden")}
    problem = export_mismatch(outputs, name, f"{name} re-exported")
    assert problem is None, problem


def test_exported_fixtures_name_only_the_resize_they_run() -> None:
    """The TorchScript fixtures load on torch 2.11: no resize op newer than it in their code (the
    exporter of 2026-11-25 wrote ``aten::_upsample_lanczos2d_aa``, torch 2.12's, into every file)."""
    for name in EXPORTS:
        with zipfile.ZipFile(FIXTURES / name) as z:
            code = b"".join(z.read(n) for n in z.namelist() if "/code/" in n and n.endswith(".py"))
        assert b"_upsample_bilinear2d_aa" in code, name
        assert b"lanczos" not in code and b"bicubic" not in code, name
