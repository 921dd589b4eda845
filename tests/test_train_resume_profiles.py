"""Exact resume with the shipped profiles users run: ``drive fit --config ncp_ltc --config
trainer/cpu`` (``max_epochs`` set: the case that replayed a killed epoch before 6db9e9a) and
``--config demo`` (a step budget, viewpoint augmentation), also with on-policy data from log replay
(``--onpolicy.*``: killed while a round of rollouts is out), SIGKILLed right after a mid-epoch
checkpoint and resumed with ``--ckpt_path last``, end bitwise equal to an uninterrupted run on the
same machine: every weight, buffer and optimizer state, with 0 and 2 DataLoader workers.

Only what keeps a run small is overridden (a 0.3-minute log at 10 fps, batches of 2 windows of 8
frames, no validation split, 30 steps, ``last.ckpt`` every 3 steps). The kill is deterministic: the
``KillAt`` callback (``tests/fault_callbacks.py``) SIGKILLs the process at the start of the batch
after the checkpoint of step ``KILL_AT`` was written (synchronously, in the same process), never a
timer racing the trainer. Subprocesses, as a user runs it."""

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

from drive.sim.record import simulate

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
MAX_STEPS, EVERY = 30, 3
# profile -> (its --config options, the step whose checkpoint the kill follows, where that is)
# ncp_ltc: stride 4 -> 44 windows, 22 batches an epoch: step 27 is batch 5 of epoch 1;
# demo: stride 8 -> 22 windows, 11 batches an epoch: step 15 is batch 4 of epoch 1.
# demo + on-policy data: a round of rollouts starts at steps 10 and 20 (the profile's own schedule
# starts at step 1,500) and lands 5 steps later; the kill after step 12's checkpoint falls while the
# first round is out (its weight snapshot is saved).
ONPOLICY = ["--onpolicy.every_n_steps", "10", "--onpolicy.start_step", "10"]
ONPOLICY += ["--onpolicy.episodes", "2", "--onpolicy.episode_s", "4"]
PROFILES = {
    "ncp_ltc": (["--config", "ncp_ltc", "--config", "trainer/cpu"], 27, {"epoch": 1, "batches": 5}),
    "demo": (["--config", "demo"], 15, {"epoch": 1, "batches": 4}),
    "demo_onpolicy": (["--config", "demo", *ONPOLICY], 12, {"epoch": 1, "batches": 1}),
}


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("resume-profile-logs")
    simulate(root, minutes=0.3, seed=3, fps=10.0, recording_minutes=0.3, noise_std=0.015)
    return root


def _fit(profile: str, logs: Path, root: Path, workers: int, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))
    cmd = [
        sys.executable,
        "-m",
        "drive.cli",
        "fit",
        *PROFILES[profile][0],
        "--data.train",
        f"[{logs}]",
        "--data.batch_size",
        "2",
        "--data.seq_len",
        "8",
        "--data.val_split",
        "none",
        "--data.num_workers",
        str(workers),
        "--data.cache_dir",
        str(root.parent.parent / f"cache-{profile}"),
        "--trainer.max_steps",
        str(MAX_STEPS),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.enable_progress_bar",
        "false",
        "--last_checkpoint.every_n_train_steps",
        str(EVERY),
        *extra,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def uninterrupted(logs: Path, tmp_path_factory) -> Dict[str, Dict[str, torch.Tensor]]:
    """Each profile's run never killed (0 workers: workers change speed, never the batches)."""
    out = {}
    for profile in PROFILES:
        root = tmp_path_factory.mktemp(f"full-{profile}") / "run"
        done = _fit(profile, logs, root, 0)
        assert done.returncode == 0, done.stderr[-3000:]
        out[profile] = checkpoint_state(root / "checkpoints" / "last.ckpt")
        assert int(out[profile]["global_step"]) == MAX_STEPS
    return out


# workers change speed, never the batches: the on-policy run (the slowest) is killed with 0 only
CASES = [(p, w) for p in PROFILES for w in (0, 2) if not (p == "demo_onpolicy" and w)]


@pytest.mark.slow
@pytest.mark.parametrize("profile,workers", CASES)
def test_a_shipped_profile_killed_mid_epoch_resumes_bitwise_on_the_same_machine(
    profile: str, workers: int, logs: Path, tmp_path: Path, uninterrupted
) -> None:
    _, kill_at, saved = PROFILES[profile]
    root = tmp_path / "run"
    killed = _fit(
        profile,
        logs,
        root,
        workers,
        "--trainer.callbacks+=fault_callbacks.KillAt",
        "--trainer.callbacks.step",
        str(kill_at),
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    assert ckpt["global_step"] == kill_at  # the checkpoint written just before the kill
    assert ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [saved]  # mid-epoch
    resumed = _fit(profile, logs, root, workers, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = checkpoint_state(root / "checkpoints" / "last.ckpt")
    reference = uninterrupted[profile]
    assert final.keys() == reference.keys()
    differ: List[str] = [k for k, v in reference.items() if not torch.equal(v, final[k])]
    worst = max((float((reference[k].double() - final[k].double()).abs().max()) for k in differ), default=0.0)
    assert not differ, (
        f"resumed run differs from the uninterrupted one in {differ[:5]} (max |diff| {worst:.3g})"
    )
