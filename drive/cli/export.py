"""`drive export`: write a trained policy as a vehicle file (TorchScript, AOTInductor or ONNX).

    drive export --ckpt runs/ncp/last.ckpt --out policy.ts
    drive export --ckpt last.ckpt --out policy.ts --device cuda --half
    drive export --ckpt last.ckpt --out policy.pt2            # format from the suffix
    drive export --ckpt last.ckpt --out policy.onnx --curvature-limit 0.15
    drive export --print-runtime-dir                          # where the C++ runtime's sources are

After writing, the file is loaded back with its own runtime and stepped over a few synthetic
frames beside the eager policy (:func:`drive.export.verify.verify_export`); the largest difference is
printed (``--no-verify`` skips it). The last line names the folder of the vehicle runtime that
runs the file (``drive/deploy/`` in the installed package: C++ sources, CMake file, Python runner,
README; :func:`drive.export.vehicle.runtime_dir`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Tuple

from drive.export import export_policy, read_metadata
from drive.export.vehicle import runtime_dir
from drive.export.verify import verify_export

COMMAND = "export"
HELP = "export a policy for the vehicle (TorchScript, AOTInductor, ONNX)"
OUTPUTS = {"out": "file"}  # drive.cli.outputs: --out is checked before the checkpoint is read
INPUTS = {"ckpt": "file"}
RANGES = {
    "curvature_limit": dict(low=0.0, high=10.0, low_open=True),  # 1/m: a 0.1 m radius
    "black_level": dict(low=0.0, high=255.0),
    "max_gap": dict(low=0.0, high=3600.0, low_open=True),
}
__all__ = ["add_arguments", "run"]

_SUFFIX_FORMAT = {".ts": "torchscript", ".pt2": "aoti", ".onnx": "onnx"}


def _frame_size(text: str) -> Tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"frame size must be HEIGHTxWIDTH, e.g. 1208x1920; got {text!r}"
        ) from None
    if not (8 <= h <= 10_000 and 8 <= w <= 10_000):
        raise argparse.ArgumentTypeError(f"frame sides must be 8 to 10000 pixels, got {text!r}")
    return h, w


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        f"The vehicle runtime (C++ sources, CMake file, torch-only Python runner, README.md) ships "
        f"with drive in {runtime_dir()}; --print-runtime-dir prints that folder."
    )
    parser.add_argument(
        "--ckpt", type=Path, help="training checkpoint (.ckpt) or converted policy (.pt); required"
    )
    parser.add_argument(
        "--out", type=Path, help="output file: policy.ts | policy.pt2 | policy.onnx; required"
    )
    parser.add_argument(
        "--print-runtime-dir",
        action="store_true",
        help="print the folder of the vehicle runtime's sources (C++, CMake, Python runner) and exit",
    )
    parser.add_argument(
        "--format",
        choices=("torchscript", "aoti", "onnx"),
        help="default: from the --out suffix (.ts torchscript, .pt2 aoti, .onnx onnx)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="device of the saved weights (AOTInductor compiles for it)",
    )
    parser.add_argument(
        "--half", action="store_true", help="conv head in fp16 (CUDA); recurrent cell stays fp32"
    )
    parser.add_argument(
        "--curvature-limit",
        type=float,
        default=None,
        metavar="K",
        help="clamp commands to [-K, K] 1/m (default: the checkpoint's, 1.25x its training "
        "labels' largest |value|; else 0.2); warns when below the training labels",
    )
    parser.add_argument(
        "--frame-size",
        type=_frame_size,
        default=None,
        metavar="HxW",
        help="camera frame size if the checkpoint does not record it",
    )
    parser.add_argument(
        "--black-level",
        type=float,
        default=4.0,
        help="mean pixel (0-255, after crop/resize) at or below which a frame counts as no image (held)",
    )
    parser.add_argument(
        "--max-gap",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="longest elapsed time one step integrates after held frames",
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="skip loading the file back for a parity check"
    )


def run(args: argparse.Namespace) -> int:
    if args.print_runtime_dir:
        print(runtime_dir())
        return 0
    missing = [name for name in ("--ckpt", "--out") if getattr(args, name[2:]) is None]
    if missing:
        raise SystemExit(f"the following arguments are required: {', '.join(missing)}")
    fmt = args.format or _SUFFIX_FORMAT.get(args.out.suffix.lower())
    if fmt is None:
        raise ValueError(
            f"--out {args.out}: cannot tell the format from the suffix {args.out.suffix!r}; "
            "use .ts, .pt2 or .onnx, or pass --format"
        )
    build = dict(
        curvature_limit_per_m=args.curvature_limit,
        frame_size=args.frame_size,
        black_level=args.black_level,
        max_gap_s=args.max_gap,
    )
    start = time.perf_counter()
    # errors of input (checkpoint, options, a full or read-only --out) propagate to drive.cli:
    # one line, exit 2
    path = export_policy(args.ckpt, args.out, format=fmt, device=args.device, half=args.half, **build)
    meta = read_metadata(path)
    h, w = meta["frame_size"]
    print(
        f"wrote {path} ({fmt}, {path.stat().st_size / 1e6:.2f} MB, {time.perf_counter() - start:.1f} s): "
        f"family {meta['family']}, frames uint8 {w}x{h} RGB at {meta['fps']:g} fps, "
        f"hidden {meta['hidden_size']}, |curvature| <= {meta['curvature_limit_per_m']:g} 1/m, "
        f"conv head {'fp16' if meta['half'] else 'fp32'}, "
        f"device {meta['device']}"
    )
    print(f"runtime: the C++ runtime and the Python runner for it are in {runtime_dir()} (README.md there)")
    if not args.no_verify:
        worst = verify_export(args.ckpt, path, half=args.half, **build)
        tol = 1e-3 if args.half else 1e-4
        verdict = "ok" if worst <= tol else "MISMATCH"
        print(f"verify: {fmt} vs eager over 30 frames: max |diff| {worst:.2e} ({verdict}, tolerance {tol:g})")
        if worst > tol:
            return 1
    return 0
