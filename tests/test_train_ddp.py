"""DDP: `drive fit` with 2 CPU processes (gloo) trains and writes the usual checkpoint format."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from drive.policy_io import load_policy
from drive.sim.record import simulate
from drive.sim.render import Camera

REPO = Path(__file__).resolve().parents[1]


def test_ddp_two_cpu_processes_train_and_write_a_loadable_checkpoint(tmp_path: Path) -> None:
    small = Camera.default(width=100, height=40)
    simulate(tmp_path / "train", minutes=0.4, seed=5, fps=10.0, camera=small, recording_minutes=0.2)
    root = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "drive.train.cli", "fit",
        "--config", str(REPO / "configs" / "ncp_ltc.yaml"),
        "--config", str(REPO / "configs" / "trainer" / "ddp.yaml"),
        "--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.max_steps", "3",
        "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false",
        "--trainer.limit_val_batches", "2",
        "--model.input_hw", "[40, 100]", "--model.head_precision", "fp32",
        "--data.train", f"[{tmp_path / 'train'}]", "--data.image_size", "[40, 100]",
        "--data.batch_size", "2", "--data.num_workers", "0", "--data.pin_memory", "false",
        "--data.cache_dir", str(tmp_path / "cache"),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "world_size: 2" in proc.stderr + proc.stdout or "distributed_backend=gloo" in proc.stderr + proc.stdout
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 3
    assert {"policy_config", "preprocessing", "fps", "label_units", "family"} <= set(ckpt["drive"])
    policy, meta = load_policy(root / "checkpoints" / "last.ckpt")
    assert meta["family"] == "ncp_ltc" and meta["fps"] == 10.0
    with torch.no_grad():
        y, h = policy(torch.rand(1, 3, 3, 40, 100))
    assert y.shape == (1, 3) and h.shape == (1, 19) and torch.isfinite(y).all()
