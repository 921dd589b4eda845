"""``drive evaluate``: closed-loop lane keeping of a policy in the built-in world.

Examples::

    drive evaluate --policy expert --km 5 --seed 0 --out runs/eval_expert
    drive evaluate --policy constant:0 --km 1 --out runs/eval_straight
    drive evaluate --policy runs/ncp/last.ckpt --km 2 --conditions winter --out runs/eval_ncp --video
    drive evaluate --policy export/ncp.ts --km 2 --noise-std 0.1 --out runs/eval_ncp_noisy

    drive evaluate --logs my_logs/ --policy runs/ncp/last.ckpt --out runs/replay --video
    drive evaluate --logs drive.mcap --set camera=approximate --policy policy.ts --out runs/replay

Writes ``metrics.json`` and ``drive.png`` (road, driven path, interventions) to ``--out``,
and ``drive.mp4`` with ``--video``. ``--env ID`` drives a Gymnasium env instead
(:mod:`drive.sim.gym_eval`); ``--logs`` drives recorded logs by log replay
(:mod:`drive.evaluate.log_replay`: ``metrics.json``, ``REPORT.md``, ``replay.png``, ``videos/``).
Policies come from :func:`drive.policy_drivers.make_driver`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, Tuple

from drive.cli.errors import say
from drive.cli.outputs import KM, SEED, THREADS, WORKERS
from drive.cli.reader_args import add_reader_arguments, reader_options
from drive.io.atomic import all_or_nothing, no_empty_dir_on_error
from drive.io.checks import read_yaml
from drive.sim.appearance import CONDITION_AXES, parse_conditions
from drive.sim.camera import Camera
from drive.sim.closed_loop import Segment, evaluate
from drive.sim.gym_eval import evaluate_env, make_env
from drive.sim.gym_mapping import load_mapping
from drive.sim.record import check_world_settings
from drive.sim.road import ROAD_KINDS, SPLITS

COMMAND = "evaluate"
HELP = "closed-loop driving of a policy (expert, checkpoint, exported file)"
OUTPUTS = {"out": "folder"}  # drive.cli.outputs: --out is checked before anything is read
INPUTS = {"logs": "logs", "policy": "policy", "reader": "config", "env_config": "file"}
RANGES = {
    "km": KM,
    "seed": SEED,
    "segment_km": dict(low=0.0, high=1e3, low_open=True),
    "noise_std": dict(low=0.0, high=1.0),
    "threads": THREADS,
    "workers": WORKERS,
}
__all__ = ["add_arguments", "run"]


def _camera_fps(driver: Any, spec: str, fps: Any) -> float:
    """The world's camera rate: ``--fps``, else the policy's own (checkpoint or export metadata), else 30.
    An exported file integrates only its own step length, so another ``--fps`` is refused here."""
    meta = getattr(driver, "meta", None) or {}
    own = float(meta["fps"]) if "fps" in meta else None
    if fps is None:
        return own if own is not None else 30.0
    if own is not None and "format" in meta and abs(fps - own) > 0.01 * own:
        raise ValueError(
            f"--fps {fps:g}: the exported policy {spec} steps at {own:g} Hz (its metadata); "
            f"leave --fps out or pass --fps {own:g}"
        )
    return float(fps)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    conds = "; ".join(f"{a}: {', '.join(v)}" for a, v in CONDITION_AXES.items())
    parser.add_argument(
        "--policy",
        required=True,
        help="'expert', 'constant:K' (curvature 1/m), a checkpoint (.ckpt/.pt) or an exported file",
    )
    parser.add_argument("--km", type=float, default=2.0, help="distance to drive (default 2 km)")
    parser.add_argument("--seed", type=int, default=0, help="world seed (default 0)")
    parser.add_argument("--split", choices=SPLITS, default="test", help="road split (default test)")
    parser.add_argument(
        "--roads",
        choices=ROAD_KINDS,
        default="easy",
        help="easy: curves up to 1/25 m at one speed (default); hard: junction turns up to 1/5 m, "
        "hairpins, S-bends, chicanes, at a speed that follows the road; mixed: both, alternating",
    )
    parser.add_argument("--conditions", default=None, help=f"comma-separated condition names ({conds})")
    parser.add_argument("--segment-km", type=float, default=1.0, help="length of each road (default 1 km)")
    parser.add_argument("--out", required=True, help="output directory (metrics.json, drive.png)")
    parser.add_argument("--video", action="store_true", help="also write drive.mp4 of the camera view")
    parser.add_argument(
        "--noise-std",
        type=float,
        default=0.0,
        help="Gaussian noise std on [0,1] pixels of the policy's view: a checkpoint's network input "
        "(after crop and resize), an exported file's camera frame (default 0)",
    )
    parser.add_argument("--speed-kmh", type=float, default=30.0, help="vehicle speed (default 30 km/h)")
    parser.add_argument(
        "--fps",
        type=float,
        default=None,
        help="camera rate (default: the policy's own, from its checkpoint or exported file's "
        "metadata; 30 Hz for expert and constant)",
    )
    parser.add_argument(
        "--width",
        type=int,
        default=None,
        help="camera image width (default: the policy's camera frame size from its metadata, else 200)",
    )
    parser.add_argument(
        "--height", type=int, default=None, help="camera image height (default: as --width, else 78)"
    )
    parser.add_argument("--device", default="cpu", help="torch device for checkpoint policies (default cpu)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads for policy files (default 1; 0 = torch's default)",
    )
    parser.add_argument(
        "--env",
        metavar="ID",
        default=None,
        help="drive in a Gymnasium env instead (e.g. drive/LaneKeeping-v0, or module:ID); "
        "see drive.sim.gym_eval",
    )
    parser.add_argument(
        "--env-config",
        metavar="YAML",
        default=None,
        help="with --env: how curvature maps to the env's action and which info keys hold the "
        "lateral offset and heading error (not needed for drive/LaneKeeping-v0)",
    )
    logs = parser.add_argument_group(
        "log replay (--logs)",
        "drive recorded logs closed loop: each frame re-rendered for the car's pose (docs/replay.md)",
    )
    logs.add_argument(
        "--logs", nargs="+", metavar="PATH", default=None, help="log files, folders or globs (any format)"
    )
    add_reader_arguments(logs)
    logs.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes over the logs (default: one per CPU core); under torchrun or srun, per process",
    )
    logs.add_argument(
        "--no-poses",
        action="store_true",
        help="build the path from curvature and speed even where poses exist",
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "env", None):
        return _run_env(args)
    if getattr(args, "logs", None):
        return _run_logs(args)
    from drive.policy_drivers import camera_size, make_driver  # at run time: torch (seconds)

    # errors of input (options, the policy, a full or read-only --out) propagate to drive.cli: one
    # line, exit 2, the traceback with --debug
    parse_conditions(args.conditions)
    check_world_settings(speed_kmh=args.speed_kmh, fps=args.fps, width=args.width, height=args.height)
    driver = make_driver(args.policy, args.device, args.threads)
    args.fps = _camera_fps(driver, args.policy, args.fps)
    args.height, args.width = camera_size(driver, args.height, args.width)
    perturb = _noise(args, driver)
    out = Path(args.out)

    def progress(seg: Any) -> None:
        print(
            f"segment {seg.index}: {seg.km:.2f} km, {len(seg.intervention_xy)} interventions "
            f"({'/'.join(seg.conditions.values())})",
            flush=True,
        )

    # a refused run leaves no --out folder; a failed one none of its files (they appear together)
    with no_empty_dir_on_error(out), all_or_nothing():
        result = evaluate(
            driver,
            args.km,
            args.seed,
            conditions=args.conditions,
            perturb=perturb,
            split=args.split,
            video_path=out / "drive.mp4" if args.video else None,
            segment_km=args.segment_km,
            camera=Camera.default(args.width, args.height),
            speed_mps=args.speed_kmh / 3.6,
            fps=args.fps,
            progress=progress,
            roads=args.roads,
        )
        result.metrics["policy"] = args.policy
        result.metrics["image_noise_std"] = args.noise_std
        paths = result.save(out)
    return _summary(result.metrics, paths)


def _check_numbers(args: argparse.Namespace, positive: Tuple[str, ...]) -> None:
    """``positive`` options > 0 when given (drive's world checks its own settings; an env's are
    checked here); argparse made every float finite, RANGES the rest."""
    for name in positive:
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value:g}")


# `drive evaluate` options that configure the built-in world, with their defaults
WORLD_DEFAULTS = {
    "conditions": None,
    "fps": 30.0,
    "speed_kmh": 30.0,
    "split": "test",
    "roads": "easy",
    "segment_km": 1.0,
    "width": 200,
    "height": 78,
}


def _run_env(args: argparse.Namespace) -> int:
    """``drive evaluate --env ID [--env-config YAML] --policy P --km K --out DIR`` (drive.sim.gym_eval)."""
    from drive.policy_drivers import make_driver  # at run time: torch (seconds)

    env = None
    try:
        _check_env_args(args)
        mapping = load_mapping(args.env_config, args.env)
        driver = make_driver(args.policy, args.device, args.threads)
        overrides = _world_overrides(args, driver)
        perturb = _noise(args, driver)
        env = make_env(args.env, mapping, overrides)

        def progress(seg: Segment) -> None:
            print(
                f"episode {seg.index}: {seg.km:.3f} km, {len(seg.intervention_xy)} interventions"
                + (f" ({'/'.join(seg.conditions.values())})" if seg.conditions else ""),
                flush=True,
            )

        result = evaluate_env(
            env,
            driver,
            mapping,
            args.km,
            seed=args.seed,
            perturb=perturb,
            progress=progress,
            episode_m=1000.0 * args.segment_km if overrides else None,
        )
    finally:
        if env is not None:
            env.close()
    result.metrics.update(policy=args.policy, image_noise_std=args.noise_std, env_config=args.env_config)
    with no_empty_dir_on_error(args.out), all_or_nothing():
        paths = result.save(args.out, plot=False)
    return _summary(result.metrics, paths)


def _check_env_args(args: argparse.Namespace) -> None:
    """What ``--env`` refuses before anything loads: the expert, non-positive sizes, ``--video``."""
    if args.policy == "expert":
        raise ValueError(
            "--policy expert needs the built-in world's road (privileged); with --env drive "
            "a checkpoint, an exported file or constant:K"
        )
    _check_numbers(args, ("speed_kmh", "fps"))
    if args.env_config is not None and os.path.isfile(args.env_config):
        read_yaml(
            args.env_config, "--env-config "
        )  # UTF-8 and valid YAML, named (the mapping checks the rest)
    if getattr(args, "video", False):
        raise ValueError("--video is not available with --env (record with the env's own render_mode)")


def _world_overrides(args: argparse.Namespace, driver: Any) -> Dict[str, Any]:
    """For drive's own env, the world options of ``drive evaluate`` as its keyword arguments; for
    another simulator none, and a world option given is an error (its options go in the mapping's
    ``env_kwargs``, never silently dropped)."""
    from drive.policy_drivers import camera_size  # at run time: torch (seconds)

    if args.env.split(":")[-1] != "drive/LaneKeeping-v0":
        given = [
            f"--{k.replace('_', '-')}"
            for k, default in WORLD_DEFAULTS.items()
            if getattr(args, k, default) not in (default, None)
        ]
        if given:
            raise ValueError(
                f"{', '.join(given)} set(s) up drive's own world; for --env {args.env} "
                f"put the env's options in env_kwargs of --env-config"
            )
        return {}
    fps = getattr(args, "fps", None)
    if fps is None:  # no --fps given: the policy's own rate, else the world's default
        nominal = getattr(driver, "nominal_dt_s", None)
        fps = 1.0 / nominal if nominal else WORLD_DEFAULTS["fps"]
    height, width = camera_size(driver, args.height, args.width)
    return dict(
        seed=args.seed,
        conditions=args.conditions,
        fps=fps,
        speed_kmh=args.speed_kmh,
        split=args.split,
        roads=args.roads,
        episode_km=args.segment_km,
        width=width,
        height=height,
    )


def _noise(args: argparse.Namespace, driver: Any) -> Any:
    """``--noise-std`` as a perturbation: a checkpoint's PolicyDriver takes it on the network's view
    (set on the driver, None returned); any other driver gets it on the camera frame (returned)."""
    from drive.data.perturb import Perturbation  # at run time: torch (seconds), --help needs none

    if not args.noise_std > 0:
        return None
    perturb = Perturbation("gaussian", args.noise_std, seed=args.seed)
    if hasattr(driver, "view"):
        driver.perturb = perturb
        return None
    return perturb


def _run_logs(args: argparse.Namespace) -> int:
    """``drive evaluate --logs PATH... --policy P --out DIR`` (:mod:`drive.evaluate.log_replay`)."""
    from drive.evaluate.log_replay import ReplaySettings, evaluate_logs  # at run time: torch (seconds)

    given = [
        f"--{k.replace('_', '-')}"
        for k, default in {**WORLD_DEFAULTS, "km": 2.0}.items()
        if k not in ("fps",) and getattr(args, k, default) not in (default, None)
    ]
    if given:
        raise ValueError(
            f"{', '.join(given)} set(s) up drive's own world; --logs drives the logs as recorded"
        )
    _check_numbers(args, ("fps",))
    settings = ReplaySettings(
        fps=args.fps,
        noise_std=args.noise_std,
        seed=args.seed,
        use_poses=not args.no_poses,
        video=args.video,
        device=args.device,
    )
    out = Path(args.out)

    def progress(row: Dict[str, Any]) -> None:
        if "skipped" in row:  # one write a line: torchrun's ranks share this stdout
            say(f"{row['name']}: skipped, {row['skipped']}")
            return
        say(
            f"{row['name']}: {row['km']:.2f} km, {row['interventions']} interventions, "
            f"no-source {100 * row['no_source_share']['mean']:.1f} %, path from {row['path_source']}"
        )

    # a refused run leaves no --out folder; a failed one none of its files (they appear together)
    with no_empty_dir_on_error(out), all_or_nothing():
        result = evaluate_logs(
            args.policy,
            args.logs,
            args.format,
            reader_options(args),
            settings,
            workers=args.workers,
            video_dir=out / "videos" if args.video else None,
            progress=progress,
        )
        if result is None:  # a torchrun / SLURM process other than rank 0, which writes the report
            return 0
        paths = result.save(out)
    return _summary(result.metrics, paths)


SUMMARY_KEYS = (
    "km",
    "interventions",
    "interventions_per_km",
    "interventions_per_km_ci95",
    "autonomy_pct",
    "lateral_rms_m",
    "lateral_max_abs_m",
    "steering_rate_rms",
)


def _summary(m: Dict[str, Any], paths: Dict[str, Path]) -> int:
    """Print the headline metrics and the files written; exit status 1 when a metric is NaN."""
    print(json.dumps({k: m[k] for k in SUMMARY_KEYS}, indent=2))
    print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0 if not any(isinstance(v, float) and math.isnan(v) for v in m.values()) else 1
