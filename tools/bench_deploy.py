#!/usr/bin/env python3
"""Batch-1 step latency of a deployed policy: eager vs TorchScript vs AOTInductor vs onnxruntime.

    python tools/bench_deploy.py                      # NCP-LTC, 1 CPU thread, all four paths
    python tools/bench_deploy.py --ckpt last.ckpt --steps 500
    python tools/bench_deploy.py --device cuda        # p50/p99, fp32 and fp16 conv head
    python tools/bench_deploy.py --soak               # 108,000 steps (an hour at 30 Hz)

Every path runs the same module (raw uint8 frame -> preprocessing -> head -> cell -> safety
layer), one frame per step, the command read back to the host each step. Beside them: the
conv-FLOP floor of this CPU, the NCP head's multiply-adds (81 MFLOP per frame, counted from the
module's own Conv2d layers) divided by the 1-thread sgemm rate measured in the same run.
Targets (issue 9): TorchScript within 1.2x of onnxruntime; the fastest path within 1.5x of the floor.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

import torch

from drive.export import build_deployed, export_policy, load_exported
from drive.export.soak import soak
from drive.policy_io import load_policy, policy_meta, save_policy
from drive.preprocess import Preprocessing
from drive.train.families import build_policy


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


def sgemm_gflops(n: int = 512, seconds: float = 1.0) -> float:
    """Best sustained fp32 matmul rate (GFLOP/s) on the current thread setting."""
    a, b = torch.rand(n, n), torch.rand(n, n)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        best = max(best, 4 * 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def time_steps(step: Callable, frames: torch.Tensor, hidden: torch.Tensor, steps: int, warmup: int) -> List[float]:
    lat = []
    with torch.inference_mode():
        for i in range(warmup + steps):
            frame = frames[i % len(frames)]
            t0 = time.perf_counter()
            command, hidden, _ = step(frame, hidden)
            float(command[0])  # the vehicle waits for the command on the host
            if i >= warmup:
                lat.append((time.perf_counter() - t0) * 1e3)
    return lat


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


def bench_cpu(args, ckpt: Path, work: Path) -> Dict:
    torch.set_num_threads(args.threads)
    policy, meta = load_policy(ckpt)
    eager = build_deployed(policy, meta)
    h, w = eager.frame_height, eager.frame_width
    frames = torch.randint(0, 256, (32, h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    paths: Dict[str, Callable] = {"eager": eager.step_with_status}
    models = {"torchscript": "policy.ts", "aoti": "policy.pt2", "onnxruntime": "policy.onnx"}
    formats = {"torchscript": "torchscript", "aoti": "aoti", "onnxruntime": "onnx"}
    for name, file in models.items():
        if name in args.skip:
            continue
        t0 = time.perf_counter()
        path = export_policy(ckpt, work / file, format=formats[name])
        print(f"# exported {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        paths[name] = load_exported(path, threads=args.threads).step
    rows = {}
    for name, step in paths.items():
        rows[name] = summary(time_steps(step, frames, eager.initial_state(1), args.steps, args.warmup))
    flops = conv_flops(policy.head, policy.input_size)
    rate = sgemm_gflops()
    floor_ms = flops / (rate * 1e9) * 1e3
    result = {"device": "cpu", "threads": args.threads, "family": meta["family"], "frame": [h, w],
              "conv_mflop_per_frame": flops / 1e6, "sgemm_gflops_1thread": rate, "floor_ms": floor_ms,
              "paths": rows}
    print(f"\nbatch-1 step latency, {args.threads} thread(s), {meta['family']}, frame {w}x{h}, {args.steps} steps")
    print(f"conv head {flops / 1e6:.1f} MFLOP/frame; sgemm {rate:.1f} GFLOP/s -> floor {floor_ms:.3f} ms\n")
    print(f"{'path':<12} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'x floor':>8}")
    for name, r in rows.items():
        print(f"{name:<12} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['mean_ms']:8.3f} {r['p50_ms'] / floor_ms:8.2f}")
    fastest = min(rows, key=lambda n: rows[n]["p50_ms"])
    result["fastest"] = fastest
    result["fastest_vs_floor"] = rows[fastest]["p50_ms"] / floor_ms
    print(f"\nfastest: {fastest}, {result['fastest_vs_floor']:.2f}x the floor (target <= 1.5)")
    if "torchscript" in rows and "onnxruntime" in rows:
        result["torchscript_vs_onnxruntime"] = rows["torchscript"]["p50_ms"] / rows["onnxruntime"]["p50_ms"]
        print(f"torchscript / onnxruntime: {result['torchscript_vs_onnxruntime']:.2f}x (target <= 1.2)")
    return result


def bench_cuda(args, ckpt: Path, work: Path) -> Dict:
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device")
    rows = {}
    variants = [("torchscript fp32", "torchscript", False, "p32.ts"), ("torchscript fp16", "torchscript", True, "p16.ts")]
    if "aoti" not in args.skip:
        variants.append(("aoti fp32", "aoti", False, "p32.pt2"))
    for name, fmt, half, file in variants:
        model = load_exported(export_policy(ckpt, work / file, format=fmt, device="cuda", half=half), device="cuda")
        h, w = model.frame_size
        frames = torch.randint(0, 256, (32, h, w, 3), dtype=torch.uint8).cuda()
        rows[name] = summary(time_steps(model.step, frames, model.initial_state(), args.steps, args.warmup))
    print(f"\nbatch-1 step latency on {torch.cuda.get_device_name()}, {args.steps} steps (frame already on the GPU)")
    for name, r in rows.items():
        print(f"{name:<18} p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms")
    return {"device": torch.cuda.get_device_name(), "paths": rows}


def run_soak(args, ckpt: Path, work: Path) -> Dict:
    torch.set_num_threads(args.threads)
    model = load_exported(export_policy(ckpt, work / "soak.ts"))
    h, w = model.frame_size
    frames = torch.randint(0, 256, (64, h, w, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
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
    ap.add_argument("--skip", nargs="*", default=[], choices=("torchscript", "aoti", "onnxruntime"))
    ap.add_argument("--soak", action="store_true", help="run the soak instead of the latency table")
    ap.add_argument("--soak-steps", type=int, default=108_000)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
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
