"""The wheel is the product: built from the sources, installed into a fresh venv, and run from a
folder outside the checkout, it trains and drives with its shipped profiles (a reduced ``drive
demo`` that runs every stage and says what failed), reads ``drive fit --config ncp_ltc``, and carries
the vehicle runtime's sources.

The fresh venv gets no packages of its own but the wheel (``--no-deps``): a ``.pth`` file points it
at this test environment's site-packages for torch, Lightning and the rest. A plain path in a
``.pth`` file is appended to ``sys.path`` without reading the ``.pth`` files there, so the
checkout's editable install of drive stays invisible; the test asserts that ``drive`` imports from
the venv. Offline: ``pip wheel --no-deps --no-build-isolation --no-index`` with this environment's
setuptools.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import torch

from drive.cli.fit import lightning_main
from drive.demo.report import STAGES
from drive.demo.settings import DEFAULT_CONFIG

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: List[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv holding only the wheel built from this checkout; returns its ``bin`` folder."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"  # a copy: a build in place could pick up stale files of an earlier build/
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "drive", src / "drive", ignore=shutil.ignore_patterns("__pycache__", "build"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    done = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(work), str(src)], work
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = work.glob("drive-*.whl")
    venv = work / "venv"
    done = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work)
    (Path(purelib.stdout.strip()) / "test_environment.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n"
    )
    done = _run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], work)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return venv / "bin"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A working folder outside the checkout."""
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return tmp_path


@pytest.mark.slow
def test_the_installed_package_is_the_wheel_with_its_profiles_and_runtime(installed: Path, outside: Path):
    venv = installed.parent
    done = _run(
        [
            str(installed / "python"),
            "-c",
            "import drive, drive.train.profiles as p, drive.export.vehicle as v; "
            "print(drive.__file__); print(p.configs_dir()); print(v.runtime_dir())",
        ],
        outside,
    )
    assert done.returncode == 0, done.stderr
    package, configs, runtime = (Path(line) for line in done.stdout.split())
    assert package.is_relative_to(venv) and configs.is_relative_to(venv) and runtime.is_relative_to(venv)
    assert (configs / "ncp_ltc.yaml").is_file() and (configs / "trainer" / "cpu.yaml").is_file()
    for name in ("drive_runtime.cpp", "CMakeLists.txt", "run_policy.py", "README.md"):
        assert (runtime / name).is_file(), name
    done = _run([str(installed / "drive"), "export", "--print-runtime-dir"], outside)
    assert done.returncode == 0 and Path(done.stdout.strip()) == runtime, done.stderr
    done = _run([str(installed / "drive"), "fit", "--config", "ncp_ltc", "--help"], outside)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--model.ncp_ltc.ode_unfolds" in done.stdout
    done = _run([str(installed / "drive"), "fit", "--config", "ncp_ltc", "--print_config"], outside)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "default_root_dir: runs/ncp_ltc" in done.stdout and "ode_unfolds: 6" in done.stdout
    )  # the profile's
    done = _run([str(installed / "drive"), "fit", "--config", "ncp_ltx"], outside)
    assert done.returncode == 2 and "no shipped profile of that name" in done.stderr, done.stderr


@pytest.mark.slow
def test_a_reduced_demo_from_the_installed_wheel_runs_every_stage_and_names_the_failed_criteria(
    installed: Path, outside: Path
) -> None:
    """``drive demo`` end to end from the wheel, in a folder outside the checkout (one run serves both:
    the product as installed, and every stage -- closed-loop robustness and the exported file's drive
    included -- so a crash in any stage fails the suite)."""
    out = outside / "demo"
    cmd = [
        str(installed / "drive"),
        "demo",
        "--out",
        "demo",  # relative: lands in the working folder, outside the checkout
        "--train-minutes",
        "0.5",
        "--val-minutes",
        "0.25",
        "--recording-minutes",
        "0.25",
        "--max-steps",
        "4",
        "--onpolicy-steps",
        "2",
        "--baseline-steps",
        "2",
        "--km",
        "0.3",
        "--hard-km",
        "0.1",
        "--test-seeds",
        "5,6",
        "--robustness-km",
        "0.05",
        "--robustness-frames",
        "40",
        "--saliency-frames",
        "8",
        "--closed-form-km",
        "0.05",
        "--speed-rounds",
        "1",
    ]
    done = _run(cmd, outside, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # four optimizer steps cannot keep a lane: the demo runs to the end and says exactly what failed
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAILED acceptance: drove 0.30 km < 6 km" in done.stdout
    for name in STAGES:
        assert (out / "stages" / f"{name}.json").is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["training"]["steps"] == 4
    assert set(summary["stage_seconds"]) == set(STAGES)
    assert not summary["acceptance"]["passed"] and len(summary["acceptance"]["failed"]) >= 1
    drive = json.loads((out / "drive" / "ncp_ltc" / "metrics.json").read_text())
    assert drive["seed"] == [5, 6] and {s["seed"] for s in drive["per_segment"]} == {5}
    report = (out / "REPORT.md").read_text()
    assert "4 optimizer steps" in report and "test seeds 5,6" in report and "| **total** |" in report
    assert "`--config demo`" in report and (out / "export").is_dir()
    assert "per km (exact 95 % interval)" in report and "told apart at this distance?" in report
    stamps = {n: json.loads((out / "stages" / f"{n}.json").read_text())["result"] for n in STAGES}
    assert stamps["export"]["closed_loop"]["km"] == pytest.approx(0.3, abs=0.01)
    # the demo's policy is trained in the loop: the behaviour-cloning run branched at step 2, a round
    # of rollouts landed and changed its batches; every later stage takes it
    arm = stamps["onpolicy"]
    assert arm["branch_step"] == 2 and arm["steps"] == 4 and arm["rounds"] == 1 and arm["visited_steps"] > 0
    main, other = (
        torch.load(p, weights_only=True)["state_dict"]
        for p in (outside / stamps["train"]["checkpoint"], outside / arm["checkpoint"])
    )
    assert any(not torch.allclose(main[k], other[k], rtol=1e-5, atol=1e-6) for k in main)  # told apart
    # no round was started that could only land after the last step (training would wait for it)
    state = torch.load(outside / arm["checkpoint"], weights_only=True)["callbacks"]["OnPolicyData"]
    assert state["pending"] is None and len(state["rounds"]) == 1
    assert (out / "drive" / "ncp_ltc_bc" / "metrics.json").is_file()
    assert "## Training in the loop (both arms)" in report and "NCP-LTC, behaviour cloning only" in report
    assert arm["noise_std"] > 0 and f"DART noise of {arm['noise_std']:g} 1/m" in report
    # trained on mixed roads (every other recording hard), and driven on held-out hard roads too
    assert [Path(p).name.split("-")[3] == "hard" for p in stamps["simulate"]["train"]] == [False, True]
    assert "## Closed loop on held-out hard roads" in report
    assert summary["closed_loop_hard"]["ncp_ltc"]["km"] == pytest.approx(0.1, abs=0.01)
    assert f"`{Path(arm['checkpoint']).relative_to('demo')}`" in report.split("## Training\n")[1]
    policy = (outside / arm["checkpoint"]).resolve()
    assert (out / "robustness" / "models" / "ncp_ltc.ckpt").resolve() == policy
    logs = {k: [str(outside / p) for p in stamps["simulate"][k]] for k in ("train", "val")}
    _the_branch_is_one_fit_with_the_schedule_in_the_profile(out, logs, other)
    assert any(r.get("interventions_per_km") is not None for r in stamps["robustness"]["rows"])
    # a second run finds every stage done and redoes nothing
    again = _run(cmd, outside, timeout=300)
    assert again.stdout.count("skipped") == len(STAGES), again.stdout[-2000:]


def _the_branch_is_one_fit_with_the_schedule_in_the_profile(out: Path, data: dict, branch: dict) -> None:
    """The demo trains its policy as a branch of the behaviour-cloning run (resumed at step 2 with a
    round every step); one uninterrupted ``drive fit`` with that schedule in the profile
    (``onpolicy.start_step``, as the shipped profile ``demo`` has it: from step 1,500 of 1,800) must
    end at the same weights: the same computation on this machine, so within float noise, while a
    round started at another step or a lost buffer moves them far more."""
    argv = ["fit", "--config", str(DEFAULT_CONFIG), "--seed_everything", "0"]
    argv += ["--data.train", json.dumps(data["train"]), "--data.val", json.dumps(data["val"])]
    argv += ["--data.cache_dir", str(out / "cache"), "--trainer.default_root_dir", str(out / "one_fit")]
    argv += ["--trainer.max_steps", "4", "--trainer.enable_progress_bar", "false"]
    argv += ["--onpolicy.start_step", "2", "--onpolicy.every_n_steps", "1"]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # drive demo's --threads
    try:
        assert lightning_main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    single = torch.load(out / "one_fit" / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    for key, value in single.items():
        torch.testing.assert_close(branch[key], value, rtol=1e-5, atol=1e-6, msg=key)
