"""``drive saliency``: VisualBackProp saliency video of a policy on a recording.

    drive saliency --ckpt policy.ckpt --recording recordings/val_000 --out saliency.mp4 \\
        [--noise 0.2] [--side-by-side] [--method bojarski|ncp] [--max-frames N] [--still still.png]

Writes the MP4 (camera | saliency overlay | steering trace) and ``<out>.contact.png`` beside it,
and prints a JSON summary (frames, fps, size, paths).
"""
from __future__ import annotations

import argparse
import json

from drive.explain.visual_backprop import METHODS

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="policy checkpoint (.ckpt from `drive fit`, or .pt)")
    parser.add_argument("--recording", required=True, help="canonical recording directory to explain")
    parser.add_argument("--out", required=True, help="output video (.mp4); the contact sheet goes beside it")
    parser.add_argument("--noise", type=float, default=None,
                        help="Gaussian noise std on [0,1] input pixels (NCP paper: 0.1-0.3)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="two rows: clean and noisy (noise 0.2 unless --noise is given)")
    parser.add_argument("--method", choices=METHODS, default="bojarski",
                        help="bojarski: the published VisualBackProp; ncp: the NCP authors' variant")
    parser.add_argument("--max-frames", type=int, default=None, help="explain only the first N frames")
    parser.add_argument("--still", default=None,
                        help="also write one PNG of the layout (clean and noisy rows) at --still-frame")
    parser.add_argument("--still-frame", type=int, default=None, help="frame of the still (default: middle)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the noise")
    parser.add_argument("--scale", type=int, default=3, help="upscaling of the 200x78 panels")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")


def run(args: argparse.Namespace) -> int:
    from drive.explain.video import saliency_still, saliency_video
    from drive.policy_io import load_policy

    if args.noise is not None and not 0.0 <= args.noise <= 1.0:
        raise SystemExit(f"drive saliency: --noise must be in [0, 1], got {args.noise}")
    if args.max_frames is not None and args.max_frames <= 0:
        raise SystemExit(f"drive saliency: --max-frames must be positive, got {args.max_frames}")
    policy, meta = load_policy(args.ckpt, map_location=args.device)
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
        result["still"] = str(saliency_still(
            policy, meta, args.recording, args.still, frame_index=args.still_frame,
            noise=args.noise if args.noise else 0.2, method=args.method, seed=args.seed,
            scale=args.scale, device=args.device,
        ))
    print(json.dumps(result, indent=2))
    return 0
