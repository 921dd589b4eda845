"""Real inputs for the bad-input tests: tiny recordings from the world, a folder + CSV log made from
one, a snapshot of a folder to compare before and after a refused command, and the one-line check."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from drive.sim.camera import Camera
from drive.sim.record import simulate

ROOT = Path(__file__).resolve().parent.parent
HW = (16, 48)


def tiny_recordings(root: Path, minutes: float = 0.1, seed: int = 1) -> List[Path]:
    """Recordings of 48x16 frames at 10 Hz (6 s and 60 frames a recording at the default)."""
    return simulate(
        root,
        minutes=minutes,
        seed=seed,
        fps=10.0,
        camera=Camera.default(width=HW[1], height=HW[0]),
        recording_minutes=minutes,
    )


def folder_log(recording: Path, out: Path, rows: Optional[int] = None) -> Path:
    """The recording as a foreign log: its JPEGs and ``labels.csv`` (image, timestamp, curvature,
    speed), no calibration."""
    out.mkdir(parents=True, exist_ok=True)
    with open(recording / "log.csv", newline="") as f:
        table = list(csv.DictReader(f))[:rows]
    with open(out / "labels.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "timestamp", "curvature", "speed"])
        for r in table:
            name = f"{int(r['frame']):06d}.jpg"
            shutil.copy(recording / "frames" / name, out / name)
            writer.writerow([name, r["timestamp_s"], r["curvature"], r["speed_mps"]])
    return out


def edit_csv(path: Path, row: int, column: str, value: str) -> None:
    """Set ``column`` of data row ``row`` (0-based) of a CSV with a header."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    rows[row + 1][rows[0].index(column)] = value
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


def snapshot(folder: Path) -> Dict[str, Optional[bytes]]:
    """Every path below ``folder`` (relative) with its bytes (None for a folder)."""
    out: Dict[str, Optional[bytes]] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), folder)] = None
        for name in files:
            path = os.path.join(root, name)
            out[os.path.relpath(path, folder)] = Path(path).read_bytes()
    return out


def one_line(err: str, command: str, *must: str) -> str:
    """``err`` must be exactly one line, ``drive <command>: error: ...`` holding every ``must``."""
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    line = lines[0]
    assert line.startswith(f"drive {command}: error: "), line
    for text in must:
        assert text in line, (text, line)
    return line


def run_cli(
    *args: str, env: Optional[Dict[str, str]] = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """``python -m drive.cli ARGS`` in a fresh process importing this tree."""
    environ = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "drive.cli", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
