"""`drive fit ... --ckpt_path last` after a real SIGKILL ends bitwise equal to a run never killed
on the same machine: the same batches, augmentation, weight constraints, optimizer and LR state (0
and 2 workers, killed mid-epoch in the first epoch and in a later one). Subprocesses, as a user runs
it. Bitwise holds because both runs use this machine's kernels; the shipped profiles' resume is
tests/test_train_resume_profiles.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from resume_state import checkpoint_state

from drive.sim.camera import Camera
from drive.sim.record import simulate

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# 2 recordings x 120 frames, windows of 8 every 8 frames -> 8 batches of 4 an epoch;
# last.ckpt every 2 steps; 12 steps cross into the second epoch.
MAX_STEPS, EVERY = 12, 2


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("resume-logs")
    simulate(
        root,
        minutes=0.4,
        seed=3,
        fps=10.0,
        camera=Camera.default(width=48, height=16),
        recording_minutes=0.2,
        noise_std=0.015,
        conditions=["summer", "noon", "marked"],
    )
    return root


def _fit(logs: Path, root: Path, workers: int, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    cmd = [
        sys.executable,
        "-m",
        "drive.cli",
        "fit",
        "--model.family",
        "ncp_ltc",
        "--model.input_hw",
        "[16, 48]",
        "--model.lr",
        "0.02",  # large steps: the LTC's positivity clip acts from the first steps
        "--data.train",
        f"[{logs}]",
        "--data.image_size",
        "[16, 48]",
        "--data.seq_len",
        "8",
        "--data.stride",
        "8",
        "--data.batch_size",
        "4",
        "--data.num_workers",
        str(workers),
        "--data.cache_dir",
        str(root.parent / "cache"),
        "--data.val_split",
        "none",
        "--data.augment",
        '{"viewpoint_p": 0.5, "photometric_p": 0.8, "noise_p": 0.5, "shadow_p": 0.5}',
        "--trainer.accelerator",
        "cpu",
        "--trainer.max_steps",
        str(MAX_STEPS),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger",
        "false",
        "--trainer.enable_model_summary",
        "false",
        "--last_checkpoint.every_n_train_steps",
        str(EVERY),
        *extra,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def uninterrupted(logs: Path, tmp_path_factory) -> Dict[int, Dict[str, torch.Tensor]]:
    out = {}
    for workers in (0, 2):
        root = tmp_path_factory.mktemp(f"full{workers}") / "run"
        done = _fit(logs, root, workers)
        assert done.returncode == 0, done.stderr[-3000:]
        out[workers] = checkpoint_state(root / "checkpoints" / "last.ckpt")
    # the reference itself is reproducible: two workers' settings give the same run
    for name, value in out[0].items():
        assert torch.equal(value, out[2][name]), name
    return out


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "kill_at, saved", [(5, {"epoch": 0, "batches": 4}), (11, {"epoch": 1, "batches": 2})]
)
def test_killed_and_resumed_run_ends_bitwise_equal_to_an_uninterrupted_one(
    logs: Path, tmp_path: Path, uninterrupted, workers: int, kill_at: int, saved: Dict[str, int]
) -> None:
    root = tmp_path / "run"
    killed = _fit(
        logs,
        root,
        workers,
        "--trainer.callbacks+=fault_callbacks.KillAt",
        "--trainer.callbacks.step",
        str(kill_at),
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == kill_at - 1  # killed mid-epoch, after the last save
    assert ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [saved]
    resumed = _fit(logs, root, workers, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = checkpoint_state(root / "checkpoints" / "last.ckpt")
    reference = uninterrupted[workers]
    assert final.keys() == reference.keys()
    differ: List[str] = [k for k, v in reference.items() if not torch.equal(v, final[k])]
    assert not differ, f"resumed run differs from the uninterrupted one in {differ[:5]}"


def test_a_run_ending_between_two_saves_leaves_its_final_weights_in_last_ckpt(logs: Path, tmp_path: Path):
    """A step budget that ends mid-epoch after an interval save (11 steps, saves every 4): last.ckpt
    holds step 11, not 8 (Lightning writes ``last`` at the end only for a run that never saved;
    drive.train.launch.LastCheckpoint), and resuming it has nothing left to train."""
    root = tmp_path / "run"
    done = _fit(logs, root, 0, "--trainer.max_steps", "11", "--last_checkpoint.every_n_train_steps", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == 11
    assert ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"epoch": 1, "batches": 3}]
    again = _fit(logs, root, 0, "--trainer.max_steps", "11", "--ckpt_path", "last")
    assert again.returncode == 0, again.stderr[-3000:]
    assert checkpoint_state(root / "checkpoints" / "last.ckpt")["global_step"] == 11
