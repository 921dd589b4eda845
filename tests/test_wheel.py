"""The wheel is the product: built from the sources, installed into a fresh venv, and run from a
folder outside the checkout, it trains and drives with its shipped profiles (a reduced ``drive
demo``), reads ``drive fit --config ncp_ltc``, and carries the vehicle runtime's sources.

The fresh venv gets no packages of its own but the wheel (``--no-deps``): a ``.pth`` file points it
at this test environment's site-packages for torch, Lightning and the rest. A plain path in a
``.pth`` file is appended to ``sys.path`` without reading the ``.pth`` files there, so the
checkout's editable install of drive stays invisible; the test asserts that ``drive`` imports from
the venv. Offline: ``pip wheel --no-deps --no-build-isolation --no-index`` with this environment's
setuptools.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

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
def test_a_reduced_demo_runs_from_the_installed_wheel_in_any_folder(installed: Path, outside: Path):
    cmd = [
        str(installed / "drive"),
        "demo",
        "--out",
        "demo",  # relative: lands in the working folder, outside the checkout
        "--threads",
        "1",
        "--train-minutes",
        "0.2",
        "--val-minutes",
        "0.1",
        "--recording-minutes",
        "0.1",
        "--max-steps",
        "2",
        "--onpolicy-steps",
        "1",
        "--baselines",
        "",
        "--km",
        "0.1",
        "--test-seeds",
        "5",
        "--robustness-km",
        "0",
        "--robustness-frames",
        "8",
        "--saliency-frames",
        "4",
        "--closed-form-km",
        "0.02",
        "--speed-rounds",
        "1",
    ]
    done = _run(cmd, outside, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # two optimizer steps cannot keep a lane: the demo runs to the end and says what failed
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAILED acceptance" in done.stdout
    report = (outside / "demo" / "REPORT.md").read_text()
    assert "`--config demo`" in report and "2 optimizer steps" in report
    assert (outside / "demo" / "export").is_dir()
