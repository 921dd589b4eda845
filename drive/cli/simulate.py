"""``drive simulate``: record expert driving logs (with DART recoveries) in the built-in world.

Example::

    drive simulate --out data/sim --minutes 20 --seed 0 --conditions summer,autumn
    drive simulate --out data/sim_test --minutes 4 --seed 0 --split test --conditions winter
"""

from __future__ import annotations

import argparse

from drive.cli.outputs import SEED
from drive.io.atomic import all_or_nothing, no_empty_dir_on_error
from drive.sim.appearance import CONDITION_AXES, parse_conditions
from drive.sim.camera import Camera
from drive.sim.record import DEFAULT_NOISE_STD, check_world_settings, simulate
from drive.sim.road import ROAD_KINDS, SPLITS, TEST_SEED_OFFSET

COMMAND = "simulate"
HELP = "record driving logs in the built-in world"
OUTPUTS = {"out": "folder"}  # drive.cli.outputs: --out is checked before anything is written
RANGES = {"minutes": dict(low=0.0, high=1e4, low_open=True), "seed": SEED}
__all__ = ["add_arguments", "run"]


def _condition_help() -> str:
    return "; ".join(f"{axis}: {', '.join(values)}" for axis, values in CONDITION_AXES.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output directory (one sub-directory per recording)")
    parser.add_argument("--minutes", type=float, default=10.0, help="total minutes of driving (default 10)")
    parser.add_argument("--seed", type=int, default=0, help=f"world seed, 0 <= seed < {TEST_SEED_OFFSET}")
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="train",
        help="train and test roads come from disjoint seed ranges (default train)",
    )
    parser.add_argument(
        "--roads",
        choices=ROAD_KINDS,
        default="easy",
        help="easy: curves up to 1/25 m at one speed (default); hard: junction turns up to 1/5 m, "
        "hairpins, S-bends, chicanes, at a speed that follows the road (--speed-kmh the cruise); "
        "mixed: both, alternating recordings",
    )
    parser.add_argument(
        "--conditions",
        default=None,
        help=f"comma-separated condition names, cycled over recordings ({_condition_help()}); "
        "axes not named are random",
    )
    parser.add_argument(
        "--recording-minutes", type=float, default=2.0, help="length of each recording (default 2)"
    )
    parser.add_argument(
        "--storage",
        choices=("frames", "video"),
        default="frames",
        help="JPEG frames (default) or one MP4 per recording",
    )
    parser.add_argument(
        "--noise-std",
        type=float,
        default=DEFAULT_NOISE_STD,
        help=f"DART steering noise, std of curvature in 1/m (default {DEFAULT_NOISE_STD}; 0 = none)",
    )
    parser.add_argument("--speed-kmh", type=float, default=30.0, help="vehicle speed (default 30 km/h)")
    parser.add_argument("--fps", type=float, default=30.0, help="camera rate (default 30 Hz)")
    parser.add_argument("--width", type=int, default=200, help="image width (default 200)")
    parser.add_argument("--height", type=int, default=78, help="image height (default 78)")
    parser.add_argument("--overwrite", action="store_true", help="replace existing recordings")


def run(args: argparse.Namespace) -> int:
    # errors of input (settings, an existing recording, a full or read-only --out) propagate to
    # drive.cli: one line, exit 2, the traceback with --debug
    parse_conditions(args.conditions)
    check_world_settings(
        speed_kmh=args.speed_kmh,
        fps=args.fps,
        width=args.width,
        height=args.height,
        noise_std=args.noise_std,
        minutes=args.minutes,
        recording_minutes=args.recording_minutes,
    )
    if args.roads == "mixed" and args.minutes <= args.recording_minutes:
        raise ValueError(
            f"--roads mixed: --minutes {args.minutes:g} at --recording-minutes {args.recording_minutes:g} "
            "is one recording, an easy road only (mixed alternates easy and hard recordings); "
            "give a --recording-minutes of at most half --minutes"
        )
    camera = Camera.default(args.width, args.height)

    def progress(i: int, n: int, path) -> None:
        print(f"[{i + 1}/{n}] {path}", flush=True)

    # a refused run leaves no --out folder, and a failed one none of its recordings: they appear
    # together when the last is written
    with no_empty_dir_on_error(args.out), all_or_nothing():
        paths = simulate(
            args.out,
            args.minutes,
            args.seed,
            args.conditions,
            split=args.split,
            recording_minutes=args.recording_minutes,
            storage=args.storage,
            noise_std=args.noise_std,
            camera=camera,
            speed_mps=args.speed_kmh / 3.6,
            fps=args.fps,
            overwrite=args.overwrite,
            progress=progress,
            roads=args.roads,
        )
    print(f"wrote {len(paths)} recording(s) to {args.out}")
    return 0
