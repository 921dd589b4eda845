"""Issue 44 for ``drive fit``: a refused option is one line naming it (not jsonargparse's 140-line
usage dump), a refused run leaves no ``tensorboard/version_N`` / ``csv/version_N`` behind, and
every number of the reader options is checked. Real logs from the world; in-process runs."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, List

import pytest
from bad_input_util import HW, edit_csv, folder_log, one_line, snapshot, tiny_recordings

from drive.cli import main


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Dict[str, Path]:
    """A recording of 60 m (calibrated), the same as a folder + CSV log (no calibration), one that
    stands still and one of 1.5 s (12 m)."""
    d = tmp_path_factory.mktemp("fit-logs")
    (rec,) = tiny_recordings(d / "good", minutes=0.12)
    still = shutil.copytree(rec, d / "still" / "rec")
    for row in range(72):
        edit_csv(still / "log.csv", row, "speed_mps", "0")
    short = shutil.copytree(rec, d / "short" / "rec")
    lines = (short / "log.csv").read_text().splitlines()
    (short / "log.csv").write_text("\n".join(lines[:16]) + "\n")
    for frame in sorted((short / "frames").iterdir())[15:]:
        frame.unlink()
    return {
        "dir": d,
        "good": d / "good",
        "folder": folder_log(rec, d / "folder" / "log"),
        "still": d / "still",
        "short": d / "short",
    }


pytestmark = pytest.mark.usefixtures("quiet_lightning_notes")


def _fit(train: Path, root: Path, *extra: str) -> List[str]:
    return [
        "fit",
        "--data.train",
        f"[{train}]",
        "--data.image_size",
        str(list(HW)),
        "--model.input_hw",
        str(list(HW)),
        "--data.seq_len",
        "8",
        "--data.batch_size",
        "2",
        "--data.num_workers",
        "0",
        "--data.val_split",
        "none",
        "--data.cache_dir",
        str(root.parent / "cache"),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.accelerator",
        "cpu",
        "--trainer.max_steps",
        "3",
        "--trainer.enable_progress_bar",
        "false",
        *extra,
    ]


@pytest.mark.parametrize(
    "log, must",
    [
        ("folder", "need camera calibration, missing for ['log']"),
        ("still", "no training recording has one (too short, or stopped)"),
        ("short", "no training recording has one (too short, or stopped)"),
    ],
)
def test_a_refused_fit_leaves_no_logger_folders(
    log, must, logs, tmp_path, capsys, warnings_on_stderr
) -> None:
    """No calibration, a log under 30 m, zero speed: refused when rounds start, after Lightning made
    tensorboard/version_N and csv/version_N, one more on every retry. Now nothing stays, and an
    earlier run's folders are untouched."""
    root = tmp_path / "run"
    (root / "tensorboard" / "version_0").mkdir(parents=True)
    (root / "tensorboard" / "version_0" / "events").write_bytes(b"an earlier run")
    before = snapshot(root)
    argv = _fit(logs[log], root, "--onpolicy.every_n_steps", "1")
    for _ in range(2):  # a retry adds nothing either
        assert main(argv) == 2
        one_line(capsys.readouterr().err, "fit", "onpolicy: ", must)
        assert snapshot(root) == before
    fresh = tmp_path / "fresh"
    assert main(_fit(logs[log], fresh, "--onpolicy.every_n_steps", "1")) == 2
    one_line(capsys.readouterr().err, "fit", must)
    assert not fresh.exists()


def test_a_fit_that_trained_keeps_its_logs(logs, tmp_path, capsys) -> None:
    root = tmp_path / "run"
    assert main(_fit(logs["good"], root, "--onpolicy.every_n_steps", "0")) == 0
    assert (root / "tensorboard" / "version_0").is_dir() and (root / "csv" / "version_0").is_dir()


@pytest.mark.parametrize(
    "option, value, must",
    [
        ("--onpolicy.share", "nan", "--onpolicy.share: expected a finite number, got 'nan'"),
        ("--onpolicy.share", "abc", "--onpolicy.share: expected a number, got 'abc'"),
        ("--trainer.max_epochs", "many", "--trainer.max_epochs: expected a whole number"),
        ("--model.lr", "inf", "--model.lr: expected a finite number, got 'inf'"),
        ("--model.lr", ".nan", "--model.lr must be a finite number, got nan"),
        ("--model.lr", "-1", "--model.lr must be in (0, 10], got -1"),
        ("--data.seq_len", "0", "--data.seq_len must be in [1, 100000], got 0"),
        ("--data.gap_factor", "1", "--data.gap_factor must be in (1, 1e+06], got 1"),
        ("--data.val_fraction", "1.5", "--data.val_fraction must be in [0, 1), got 1.5"),
        ("--no.such_option", "1", "unrecognized arguments: --no.such_option 1"),
        ("--trainer.max_steps", "-5", "`max_steps` must be a non-negative integer or -1"),
        ("--data.reader", "{camera: [", "--data.reader: not valid YAML"),
        ("--data.reader", "[1, 2]", "--data.reader: expected a mapping or null, got '[1, 2]'"),
        (
            "--data.reader",
            "{camera: {hfov_deg: abc, height_m: 1.5}}",
            "--data.reader: reader option camera: hfov_deg must be a number, got 'abc'",
        ),
        (
            "--data.reader",
            "{camera: {hfov_deg: 80, height_m: 1.5, pitch_rad: .nan}}",
            "--data.reader: reader option camera: pitch_rad must be a finite number, got nan",
        ),
        ("--data.reader", "{fps: -5}", "--data.reader: reader option fps must be in (0, 1000], got -5"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(
    option, value, must, logs, tmp_path, capsys, warnings_on_stderr
) -> None:
    """A bad type, an unknown key or broken YAML printed a 136-143 line usage dump; a non-number in
    the reader options `could not convert string to float: 'abc'`; a NaN calibration trained."""
    root = tmp_path / "run"
    assert main([*_fit(logs["good"], root), option, value]) == 2
    one_line(capsys.readouterr().err, "fit", must)
    assert not root.exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    "content, must",
    [
        (
            b"model: {lr: 0.1\n",
            "not valid YAML: expected ',' or '}', but got '<stream end>' (line 2, column 1)",
        ),
        (b"- model\n", "the file is a YAML list; expected a mapping"),
        (b"model:\n  lr: 0.1 # \xe9\n", "line 2: byte 0xe9 is not UTF-8 text"),
        (b"model:\n  lr: 0.1\nmodel:\n  lr: 0.2\n", "key 'model' is given twice (line 3, column 1)"),
    ],
)
def test_a_bad_config_file_is_named(content, must, logs, tmp_path, capsys, warnings_on_stderr) -> None:
    config = tmp_path / "my.yaml"
    config.write_bytes(content)
    assert main([*_fit(logs["good"], tmp_path / "run"), "--config", str(config)]) == 2
    one_line(capsys.readouterr().err, "fit", f"--config {config}", must)


def test_the_run_folder_is_never_inside_the_logs(logs, tmp_path, capsys, read_only) -> None:
    inside = logs["good"] / "runs"
    assert main(_fit(logs["good"], inside)) == 2
    one_line(capsys.readouterr().err, "fit", f"--trainer.default_root_dir {inside}: lies inside the logs")
    assert not inside.exists()
    assert main(_fit(logs["good"], read_only / "run")) == 2
    one_line(capsys.readouterr().err, "fit", f"--trainer.default_root_dir {read_only / 'run'}: cannot write")
