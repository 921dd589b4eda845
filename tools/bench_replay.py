"""Does log replay predict driving? Policies driven closed loop in the built-in world and in log replay
on expert logs of the same held-out roads, ranked both ways; and how fast log replay steps.

    python tools/bench_replay.py --demo runs/demo --out runs/bench_replay     # after `make demo`
    python tools/bench_replay.py --speed                                      # steps/s only

1. Logs: noise-free expert drives on test roads of ``--seeds`` (held out from the demo's training and
   test seeds), ``--km`` in all, in recordings of ``--recording-km``, every named condition on some.
2. Policies of clearly different quality: the expert with a steering bias, with steering noise and
   with a delay; constant steering; the demo's NCP-LTC (``--demo``'s checkpoint), its closed form,
   NCP-LTCs trained for fewer steps (``--ncp-steps``) and the demo's baselines (LSTM, CNN) plus a CfC
   (``--cfc-steps``), trained here with the demo profile on the demo's data when missing.
3. Each policy drives every recording's road in the true closed loop (same road, same appearance, the
   world's renderer) and the recording itself in log replay; open-loop MSE on the same logs beside.
4. Printed: the table, Spearman's rank correlation of interventions/km (replay vs world, and open-loop
   MSE vs world), and the goal checks (rho >= 0.9; replay within 2x of the world for every policy the
   world puts above 1/km). Results are cached per policy under ``--out``.

``--speed``: policy steps per second on one core for the NCP-LTC at the demo's input size, in log
replay and in the world's closed loop, measured in the same run (ratio printed); the goal is >= 200.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent import futures
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Dict, List, Tuple

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

from drive.drivers import make_driver
from drive.io.recording import Recording
from drive.replay import open_loop_errors, replay_recording
from drive.sim.appearance import CONDITION_AXES, sample_appearance
from drive.sim.closed_loop import drive_segment, summarize
from drive.sim.expert import PurePursuitExpert, SteeringNoise
from drive.sim.poisson import format_rate
from drive.sim.record import record_drive
from drive.sim.render import Renderer
from drive.sim.road import generate_road
from drive.sim.world import DEFAULT_SPEED_MPS, World

ROOT = Path(__file__).resolve().parents[1]
FPS = 10.0


# -- policies that need no training: the expert, made worse in three ways ----------------------------
class BiasedExpert(PurePursuitExpert):
    """The expert with a constant steering bias (1/m)."""

    def __init__(self, bias_per_m: float) -> None:
        super().__init__()
        self.bias, self.name = bias_per_m, f"expert+bias {bias_per_m:g}"

    def act(self, obs: Any) -> float:
        return super().act(obs) + self.bias


class NoisyExpert(PurePursuitExpert):
    """The expert with Ornstein-Uhlenbeck steering noise (std 1/m, 1 s), reseeded at every reset."""

    def __init__(self, std_per_m: float) -> None:
        super().__init__()
        self.std, self.name, self.episode = std_per_m, f"expert+noise {std_per_m:g}", 0

    def reset(self) -> None:
        self.noise = SteeringNoise(self.std, seed=self.episode)
        self.episode += 1

    def act(self, obs: Any) -> float:
        return super().act(obs) + self.noise(obs.dt_s)


class DelayedExpert(PurePursuitExpert):
    """The expert acting on what it saw ``steps`` periods ago."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps, self.name = steps, f"expert+delay {steps / FPS:g} s"
        self.queue: List[float] = []

    def reset(self) -> None:
        self.queue = []

    def act(self, obs: Any) -> float:
        self.queue.append(super().act(obs))
        return self.queue.pop(0) if len(self.queue) > self.steps else self.queue[0]


SCRIPTED = {
    "expert+bias 0.03": lambda: BiasedExpert(0.03),
    "expert+noise 0.015": lambda: NoisyExpert(0.015),
    "expert+noise 0.03": lambda: NoisyExpert(0.03),
    "expert+delay 0.5 s": lambda: DelayedExpert(5),
    "constant": lambda: make_driver("constant:0"),
}


def _driver(spec: str) -> Any:
    return SCRIPTED[spec]() if spec in SCRIPTED else make_driver(spec, threads=1)


# -- 1. logs ---------------------------------------------------------------------------------------
def _conditions(j: int) -> Dict[str, str]:
    """A Latin square over the named conditions: nine recordings show every pair of axes' values."""
    axes = list(CONDITION_AXES.values())
    return {
        "season": axes[0][j % 3],
        "light": axes[1][(j + j // 3) % 3],
        "markings": axes[2][(j + 2 * (j // 3)) % 3],
    }


def record_logs(out: Path, seeds: List[int], km: float, recording_km: float) -> List[Dict[str, Any]]:
    """Noise-free expert logs on test roads; one entry per recording: its path, seed, index, conditions."""
    count = int(math.ceil(km / recording_km - 1e-9))
    minutes = recording_km * 1000.0 / DEFAULT_SPEED_MPS / 60.0
    logs = []
    for j in range(count):
        seed, index = seeds[j % len(seeds)], j // len(seeds)
        path = out / "logs" / f"test-s{seed}-{index:03d}"
        if not (path / "meta.json").exists():
            record_drive(
                path, seed, index, "test", minutes, _conditions(j), noise_std=0.0, fps=FPS, overwrite=True
            )
        logs.append(
            {
                "path": str(path),
                "seed": seed,
                "index": index,
                "minutes": minutes,
                "conditions": _conditions(j),
            }
        )
    return logs


# -- 2. policies -------------------------------------------------------------------------------------
def _train(out: Path, demo: Path, name: str, steps: int, extra: List[str]) -> str:
    """A policy trained with the demo profile on the demo's data for ``steps`` steps (cached)."""
    from drive.train.launch import launch  # here: Lightning's import only where something trains

    root = out / "policies" / name
    last = root / "checkpoints" / "last.ckpt"
    if last.exists():
        return str(last)
    data = json.loads((demo / "stages" / "simulate.json").read_text())["result"]
    argv = ["fit", "--config", str(ROOT / "configs" / "demo.yaml"), "--seed_everything", "0"]
    argv += ["--data.train", json.dumps(data["train"]), "--data.val", json.dumps(data["val"])]
    argv += ["--data.cache_dir", str(demo / "cache"), "--trainer.default_root_dir", str(root)]
    argv += ["--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps), *extra]
    argv += ["--trainer.enable_progress_bar", "false"]
    torch.set_num_threads(2)
    launch(argv)
    return str(last)


def policies(out: Path, demo: Path, ncp_steps: List[int], cfc_steps: int) -> Dict[str, str]:
    """name -> driver spec, every learned one a file."""
    specs = {k: k for k in SCRIPTED}
    specs["ncp_ltc (demo)"] = str(demo / "train" / "checkpoints" / "last.ckpt")
    closed = sorted((demo / "closed_form").glob("*.pt")) if (demo / "closed_form").exists() else []
    if closed:
        specs["ncp_ltc closed form"] = str(closed[0])
    for family in ("lstm", "cnn"):
        ckpt = demo / "baselines" / family / "checkpoints" / "last.ckpt"
        if ckpt.exists():
            specs[f"{family} (demo)"] = str(ckpt)
    for steps in ncp_steps:
        specs[f"ncp_ltc {steps} steps"] = _train(out, demo, f"ncp_ltc_{steps}", steps, [])
    if cfc_steps:
        specs[f"cfc {cfc_steps} steps"] = _train(out, demo, "cfc", cfc_steps, ["--model.family", "cfc"])
    return specs


# -- 3. driving ---------------------------------------------------------------------------------------
def _world_drive(driver: Any, log: Dict[str, Any], length_m: float, fps: float) -> Any:
    """The true closed loop on the recording's own road and appearance (record_drive's road and start)."""
    n_frames = int(round(log["minutes"] * 60.0 * FPS))
    road = generate_road(log["seed"], n_frames / FPS * DEFAULT_SPEED_MPS + 300.0, "test", log["index"])
    app = sample_appearance(log["seed"], "test", log["index"], log["conditions"])
    world = World(road, app, Renderer(), fps=fps, start_s_m=5.0)
    return drive_segment(world, driver, length_m, None, 1.0, math.pi / 10, None, log["index"], {})


def measure(name: str, spec: str, logs: List[Dict[str, Any]], cache: Path) -> Dict[str, Any]:
    """World, replay and open loop for one policy over every log (cached as JSON)."""
    if cache.exists():
        return json.loads(cache.read_text())
    torch.set_num_threads(1)
    driver = _driver(spec)
    fps = 1.0 / getattr(driver, "nominal_dt_s", 1.0 / FPS)
    world, replay, errors = [], [], []
    for log in logs:
        rec = Recording.open(log["path"])
        replayed = replay_recording(rec, driver, fps)
        replay += replayed.segments
        length = sum(s.km for s in replayed.segments) * 1000.0
        world.append(_world_drive(driver, log, length, fps))
        errors.append(open_loop_errors(rec, driver))
    w, r = summarize(world), summarize(replay)
    result = {
        "name": name,
        "spec": spec,
        "world": {k: w[k] for k in ("km", "interventions", "interventions_per_km", "lateral_rms_m")},
        "replay": {k: r[k] for k in ("km", "interventions", "interventions_per_km", "lateral_rms_m")},
        "open_loop_mse_km2": float(np.mean((1000.0 * np.concatenate(errors)) ** 2)),
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=2) + "\n")
    return result


# -- 4. statistics ------------------------------------------------------------------------------------
def ranks(values: List[float]) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    r[order] = np.arange(1, len(v) + 1)
    for value in np.unique(v):
        tied = v == value
        r[tied] = r[tied].mean()
    return r


def spearman(a: List[float], b: List[float]) -> float:
    """Spearman's rank correlation (Pearson's on average ranks)."""
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def report(results: List[Dict[str, Any]]) -> Tuple[str, Dict[str, Any]]:
    rows = sorted(results, key=lambda r: r["world"]["interventions_per_km"])
    lines = [
        f"| {'policy':<26} | {'world /km (95 %)':<26} | {'log replay /km (95 %)':<26} "
        "| replay/world | open-loop MSE |",
        f"|{'-' * 28}|{'-' * 28}|{'-' * 28}|--------------|---------------|",
    ]
    misses = []
    for r in rows:
        w, p = r["world"], r["replay"]
        ratio = p["interventions_per_km"] / w["interventions_per_km"] if w["interventions"] else float("nan")
        if w["interventions_per_km"] > 1.0 and not 0.5 <= ratio <= 2.0:
            misses.append(r["name"])
        lines.append(
            f"| {r['name']:<26} | {format_rate(w['interventions'], w['km']):<26} | "
            f"{format_rate(p['interventions'], p['km']):<26} | {ratio:12.2f} | "
            f"{r['open_loop_mse_km2']:13.1f} |"
        )
    world = [r["world"]["interventions_per_km"] for r in rows]
    summary = {
        "policies": len(rows),
        "km_per_policy": rows[0]["world"]["km"] if rows else 0.0,
        "spearman_replay_vs_world": spearman([r["replay"]["interventions_per_km"] for r in rows], world),
        "spearman_open_loop_mse_vs_world": spearman([r["open_loop_mse_km2"] for r in rows], world),
        "outside_2x": misses,
    }
    lines += [
        "",
        f"Spearman rank correlation with the world's interventions/km over {len(rows)} policies:",
        f"  log replay        {summary['spearman_replay_vs_world']:+.3f}   (goal >= 0.9)",
        f"  open-loop MSE     {summary['spearman_open_loop_mse_vs_world']:+.3f}",
        "log replay within 2x of the world for every policy above 1/km: "
        + ("yes" if not misses else f"NO ({', '.join(misses)})"),
    ]
    return "\n".join(lines), summary


# -- speed ---------------------------------------------------------------------------------------------
def speed(demo: Path, out: Path) -> str:
    """Steps/s on one core of the NCP-LTC in log replay and in the world, same policy, same run."""
    torch.set_num_threads(1)
    ckpt = demo / "train" / "checkpoints" / "last.ckpt"
    if not ckpt.exists():
        raise SystemExit(f"{ckpt}: no demo checkpoint; run `make demo` (or pass --demo)")
    (log,) = record_logs(out / "speed", [909], 0.5, 0.5)
    rec = Recording.open(log["path"])
    driver = make_driver(str(ckpt), threads=1)
    replay_recording(rec, driver, FPS)  # warm-up
    t, cpu = time.perf_counter(), time.process_time()
    replayed = replay_recording(rec, driver, FPS)
    replay_s, replay_cpu = time.perf_counter() - t, time.process_time() - cpu
    steps = replayed.frames_shown
    length = sum(s.km for s in replayed.segments) * 1000.0
    t, cpu = time.perf_counter(), time.process_time()
    seg = _world_drive(driver, log, length, FPS)
    world_s, world_cpu = time.perf_counter() - t, time.process_time() - cpu
    world_steps = len(seg.curvature_cmd_per_m)
    rate, world_rate = steps / replay_s, world_steps / world_s
    return (
        f"NCP-LTC ({ckpt}), input {driver.preprocessing.size}, one thread:\n"
        f"  log replay   {rate:7.0f} steps/s ({steps / replay_cpu:.0f} per CPU second)   goal >= 200\n"
        f"  world        {world_rate:7.0f} steps/s ({world_steps / world_cpu:.0f} per CPU second)\n"
        f"  log replay / world: {rate / world_rate:.2f}x"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--demo", default=str(ROOT / "runs" / "demo"), help="a finished drive demo's --out")
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_replay"))
    p.add_argument("--seeds", default="101,202,303", help="test-road seeds of the logs")
    p.add_argument("--km", type=float, default=6.0, help="log distance in all")
    p.add_argument("--recording-km", type=float, default=0.5)
    p.add_argument("--ncp-steps", default="150,500", help="extra NCP-LTC runs (steps)")
    p.add_argument("--cfc-steps", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--speed", action="store_true", help="only the speed measurement")
    args = p.parse_args()
    out, demo = Path(args.out), Path(args.demo)
    if args.speed:
        print(speed(demo, out))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    logs = record_logs(out, seeds, args.km, args.recording_km)
    print(f"{len(logs)} noise-free expert logs on test roads of seeds {seeds}: {args.km:g} km", flush=True)
    specs = policies(out, demo, [int(s) for s in args.ncp_steps.split(",") if s], args.cfc_steps)
    slug = {n: n.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "_") for n in specs}
    ctx = get_context("spawn")
    with futures.ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        jobs = {
            n: pool.submit(measure, n, s, logs, out / "results" / f"{slug[n]}.json") for n, s in specs.items()
        }
        results = []
        for name, job in jobs.items():
            results.append(job.result())
            print(f"  measured {name}", flush=True)
    text, summary = report(results)
    print(text)
    (out / "summary.json").write_text(json.dumps({**summary, "results": results}, indent=2) + "\n")
    (out / "summary.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
