"""`drive demo`'s budget is optimizer steps: the same settings give the same weights. The reduced demo
that runs every stage runs from the installed wheel (tests/test_wheel.py): one run serves both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drive.cli.fit import lightning_main
from drive.demo.settings import DEFAULT_CONFIG
from drive.sim.record import simulate


@pytest.fixture(scope="module")
def tiny_logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo_logs")
    simulate(root / "train", minutes=0.5, seed=4, fps=10.0, recording_minutes=0.25, noise_std=0.015)
    simulate(root / "val", minutes=0.25, seed=5, fps=10.0, recording_minutes=0.25)
    return root


def _fit(logs: Path, root: Path, workers: int) -> dict:
    """The shipped profile ``demo``, 6 optimizer steps on tiny logs; returns the final weights."""
    argv = [
        "fit",
        "--config",
        str(DEFAULT_CONFIG),
        "--seed_everything",
        "3",
        "--data.train",
        json.dumps(sorted(str(p) for p in (logs / "train").iterdir())),
        "--data.val",
        json.dumps(sorted(str(p) for p in (logs / "val").iterdir())),
        "--data.cache_dir",
        str(root / "cache"),
        "--data.num_workers",
        str(workers),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.max_steps",
        "6",
        "--trainer.val_check_interval",
        "6",
        "--trainer.enable_progress_bar",
        "false",
    ]
    assert lightning_main(argv) == 0
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 6
    return ckpt["state_dict"]


@pytest.mark.slow
def test_demo_profile_budget_is_steps_and_two_runs_give_identical_weights(
    tiny_logs: Path, tmp_path: Path
) -> None:
    """Two runs of the same settings on the same machine end with bitwise the same weights (another
    CPU may sum float32 in another order: the same steps there give other last bits)."""
    config = DEFAULT_CONFIG.read_text()
    assert "max_time" not in config and "max_steps:" in config
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # what drive demo pins: the same reduction order on every machine
    try:
        first = _fit(tiny_logs, tmp_path / "a", workers=1)
        second = _fit(tiny_logs, tmp_path / "b", workers=0)  # workers change speed, never the batches
    finally:
        torch.set_num_threads(threads)
    assert first.keys() == second.keys()
    changed = [k for k in first if not torch.equal(first[k], second[k])]
    assert not changed, f"weights differ between identical runs: {changed[:5]}"
