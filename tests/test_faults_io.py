"""Files survive kills and full disks: checkpoints (drive fit), exported policies (drive export)
and drive.io.atomic's writers. Real subprocesses, real file-size limits (RLIMIT_FSIZE, any user) and,
where the tests run as root, a real full tmpfs with TMPDIR on another file system (/dev/shm)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
import torch

from drive.checkpoint import policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.io.atomic import WriteError, write_bytes, write_text
from drive.nn.families import build_policy
from drive.sim.camera import Camera
from drive.sim.record import simulate

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _run(args: List[str], fsize: Optional[int] = None, **env: str) -> subprocess.CompletedProcess:
    environ = dict(
        os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]), **env
    )

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "drive.cli", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=limit,
    )


def _one_error_line(err: str, command: str) -> str:
    """The error line, which must be the last line and the only one from drive (Lightning logs
    its own progress notes to stderr during `drive fit`; other commands print nothing else)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "terminate called" not in err, err[-3000:]
    ours = [line for line in lines if line.startswith("drive ")]
    assert len(ours) == 1 and lines[-1] == ours[0] and ours[0].startswith(f"drive {command}: error: "), err[
        -3000:
    ]
    if command != "fit":
        assert len(lines) == 1, err[-3000:]
    return ours[0]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("io-logs")
    simulate(
        root, minutes=0.2, seed=3, fps=10.0, camera=Camera.default(width=48, height=16), recording_minutes=0.2
    )
    return root


def _fit_args(logs: Path, root: Path, steps: int, *extra: str) -> List[str]:
    return [
        "fit",
        "--model.family",
        "ncp_ltc",
        "--model.input_hw",
        "[16, 48]",
        "--data.train",
        f"[{logs}]",
        "--data.image_size",
        "[16, 48]",
        "--data.seq_len",
        "8",
        "--data.batch_size",
        "4",
        "--data.num_workers",
        "0",
        "--data.cache_dir",
        str(logs.parent / "cache"),
        "--data.val_split",
        "none",
        "--trainer.accelerator",
        "cpu",
        "--trainer.max_steps",
        str(steps),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--last_checkpoint.every_n_train_steps",
        "2",
        *extra,
    ]


def _two_steps(logs: Path, root: Path) -> Path:
    """last.ckpt of a 2-step run in ``root`` (a complete checkpoint to protect)."""
    done = _run(_fit_args(logs, root, 2))  # one save, at step 2
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "checkpoints" / "last.ckpt"


def test_failed_checkpoint_write_keeps_the_previous_checkpoint_and_says_so(logs, tmp_path) -> None:
    """A resumed run whose next save cannot be written (file-size limit: EFBIG, TMPDIR elsewhere)
    stops with one line naming last.ckpt; the step-2 checkpoint is intact and no temporary is left."""
    last = _two_steps(logs, tmp_path / "run")
    before = last.read_bytes()
    done = _run(
        _fit_args(logs, tmp_path / "run", 4, "--ckpt_path", "last"), fsize=len(before) // 2, TMPDIR="/dev/shm"
    )
    assert done.returncode == 2
    line = _one_error_line(done.stderr, "fit")
    assert str(last) in line and "File too large" in line and "previous file is left intact" in line
    assert last.read_bytes() == before
    assert os.listdir(last.parent) == ["last.ckpt"]


def test_kill_in_the_middle_of_a_checkpoint_write_keeps_the_previous_checkpoint(logs, tmp_path) -> None:
    """The process dies (SIGXFSZ, default action) inside the write of the step-4 checkpoint, with
    TMPDIR on another file system: last.ckpt is still the complete step-2 checkpoint and resumes."""
    last = _two_steps(logs, tmp_path / "run")
    before = last.read_bytes()
    done = _run(
        _fit_args(
            logs,
            tmp_path / "run",
            4,
            "--ckpt_path",
            "last",
            "--trainer.callbacks+=fault_callbacks.DieOnFileSizeLimit",
        ),
        fsize=len(before) // 2,
        TMPDIR="/dev/shm",
    )
    assert done.returncode == -signal.SIGXFSZ, done.stderr[-3000:]
    assert last.read_bytes() == before
    assert torch.load(last, weights_only=True)["global_step"] == 2
    # A second name for the step-2 file: a save that rewrites last.ckpt in place (as Lightning's
    # writer did, truncating it before copying from TMPDIR) changes it; a rename does not.
    os.link(last, tmp_path / "step2.ckpt")
    resumed = _run(_fit_args(logs, tmp_path / "run", 4, "--ckpt_path", "last"), TMPDIR="/dev/shm")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(last, weights_only=True)["global_step"] == 4
    assert (tmp_path / "step2.ckpt").read_bytes() == before
    assert os.listdir(last.parent) == ["last.ckpt"]  # the killed save's temporary was cleared


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real full-disk: a 1 MiB tmpfs (needs root; skipped otherwise)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("mounting a small tmpfs needs root")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_full_disk_with_tmpdir_elsewhere_keeps_the_previous_checkpoint(logs, small_tmpfs) -> None:
    """Lightning's writer staged checkpoints in TMPDIR and copied them over last.ckpt, so a full
    disk left a cut-short last.ckpt: here the previous one survives and the run says so."""
    root = small_tmpfs / "run"
    last = _two_steps(logs, root)
    before = last.read_bytes()
    assert len(before) < 1 << 20 < 2 * len(before)  # one checkpoint fits, a second beside it does not
    done = _run(_fit_args(logs, root, 4, "--ckpt_path", "last"), TMPDIR="/dev/shm")
    assert done.returncode == 2
    line = _one_error_line(done.stderr, "fit")
    assert str(last) in line and "No space left on device" in line and "previous file is left intact" in line
    assert last.read_bytes() == before and sorted(os.listdir(root / "checkpoints")) == ["last.ckpt"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    policy = build_policy("cfc", frame_period_s=0.1, units=16, input_hw=(16, 48))
    meta = policy_meta(policy, Preprocessing(size=(16, 48)), 10.0, "cfc")
    return save_policy(tmp_path_factory.mktemp("ckpt") / "policy.ckpt", policy, meta)


@pytest.mark.parametrize("suffix", [".ts", ".onnx"])
def test_export_past_the_file_size_limit_is_one_line_and_leaves_nothing(checkpoint, tmp_path, suffix) -> None:
    """torch.jit.save on a full disk aborted the process (exit 134, c10::Error thrown in a
    destructor) and left .policy.<hex>.tmp.ts: now one line, exit 2, nothing left over."""
    out = tmp_path / "deploy" / f"policy{suffix}"
    out.parent.mkdir()
    done = _run(["export", "--ckpt", str(checkpoint), "--out", str(out), "--no-verify"], fsize=64 * 1024)
    assert done.returncode == 2, done.stderr[-3000:]
    line = _one_error_line(done.stderr, "export")
    assert str(out) in line and "File too large" in line and "nothing was written" in line
    assert os.listdir(out.parent) == []


def test_export_on_a_full_disk_is_one_line_and_leaves_nothing(checkpoint, small_tmpfs) -> None:
    (small_tmpfs / "filler").write_bytes(b"\0" * 1_000_000)  # leaves ~48 KB: less than the export
    done = _run(["export", "--ckpt", str(checkpoint), "--out", str(small_tmpfs / "policy.ts"), "--no-verify"])
    assert done.returncode == 2, done.stderr[-3000:]
    assert "No space left on device" in _one_error_line(done.stderr, "export")
    assert os.listdir(small_tmpfs) == ["filler"]


def test_atomic_writers_fail_whole_on_a_full_disk(small_tmpfs) -> None:
    out = small_tmpfs / "report.txt"
    write_text(out, "old report\n")
    with pytest.raises(
        WriteError,
        match=f"{out}: could not be written: No space left on device.*previous file is left intact",
    ):
        write_bytes(out, b"x" * (2 << 20))
    assert out.read_text() == "old report\n" and os.listdir(small_tmpfs) == ["report.txt"]
