"""`drive demo` stages are idempotent: same settings skip, changed settings or lost outputs re-run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Type

import pytest

from drive.demo.results import Drives, Drove, HardDrove, Result, Simulated
from drive.demo.stage import Made, Stages


@dataclass
class Value(Result):
    value: int
    seconds: float = 0.0


@dataclass
class Renamed(Result):  # Value as an older version of the package wrote it
    amount: int
    seconds: float = 0.0


def _run(out: Path, calls: list, a: int, b: int, kind: Type[Result] = Value) -> list:
    stage = Stages(out, total=2)

    def first() -> Made:
        calls.append("first")
        (out / "first.txt").write_text(str(a))
        return Made(kind(a), [out / "first.txt"])

    def second() -> Made:
        calls.append("second")
        return Made(kind(b))

    return [stage("first", {"a": a}, first, kind), stage("second", {"b": b}, second, kind)]


def test_rerun_with_same_settings_skips_every_stage(tmp_path: Path) -> None:
    calls: list = []
    ran = _run(tmp_path, calls, 1, 2)
    skipped = _run(tmp_path, calls, 1, 2)
    assert calls == ["first", "second"]
    saved = json.loads((tmp_path / "stages" / "first.json").read_text())
    assert saved["result"]["value"] == 1 and saved["outputs"] == [str(tmp_path / "first.txt")]
    assert set(saved["result"]) == {"value", "seconds"}  # the dataclass's fields are the file's keys
    assert skipped == ran and [type(r) for r in skipped] == [Value, Value]  # rebuilt, seconds and all


def test_a_saved_result_of_other_fields_is_stale_and_the_stage_runs_again(tmp_path: Path, capsys) -> None:
    """A stage file written before a field was renamed does not fit the dataclass: the stage runs
    again (and everything after it) instead of crashing on the rebuild."""
    calls: list = []
    _run(tmp_path, calls, 1, 2, kind=Renamed)
    assert json.loads((tmp_path / "stages" / "first.json").read_text())["result"]["amount"] == 1
    first, second = _run(tmp_path, calls, 1, 2)
    assert calls == ["first", "second", "first", "second"]
    assert first == Value(1, first.seconds) and second == Value(2, second.seconds)
    assert "first: its saved result does not fit Value" in capsys.readouterr().out
    assert json.loads((tmp_path / "stages" / "first.json").read_text())["result"]["value"] == 1
    _run(tmp_path, calls, 1, 2)
    assert len(calls) == 4  # the rewritten files fit: skipped


def test_a_stage_handing_on_another_kind_of_result_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="stage s made a Renamed, not a Value"):
        Stages(tmp_path, total=1)("s", {}, lambda: Made(Renamed(1)), Value)


def test_the_drive_stage_keeps_one_key_per_driver_and_is_rebuilt_with_its_hard_roads(tmp_path: Path) -> None:
    drives = Drives(
        {
            "ncp_ltc": Drove({"km": 1.0}, "a.png", "a.mp4", HardDrove({"km": 0.5}, "hard.png")),
            "expert": Drove({"km": 1.0}, "b.png"),
        }
    )
    ran = Stages(tmp_path, total=1)("drive", {}, lambda: Made(drives), Drives)
    saved = json.loads((tmp_path / "stages" / "drive.json").read_text())["result"]
    assert saved == {
        "ncp_ltc": {
            "metrics": {"km": 1.0},
            "plot": "a.png",
            "video": "a.mp4",
            "hard": {"metrics": {"km": 0.5}, "plot": "hard.png"},
        },
        "expert": {"metrics": {"km": 1.0}, "plot": "b.png", "video": ""},
        "seconds": ran.seconds,
    }
    assert Stages(tmp_path, total=1)("drive", {}, lambda: Made(Drives()), Drives) == ran


def test_changed_upstream_setting_reruns_that_stage_and_everything_after(tmp_path: Path) -> None:
    calls: list = []
    _run(tmp_path, calls, 1, 2)
    _run(tmp_path, calls, 5, 2)
    assert calls == ["first", "second", "first", "second"]


def test_changed_downstream_setting_reruns_only_downstream(tmp_path: Path) -> None:
    calls: list = []
    _run(tmp_path, calls, 1, 2)
    _run(tmp_path, calls, 1, 3)
    assert calls == ["first", "second", "second"]


def test_missing_output_reruns_the_stage(tmp_path: Path) -> None:
    calls: list = []
    _run(tmp_path, calls, 1, 2)
    (tmp_path / "first.txt").unlink()
    _run(tmp_path, calls, 1, 2)
    assert calls == ["first", "second", "first", "second"]


def test_unknown_baseline_family_is_named_before_any_training(tmp_path: Path) -> None:
    import pytest

    from drive.demo.settings import DemoSettings
    from drive.demo.training import train_baselines

    with pytest.raises(ValueError, match=r"unknown families \['gru'\]"):
        train_baselines(
            DemoSettings(out=str(tmp_path), baselines="lstm,gru"), tmp_path, Simulated([], [], [])
        )
    assert not (tmp_path / "baselines").exists()


def test_a_bad_training_setting_is_one_error_line_naming_it(tmp_path: Path, capsys) -> None:
    """The demo trains through drive.train.launch: a bad value in its config is answered like any
    input error of `drive` (one line, exit 2), not with a traceback after the training stage."""
    from drive.cli import main
    from drive.demo.settings import DEFAULT_CONFIG

    config = tmp_path / "bad.yaml"
    config.write_text(DEFAULT_CONFIG.read_text().replace("data:\n", "data:\n  augment_on: bogus\n", 1))
    code = main(
        [
            "demo",
            "--out",
            str(tmp_path / "demo"),
            "--config",
            str(config),
            "--train-minutes",
            "0.05",
            "--val-minutes",
            "0.05",
            "--recording-minutes",
            "0.05",
            "--baselines",
            "",
            "--test-seeds",
            "3",
        ]
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("drive ")]
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert lines == ["drive demo: error: augment_on must be 'workers' or 'device', got 'bogus'"], err[-2000:]
    assert (tmp_path / "demo" / "stages" / "simulate.json").is_file()  # it failed in training, not before
    assert not (tmp_path / "demo" / "stages" / "train.json").exists()


def test_help_of_the_commands_imports_neither_torch_nor_lightning() -> None:
    """``drive --help`` and ``drive demo|simulate|evaluate --help`` answer at once: torch and
    Lightning (seconds to import) are imported when a command runs, not to print its options
    (a fresh process)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from drive.cli import main\n"
        "for args in (['--help'], ['demo', '--help'], ['simulate', '--help'], ['evaluate', '--help']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted({'torch', 'lightning'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--train-minutes" in done.stdout and "--noise-std" in done.stdout  # demo's, evaluate's options
    assert done.stdout.strip().endswith("[]"), done.stdout[-500:]


@pytest.mark.parametrize("steps", ["-1", "1800", "5000"])
def test_an_on_policy_arm_as_long_as_the_run_is_refused_before_anything_runs(
    tmp_path: Path, capsys, steps: str
) -> None:
    """`--onpolicy-steps` must leave the arm a branch point inside the run (the demo profile: 1,800
    steps); a bad value is one line, exit 2, before any log is simulated."""
    from drive.cli import main

    code = main(["demo", "--out", str(tmp_path / "demo"), "--onpolicy-steps", steps])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert f"--onpolicy-steps must be 0 or within 1..1799 (the run's steps), got {steps}" in err
    assert not (tmp_path / "demo").exists()
