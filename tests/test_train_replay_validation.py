"""Validation by driving (drive.train.replay_validation): at every validation the policy drives the
validation logs in log replay; ``val/replay/*`` is logged at that step with the picture, a checkpoint
monitoring ``val/replay/score`` keeps the best driver, a killed and resumed run logs what the
uninterrupted one did, and logs without calibration keep open-loop validation with one note."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from drive.sim.camera import Camera
from drive.sim.record import simulate
from drive.train.replay_validation import replay_score

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def test_the_score_ranks_by_interventions_and_breaks_ties_by_lateral_rms() -> None:
    assert replay_score(0, 0.9) < replay_score(1, 0.01) < replay_score(1, 0.2) < replay_score(2, 0.0)
    assert replay_score(3, 7.0) < replay_score(4, 0.0)  # a wild RMS never outweighs an intervention


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("val-replay-logs")
    kw = dict(fps=10.0, camera=Camera.default(width=48, height=16), recording_minutes=0.2, noise_std=0.015)
    simulate(root / "train", minutes=0.4, seed=3, **kw)
    simulate(root / "val", minutes=0.4, seed=5, split="test", roads="hard", **kw)
    return root


def _fit(logs: Path, root: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    cmd = [sys.executable, "-m", "drive.cli", "fit", "--model.family", "ncp_ltc"]
    cmd += ["--model.input_hw", "[16, 48]"]
    cmd += ["--data.train", f"[{logs / 'train'}]", "--data.val", f"[{logs / 'val'}]"]
    cmd += ["--data.image_size", "[16, 48]", "--data.seq_len", "8", "--data.stride", "8"]
    cmd += ["--data.batch_size", "4", "--data.num_workers", "0"]
    cmd += ["--data.cache_dir", str(root.parent / "cache")]
    cmd += ["--trainer.accelerator", "cpu", "--trainer.max_steps", "12", "--trainer.val_check_interval", "4"]
    cmd += ["--trainer.check_val_every_n_epoch", "null", "--trainer.num_sanity_val_steps", "0"]
    cmd += ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]
    cmd += ["--last_checkpoint.every_n_train_steps", "2", "--val_replay.enabled", "true", *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _replay_rows(root: Path) -> Dict[int, Dict[str, float]]:
    """``val/replay/*`` by step over every CSV log version of a run."""
    rows: Dict[int, Dict[str, float]] = {}
    for f in sorted((root / "csv").glob("version_*/metrics.csv")):
        for row in csv.DictReader(f.open()):
            values = {k: float(v) for k, v in row.items() if k.startswith("val/") and v}
            if any(k.startswith("val/replay/") for k in values):
                rows.setdefault(int(row["step"]), {}).update(values)
    return rows


@pytest.fixture(scope="module")
def uninterrupted(logs: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("val-replay") / "run"
    done = _fit(logs, root, "--checkpoint.monitor", "val/replay/score")
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_each_validation_drives_the_validation_logs_and_the_best_driver_is_kept(uninterrupted: Path) -> None:
    rows = _replay_rows(uninterrupted)
    assert sorted(rows) == [3, 7, 11]  # validations after steps 4, 8, 12 (logged at the step index)
    for r in rows.values():
        assert r["val/replay/km"] > 0.05 and r["val/replay/score"] == pytest.approx(
            r["val/replay/interventions"] + min(r["val/replay/lateral_rms_m"], 0.999), abs=1e-5
        )
        assert r["val/replay/interventions_per_km_lo"] <= r["val/replay/interventions_per_km"]
        assert r["val/replay/interventions_per_km"] <= r["val/replay/interventions_per_km_hi"]
        assert 0 <= r["val/replay/autonomy"] <= 100 and "val/loss" in r
    best = min(rows, key=lambda step: rows[step]["val/replay/score"])
    (kept,) = (uninterrupted / "checkpoints").glob("best-*.ckpt")
    assert kept.name.endswith(f"step{best + 1}.ckpt")
    pictures = sorted(p.name for p in (uninterrupted / "tensorboard").glob("version_0/replay/*.png"))
    assert pictures == ["step_000004.png", "step_000008.png", "step_000012.png"]
    assert list((uninterrupted / "tensorboard").glob("version_0/events.*"))


@pytest.mark.slow
def test_a_killed_and_resumed_run_validates_as_the_uninterrupted_one(logs, uninterrupted, tmp_path) -> None:
    root = tmp_path / "run"
    killed = _fit(
        logs,
        root,
        "--val_replay.process",
        "false",
        "--trainer.callbacks+=fault_callbacks.KillAt",
        "--trainer.callbacks.step",
        "6",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = _fit(logs, root, "--val_replay.process", "false", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got, want = _replay_rows(root), _replay_rows(uninterrupted)
    for step in (7, 11):  # validated after the resume (same machine: the same kernels)
        for key, value in want[step].items():
            if key.startswith("val/replay/"):
                assert got[step][key] == pytest.approx(value, rel=1e-6, abs=1e-9), (step, key)


@pytest.mark.slow
def test_logs_without_calibration_keep_open_loop_validation_with_one_note(logs, tmp_path) -> None:
    blind = tmp_path / "val"
    for rec in (logs / "val").iterdir():
        target = blind / rec.name
        target.mkdir(parents=True)
        for f in rec.iterdir():
            if f.is_file():
                (target / f.name).write_bytes(f.read_bytes())
            else:
                (target / f.name).symlink_to(f)
        meta = json.loads((target / "meta.json").read_text())
        meta.pop("camera")
        (target / "meta.json").write_text(json.dumps(meta))
    train: List[str] = [str(logs / "train")]
    root = tmp_path / "run"
    done = _fit(
        Path(tmp_path),
        root,
        "--data.train",
        json.dumps(train),
        "--trainer.max_steps",
        "4",
        "--checkpoint.monitor",
        "val/replay/score",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "no camera calibration" in said and "monitor val/loss" in said
    assert not _replay_rows(root) and list((root / "checkpoints").glob("best-*.ckpt"))
