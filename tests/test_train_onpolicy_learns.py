"""On-policy data must help: a tiny NCP-LTC trained on logs without recoveries drives log replay with
fewer interventions when its own rollouts join its batches (drive fit --onpolicy.*)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drive.io.recording import Recording
from drive.policy_drivers import load_driver
from drive.replay import replay_recording
from drive.sim.closed_loop import summarize
from drive.sim.record import record_logs, simulate
from drive.train.launch import launch

STEPS = 200


def _fit(train: Path, root: Path, *extra: str) -> Path:
    launch(
        [
            "fit",
            "--config",
            "demo",
            "--seed_everything",
            "0",
            "--data.train",
            json.dumps([str(train)]),
            "--data.val_split",
            "none",
            "--data.num_workers",
            "0",
            "--data.batch_size",
            "8",
            "--data.seq_len",
            "8",
            "--data.augment.viewpoint_p",
            "0",
            "--data.cache_dir",
            str(root / "cache"),
            "--trainer.max_steps",
            str(STEPS),
            "--trainer.default_root_dir",
            str(root / "run"),
            "--trainer.logger",
            "false",
            "--trainer.enable_progress_bar",
            "false",
            "--model.check_after_steps",
            "0",
            *extra,
        ]
    )
    return root / "run" / "checkpoints" / "last.ckpt"


def _replay(ckpt: Path, logs) -> dict:
    driver = load_driver(ckpt)
    return summarize(
        [s for log in logs for s in replay_recording(Recording.open(log["path"]), driver, 10.0).segments]
    )


@pytest.mark.slow
def test_on_policy_data_cuts_the_interventions_of_a_policy_trained_without_recoveries(tmp_path):
    """Two minutes of clean expert driving (no DART noise, no viewpoint augmentation): behaviour
    cloning never saw the car off the lane centre. The same run with on-policy rounds every 40 steps
    sees its own drift, labelled back to the path. Same data, steps and seed; log replay on 1.5 km of
    held-out roads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        simulate(tmp_path / "train", minutes=2.0, seed=4, fps=10.0, recording_minutes=0.5, noise_std=0.0)
        plain = _fit(tmp_path / "train", tmp_path / "bc", "--onpolicy.every_n_steps", "0")
        onpolicy = _fit(
            tmp_path / "train",
            tmp_path / "op",
            "--onpolicy.every_n_steps",
            "40",
            "--onpolicy.start_step",
            "0",
            "--onpolicy.episodes",
            "8",
            "--onpolicy.episode_s",
            "15",
            "--onpolicy.share",
            "0.5",
        )
    finally:
        torch.set_num_threads(threads)
    state = torch.load(onpolicy, weights_only=True)["callbacks"]["OnPolicyData"]
    assert len(state["rounds"]) == STEPS // 40 - 1  # rounds at steps 40-160; the run ends at 200
    logs = record_logs(tmp_path / "held_out", seeds=[61, 62, 63], km=1.5, recording_km=0.5)
    bc, op = _replay(plain, logs), _replay(onpolicy, logs)
    print(
        f"behaviour cloning {bc['interventions']} / on-policy {op['interventions']} interventions "
        f"in {bc['km']:.2f} km"
    )
    assert bc["interventions"] >= 4
    assert op["interventions"] <= 0.8 * bc["interventions"]
