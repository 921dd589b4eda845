"""A new recurrent cell and a new log reader are one module each (drive.plugins): a toy cell and a
toy reader, written here into a temporary package outside drive, train with `drive fit` and read
with `drive data inspect` through the public commands, named only in DRIVE_PLUGINS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest
import torch

# A leaky integrator of a linear map of the features: the cell, its family and its options.
CELL = '''
from dataclasses import dataclass
from typing import Any, Dict, Tuple

import torch
from torch import Tensor, nn

from drive.nn.contract import RecurrentModule
from drive.nn.registry import Family, register


@dataclass(frozen=True)
class ToyOptions:
    """``toy``: a leaky integrator (a test's plugin cell).

    Args:
        units: state neurons.
        leak: leak rate per second.
    """

    units: int = 4
    leak: float = 0.5


@register("toy_leaky", family=Family("toy", ToyOptions))
class ToyLeaky(RecurrentModule):
    def __init__(self, input_size: int, units: int = 4, leak: float = 0.5) -> None:
        super().__init__(input_size, 1, units)
        self.units, self.leak = int(units), float(leak)
        self.input_map = nn.Linear(input_size, units)
        self.readout = nn.Linear(units, 1)

    @classmethod
    def from_options(cls, features: int, options: ToyOptions) -> "ToyLeaky":
        return cls(features, options.units, options.leak)

    def config(self) -> Dict[str, Any]:
        return {"input_size": self.input_size, "units": self.units, "leak": self.leak}

    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        drive = torch.tanh(self.input_map(x))
        h, ys = hidden, []
        for t in range(x.size(1)):
            keep = torch.exp(-self.leak * ts[:, t])
            h = keep * h + (1.0 - keep) * drive[:, t]
            ys.append(self.readout(h))
        return torch.stack(ys, 1), h
'''

# ``*.toylog``: a line ``toylog <width> <height>``, then ``<time s> <curvature 1/m>`` per frame; the
# frames are drawn from the label (a bright column whose place is the curvature).
READER = """
from pathlib import Path
from typing import List

import numpy as np

from drive.data.errors import Problems
from drive.data.readers.base import ReaderOptions, build_recording
from drive.data.readers.registry import register_reader
from drive.io.recording import Recording


class ToyFrames:
    def __init__(self, curvature: np.ndarray, width: int, height: int) -> None:
        self.curvature, self.width, self.height = curvature, width, height

    def __len__(self) -> int:
        return len(self.curvature)

    def read(self, index: int) -> np.ndarray:
        frame = np.full((self.height, self.width, 3), 40, np.uint8)
        column = int((0.5 + 10.0 * float(self.curvature[index])) * (self.width - 1))
        frame[:, max(0, min(self.width - 1, column))] = 230
        return frame


def detect(path: Path) -> bool:
    return path.is_file() and path.suffix == ".toylog"


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    lines = path.read_text().splitlines()
    width, height = (int(v) for v in lines[0].split()[1:3])
    rows, t, kappa = [], [], []
    for number, text in enumerate(lines[1:], start=2):
        try:
            a, b = (float(v) for v in text.split())
        except ValueError:
            problems.report(str(path), number, "malformed_row", f"expected '<t> <curvature>', got {text!r}")
            continue
        rows.append(number)
        t.append(a)
        kappa.append(b)
    log = {"timestamp_s": np.asarray(t), "curvature": np.asarray(kappa), "speed_mps": np.full(len(t), 8.0)}
    rec = build_recording(
        file=str(path),
        rows=np.asarray(rows),
        log=log,
        source=ToyFrames(np.asarray(kappa), width, height),
        problems=problems,
        meta={"source": f"toylog:{path}", "camera": options.calibration()},
        path=path,
    )
    return [rec] if rec is not None else []


register_reader("toylog", detect=detect, read=read, layout="a .toylog file", suffixes=(".toylog",))
"""


def _toylog(path: Path, frames: int, seed: int, bad_row: bool = False) -> None:
    g = torch.Generator().manual_seed(seed)
    kappa = (torch.cumsum(torch.randn(frames, generator=g), 0) * 0.002).clamp(-0.04, 0.04)
    lines = ["toylog 64 48"] + [f"{i / 10:.1f} {float(k):.5f}" for i, k in enumerate(kappa)]
    if bad_row:
        lines.insert(5, "not a row")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Dict[str, str]:
    """The package ``toyplugin`` (a cell module, a reader module) in a folder on PYTHONPATH, named
    in DRIVE_PLUGINS: nothing in drive names it."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "toyplugin").mkdir()
    (root / "toyplugin" / "__init__.py").write_text('"""A drive plugin written by a test."""\n')
    (root / "toyplugin" / "cell.py").write_text(textwrap.dedent(CELL))
    (root / "toyplugin" / "reader.py").write_text(textwrap.dedent(READER))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["DRIVE_PLUGINS"] = "toyplugin.cell, toyplugin.reader"
    return env


def _drive(args: List[str], env: Dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "drive.cli", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_drive_data_inspect_reads_the_plugins_format(plugin, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _toylog(logs / "a.toylog", 30, 0)
    _toylog(logs / "b.toylog", 20, 1, bad_row=True)
    done = _drive(["data", "inspect", str(logs), "--json"], plugin, tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]  # 1: inspect found a problem (the bad row)
    report = json.loads(done.stdout)
    assert [(Path(log["path"]).name, log["format"]) for log in report["logs"]] == [
        ("a.toylog", "toylog"),
        ("b.toylog", "toylog"),
    ]
    assert sorted(r["frames"] for r in report["recordings"]) == [20, 30]
    assert any("malformed_row" in json.dumps(p) and "b.toylog" in json.dumps(p) for p in report["problems"])
    help_text = _drive(["data", "inspect", "--help"], plugin, tmp_path).stdout
    assert "toylog" in help_text  # --format choices come from the registry


def test_drive_fit_trains_the_plugins_cell_on_the_plugins_format(plugin, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for seed in range(2):
        _toylog(logs / f"drive{seed}.toylog", 48, seed)
    help_text = _drive(["fit", "--help"], plugin, tmp_path).stdout
    assert "--model.toy.units" in help_text and "--model.toy.leak" in help_text
    out = tmp_path / "run"
    args = ["fit", "--model.family", "toy", "--model.toy.units", "3", "--model.input_hw", "[53, 53]"]
    args += ["--model.check_after_steps", "0", "--data.train", f"[{logs}]", "--data.image_size", "[53, 53]"]
    args += ["--data.seq_len", "4", "--data.batch_size", "2", "--data.num_workers", "0"]
    args += ["--data.cache_dir", str(tmp_path / "cache"), "--trainer.accelerator", "cpu"]
    args += ["--trainer.max_steps", "3", "--trainer.default_root_dir", str(out)]
    args += ["--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]
    done = _drive(args, plugin, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["drive"]["family"] == "toy"
    assert ckpt["drive"]["policy_config"]["rnn"] == {
        "class": "toy_leaky",
        "kwargs": {"input_size": 32, "units": 3, "leak": 0.5},
    }
    assert ckpt["hyper_parameters"]["toy"] == {"units": 3, "leak": 0.5}
    assert ckpt["global_step"] == 3


def _python(code: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_an_installed_distribution_names_its_plugins_by_entry_point(plugin, tmp_path: Path) -> None:
    dist = tmp_path / "toyplugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[drive.plugins]\ncell = toyplugin.cell\n")
    env = {k: v for k, v in plugin.items() if k != "DRIVE_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), plugin["PYTHONPATH"]])
    code = "import drive.nn; from drive.nn.registry import families; print(sorted(families()))"
    done = _python(code, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'toy'" in done.stdout


def test_a_plugin_that_cannot_be_imported_is_named(tmp_path: Path) -> None:
    env = {**os.environ, "DRIVE_PLUGINS": "no_such_drive_plugin"}
    done = _python("import drive.data.readers", env)
    assert done.returncode != 0
    assert "plugin 'no_such_drive_plugin' ($DRIVE_PLUGINS) cannot be imported" in done.stderr
