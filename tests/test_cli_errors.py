"""Every `drive` command answers input errors with ONE line on stderr, `drive <command>: error: ...`,
naming the file or option and what is wrong; exit status 2; no traceback (`--debug` shows it).

The matrix runs each command against each error class in-process through ``drive.cli.main`` (an
uncaught exception fails the test as a traceback would); one case per command runs again as a
real subprocess, where stderr must be exactly that one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import pytest
import torch

from drive.checkpoint import policy_meta, save_policy
from drive.cli import main
from drive.cli.errors import error_line
from drive.data.preprocess import Preprocessing
from drive.nn.families import build_policy
from drive.sim.camera import Camera
from drive.sim.record import simulate

ROOT = Path(__file__).resolve().parent.parent
HW = (16, 48)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Dict[str, Path]:
    """One tiny recording, a valid CfC checkpoint (not an LTC: closed-form refuses it) and the
    damaged files every command is fed."""
    d = tmp_path_factory.mktemp("cli-errors")
    (rec,) = simulate(
        d / "logs",
        minutes=0.05,
        seed=1,
        fps=10.0,
        camera=Camera.default(width=HW[1], height=HW[0]),
        recording_minutes=0.05,
    )
    torch.manual_seed(0)
    policy = build_policy("cfc", frame_period_s=0.1, units=16, input_hw=HW)
    good = save_policy(d / "cfc.ckpt", policy, policy_meta(policy, Preprocessing(size=HW), 10.0, "cfc"))
    data = good.read_bytes()
    (d / "empty.ckpt").write_bytes(b"")
    (d / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    (d / "text.ckpt").write_text("hello, not a checkpoint\n")
    (d / "folder.ckpt").mkdir()

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"drive": {}, "state_dict": {}, "x": Payload()}, d / "pickled.ckpt")
    for suffix in (".ts", ".pt2", ".onnx"):
        (d / f"truncated{suffix}").write_bytes(data[:3000])
        (d / f"empty{suffix}").write_bytes(b"")
    return {"dir": d, "logs": d / "logs", "rec": rec, "good": good}


@pytest.fixture(autouse=True)
def quiet_lightning():
    """Lightning's info notes go through `logging` to a stream pytest has swapped out in-process."""
    import logging

    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric", "lightning_utilities")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    yield
    for lg, level in zip(loggers, levels):
        lg.setLevel(level)


BAD_CHECKPOINTS = {  # file -> what the message must say about it
    "missing.ckpt": "no such",
    "empty.ckpt": "empty (0 bytes",
    "truncated.ckpt": "truncated or corrupt",
    "text.ckpt": "not a checkpoint",
    "folder.ckpt": "directory",
    "pickled.ckpt": "refusing to load",
}


def _lightning(command: str, ckpt: Path, w: Dict[str, Path], out: Path) -> List[str]:
    split = "train" if command == "fit" else "val"
    return [
        command,
        "--ckpt_path",
        str(ckpt),
        f"--data.{split}",
        f"[{w['logs']}]",
        "--data.image_size",
        str(list(HW)),
        "--data.num_workers",
        "0",
        "--data.cache_dir",
        str(out / "cache"),
        "--trainer.accelerator",
        "cpu",
        "--trainer.default_root_dir",
        str(out),
        "--trainer.logger",
        "false",
        "--trainer.max_steps",
        "1",
    ]


COMMANDS: Dict[str, Callable[[Path, Dict[str, Path], Path], List[str]]] = {
    "export": lambda c, w, o: ["export", "--ckpt", str(c), "--out", str(o / "policy.ts"), "--no-verify"],
    "closed-form": lambda c, w, o: [
        "closed-form",
        "--ckpt",
        str(c),
        "--out",
        str(o / "cf.pt"),
        "--recordings",
        str(w["rec"]),
        "--km",
        "0",
    ],
    "saliency": lambda c, w, o: [
        "saliency",
        "--ckpt",
        str(c),
        "--recording",
        str(w["rec"]),
        "--out",
        str(o / "s.mp4"),
    ],
    "robustness": lambda c, w, o: [
        "robustness",
        "--ckpt",
        str(c),
        "--recordings",
        str(w["rec"]),
        "--out",
        str(o / "rob"),
        "--noise",
        "0.1",
    ],
    "evaluate": lambda c, w, o: ["evaluate", "--policy", str(c), "--km", "0.01", "--out", str(o / "eval")],
    "fit": lambda c, w, o: _lightning("fit", c, w, o),
    "validate": lambda c, w, o: _lightning("validate", c, w, o),
}


def _check(argv: List[str], command: str, capsys, *must: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("drive ")]
    assert code == 2, err[-2000:]
    assert "Traceback" not in err and len(lines) == 1, err[-2000:]
    line = lines[0]
    assert line.startswith(f"drive {command}: error: ") and "np.float" not in line, line
    for text in must:
        assert text in line, line
    return line


@pytest.mark.parametrize("bad", sorted(BAD_CHECKPOINTS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_checkpoint_command_names_a_bad_checkpoint_in_one_line(
    command, bad, world, tmp_path, capsys
) -> None:
    path = world["dir"] / bad
    _check(COMMANDS[command](path, world, tmp_path / "out"), command, capsys, str(path), BAD_CHECKPOINTS[bad])
    assert not (tmp_path / "out").exists() or command in ("fit", "validate")  # nothing written


@pytest.mark.parametrize("command", ["export", "closed-form", "saliency", "robustness", "fit", "evaluate"])
def test_exported_file_given_as_a_checkpoint_or_damaged_export(command, world, tmp_path, capsys) -> None:
    """A .ts where a checkpoint is needed is named as an exported policy; for `evaluate`, which runs
    exported files, a damaged .ts / .pt2 / .onnx is named as such (and leaves no aotinductor_* folder)."""
    if command == "evaluate":
        for name in ("truncated.ts", "truncated.pt2", "truncated.onnx", "empty.ts", "empty.pt2"):
            path = world["dir"] / name
            _check(
                COMMANDS[command](path, world, tmp_path / "out"), command, capsys, str(path), "cannot load"
            )
        return
    path = world["dir"] / "truncated.ts"
    _check(COMMANDS[command](path, world, tmp_path / "out"), command, capsys, str(path))


def test_closed_form_refuses_a_non_ltc_checkpoint_in_one_line(world, tmp_path, capsys) -> None:
    _check(COMMANDS["closed-form"](world["good"], world, tmp_path), "closed-form", capsys, "LTC")


@pytest.mark.parametrize("command", ["saliency", "robustness"])
def test_missing_recording_is_named(command, world, tmp_path, capsys) -> None:
    missing = tmp_path / "no-such-recording"
    argv = [
        str(missing) if a == str(world["rec"]) else a
        for a in COMMANDS[command](world["good"], world, tmp_path)
    ]
    _check(argv, command, capsys, str(missing))


@pytest.mark.parametrize("command, option", [("fit", "train"), ("validate", "val")])
def test_fit_and_validate_name_missing_data(command, option, world, tmp_path, capsys) -> None:
    missing = tmp_path / "no-logs"
    argv = [
        command,
        f"--data.{option}",
        f"[{missing}]",
        "--data.num_workers",
        "0",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--trainer.default_root_dir",
        str(tmp_path / "run"),
        "--trainer.logger",
        "false",
        "--trainer.accelerator",
        "cpu",
        "--model.input_hw",
        str(list(HW)),
        "--data.image_size",
        str(list(HW)),
    ]
    if command == "validate":
        argv += ["--ckpt_path", str(world["good"])]
    _check(argv, command, capsys, str(missing))


def test_fit_names_a_bad_log_row(world, tmp_path, capsys) -> None:
    logs = tmp_path / "logs"
    rec = logs / world["rec"].name
    import shutil

    shutil.copytree(world["rec"], rec)
    csv = rec / "log.csv"
    lines = csv.read_text().splitlines()
    lines[3] = lines[3].split(",")[0] + ",abc," + ",".join(lines[3].split(",")[2:])
    csv.write_text("\n".join(lines) + "\n")
    argv = [
        "fit",
        "--data.train",
        f"[{logs}]",
        "--data.num_workers",
        "0",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--trainer.default_root_dir",
        str(tmp_path / "run"),
        "--trainer.logger",
        "false",
        "--trainer.accelerator",
        "cpu",
        "--model.input_hw",
        str(list(HW)),
        "--data.image_size",
        str(list(HW)),
    ]
    _check(argv, "fit", capsys, "log.csv")


@pytest.mark.parametrize("command", ["export", "saliency", "robustness", "evaluate", "simulate", "fit"])
def test_read_only_out_is_one_line_naming_it(command, world, read_only, capsys) -> None:
    if command == "simulate":
        argv = ["simulate", "--out", str(read_only / "logs"), "--minutes", "0.01"]
    elif command == "evaluate":
        argv = ["evaluate", "--policy", "expert", "--km", "0.01", "--out", str(read_only / "eval")]
    elif command == "fit":
        argv = [
            "fit",
            "--data.train",
            f"[{world['logs']}]",
            "--data.num_workers",
            "0",
            "--data.cache_dir",
            str(world["dir"] / "cache"),
            "--trainer.default_root_dir",
            str(read_only / "run"),
            "--trainer.logger",
            "false",
            "--trainer.accelerator",
            "cpu",
            "--trainer.max_steps",
            "1",
            "--model.input_hw",
            str(list(HW)),
            "--data.image_size",
            str(list(HW)),
        ]
    else:
        argv = COMMANDS[command](world["good"], world, read_only)
    _check(argv, command, capsys, str(read_only))


@pytest.mark.parametrize(
    "argv, must",
    [
        (["simulate", "--out", "{tmp}/s", "--speed-kmh", "1e6"], "--speed-kmh"),
        (["simulate", "--out", "{tmp}/s", "--noise-std", "nan"], "--noise-std"),
        (["simulate", "--out", "{tmp}/s", "--fps", "-3"], "--fps"),
        (["simulate", "--out", "{tmp}/s", "--roads", "mixed", "--minutes", "0.5"], "--recording-minutes"),
        (["evaluate", "--policy", "expert", "--out", "{tmp}/e", "--speed-kmh", "inf"], "--speed-kmh"),
        (["evaluate", "--policy", "expert", "--out", "{tmp}/e", "--noise-std", "nan"], "--noise-std"),
        (["export", "--ckpt", "{good}", "--out", "{tmp}/p.bin"], "--out"),
    ],
)
def test_absurd_settings_are_refused_naming_the_option_and_leave_no_out_folder(
    argv, must, world, tmp_path, capsys
):
    argv = [a.format(tmp=tmp_path, good=world["good"]) for a in argv]
    _check(argv, argv[0], capsys, must)
    assert os.listdir(tmp_path) == []


def test_simulate_says_overwrite_as_the_option(world, tmp_path, capsys) -> None:
    argv = ["simulate", "--out", str(tmp_path / "s"), "--minutes", "0.01", "--width", "48", "--height", "16"]
    assert main(argv) == 0
    line = _check(argv, "simulate", capsys, "already exists", "--overwrite")
    assert "overwrite=True" not in line


def test_error_line_prints_plain_numbers() -> None:
    assert error_line(ValueError(f"fps {np.float64(2.5)!r} vs {np.int64(3)!r}")) == "fps 2.5 vs 3"
    assert (
        error_line(
            RuntimeError(
                "Caught ValueError in DataLoader worker process 0.\nOriginal Traceback "
                "(most recent call last):\n  File x\nValueError: a.csv row 3: bad"
            )
        )
        == "a.csv row 3: bad"
    )


def test_debug_shows_the_traceback(world, tmp_path) -> None:
    bad = world["dir"] / "empty.ckpt"
    with pytest.raises(ValueError, match="empty"):
        main(["export", "--ckpt", str(bad), "--out", str(tmp_path / "p.ts"), "--debug"])


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_subprocess_stderr_is_exactly_one_line(command, world, tmp_path) -> None:
    bad = world["dir"] / "truncated.ckpt"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), PYTHONWARNINGS="default")
    done = subprocess.run(
        [sys.executable, "-m", "drive.cli", *COMMANDS[command](bad, world, tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith(
        f"drive {command}: error: "
    )
    assert str(bad) in done.stderr, done.stderr


@pytest.mark.parametrize("library", ["cut-short", "foreign"])
def test_damaged_aoti_package_is_named_before_it_can_crash_and_leaves_no_extraction(
    library, world, tmp_path, capsys, monkeypatch
) -> None:
    """A .pt2 whose library is cut short crashed the process with SIGBUS when loaded; one whose
    library fails to load left its aotinductor_* folder in TMPDIR. A real ELF library stands in
    for the compiled model."""
    import zipfile

    import torch.lib

    real = Path(torch.__file__).parent / "lib" / "libshm.so"
    data = real.read_bytes()
    package = tmp_path / f"{library}.pt2"
    with zipfile.ZipFile(package, "w") as z:
        z.writestr("archive/archive_format", "pt2")
        z.writestr(
            "archive/data/aotinductor/model/m.wrapper.so",
            data[: len(data) // 2] if library == "cut-short" else data,
        )
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    line = _check(
        ["evaluate", "--policy", str(package), "--km", "0.01", "--out", str(tmp_path / "e")],
        "evaluate",
        capsys,
        str(package),
    )
    if library == "cut-short":
        assert "cut short" in line
    assert list(tmpdir.glob("aotinductor_*")) == [] and not (tmp_path / "e").exists()


def test_evaluate_takes_fps_and_camera_size_from_an_exported_files_metadata(world, tmp_path, capsys) -> None:
    """`drive evaluate --policy policy.ts` refused the file unless --fps repeated its own rate
    (10 Hz here, the world's default is 30); it now drives at the metadata's rate and frame size,
    and a contradicting --fps is refused before driving, naming the option."""
    from drive.export import export_policy, read_metadata

    ts = export_policy(world["good"], tmp_path / "policy.ts")
    assert read_metadata(ts)["fps"] == 10.0
    assert main(["evaluate", "--policy", str(ts), "--km", "0.02", "--out", str(tmp_path / "eval")]) == 0
    assert (tmp_path / "eval" / "metrics.json").is_file()
    capsys.readouterr()
    _check(
        ["evaluate", "--policy", str(ts), "--km", "0.02", "--fps", "30", "--out", str(tmp_path / "e2")],
        "evaluate",
        capsys,
        "--fps 30",
        "10 Hz",
    )
    assert not (tmp_path / "e2").exists()


def test_fit_on_missing_logs_prints_only_the_error_line_on_stderr(tmp_path) -> None:
    """Lightning's progress notes ("Seed set to ...") go to stdout: stderr is the one error line."""
    missing = tmp_path / "no-logs"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "drive.cli",
            "fit",
            "--data.train",
            f"[{missing}]",
            "--data.num_workers",
            "0",
            "--data.cache_dir",
            str(tmp_path / "cache"),
            "--trainer.default_root_dir",
            str(tmp_path / "run"),
            "--trainer.accelerator",
            "cpu",
            "--trainer.max_epochs",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"drive fit: error: {missing}: no such file or directory"], (
        done.stderr
    )
    assert "Seed set to" in done.stdout
