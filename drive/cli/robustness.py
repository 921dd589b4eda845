"""`drive robustness`: the noise-robustness report for one or more trained policies.

Arguments are checked here, before any model loads or worker process starts, so a typo fails in a
second with the argument's name rather than minutes later inside a worker.
"""

from __future__ import annotations

import argparse
from typing import Dict, List, Tuple

from drive.cli.outputs import COUNT, KM, SEED, WORKERS
from drive.data.perturb import KINDS, Perturbation
from drive.evaluate.robustness import RobustnessConfig, robustness_report

COMMAND = "robustness"
HELP = "noise-robustness report: open loop, closed loop, saliency stability"
OUTPUTS = {"out": "folder"}  # drive.cli.outputs: --out is checked before anything is read
INPUTS = {"ckpt": "file", "recordings": "logs"}
RANGES = {
    "noise": dict(low=0.0, high=1.0),
    "km": KM,
    "seed": SEED,
    "saliency_frames": COUNT,
    "max_frames": COUNT,
    "workers": WORKERS,
}

DEFAULT_OTHER = "salt_pepper=0.05 blur=2 brightness=-0.3,0.3 occlusion=0.1"
DEFAULT_KM = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ckpt", nargs="+", required=True, metavar="CKPT", help="policy checkpoints to compare"
    )
    parser.add_argument(
        "--recordings",
        nargs="+",
        required=True,
        metavar="DIR",
        help="test recordings (canonical directories, or folders holding them)",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="output folder for REPORT.md, results.csv, plots (a previous report there is replaced)",
    )
    parser.add_argument(
        "--noise",
        nargs="+",
        type=float,
        default=[0.0, 0.1, 0.2, 0.25, 0.3],
        help="Gaussian noise levels on [0, 1] pixels (standard deviation unless --variance)",
    )
    parser.add_argument(
        "--variance", action="store_true", help="read --noise as variance sigma^2 (CfC paper)"
    )
    parser.add_argument(
        "--other",
        nargs="*",
        default=DEFAULT_OTHER.split(),
        metavar="KIND=L1,L2",
        help=f"other perturbations, kinds {KINDS[1:]} (default: {DEFAULT_OTHER}); give none to skip",
    )
    parser.add_argument(
        "--closed-loop", action="store_true", help="also drive held-out roads in the built-in world"
    )
    parser.add_argument(
        "--km",
        type=float,
        default=None,
        help=f"with --closed-loop: distance per model and level (km, default {DEFAULT_KM:g})",
    )
    parser.add_argument("--seed", type=int, default=0, help="noise seed (and closed-loop road seed)")
    parser.add_argument("--saliency-frames", type=int, default=48, help="frames sampled for saliency SSIM")
    parser.add_argument("--max-frames", type=int, default=None, help="limit frames per recording (open loop)")
    parser.add_argument(
        "--workers", type=int, default=None, help="processes over models (default: min(models, CPUs))"
    )


def _fail(message: str) -> SystemExit:
    return SystemExit(f"drive robustness: {message}")


def _parse_other(items: List[str]) -> Dict[str, Tuple[float, ...]]:
    """``["blur=1,2", "brightness=-0.3"]`` -> ``{"blur": (1.0, 2.0), "brightness": (-0.3,)}``.

    Each level is checked by building its :class:`~drive.data.perturb.Perturbation`, so an out-of-range
    level is reported against the ``--other`` item that gave it.
    """
    other: Dict[str, Tuple[float, ...]] = {}
    for item in items:
        kind, sep, levels = item.partition("=")
        if not sep or kind not in KINDS[1:]:
            raise _fail(f"--other {item!r}: expected KIND=L1,L2 with KIND in {KINDS[1:]}")
        if kind in other:
            raise _fail(f"--other {item!r}: {kind} is given twice; list all its levels once, e.g. {kind}=1,2")
        try:
            values = tuple(float(v) for v in levels.split(","))
        except ValueError:
            raise _fail(f"--other {item!r}: levels must be numbers separated by commas") from None
        for level in values:
            try:
                Perturbation(kind, level)
            except ValueError as error:
                raise _fail(f"--other {item!r}: {error}") from None
        other[kind] = values
    return other


def run(args: argparse.Namespace) -> int:
    # numbers are in range already (RANGES, checked by drive.cli before run)
    if args.km is not None and not args.closed_loop:
        raise _fail("--km applies to the closed loop only; add --closed-loop")
    km = DEFAULT_KM if args.km is None else args.km
    config = RobustnessConfig(
        noise_levels=tuple(args.noise),
        variance=args.variance,
        other=_parse_other(args.other),
        seed=args.seed,
        closed_loop_km=km if args.closed_loop else 0.0,
        closed_loop_seed=args.seed,
        saliency_frames=args.saliency_frames,
        max_frames=args.max_frames,
    )
    out = robustness_report(args.ckpt, args.recordings, args.out, config, workers=args.workers)
    print(f"wrote {out['report']} and {out['csv']}")
    return 0
