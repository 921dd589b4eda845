#!/usr/bin/env python3
"""Batch-1 step latency of a deployed policy: eager vs TorchScript vs AOTInductor vs onnxruntime.

    python tools/bench_deploy.py                      # NCP-LTC, 1 CPU thread, all four paths
    python tools/bench_deploy.py --ckpt last.ckpt --steps 500
    python tools/bench_deploy.py --device cuda        # p50/p99 with and without the CUDA graph,
                                                      # fp32/fp16 head
    python tools/bench_deploy.py --soak               # 108,000 steps (an hour at 30 Hz)
    python tools/bench_deploy.py --runtime build/deploy/drive_runtime   # also the C++ vehicle runtime

With ``--runtime`` (a ``drive_runtime`` built from drive/deploy/, see its README.md) the C++ runtime
steps the same TorchScript and AOTInductor files in each round (a fresh process per round, warmed
up first; its own per-step latency column, which times the same work: validated step, command on
the host). A subprocess has no thread-CPU time to report, so its rows are by wall time only.

Every path runs the same module (raw uint8 frame -> preprocessing -> head -> cell -> safety
layer), one frame per step, the command read back to the host each step. Beside them: the
conv-FLOP floor of this CPU, the NCP head's multiply-adds (81 MFLOP per frame, counted from the
module's own Conv2d layers) divided by the 1-thread sgemm rate measured in the same run.
Targets (issue 9): TorchScript within 1.2x of onnxruntime; the fastest path within 1.5x of the floor.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch

from drive.checkpoint import load_policy, policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.export import build_deployed, export_policy, load_exported
from drive.export.soak import soak
from drive.nn.families import build_policy


def conv_flops(head: torch.nn.Module, input_hw) -> float:
    """2 x multiply-adds of every Conv2d in ``head`` for one frame (hooks on a real forward)."""
    total = [0.0]

    def hook(mod, inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
        total[0] += 2.0 * k * out.numel()

    handles = [m.register_forward_hook(hook) for m in head.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        head(torch.rand(1, 3, *input_hw, dtype=next(head.parameters()).dtype))
    for h in handles:
        h.remove()
    return total[0]


def sgemm_gflops(n: int = 512, seconds: float = 1.0) -> Tuple[float, float]:
    """Best sustained fp32 matmul rate (GFLOP/s) on the current thread setting: (by wall time, by
    thread-CPU time). The CPU-time rate is what the core delivers while this thread runs on it."""
    a, b = torch.rand(n, n), torch.rand(n, n)
    best_wall, best_cpu, deadline = 0.0, 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        t1, c1 = time.perf_counter(), time.thread_time()
        best_wall = max(best_wall, 4 * 2.0 * n**3 / (t1 - t0) / 1e9)
        best_cpu = max(best_cpu, 4 * 2.0 * n**3 / max(c1 - c0, 1e-6) / 1e9)
    return best_wall, best_cpu


def time_block(
    step: Callable, frames: torch.Tensor, hidden: torch.Tensor, steps: int, warmup: int, offset: int = 0
) -> Tuple[List[float], List[float], torch.Tensor]:
    """``steps`` timed steps after ``warmup`` untimed ones: (wall ms per step, thread-CPU ms per step,
    hidden)."""
    wall, cpu = [], []
    with torch.inference_mode():
        for i in range(warmup + steps):
            frame = frames[(offset + i) % len(frames)]
            c0, t0 = time.thread_time(), time.perf_counter()
            command, hidden, _ = step(frame, hidden)
            float(command[0])  # the vehicle waits for the command on the host
            t1, c1 = time.perf_counter(), time.thread_time()
            if i >= warmup:
                wall.append((t1 - t0) * 1e3)
                cpu.append((c1 - c0) * 1e3)
    return wall, cpu, hidden


def time_runtime(
    binary: Path,
    model: Path,
    raw: Path,
    out: Path,
    threads: int,
    warmup: int,
    device: str = "cpu",
    extra: Optional[List[str]] = None,
) -> List[float]:
    """The C++ runtime stepping every frame of ``raw`` (no pacing): its per-step wall latencies (ms)."""
    done = subprocess.run(
        [
            str(binary),
            str(model),
            str(raw),
            "--no-pace",
            "--quiet",
            "--device",
            device,
            "--threads",
            str(threads),
            "--warmup",
            str(warmup),
            "--out",
            str(out),
            *(extra or []),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{binary} {model.name} failed ({done.returncode}): {done.stderr[-2000:]}")
    with open(out) as f:
        return [float(row["latency_ms"]) for row in csv.DictReader(f)]


def median(xs: List[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summary(lat: List[float]) -> Dict[str, float]:
    t = torch.tensor(lat, dtype=torch.float64)
    return {"p50_ms": float(t.quantile(0.5)), "p99_ms": float(t.quantile(0.99)), "mean_ms": float(t.mean())}


def make_checkpoint(args, out: Path) -> Path:
    if args.ckpt:
        return Path(args.ckpt)
    torch.manual_seed(0)
    policy = build_policy(args.family, frame_period_s=1 / 30)
    meta = policy_meta(policy, Preprocessing(size=(78, 200)), 30.0, args.family, frame_size=[78, 200])
    return save_policy(out / "bench.ckpt", policy, meta)


_EXPORTS = {  # path name -> (file name, export format)
    "torchscript": ("policy.ts", "torchscript"),
    "aoti": ("policy.pt2", "aoti"),
    "onnxruntime": ("policy.onnx", "onnx"),
}


def bench_cpu(args, ckpt: Path, work: Path) -> Dict:
    """Every path, interleaved: each round runs every path (in a rotating order) and re-measures the
    sgemm floor, so a load change on a shared machine hits all of them alike. Ratios are taken per
    round and their median reported, by wall time and by thread-CPU time (time the core spent on
    this thread: insensitive to being descheduled)."""
    torch.set_num_threads(args.threads)
    policy, meta = load_policy(ckpt)
    eager = build_deployed(policy, meta)
    h, w = eager.frame_height, eager.frame_width
    frames = torch.randint(
        0, 256, (32, h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    paths = cpu_paths(args, ckpt, work, eager)
    flops = conv_flops(policy.head, policy.input_size)
    per = max(1, args.steps // args.rounds)
    runtime_models, raw = {}, None  # C++ runtime path -> model file
    if args.runtime:
        raw = work / "frames.rgb"  # one round's frames, in the order the Python paths step them
        frames[torch.arange(per) % len(frames)].numpy().tofile(raw)
        runtime_models = {f"{n}_cpp": work / _EXPORTS[n][0] for n in ("torchscript", "aoti") if n in paths}
    rounds = interleaved_rounds(args, paths, runtime_models, raw, frames, eager, per, work)
    floors = [(flops / (wall * 1e9) * 1e3, flops / (cpu * 1e9) * 1e3) for wall, cpu in rounds.gflops]
    result = {
        "device": "cpu",
        "threads": args.threads,
        "family": meta["family"],
        "frame": [h, w],
        "rounds": args.rounds,
        "steps_per_round": per,
        "conv_mflop_per_frame": flops / 1e6,
    }
    print(
        f"\nbatch-1 step latency, {args.threads} thread(s), {meta['family']}, frame {w}x{h}, "
        f"{args.rounds} interleaved rounds x {per} steps per path"
    )
    return cpu_report(result, rounds, floors, flops, list(runtime_models))


def cpu_paths(args, ckpt: Path, work: Path, eager) -> Dict[str, Callable]:
    """The step of every path: the eager module, and each format not skipped, exported and loaded."""
    paths: Dict[str, Callable] = {"eager": eager.step_with_status}
    for name, (file, fmt) in _EXPORTS.items():
        if name in args.skip:
            continue
        t0 = time.perf_counter()
        path = export_policy(ckpt, work / file, format=fmt)
        print(f"# exported {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        paths[name] = load_exported(path, threads=args.threads).step
        if name == "torchscript":  # the file as saved, without load-time specialisation
            paths["torchscript_portable"] = load_exported(path, optimize=False).step
    return paths


class Rounds:
    """Per path, every step's wall and CPU time; per round, each path's medians and the sgemm rate."""

    def __init__(self, names: List[str]) -> None:
        self.names = names
        self.wall: Dict[str, List[float]] = {n: [] for n in names}
        self.cpu: Dict[str, List[float]] = {n: [] for n in names}
        self.per_round: List[Dict[str, Tuple[float, float]]] = []
        self.gflops: List[Tuple[float, float]] = []


def interleaved_rounds(args, paths, runtime_models, raw, frames, eager, per: int, work: Path) -> Rounds:
    """``args.rounds`` rounds, each stepping every path ``per`` times in a rotating order, then the
    sgemm rate; the C++ runtime (``runtime_models``) in a fresh process each round."""
    rounds = Rounds(list(paths) + list(runtime_models))
    names = rounds.names
    hidden = {n: eager.initial_state(1) for n in paths}
    for r in range(args.rounds):
        medians = {}
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if name in runtime_models:  # a fresh process each round: always a full warm-up
                wl = time_runtime(
                    args.runtime, runtime_models[name], raw, work / "runtime.csv", args.threads, args.warmup
                )
                cl = []
            else:
                wl, cl, hidden[name] = time_block(
                    paths[name], frames, hidden[name], per, args.warmup if r == 0 else 5, offset=r * per
                )
            rounds.wall[name] += wl
            rounds.cpu[name] += cl
            medians[name] = (median(wl), median(cl))
        rounds.gflops.append(sgemm_gflops(seconds=0.3))
        rounds.per_round.append(medians)
    return rounds


def cpu_report(
    result: Dict, rounds: Rounds, floors: List[Tuple[float, float]], flops: float, runtime_names: List[str]
) -> Dict:
    """Each path against the floor and the ratios the targets name, printed and added to ``result``."""
    wall, cpu, per_round, names = rounds.wall, rounds.cpu, rounds.per_round, rounds.names
    rows = {n: dict(summary(wall[n]), cpu_p50_ms=median(cpu[n]) if cpu[n] else None) for n in names}
    floor_ms = median([f[0] for f in floors])
    floor_cpu_ms = median([f[1] for f in floors])

    def ratio(a: str, b: str, k: int) -> float:  # median over rounds of a/b (k: 0 wall, 1 CPU)
        return median([m[a][k] / m[b][k] for m in per_round])

    def vs_floor(a: str, k: int) -> Optional[float]:
        return None if k == 1 and not cpu[a] else median([m[a][k] / f[k] for m, f in zip(per_round, floors)])

    for n in names:
        rows[n]["x_floor_wall"], rows[n]["x_floor_cpu"] = vs_floor(n, 0), vs_floor(n, 1)
    result.update(
        floor_ms=floor_ms, floor_cpu_ms=floor_cpu_ms, sgemm_gflops_1thread=flops / floor_ms / 1e6, paths=rows
    )
    print(
        f"conv head {flops / 1e6:.1f} MFLOP/frame; sgemm {flops / floor_ms / 1e6:.1f} GFLOP/s wall, "
        f"{flops / floor_cpu_ms / 1e6:.1f} by CPU time -> floor {floor_ms:.3f} ms "
        f"(CPU time {floor_cpu_ms:.3f} ms)\n"
    )
    print_cpu_table(rows)
    fastest = min(rows, key=lambda n: rows[n]["x_floor_wall"])
    result["fastest"] = fastest
    result["fastest_vs_floor"] = rows[fastest]["x_floor_wall"]
    result["fastest_vs_floor_cpu"] = rows[fastest]["x_floor_cpu"]
    by_cpu = result["fastest_vs_floor_cpu"]
    print(
        f"\nfastest: {fastest}, {result['fastest_vs_floor']:.2f}x the floor by wall time"
        + (f", {by_cpu:.2f}x by CPU time" if by_cpu is not None else "")
        + " (target <= 1.5; median of per-round ratios)"
    )
    if "torchscript" in rows and "onnxruntime" in rows:
        result["torchscript_vs_onnxruntime"] = ratio("torchscript", "onnxruntime", 0)
        result["torchscript_vs_onnxruntime_cpu"] = ratio("torchscript", "onnxruntime", 1)
        result["portable_torchscript_vs_onnxruntime"] = ratio("torchscript_portable", "onnxruntime", 0)
        print(
            f"torchscript / onnxruntime: {result['torchscript_vs_onnxruntime']:.2f}x wall, "
            f"{result['torchscript_vs_onnxruntime_cpu']:.2f}x CPU time (target <= 1.2); "
            f"file as saved, unspecialised: {result['portable_torchscript_vs_onnxruntime']:.2f}x"
        )
    for n in runtime_names:  # the C++ runtime against Python stepping the same file
        result[f"{n}_vs_python"] = ratio(n, n[: -len("_cpp")], 0)
        print(f"{n} / {n[: -len('_cpp')]} (Python): {result[f'{n}_vs_python']:.2f}x wall")
    return result


def print_cpu_table(rows: Dict[str, Dict]) -> None:
    print(f"{'path':<21} {'p50 ms':>7} {'p99 ms':>7} {'cpu p50':>8} {'x floor':>8} {'x floor cpu':>12}")

    def num(x: Optional[float], width: int, digits: int) -> str:
        return f"{x:{width}.{digits}f}" if x is not None else f"{'-':>{width}}"

    for n, r in rows.items():
        print(
            f"{n:<21} {r['p50_ms']:7.3f} {r['p99_ms']:7.3f} {num(r['cpu_p50_ms'], 8, 3)} "
            f"{r['x_floor_wall']:8.2f} {num(r['x_floor_cpu'], 12, 2)}"
        )


def bench_cuda(args, ckpt: Path, work: Path) -> Dict:
    """p50/p99 of the batch-1 step on the GPU, each file stepped with its CUDA graph (the default)
    and without (``cuda_graph=False``), in alternating blocks of the same run; the ratio plain /
    graph per file. The AOTInductor row comes last: its CUDA compile takes minutes, and a package
    that cannot load is reported with the reason, not a crash."""
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    rows: Dict[str, Dict] = {}
    variants = [
        ("torchscript fp32", "torchscript", False, "p32.ts"),
        ("torchscript fp16", "torchscript", True, "p16.ts"),
    ]
    if "aoti" not in args.skip:
        variants.append(("aoti fp32", "aoti", False, "p32.pt2"))
    print(
        f"\nbatch-1 step latency on {torch.cuda.get_device_name()}, {args.steps} steps per path "
        "(frame already on the GPU, command read back each step)",
        flush=True,
    )
    ts32 = None
    for name, fmt, half, file in variants:
        try:
            path = export_policy(ckpt, work / file, format=fmt, device="cuda", half=half)
            graphed = load_exported(path, device="cuda")
            plain = load_exported(path, device="cuda", cuda_graph=False)
        except Exception as e:  # noqa: BLE001 - report and go on with the other rows
            print(
                f"{name:<18} not measured: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                flush=True,
            )
            rows[name] = {"error": str(e)}
            continue
        ts32 = path if name == "torchscript fp32" else ts32
        h, w = graphed.frame_size
        frames = torch.randint(0, 256, (32, h, w, 3), dtype=torch.uint8).cuda()
        lat: Dict[str, List[float]] = {"graph": [], "plain": []}
        hidden = {"graph": graphed.initial_state(), "plain": plain.initial_state()}
        blocks = 5
        for b in range(blocks):  # alternating blocks: drift on the machine hits both alike
            for key, model in (("graph", graphed), ("plain", plain)):
                wall, _, hidden[key] = time_block(
                    model.step,
                    frames,
                    hidden[key],
                    max(1, args.steps // blocks),
                    args.warmup if b == 0 else 5,
                    offset=b * 7,
                )
                lat[key] += wall
        g, p = summary(lat["graph"]), summary(lat["plain"])
        rows[name] = {
            "graph": g,
            "plain": p,
            "graph_failures": graphed.graph_failures,
            "plain_over_graph_p50": p["p50_ms"] / g["p50_ms"],
            "plain_over_graph_p99": p["p99_ms"] / g["p99_ms"],
        }
        fell_back = f"  (capture failed: {graphed.graph_failures})" if graphed.graph_failures else ""
        print(
            f"{name:<18} CUDA graph p50 {g['p50_ms']:.3f} ms  p99 {g['p99_ms']:.3f} ms | "
            f"without p50 {p['p50_ms']:.3f} ms  p99 {p['p99_ms']:.3f} ms | "
            f"without / with: p50 {rows[name]['plain_over_graph_p50']:.2f}x, "
            f"p99 {rows[name]['plain_over_graph_p99']:.2f}x (p99 target <= 0.3 ms){fell_back}",
            flush=True,
        )
    if args.runtime and ts32 is not None:
        raw = work / "frames.rgb"
        model = load_exported(ts32)
        h, w = model.frame_size
        raw.write_bytes(torch.randint(0, 256, (args.steps, h, w, 3), dtype=torch.uint8).numpy().tobytes())
        for label, extra in (("graph", []), ("plain", ["--no-cuda-graph"])):
            lat = time_runtime(
                args.runtime,
                ts32,
                raw,
                work / f"cpp_{label}.csv",
                args.threads,
                args.warmup,
                device="cuda",
                extra=extra,
            )
            r = rows[f"torchscript fp32 C++ {label}"] = summary(lat)
            print(
                f"C++ runtime, torchscript fp32, {'CUDA graph' if label == 'graph' else 'no graph  '}: "
                f"p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms (host-to-device frame copy included)",
                flush=True,
            )
        g, p = rows["torchscript fp32 C++ graph"], rows["torchscript fp32 C++ plain"]
        print(
            f"C++ runtime without / with the graph: p50 {p['p50_ms'] / g['p50_ms']:.2f}x, "
            f"p99 {p['p99_ms'] / g['p99_ms']:.2f}x"
        )
    return {"device": torch.cuda.get_device_name(), "paths": rows}


def run_soak(args, ckpt: Path, work: Path) -> Dict:
    torch.set_num_threads(args.threads)
    model = load_exported(export_policy(ckpt, work / "soak.ts"))
    h, w = model.frame_size
    frames = torch.randint(
        0, 256, (64, h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(2)
    )
    report = soak(model, steps=args.soak_steps, frames=frames).to_dict()
    print(json.dumps(report, indent=2))
    return {"soak": report}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ckpt", help="a checkpoint (default: an untrained policy of --family)")
    ap.add_argument("--family", default="ncp_ltc", choices=("ncp_ltc", "cfc", "lstm", "ctrnn", "cnn"))
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument(
        "--rounds", type=int, default=10, help="interleaved rounds (CPU); --steps are split among them"
    )
    ap.add_argument("--skip", nargs="*", default=[], choices=("torchscript", "aoti", "onnxruntime"))
    ap.add_argument("--runtime", type=Path, help="a built drive_runtime (drive/deploy/): also time it")
    ap.add_argument("--soak", action="store_true", help="run the soak instead of the latency table")
    ap.add_argument("--soak-steps", type=int, default=108_000)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    if args.runtime and not (args.runtime.is_file() and os.access(args.runtime, os.X_OK)):
        ap.error(f"--runtime {args.runtime}: not an executable file (drive/deploy/README.md builds it)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ckpt = make_checkpoint(args, work)
        if args.soak:
            result = run_soak(args, ckpt, work)
        elif args.device == "cuda":
            result = bench_cuda(args, ckpt, work)
        else:
            result = bench_cpu(args, ckpt, work)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
