"""``drive saliency``: VisualBackProp saliency video of a policy on a recording, or live while it
drives the built-in world.

    drive saliency --ckpt policy.ckpt --recording recordings/val_000 --out saliency.mp4 \\
        [--noise 0.2] [--side-by-side] [--method bojarski|ncp] [--max-frames N] [--still still.png]
    drive saliency --ckpt policy.ckpt --world --km 0.5 [--seed S] [--conditions winter] --out drive.mp4

Writes the MP4 (camera | saliency overlay | steering trace) and ``<out>.contact.png`` beside it,
and prints a JSON summary (frames, fps, size, paths; closed-loop metrics with ``--world``). In the
world the trace's label is the expert's command at the same pose.
"""

from __future__ import annotations

import argparse
import json

from drive.checkpoint import load_policy
from drive.cli.outputs import COUNT, KM, SEED
from drive.explain.live import saliency_drive
from drive.explain.video import saliency_still, saliency_video
from drive.explain.visual_backprop import METHODS

COMMAND = "saliency"
HELP = "VisualBackProp saliency video of a policy on a recording"
OUTPUTS = {"out": "video", "still": "file"}  # drive.cli.outputs: --out is checked before anything is read
INPUTS = {"ckpt": "file", "recording": "logs"}
RANGES = {
    "km": KM,
    "noise": dict(low=0.0, high=1.0),
    "max_frames": COUNT,
    "still_frame": dict(low=0, high=1e9, integer=True),
    "seed": SEED,
    "scale": dict(low=1, high=16, integer=True),
}
__all__ = ["add_arguments", "run"]

DEFAULT_KM = 0.5
# options that mean something for one source only; given with the other they would be silently
# ignored (a live drive records one row as it goes: no clean/noisy pair, no frame to pick a still from)
RECORDING_ONLY = {
    "side_by_side": "--side-by-side",
    "still": "--still",
    "still_frame": "--still-frame",
    "max_frames": "--max-frames",
}
WORLD_ONLY = {"km": "--km", "conditions": "--conditions"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="policy checkpoint (.ckpt from `drive fit`, or .pt)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--recording", help="canonical recording directory to explain")
    source.add_argument(
        "--world",
        action="store_true",
        help="drive held-out roads of the built-in world closed loop, recording saliency live",
    )
    parser.add_argument(
        "--km", type=float, default=None, help=f"with --world: distance to drive (default {DEFAULT_KM:g})"
    )
    parser.add_argument("--conditions", default=None, help="with --world: comma-separated condition names")
    parser.add_argument("--out", required=True, help="output video (.mp4); the contact sheet goes beside it")
    parser.add_argument(
        "--noise",
        type=float,
        default=None,
        help="Gaussian noise std on [0,1] input pixels (NCP paper: 0.1-0.3)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="two rows: clean and noisy (noise 0.2 unless --noise is given)",
    )
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="bojarski",
        help="bojarski: the published VisualBackProp; ncp: the NCP authors' variant",
    )
    parser.add_argument("--max-frames", type=int, default=None, help="explain only the first N frames")
    parser.add_argument(
        "--still",
        default=None,
        help="also write one PNG of the layout (clean and noisy rows) at --still-frame",
    )
    parser.add_argument("--still-frame", type=int, default=None, help="frame of the still (default: middle)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the noise (and of the roads with --world)"
    )
    parser.add_argument("--scale", type=int, default=3, help="upscaling of the 200x78 panels")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")


def run(args: argparse.Namespace) -> int:
    # numbers are in range already (RANGES, checked by drive.cli before run)
    source, other, misplaced = (
        ("--world", "--recording", RECORDING_ONLY) if args.world else ("--recording", "--world", WORLD_ONLY)
    )
    given = [flag for dest, flag in misplaced.items() if getattr(args, dest) not in (None, False)]
    if given:
        raise SystemExit(
            f"drive saliency: {', '.join(given)} cannot be used with {source} (only with {other})"
        )
    if args.still_frame is not None and not args.still:
        raise SystemExit("drive saliency: --still-frame picks the frame of --still; give --still too")
    policy, meta = load_policy(args.ckpt, map_location=args.device)
    if args.world:
        return _world(args, policy, meta)
    result = saliency_video(
        policy,
        meta,
        args.recording,
        args.out,
        noise=args.noise,
        side_by_side=args.side_by_side,
        max_frames=args.max_frames,
        method=args.method,
        seed=args.seed,
        scale=args.scale,
        device=args.device,
    )
    if args.still:
        result["still"] = str(
            saliency_still(
                policy,
                meta,
                args.recording,
                args.still,
                frame_index=args.still_frame,
                noise=args.noise if args.noise else 0.2,
                method=args.method,
                seed=args.seed,
                scale=args.scale,
                device=args.device,
            )
        )
    print(json.dumps(result, indent=2))
    return 0


def _world(args: argparse.Namespace, policy, meta) -> int:
    """Closed-loop drive with live saliency (drive.explain.live.saliency_drive)."""
    km = DEFAULT_KM if args.km is None else args.km
    result = saliency_drive(
        policy,
        meta,
        args.out,
        km,
        seed=args.seed,
        conditions=args.conditions,
        noise=args.noise,
        method=args.method,
        scale=args.scale,
        device=args.device,
    )
    print(json.dumps(result, indent=2, default=str))
    return 0
