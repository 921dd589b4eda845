"""``drive evaluate --logs``: closed loop on recorded logs through the command, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from drive.cli import main
from drive.io.recording import Recording
from drive.sim.camera import Camera
from drive.sim.record import simulate

FIXTURES = Path(__file__).parent / "fixtures" / "compat"
CKPT, EXPORT = FIXTURES / "ncp_ltc.ckpt", FIXTURES / "ncp_ltc.ts"  # trained on 200x78 frames at 10 Hz


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """Two noise-free expert recordings on test roads, summer and winter, 18 s each at 10 Hz."""
    root = tmp_path_factory.mktemp("logs")
    simulate(
        root,
        minutes=0.6,
        seed=7,
        split="test",
        fps=10.0,
        noise_std=0.0,
        recording_minutes=0.3,
        conditions=["summer", "winter"],
    )
    return root


def _evaluate(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / name
    assert main(["evaluate", "--out", str(out), *args]) == 0
    return json.loads((out / "metrics.json").read_text())


def test_a_checkpoint_drives_the_logs_with_metrics_report_plot_and_videos(logs, tmp_path, capsys):
    m = _evaluate(tmp_path, "ckpt", "--logs", str(logs), "--policy", str(CKPT), "--video", "--workers", "1")
    out = tmp_path / "ckpt"
    assert {p.name for p in out.iterdir()} == {"metrics.json", "REPORT.md", "replay.png", "videos"}
    assert m["recordings"] == 2 and len(m["per_recording"]) == 2
    assert m["km"] == pytest.approx(2 * 0.3 * 60 * 30 / 3.6 / 1000, rel=0.05)
    lo, hi = m["interventions_per_km_ci95"]
    assert lo <= m["interventions_per_km"] <= hi
    assert {"summer", "winter"} <= set(m["per_condition"])
    assert m["camera"] == ["log"]
    for row in m["per_recording"]:
        assert row["path_source"] == "poses" and row["fps"] == 10.0
        assert 0.0 <= row["no_source_share"]["mean"] <= row["no_source_share"]["max"] <= 1.0
    videos = sorted((out / "videos").iterdir())
    assert len(videos) == 2
    cap = cv2.VideoCapture(str(videos[0]))
    frames = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    ok, frame = cap.read()
    assert ok and frame.shape[0] == 240 and frames == m["per_recording"][0]["frames_shown"]
    report = (out / "REPORT.md").read_text()
    assert "95%" in report and "no recorded content" in report and "docs/replay.md" in report
    printed = capsys.readouterr().out
    assert "interventions_per_km_ci95" in printed


def test_the_exported_file_drives_the_logs_as_its_checkpoint_does(logs, tmp_path):
    a = _evaluate(tmp_path, "ckpt", "--logs", str(logs), "--policy", str(CKPT), "--workers", "1")
    b = _evaluate(tmp_path, "ts", "--logs", str(logs), "--policy", str(EXPORT), "--workers", "1")
    assert abs(a["interventions"] - b["interventions"]) <= 1
    assert a["lateral_rms_m"] == pytest.approx(b["lateral_rms_m"], abs=0.01)


def test_parallel_workers_give_the_numbers_of_one_process(logs, tmp_path):
    one = _evaluate(tmp_path, "one", "--logs", str(logs), "--policy", str(CKPT), "--workers", "1")
    two = _evaluate(tmp_path, "two", "--logs", str(logs), "--policy", str(CKPT), "--workers", "2")
    assert [r["name"] for r in one["per_recording"]] == [r["name"] for r in two["per_recording"]]
    for a, b in zip(one["per_recording"], two["per_recording"]):
        assert a["interventions"] == b["interventions"]
        assert a["lateral_rms_m"] == pytest.approx(b["lateral_rms_m"], rel=1e-6, abs=1e-9)


def _foreign_log(rec_dir: Path, out: Path) -> Path:
    """The recording as a user's image folder with a CSV (curvature 1/m), no calibration."""
    rec = Recording.open(rec_dir)
    out.mkdir()
    rows = ["image,timestamp_s,curvature_per_m,speed_mps"]
    for i in range(len(rec)):
        cv2.imwrite(str(out / f"{i:05d}.png"), cv2.cvtColor(rec.frame(i), cv2.COLOR_RGB2BGR))
        rows.append(
            f"{i:05d}.png,{rec.log['timestamp_s'][i]},{rec.log['curvature'][i]},{rec.log['speed_mps'][i]}"
        )
    (out / "drive.csv").write_text("\n".join(rows) + "\n")
    return out


def test_a_log_without_calibration_needs_the_camera_option_and_approximate_is_stated(logs, tmp_path):
    folder = _foreign_log(sorted(p for p in logs.iterdir() if p.is_dir())[0], tmp_path / "mine")
    cmd = [sys.executable, "-m", "drive.cli", "evaluate", "--logs", str(folder), "--policy", "constant:0"]
    done = subprocess.run(
        [*cmd, "--out", str(tmp_path / "refused")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    assert (
        done.stderr.count("\n") == 1 and "no camera calibration" in done.stderr and "camera=" in done.stderr
    )
    assert not (tmp_path / "refused").exists()
    m = _evaluate(
        tmp_path, "approx", "--logs", str(folder), "--policy", "constant:0", "--set", "camera=approximate"
    )
    assert m["camera"] == ["approximate"] and m["per_recording"][0]["path_source"] == "curvature"
    assert "**approximate**" in (tmp_path / "approx" / "REPORT.md").read_text()
    # the built-in camera is the stated approximation: the same drive as the calibrated recording
    (rec,) = [r for r in sorted(logs.iterdir()) if r.is_dir()][:1]
    calibrated = _evaluate(tmp_path, "calibrated", "--logs", str(rec), "--policy", "constant:0")
    assert m["interventions"] == calibrated["interventions"] > 0


def test_frames_of_another_camera_size_are_refused(tmp_path, capsys):
    (small,) = simulate(tmp_path / "small", minutes=0.05, seed=1, fps=10.0, camera=Camera.default(48, 16))
    assert main(["evaluate", "--logs", str(small), "--policy", str(CKPT), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "frames are 48x16" in err and "200x78" in err and err.count("\n") == 1


def test_world_options_are_refused_with_logs(logs, tmp_path, capsys):
    args = [
        "evaluate",
        "--logs",
        str(logs),
        "--policy",
        "constant:0",
        "--km",
        "5",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(args) == 2
    assert "--km" in capsys.readouterr().err


def test_interventions_per_km_in_the_world_carry_their_interval(tmp_path):
    m = _evaluate(tmp_path, "world", "--policy", "constant:0", "--km", "0.3", "--fps", "10")
    lo, hi = m["interventions_per_km_ci95"]
    n, km = m["interventions"], m["km"]
    assert lo < n / km < hi and np.isfinite([lo, hi]).all()
