"""DDP: `drive fit` with 2 CPU processes (gloo) trains and writes the usual checkpoint format, and
stateful validation under DDP gives the single process's metrics."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drive.checkpoint import load_policy
from drive.data.sampling import Padding, RecordingShards
from drive.sim.camera import Camera
from drive.sim.record import simulate

REPO = Path(__file__).resolve().parents[1]


def test_recording_shards_give_each_rank_whole_recordings_in_order_without_repeats() -> None:
    recording_of = [0] * 5 + [1] * 2 + [2] * 4 + [3] * 1 + [4] * 3
    shards = [list(RecordingShards(recording_of, 2, rank)) for rank in (0, 1)]
    assert sorted(shards[0] + shards[1]) == list(range(len(recording_of)))  # all, none twice
    for shard in shards:
        assert shard == sorted(shard)  # time order
        recs = {recording_of[i] for i in shard}
        assert all(recording_of.count(r) == sum(recording_of[i] == r for i in shard) for r in recs)  # whole
    assert abs(len(shards[0]) - len(shards[1])) <= 1  # balanced by windows: 5+2+1 vs 4+3
    (pad,) = RecordingShards([0, 0], 3, 2)  # more ranks than streams: a window that counts nothing
    assert isinstance(pad, Padding)


def _cli(tmp_path: Path, command: str, root: Path, devices: int, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "drive.cli.fit",
        command,
        "--config",
        "ncp_ltc",
        "--config",
        "trainer/ddp",
        "--trainer.accelerator",
        "cpu",
        "--trainer.devices",
        str(devices),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.enable_progress_bar",
        "false",
        "--model.input_hw",
        "[40, 100]",
        "--model.head_precision",
        "fp32",
        "--data.train",
        f"[{tmp_path / 'train'}]",
        "--data.val",
        f"[{tmp_path / 'val'}]",
        "--data.image_size",
        "[40, 100]",
        "--data.batch_size",
        "2",
        "--data.eval_batch_size",
        "3",
        "--data.num_workers",
        "0",
        "--data.pin_memory",
        "false",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        *extra,
    ]
    path = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )  # keep what the caller set
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _logged(root: Path) -> dict:
    """The last value of every metric in the run's CSV log."""
    values: dict = {}
    for path in root.rglob("metrics.csv"):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                values.update({k: float(v) for k, v in row.items() if v not in ("", None)})
    return values


@pytest.mark.slow
def test_ddp_two_cpu_processes_train_and_write_a_loadable_checkpoint(tmp_path: Path) -> None:
    small = Camera.default(width=100, height=40)
    simulate(tmp_path / "train", minutes=0.4, seed=5, fps=10.0, camera=small, recording_minutes=0.2)
    # validation: 2 recordings of 90 frames, 6 consecutive 16-frame windows each (the state is carried)
    simulate(tmp_path / "val", minutes=0.3, seed=6, fps=10.0, camera=small, recording_minutes=0.15)
    root = tmp_path / "run"
    proc = _cli(tmp_path, "fit", root, 2, "--trainer.max_steps", "3", "--trainer.limit_val_batches", "2")
    assert (
        "world_size: 2" in proc.stderr + proc.stdout
        or "distributed_backend=gloo" in proc.stderr + proc.stdout
    )
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 3
    assert {"policy_config", "preprocessing", "fps", "label_units", "family"} <= set(ckpt["drive"])
    policy, meta = load_policy(root / "checkpoints" / "last.ckpt")
    assert meta["family"] == "ncp_ltc" and meta["fps"] == 10.0
    with torch.no_grad():
        y, h = policy(torch.rand(1, 3, 3, 40, 100))
    assert y.shape == (1, 3) and h.shape == (1, 19) and torch.isfinite(y).all()
    # stateful validation: 2 processes (each whole recordings, in order) == 1 process, per recording too
    ckpt_path = str(root / "checkpoints" / "last.ckpt")
    single, ddp = tmp_path / "val1", tmp_path / "val2"
    _cli(tmp_path, "validate", single, 1, "--ckpt_path", ckpt_path, "--trainer.strategy", "auto")
    _cli(tmp_path, "validate", ddp, 2, "--ckpt_path", ckpt_path)
    one, two = _logged(single), _logged(ddp)
    keys = [k for k in one if k.startswith("val")]
    assert "val/mse_km" in keys and sum("val_recording/" in k for k in keys) >= 4  # 2 recordings x mse, mae
    for key in keys:
        assert abs(two[key] - one[key]) <= 1e-4 * max(1.0, abs(one[key])), (key, one[key], two[key])
