"""Training in the loop under DDP: on-policy rounds, validation by driving and evaluation on logs split
across processes (gloo, 2 CPU processes, a 48x16 camera).

The ranks' share of every global batch is what one process trains at that global batch; a round's
episodes split over the ranks are the round one process drives; validation by driving split over the
ranks gives one process's numbers; a 2-process run killed and resumed ends bitwise equal to the run
never killed; `drive evaluate --logs` under torchrun writes the one report one process writes. The
fit is the issue's: the demo profile with trainer/ddp on one 1.5-minute recording (its validation the
first and last 10 %), shrunk to a few steps."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import numpy as np
import pytest
import torch
from resume_state import checkpoint_state

from drive.checkpoint import load_policy
from drive.data.datamodule import DriveDataModule
from drive.data.sampling import EpochSampler, EpochShards, Padding, RecordingShards, global_rows
from drive.evaluate.log_replay import launch_rank
from drive.nn.families import build_policy
from drive.replay.rollout import Rollout
from drive.sim.camera import Camera
from drive.sim.record import simulate
from drive.train.onpolicy import OnPolicyData
from drive.train.replay_validation import (
    ReplayJob,
    plan_drive,
    plan_share,
    replay_metrics,
    run_replay,
    validation_ranges,
)
from drive.train.rounds import RoundJob, run_round

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
HW = [16, 48]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """One 1.5-minute recording to train on; three of 12 s to evaluate on."""
    root = tmp_path_factory.mktemp("ddp-loop-logs")
    kw = dict(fps=10.0, camera=Camera.default(width=48, height=16), noise_std=0.015)
    simulate(root / "train", minutes=1.5, seed=3, recording_minutes=1.5, **kw)
    simulate(root / "eval", minutes=0.6, seed=4, recording_minutes=0.2, split="test", **kw)
    return root


def _datamodule(logs: Path, cache: Path) -> DriveDataModule:
    dm = DriveDataModule(
        train=[str(logs / "train")],
        seq_len=8,
        image_size=HW,
        cache_dir=str(cache),
        val_fraction=0.2,
        num_workers=0,
        eval_batch_size=4,
    )
    dm.setup("fit")
    return dm


# -- the pieces, in one process ------------------------------------------------------------------


def test_the_ranks_train_the_global_batches_of_one_process() -> None:
    for world, batch in ((2, 3), (3, 2)):
        one = EpochSampler(23, seed=5)
        one.set_epoch(2)
        keys = list(one)
        shards = [EpochShards(EpochSampler(23, seed=5), batch, world, r) for r in range(world)]
        for s in shards:
            s.set_epoch(2)
        mine = [list(s) for s in shards]
        assert {len(m) for m in mine} == {len(shards[0])}  # lockstep: the same batches on every rank
        size = batch * world
        for k in range(len(keys) // size):  # every full global batch is one process's, row for row
            block = keys[k * size : (k + 1) * size]
            for r in range(world):
                assert [block[i] for i in global_rows(batch, r, world)] == mine[r][
                    k * batch : (k + 1) * batch
                ]
        last = keys[(len(keys) // size) * size :]  # the partial one: all of it, padded with repeats
        tail = [m[(len(keys) // size) * batch :] for m in mine]
        assert set(last) == {key for t in tail for key in t} and sum(map(len, tail)) % world == 0


def test_evaluation_shards_split_streams_and_pad_a_rank_without_one(logs, tmp_path) -> None:
    """The issue's one recording: validation is its first and last 10 %, two streams; with two ranks
    each gets one, with three the third evaluates a window that counts nothing."""
    dm = _datamodule(logs, tmp_path / "cache")
    windows = dm.datasets["val"].windows
    assert sum(w.reset for w in windows) == 2 and len({w.recording for w in windows}) == 1
    for world in (2, 3):
        counted: List[int] = []
        for rank in range(world):
            dm.trainer = SimpleNamespace(world_size=world, global_rank=rank)
            loader = dm.val_dataloader()
            batches = list(loader)
            assert batches  # every rank runs the loop (Lightning refuses an empty one under DDP)
            shard = list(loader.sampler)
            if isinstance(shard[0], Padding):
                assert world == 3 and len(shard) == 1 and not any(b["mask"].any() for b in batches)
            else:
                counted += shard
                assert shard == sorted(shard) and windows[shard[0]].reset
        assert sorted(counted) == list(range(len(windows)))  # every window once
    split = [list(RecordingShards([0, 0, 0, 1], 2, r, [True, False, True, False])) for r in range(2)]
    assert split == [[0, 1], [2, 3]]  # streams [0 1], [2], [3]: the larger first, then the least loaded


@pytest.fixture(scope="module")
def cached(logs, tmp_path_factory) -> DriveDataModule:
    return _datamodule(logs, tmp_path_factory.mktemp("ddp-loop-cache"))


def _policy(seed: int = 0):
    torch.manual_seed(seed)
    return build_policy("ncp_ltc", input_hw=HW, frame_period_s=0.1)


def test_a_round_split_over_ranks_is_the_round_of_one_process(cached) -> None:
    """Each rank drives its block of episodes, started and seeded as in one process: concatenated in
    rank order they are one process's round (the same steps; positions to float32 rounding, which
    batching the policy over fewer episodes changes)."""
    policy = _policy()
    caches = [str(r.directory) for r in cached.datasets["train"].recordings]
    job = RoundJob(caches, policy.config(), policy.state_dict(), 7, 5, 30, 0.9, 5.0, noise_std=0.015)
    whole = run_round(job)
    for world in (2, 3):
        parts = [run_round(replace(job, part=(r, world))) for r in range(world)]
        for key, value in whole.items():
            joined = np.concatenate([p[key] for p in parts])
            if value.dtype.kind in "iub":
                np.testing.assert_array_equal(joined, value, err_msg=key)
            else:
                np.testing.assert_allclose(joined, value, rtol=0, atol=1e-6, err_msg=key)


def test_two_ranks_mix_in_the_windows_one_process_mixes_at_the_same_global_batch(cached) -> None:
    policy = _policy()
    recs = cached.datasets["train"].recordings
    job = RoundJob([str(r.directory) for r in recs], policy.config(), policy.state_dict(), 3, 4, 30, 0.9, 5.0)
    done = Rollout(**run_round(job))

    def mixed(rank: int, world: int, batch: int) -> torch.Tensor:
        cb = OnPolicyData(every_n_steps=10, share=0.3)
        cb.recordings, cb.seq_len, cb.curve_factor, cb.rank, cb.world = recs, 8, 0.0, rank, world
        cb.buffer.add(done)
        rows = {
            "frames": torch.zeros(batch, 8, 3, *HW, dtype=torch.uint8),
            "curvature": torch.full((batch, 8), 9.0),
        }
        cb._mix(rows, step=40)
        return rows["curvature"]

    one = mixed(0, 1, 10)  # round(0.3 x 10) = 3 windows, the last rows
    assert (one[:7] == 9.0).all() and (one[7:] != 9.0).all()
    two = [mixed(r, 2, 5) for r in range(2)]
    together = torch.empty_like(one)
    for r in range(2):
        together[torch.from_numpy(global_rows(5, r, 2))] = two[r]
    assert torch.equal(together, one)  # the same windows in the same rows of the global batch


def test_validation_by_driving_split_over_ranks_gives_one_process_numbers(cached) -> None:
    policy = _policy(1)
    val = cached.datasets["val"]
    assert validation_ranges(val) == [(0, 0, 90), (0, 810, 900)]  # its first and last 10 %, not between
    plan = plan_drive(val.recordings, validation_ranges(val), km=0.0)
    assert len(plan) == 2
    caches = [str(r.directory) for r in val.recordings]

    def drive(items) -> Dict:
        return run_replay(ReplayJob(caches, items, policy.config(), policy.state_dict()))

    one = drive(plan)
    parts = [drive(plan_share(plan, r, 2)) for r in range(2)]
    assert [len(p["sums"]) for p in parts] == [1, 1]  # a path each
    split = replay_metrics([s for p in parts for s in p["sums"]])
    assert split == replay_metrics(one["sums"])  # exactly
    assert plan_share(plan, 2, 3) == [] and replay_metrics(one["sums"])["km"] > 0.1


def test_a_launch_rank_comes_from_torchrun_or_an_srun_step(monkeypatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    assert launch_rank() == (0, 1)
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert launch_rank() == (0, 1)  # the batch script itself, not an srun step: one process
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert launch_rank() == (3, 4)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launch_rank() == (1, 2)


# -- 2 processes -------------------------------------------------------------------------------

# rounds every 4 steps from step 4, each landing 2 steps later (6, 10); validation at 6 and 12;
# last.ckpt every 2 steps
STEPS = 12


def _drive(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m drive.cli ARGS...`` in a session of its own: whatever a killed run leaves behind is
    ended with it."""
    cmd = [sys.executable, "-m", "drive.cli", *args]
    proc = subprocess.Popen(
        cmd,
        env=ENV,
        cwd=root.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _args(root: Path, command: str = "fit", devices: int = 2) -> List[str]:
    """The demo profile under trainer/ddp on CPU, shrunk: 48x16 frames, windows of 8, 2 per rank."""
    args = [command, "--config", "demo", "--config", "trainer/ddp", "--trainer.accelerator", "cpu"]
    args += ["--trainer.devices", str(devices), "--trainer.strategy", "ddp" if devices > 1 else "auto"]
    args += ["--model.input_hw", json.dumps(HW), "--model.head_precision", "fp32"]
    args += ["--data.image_size", json.dumps(HW), "--data.seq_len", "8", "--data.batch_size", "2"]
    args += ["--data.eval_batch_size", "4", "--data.num_workers", "0", "--data.pin_memory", "false"]
    args += ["--data.augment.lookahead_s", "0.9", "--data.cache_dir", str(root.parent / "cache")]
    return args + ["--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"]


def _fit(logs: Path, root: Path, *extra: str) -> subprocess.CompletedProcess:
    args = _args(root) + ["--data.train", f"[{logs / 'train'}]", "--data.val_fraction", "0.2"]
    args += ["--trainer.max_steps", str(STEPS), "--trainer.val_check_interval", "6"]
    args += ["--last_checkpoint.every_n_train_steps", "2"]
    args += ["--onpolicy.every_n_steps", "4", "--onpolicy.episodes", "4", "--onpolicy.episode_s", "3"]
    args += ["--val_replay.enabled", "true", "--checkpoint.monitor", "val/replay/score"]
    return _drive(root, *args, *extra)


def _rank_log(path: Path) -> List[Dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def two(logs, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ddp-loop") / "run"
    done = _fit(
        logs, root, "--trainer.callbacks+=rank_callbacks.RankLog", "--trainer.callbacks.path", str(root)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_rounds_land_on_both_ranks_at_the_same_steps_and_both_validate_alike(two: Path, cached) -> None:
    ranks = [_rank_log(two.parent / f"run.rank{r}") for r in range(2)]
    assert ranks[0] == ranks[1]  # the same steps, buffer digests and logged val/replay values
    steps = [row for row in ranks[0] if "step" in row]
    assert [row["step"] for row in steps] == list(range(STEPS))
    landed = [
        row["step"] for i, row in enumerate(steps) if row["rounds"] > (steps[i - 1]["rounds"] if i else 0)
    ]
    assert landed == [6, 10]  # started at 4 and 8, each 2 steps later
    validated = [row for row in ranks[0] if "validated" in row]
    assert [row["validated"] for row in validated] == [6, 12]
    # validation by driving split over the ranks (a path each) = one process's numbers, these weights
    policy, _ = load_policy(two / "checkpoints" / "last.ckpt")
    val = cached.datasets["val"]
    plan = plan_drive(val.recordings, validation_ranges(val), km=0.0)
    caches = [str(r.directory) for r in val.recordings]
    one = replay_metrics(run_replay(ReplayJob(caches, plan, policy.config(), policy.state_dict()))["sums"])
    for name, value in one.items():
        assert validated[-1][f"val/replay/{name}"] == pytest.approx(value, rel=1e-6), name
    best = min(validated, key=lambda row: row["val/replay/score"])["validated"]
    assert [p.name for p in (two / "checkpoints").glob("best-*.ckpt")] == [f"best-epoch0-step{best}.ckpt"]


@pytest.mark.slow
def test_a_killed_two_process_run_resumes_bitwise_and_its_rounds_are_one_process_rounds(
    logs, two: Path, cached, tmp_path: Path
) -> None:
    root = tmp_path / "run"
    (tmp_path / "cache").symlink_to(two.parent / "cache")
    killed = _fit(logs, root, "--trainer.callbacks+=fault_callbacks.KillAt", "--trainer.callbacks.step", "11")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    state = ckpt["callbacks"]["OnPolicyData"]
    assert ckpt["global_step"] == 10 and state["pending"]["step"] == 8 and len(state["rounds"]) == 1
    resumed = _fit(logs, root, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = checkpoint_state(root / "checkpoints" / "last.ckpt")
    reference = checkpoint_state(two / "checkpoints" / "last.ckpt")
    assert final.keys() == reference.keys()
    assert not [k for k, v in reference.items() if not torch.equal(v, final[k])]
    buffers = [
        torch.load(p / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["OnPolicyData"]["rounds"]
        for p in (root, two)
    ]
    assert len(buffers[0]) == 2 and all(torch.equal(a[k], b[k]) for a, b in zip(*buffers) for k in a)
    # the round of step 8 the two ranks drove is the round one process drives from the same snapshot
    policy, _ = load_policy(two / "checkpoints" / "last.ckpt")
    caches = [str(r.directory) for r in _datamodule(logs, two.parent / "cache").datasets["train"].recordings]
    job = RoundJob(caches, policy.config(), state["pending"]["weights"], 8, 4, 30, 0.9, 5.0, noise_std=0.015)
    # Each rank drove its 2 episodes as one batch, this process drives all 4 as one: the policy sums in
    # another order, and 3 s of closed loop grow that last-bit difference to micrometres (3.5e-6 m
    # measured). A wrong round (other episodes, starts, noise or weights) differs in the integer
    # columns, and in the floats by centimetres: 1e-4 (m, rad, 1/m) tells them apart.
    for key, value in run_round(job).items():
        landed = buffers[1][1][key].numpy()
        if value.dtype.kind in "iub":
            np.testing.assert_array_equal(landed, value, err_msg=key)
        else:
            np.testing.assert_allclose(landed, value, rtol=0, atol=1e-4, err_msg=key)
    # the tolerance tells rounds apart: the same round driven by the weights of step 12 moves far more
    later = run_round(replace(job, weights=policy.state_dict()))
    assert np.abs(later["left_m"] - buffers[1][1]["left_m"].numpy()).max() > 1e-3


@pytest.mark.slow
def test_a_rank_without_a_validation_stream_counts_nothing(logs, two: Path, tmp_path: Path) -> None:
    """One validation recording of one stream, two ranks: the second evaluates a window that counts
    nothing, and the metrics are one process's."""
    (tmp_path / "cache").symlink_to(two.parent / "cache")
    (first, *_) = sorted((logs / "eval").iterdir())
    values = []
    for devices in (1, 2):
        root = tmp_path / f"val{devices}"
        args = _args(root, "validate", devices) + ["--data.val", f"[{first}]"]
        done = _drive(root, *args, "--ckpt_path", str(two / "checkpoints" / "last.ckpt"))
        assert done.returncode == 0, done.stderr[-3000:]
        (metrics,) = root.glob("csv/version_*/metrics.csv")
        with metrics.open(newline="") as f:
            (row,) = [r for r in csv.DictReader(f) if r.get("val/mse_km")]
        values.append({k: float(v) for k, v in row.items() if v and k.startswith("val")})
    assert "val/mse_km" in values[0] and values[0].keys() == values[1].keys()
    for key, value in values[0].items():
        assert values[1][key] == pytest.approx(value, rel=1e-5), key


@pytest.mark.slow
def test_evaluate_logs_over_two_torchrun_processes_writes_one_process_report(
    logs, two: Path, tmp_path
) -> None:
    policy = str(two / "checkpoints" / "last.ckpt")
    evaluate = ["evaluate", "--logs", str(logs / "eval"), "--policy", policy, "--workers", "1"]
    one = _drive(tmp_path / "one", *evaluate, "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    # torchrun's own parser would take --logs for its --logs-specs: `--` ends its options
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd = [*torchrun, "-m", "drive.cli", "--", *evaluate, "--out", str(tmp_path / "two")]
    done = subprocess.run(cmd, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len([line for line in done.stdout.splitlines() if " km, " in line]) == 3  # each rank its own
    report = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert report["recordings"] == 3 and report["interventions"] > 0
    for name in ("metrics.json", "REPORT.md"):
        assert (tmp_path / "two" / name).read_text() == (tmp_path / "one" / name).read_text(), name
