"""``drive evaluate``: closed-loop lane keeping of a policy in the built-in world.

Examples::

    drive evaluate --policy expert --km 5 --seed 0 --out runs/eval_expert
    drive evaluate --policy constant:0 --km 1 --out runs/eval_straight
    drive evaluate --policy runs/ncp/last.ckpt --km 2 --conditions winter --out runs/eval_ncp --video
    drive evaluate --policy export/ncp.ts --km 2 --noise-std 0.1 --out runs/eval_ncp_noisy

Writes ``metrics.json`` and ``drive.png`` (road, driven path, interventions) to ``--out``,
and ``drive.mp4`` with ``--video``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, Tuple


from drive.io.atomic import no_empty_dir_on_error
from drive.data.perturb import Perturbation
from drive.sim.appearance import CONDITION_AXES, parse_conditions
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver
from drive.sim.expert import PurePursuitExpert
from drive.sim.record import check_world_settings
from drive.sim.render import Camera
from drive.sim.road import SPLITS

__all__ = ["add_arguments", "run", "make_driver"]


def make_driver(spec: str, device: str = "cpu", threads: int = 0) -> Any:
    """``expert`` | ``constant:K`` (K in 1/m) | a checkpoint or exported policy file.

    ``threads`` > 0 sets torch's CPU threads for policy files (batch-1 steps gain little from more).
    """
    if spec == "expert":
        return PurePursuitExpert()
    if spec.startswith("constant:"):
        value = spec.split(":", 1)[1]
        try:
            return ConstantDriver(float(value))
        except ValueError:
            raise ValueError(f"--policy constant:K needs a number K (curvature in 1/m), got {value!r}") from None
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"--policy {spec}: no such file (nor 'expert' or 'constant:K')")
    import torch

    from drive.checkpoint import load_driver

    if threads > 0:
        torch.set_num_threads(threads)
    return load_driver(path, device=device)


def camera_size(driver: Any, height: Optional[int], width: Optional[int]) -> Tuple[int, int]:
    """The world's camera (height, width): the options where given, else the policy's own camera frame
    size (checkpoint or export metadata), else 78 x 200."""
    size = (getattr(driver, "meta", None) or {}).get("frame_size") or (78, 200)
    return (int(size[0]) if height is None else height), (int(size[1]) if width is None else width)


def _camera_fps(driver: Any, spec: str, fps: Any) -> float:
    """The world's camera rate: ``--fps``, else the policy's own (checkpoint or export metadata), else 30.
    An exported file integrates only its own step length, so another ``--fps`` is refused here."""
    meta = getattr(driver, "meta", None) or {}
    own = float(meta["fps"]) if "fps" in meta else None
    if fps is None:
        return own if own is not None else 30.0
    if own is not None and "format" in meta and abs(fps - own) > 0.01 * own:
        raise ValueError(f"--fps {fps:g}: the exported policy {spec} steps at {own:g} Hz (its metadata); "
                         f"leave --fps out or pass --fps {own:g}")
    return float(fps)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    conds = "; ".join(f"{a}: {', '.join(v)}" for a, v in CONDITION_AXES.items())
    parser.add_argument("--policy", required=True,
                        help="'expert', 'constant:K' (curvature 1/m), a checkpoint (.ckpt/.pt) or an exported file")
    parser.add_argument("--km", type=float, default=2.0, help="distance to drive (default 2 km)")
    parser.add_argument("--seed", type=int, default=0, help="world seed (default 0)")
    parser.add_argument("--split", choices=SPLITS, default="test", help="road split (default test)")
    parser.add_argument("--conditions", default=None, help=f"comma-separated condition names ({conds})")
    parser.add_argument("--segment-km", type=float, default=1.0, help="length of each road (default 1 km)")
    parser.add_argument("--out", required=True, help="output directory (metrics.json, drive.png)")
    parser.add_argument("--video", action="store_true", help="also write drive.mp4 of the camera view")
    parser.add_argument("--noise-std", type=float, default=0.0,
                        help="Gaussian noise std on [0,1] pixels of the policy's view: a checkpoint's network input "
                             "(after crop and resize), an exported file's camera frame (default 0)")
    parser.add_argument("--speed-kmh", type=float, default=30.0, help="vehicle speed (default 30 km/h)")
    parser.add_argument("--fps", type=float, default=None,
                        help="camera rate (default: the policy's own, from its checkpoint or exported file's "
                             "metadata; 30 Hz for expert and constant)")
    parser.add_argument("--width", type=int, default=None,
                        help="camera image width (default: the policy's camera frame size from its metadata, else 200)")
    parser.add_argument("--height", type=int, default=None,
                        help="camera image height (default: as --width, else 78)")
    parser.add_argument("--device", default="cpu", help="torch device for checkpoint policies (default cpu)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for policy files (default 1; 0 = torch's default)")
    parser.add_argument("--env", metavar="ID", default=None,
                        help="drive in a Gymnasium env instead (e.g. drive/LaneKeeping-v0, or module:ID); "
                             "see drive.sim.gym_eval")
    parser.add_argument("--env-config", metavar="YAML", default=None,
                        help="with --env: how curvature maps to the env's action and which info keys hold the "
                             "lateral offset and heading error (not needed for drive/LaneKeeping-v0)")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "env", None):
        from drive.sim.gym_eval import run_cli

        return run_cli(args)
    try:
        parse_conditions(args.conditions)
        for name in ("km", "segment_km", "speed_kmh", "fps"):
            value = getattr(args, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value:g}")
        if not (math.isfinite(args.noise_std) and args.noise_std >= 0):
            raise ValueError(f"--noise-std must be a number >= 0, got {args.noise_std}")
        check_world_settings(speed_kmh=args.speed_kmh, fps=args.fps, width=args.width, height=args.height)
        driver = make_driver(args.policy, args.device, args.threads)
        args.fps = _camera_fps(driver, args.policy, args.fps)
        args.height, args.width = camera_size(driver, args.height, args.width)
        perturb = Perturbation("gaussian", args.noise_std, seed=args.seed) if args.noise_std > 0 else None
        if hasattr(driver, "view"):  # a checkpoint's PolicyDriver: noise on the network's view
            driver.perturb, perturb = perturb, None
        out = Path(args.out)

        def progress(seg: Any) -> None:
            print(f"segment {seg.index}: {seg.km:.2f} km, {len(seg.intervention_xy)} interventions "
                  f"({'/'.join(seg.conditions.values())})", flush=True)

        with no_empty_dir_on_error(out):  # a failed run leaves no empty --out folder
            result = evaluate(driver, args.km, args.seed, conditions=args.conditions, perturb=perturb,
                              split=args.split, video_path=out / "drive.mp4" if args.video else None,
                              segment_km=args.segment_km, camera=Camera.default(args.width, args.height),
                              speed_mps=args.speed_kmh / 3.6, fps=args.fps, progress=progress)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"drive evaluate: error: {e}", file=sys.stderr)
        return 2
    result.metrics["policy"] = args.policy
    result.metrics["image_noise_std"] = args.noise_std
    paths = result.save(out)
    m = result.metrics
    print(json.dumps({k: m[k] for k in ("km", "interventions", "interventions_per_km", "autonomy_pct",
                                        "lateral_rms_m", "lateral_max_abs_m", "steering_rate_rms")}, indent=2))
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0 if not any(isinstance(v, float) and math.isnan(v) for v in m.values()) else 1
