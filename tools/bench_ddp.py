"""What data-parallel training costs on this machine: ``drive fit --config demo --config trainer/ddp``
on the CPU in one process at batch B and in N processes at B/N each (the same global batch, the same
steps), with the demo's on-policy rounds on (every ``--every`` steps) or off.

    python tools/bench_ddp.py --out runs/bench_ddp                      # 2 processes vs 1, 300 steps
    python tools/bench_ddp.py --out runs/bench_ddp --steps 200 --repeats 3 --every 0

Every arm is a real fit (a subprocess, as a user runs it) on ``--minutes`` of built-in logs, without
validation; arms run in turn and ``--repeats`` times, interleaved, so load from other jobs on a shared
machine hits them alike, and the median is reported. Measured: training frames per second of the
whole global batch after ``--skip`` warm-up steps (:class:`drive.train.throughput.Throughput` on rank
0, times the processes: every rank trains its share of each step), the fit's wall time from start to
exit (start-up, the process group, caching excluded: the cache is built once before), the CPU seconds
the fit's processes used (user + system, every rank, worker, rollout and replay process: on a machine
shared with other jobs the load-independent cost, where frames/s also measure how much of the
machine N processes win from the other jobs), and the rounds that landed. Results go to
``<out>/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import torch

from drive.sim.record import simulate

ROOT = Path(__file__).resolve().parents[1]
# the single-process arms: (processes, torch threads; 0 = Lightning's default, all the cores)
ARMS = {"1 process": (1, 0), "1 process, 1 thread": (1, 1)}


def _env(threads: int = 0) -> Dict[str, str]:
    """This tree's drive; ``threads`` torch threads per process, or (0) no OMP_NUM_THREADS, so that
    Lightning gives each of N processes 1/N of the cores and one process all of them (what a user
    gets)."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    env.pop("OMP_NUM_THREADS", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def _fit(args: argparse.Namespace, logs: Path, run: Path, devices: int) -> List[str]:
    cmd = [sys.executable, "-m", "drive.cli", "fit", "--config", "demo", "--config", "trainer/ddp"]
    cmd += ["--trainer.accelerator", "cpu", "--trainer.devices", str(devices)]
    cmd += ["--trainer.strategy", "ddp" if devices > 1 else "auto"]
    cmd += [
        "--data.train",
        f"[{logs}]",
        "--data.val_split",
        "none",
        "--data.cache_dir",
        str(args.out / "cache"),
    ]
    cmd += ["--data.batch_size", str(args.batch // devices), "--data.num_workers", str(args.workers)]
    cmd += ["--trainer.max_steps", str(args.steps)]
    cmd += ["--trainer.default_root_dir", str(run), "--trainer.enable_progress_bar", "false"]
    cmd += ["--trainer.logger", "false", "--throughput.skip_steps", str(args.skip)]
    cmd += ["--throughput.path", str(run / "throughput.json")]
    if args.every:
        cmd += ["--onpolicy.every_n_steps", str(args.every), "--onpolicy.start_step", str(args.every)]
    else:
        cmd += ["--onpolicy.every_n_steps", "0"]
    return cmd


def _measure(args: argparse.Namespace, logs: Path, arm: str, repeat: int) -> Dict[str, Any]:
    devices, threads = ARMS[arm] if arm in ARMS else (args.devices, 0)
    run = args.out / f"{arm.replace(' ', '_').replace(',', '')}_r{repeat}"
    started, cpu = time.perf_counter(), {}
    with (run.parent / f"{run.name}.log").open("w") as log:
        proc = subprocess.Popen(
            _fit(args, logs, run, devices),
            env=_env(threads),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        while proc.poll() is None:
            _session_cpu(proc.pid, cpu)
            time.sleep(0.5)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{devices} process(es) failed: see {log.name}")
    throughput = json.loads((run / "throughput.json").read_text())
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
    rounds = len(state["callbacks"].get("OnPolicyData", {}).get("rounds", []))
    return {
        "arm": arm,
        "processes": devices,
        "batch_per_process": args.batch // devices,
        "frames_per_s": throughput["frames_per_s"] * devices,
        "wall_s": wall,
        "cpu_s": sum(cpu.values()),
        "rounds": rounds,
    }


def _session_cpu(session: int, seen: Dict[int, float]) -> None:
    """User + system CPU seconds so far of every process of ``session`` (the fit's ranks, DataLoader
    workers, rollout and replay processes: Lightning does not wait for its other ranks, so the
    children's usage of ``getrusage`` would miss them), into ``seen`` by pid (Linux /proc; what a
    process uses in its last half second before it exits is missed)."""
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[3]) == session:  # fields after the name: state ppid pgrp session ... utime stime
            seen[int(entry)] = (int(fields[11]) + int(fields[12])) / tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=2, help="processes of the DDP arm (default 2)")
    parser.add_argument("--batch", type=int, default=16, help="global batch (the demo's 16)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=20, help="warm-up steps left out of frames/s")
    parser.add_argument("--every", type=int, default=100, help="rounds every N steps (0: off)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=5.0, help="minutes of built-in logs")
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per process (demo: 1)")
    parser.add_argument(
        "--one-thread", action="store_true", help="also one process on one torch thread (DDP's own cost)"
    )
    args = parser.parse_args()
    if args.batch % args.devices:
        raise SystemExit(f"--batch {args.batch} must divide into --devices {args.devices}")
    logs = args.out / "logs"
    if not logs.exists():
        simulate(logs, minutes=args.minutes, seed=0, fps=10.0, noise_std=0.015)
    cache = argparse.Namespace(**{**vars(args), "steps": 1, "every": 0, "skip": 0})
    subprocess.run(
        _fit(cache, logs, args.out / "cache_run", 1), env=_env(), check=True, capture_output=True
    )  # the cache
    arms = ["1 process", *(["1 process, 1 thread"] if args.one_thread else []), f"{args.devices} processes"]
    rows = []
    for repeat in range(args.repeats):
        for arm in arms:
            rows.append(_measure(args, logs, arm, repeat))
            print(json.dumps(rows[-1]), flush=True)
    summary = {
        arm: {
            key: statistics.median(r[key] for r in rows if r["arm"] == arm)
            for key in ("frames_per_s", "wall_s", "cpu_s", "rounds")
        }
        for arm in arms
    }
    one, many = summary[arms[0]], summary[arms[-1]]
    result = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "runs": rows,
        "median": summary,
        "speed_ratio": many["frames_per_s"] / one["frames_per_s"],
        "cpu_ratio": many["cpu_s"] / one["cpu_s"],
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["median"], indent=2))
    print(f"{args.devices} processes / 1 process, training frames/s: {result['speed_ratio']:.2f}")
    print(f"{args.devices} processes / 1 process, CPU seconds of the whole fit: {result['cpu_ratio']:.2f}")


if __name__ == "__main__":
    main()
