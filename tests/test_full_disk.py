"""A full disk, for real: each command writes into a small tmpfs mounted in a private mount namespace
(``unshare --mount``, as root or through a user namespace), fills it, and must answer with one
line saying the disk is full, naming the path, and leave nothing on it: outputs are written whole
or not at all, also when a command writes many files (a report, recordings). Skipped, with the
reason, where the machine does not allow the mount."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import torch
from bad_input_util import HW, ROOT, tiny_recordings

from drive.checkpoint import policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.nn.families import build_policy

UNSHARE = shutil.which("unshare")
# mount a tmpfs of $1 bytes on $2, fill all but $3 bytes of it, run the rest, list what is left in $4
SCRIPT = """
mount -t tmpfs -o size=$1 tmpfs "$2" || exit 97
free=$(df -B1 --output=avail "$2" | tail -1)
if [ "$3" -gt 0 ]; then head -c $(( free - $3 )) /dev/zero > "$2/filler"; fi
disk=$2; listing=$4; shift 4
"$@"; rc=$?
find "$disk" -mindepth 1 ! -name filler > "$listing"
exit $rc
"""


SMALL = ["--width", "48", "--height", "16", "--fps", "10"]  # 30 frames of 0.7 KB a recording


def _namespace() -> List[str]:
    return [UNSHARE, "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])


def _mount_refused(tmp: Path) -> str:
    """Why a tmpfs cannot be mounted in a private namespace here ('' when it can)."""
    if UNSHARE is None:
        return "no unshare(1) on this machine"
    (tmp / "probe").mkdir()
    done = subprocess.run(
        [*_namespace(), "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0"', str(tmp / "probe")],
        capture_output=True,
        text=True,
    )
    return (
        "" if done.returncode == 0 else f"cannot mount a tmpfs in a private namespace: {done.stderr.strip()}"
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Dict[str, Path]:
    d = tmp_path_factory.mktemp("full-disk")
    why = _mount_refused(d)
    if why:
        pytest.skip(why)
    rec, _ = tiny_recordings(d / "logs", minutes=0.05, seed=1) + tiny_recordings(
        d / "logs", minutes=0.05, seed=2
    )
    torch.manual_seed(0)
    policy = build_policy("cfc", frame_period_s=0.1, units=8, input_hw=HW)
    ckpt = save_policy(d / "cfc.ckpt", policy, policy_meta(policy, Preprocessing(size=HW), 10.0, "cfc"))
    return {"rec": rec, "logs": d / "logs", "ckpt": ckpt}


def _on_small_disk(tmp: Path, size: str, room: int, *argv: str) -> Tuple[subprocess.CompletedProcess, str]:
    """``drive ARGV`` ({disk} is the mount) on a tmpfs of ``size`` with ``room`` bytes left free;
    (the finished process, what the command left on the disk)."""
    disk, listing = tmp / "disk", tmp / "left.txt"
    disk.mkdir()
    args = [a.format(disk=disk) for a in argv]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "drive.cli", *args]
    done = subprocess.run(
        [*_namespace(), "sh", "-c", SCRIPT, "sh", size, str(disk), str(room), str(listing), *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 97, done.stderr
    return done, listing.read_text() if listing.exists() else "(no listing)"


def _disk_full(done: subprocess.CompletedProcess, command: str, disk: Path) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"drive {command}: error: {disk}/"), done.stderr[-3000:]
    assert "No space left on device" in lines[0] and "free some space" in lines[0], lines[0]
    return lines[0]


CASES = {  # id: (command, bytes left free, arguments, the output the full disk refuses)
    # metrics.json fits, replay.png does not: metrics.json was left behind
    "evaluate-logs": (
        "evaluate",
        8192,
        ["evaluate", "--logs", "{logs}", "--policy", "expert", "--out", "{disk}/eval"],
        "eval/replay.png",
    ),
    "evaluate-world": (
        "evaluate",
        8192,
        ["evaluate", "--policy", "expert", "--km", "0.05", "--out", "{disk}/eval"],
        "eval/drive.png",
    ),
    # the first of two recordings fits (30 frames, a 4 KB page each), the second does not: it said
    # `4288 requested and 0 written`, and left the first and an empty --out
    "data-convert": (
        "data",
        204800,
        ["data", "convert", "{logs}", "--out", "{disk}/conv"],
        "conv/train-s2-000-",
    ),
    # the same for the world's recordings: none of them stays
    "simulate-frames": (
        "simulate",
        204800,
        ["simulate", "--out", "{disk}/sim", "--minutes", "0.2", "--recording-minutes", "0.05", *SMALL],
        "sim/train-s0-001-",
    ),
    # OpenCV's video writer fails silently: the cut-short video is caught by its index
    "simulate-video": (
        "simulate",
        8192,
        ["simulate", "--out", "{disk}/sim", "--minutes", "0.05", "--storage", "video", *SMALL],
        "sim/train-s0-000-",
    ),
    "export": (
        "export",
        16384,
        ["export", "--ckpt", "{ckpt}", "--out", "{disk}/policy.ts", "--no-verify"],
        "policy.ts",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_full_disk_is_one_line_and_leaves_nothing(case, inputs, tmp_path) -> None:
    command, room, argv, refused = CASES[case]
    argv = [a.replace("{logs}", str(inputs["logs"])).replace("{ckpt}", str(inputs["ckpt"])) for a in argv]
    done, left = _on_small_disk(tmp_path, "1M", room, *argv)
    line = _disk_full(done, command, tmp_path / "disk")
    assert f"{tmp_path / 'disk'}/{refused}" in line, line
    assert left == "", left
