"""Does log replay predict driving? Policies driven closed loop in the built-in world and in log replay
on expert logs of the same held-out roads, ranked both ways; and how fast log replay steps.

    python tools/bench_replay.py --demo runs/demo --out runs/bench_replay     # after `make demo`
    python tools/bench_replay.py --speed                                      # steps/s only

1. Logs: noise-free expert drives on test roads of ``--seeds`` (held out from the demo's training and
   test seeds), ``--km`` in all, in recordings of ``--recording-km``, every named condition on some.
2. Policies of clearly different quality: the expert with a steering bias, with steering noise and
   with a delay; constant steering; pixel ridge regressions (camera only, fitted in seconds on 20 of
   the demo's training recordings); the demo's NCP-LTC (``--demo``'s checkpoint), its closed form,
   NCP-LTCs trained for fewer steps (``--ncp-steps``) and the demo's baselines (LSTM, CNN) plus a CfC
   (``--cfc-steps``), trained here with the demo profile on the demo's data when missing.
3. Each policy drives every recording's road in the true closed loop (same road, same appearance, the
   world's renderer) and the recording itself in log replay, its path from the poses and again from
   curvature and speed (as a log without poses gives it); open-loop MSE on the same logs beside
   (``tools/replay_proof.py``).
4. Printed: the table, Spearman's rank correlation of interventions/km (replay vs world, and open-loop
   MSE vs world), and the goal checks (rho >= 0.9; replay within 2x of the world for every policy the
   world puts above 1/km). Results are cached per policy under ``--out``.

``--speed``: policy steps per second on one core for the NCP-LTC at the demo's input size, in log
replay and in the world's closed loop, measured in the same run (ratio printed); the goal is >= 200.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent import futures
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Dict, List, Tuple

os.environ.setdefault("OMP_NUM_THREADS", "1")

import cv2
import torch
from replay_proof import (  # tools/replay_proof.py, beside this script
    FPS,
    BiasedExpert,
    DelayedExpert,
    NoisyExpert,
    PixelRidge,
    measure,
    spearman,
    world_drive,
)

from drive.io.recording import Recording
from drive.policy_drivers import make_driver
from drive.replay import replay_recording
from drive.sim.poisson import format_rate
from drive.sim.record import record_logs

ROOT = Path(__file__).resolve().parents[1]

SCRIPTED = {
    "expert+bias 0.03": lambda logs: BiasedExpert(0.03),
    "expert+noise 0.015": lambda logs: NoisyExpert(0.015),
    "expert+noise 0.03": lambda logs: NoisyExpert(0.03),
    "expert+delay 0.5 s": lambda logs: DelayedExpert(5),
    "constant": lambda logs: make_driver("constant:0"),
    "ridge 16x40": lambda logs: PixelRidge(logs, (16, 40), 1e-4),
    "ridge 2x5": lambda logs: PixelRidge(logs, (2, 5), 1e-3),
    "ridge 8x20 alpha 10": lambda logs: PixelRidge(logs, (8, 20), 10.0),
}


def _driver(spec: str, fit_logs: List[str]) -> Any:
    if spec in SCRIPTED:
        return SCRIPTED[spec]([Recording.open(p) for p in fit_logs])
    return make_driver(spec, threads=1)


# -- 2. policies -------------------------------------------------------------------------------------
def _train(out: Path, demo: Path, name: str, steps: int, extra: List[str]) -> str:
    """A policy trained with the demo profile on the demo's data for ``steps`` steps (cached)."""
    from drive.train.launch import launch  # here: Lightning's import only where something trains

    root = out / "policies" / name
    last = root / "checkpoints" / "last.ckpt"
    if last.exists():
        return str(last)
    data = json.loads((demo / "stages" / "simulate.json").read_text())["result"]
    argv = ["fit", "--config", "demo", "--seed_everything", "0"]
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


# -- 3. driving -----------------------------------------------------------------------------------------
def measure_policy(
    name: str, spec: str, logs: List[Dict[str, Any]], fit_logs: List[str], cache: Path
) -> Dict[str, Any]:
    """World, replay and open loop for one policy over every log (cached as JSON)."""
    if cache.exists():
        return json.loads(cache.read_text())
    torch.set_num_threads(1)
    result = {"name": name, "spec": spec, **measure(_driver(spec, fit_logs), logs)}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=2) + "\n")
    return result


def report(results: List[Dict[str, Any]]) -> Tuple[str, Dict[str, Any]]:
    rows = sorted(results, key=lambda r: r["world"]["interventions_per_km"])
    lines = [
        f"| {'policy':<26} | {'world /km (95 %)':<26} | {'log replay /km (95 %)':<26} "
        f"| replay/world | {'replay, path from curvature':<27} | open-loop MSE |",
        f"|{'-' * 28}|{'-' * 28}|{'-' * 28}|--------------|{'-' * 29}|---------------|",
    ]
    misses = []
    for r in rows:
        w, p = r["world"], r["replay"]
        ratio = p["interventions_per_km"] / w["interventions_per_km"] if w["interventions"] else float("nan")
        if w["interventions_per_km"] > 1.0 and not 0.5 <= ratio <= 2.0:
            misses.append(r["name"])
        c = r["replay_from_curvature"]
        lines.append(
            f"| {r['name']:<26} | {format_rate(w['interventions'], w['km']):<26} | "
            f"{format_rate(p['interventions'], p['km']):<26} | {ratio:12.2f} | "
            f"{format_rate(c['interventions'], c['km']):<27} | {r['open_loop_mse_km2']:13.1f} |"
        )
    world = [r["world"]["interventions_per_km"] for r in rows]
    summary = {
        "policies": len(rows),
        "km_per_policy": rows[0]["world"]["km"] if rows else 0.0,
        "spearman_replay_vs_world": spearman([r["replay"]["interventions_per_km"] for r in rows], world),
        "spearman_replay_from_curvature_vs_world": spearman(
            [r["replay_from_curvature"]["interventions_per_km"] for r in rows], world
        ),
        "spearman_open_loop_mse_vs_world": spearman([r["open_loop_mse_km2"] for r in rows], world),
        "outside_2x": misses,
    }
    lines += [
        "",
        f"Spearman rank correlation with the world's interventions/km over {len(rows)} policies:",
        f"  log replay        {summary['spearman_replay_vs_world']:+.3f}   (goal >= 0.9)",
        f"  log replay, path from curvature {summary['spearman_replay_from_curvature_vs_world']:+.3f}",
        f"  open-loop MSE     {summary['spearman_open_loop_mse_vs_world']:+.3f}",
        "log replay within 2x of the world for every policy above 1/km: "
        + ("yes" if not misses else f"NO ({', '.join(misses)})"),
    ]
    return "\n".join(lines), summary


# -- speed ---------------------------------------------------------------------------------------------
def speed(demo: Path, out: Path) -> str:
    """Steps/s on one core of the NCP-LTC in log replay and in the world, same policy, same run."""
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    ckpt = demo / "train" / "checkpoints" / "last.ckpt"
    if not ckpt.exists():
        raise SystemExit(f"{ckpt}: no demo checkpoint; run `make demo` (or pass --demo)")
    (log,) = record_logs(out / "speed_logs", [909], 0.5, 0.5)
    rec = Recording.open(log["path"])
    driver = make_driver(str(ckpt), threads=1)
    replay_recording(rec, driver, FPS)  # warm-up
    t, cpu = time.perf_counter(), time.process_time()
    replayed = replay_recording(rec, driver, FPS)
    replay_s, replay_cpu = time.perf_counter() - t, time.process_time() - cpu
    steps = replayed.frames_shown
    length = sum(s.km for s in replayed.segments) * 1000.0
    t, cpu = time.perf_counter(), time.process_time()
    seg = world_drive(driver, log, length, FPS)
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
    logs = record_logs(out / "logs", seeds, args.km, args.recording_km)
    print(f"{len(logs)} noise-free expert logs on test roads of seeds {seeds}: {args.km:g} km", flush=True)
    specs = policies(out, demo, [int(s) for s in args.ncp_steps.split(",") if s], args.cfc_steps)
    fit_logs = json.loads((demo / "stages" / "simulate.json").read_text())["result"]["train"][:20]
    slug = {n: n.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "_") for n in specs}
    ctx = get_context("spawn")
    with futures.ProcessPoolExecutor(max_workers=args.workers, mp_context=ctx) as pool:
        jobs = {
            n: pool.submit(measure_policy, n, s, logs, fit_logs, out / "results" / f"{slug[n]}.json")
            for n, s in specs.items()
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
