"""``drive closed-form``: convert a trained LTC policy to its closed form and report fidelity.

Examples::

    drive closed-form --ckpt runs/ncp/last.ckpt --method exact --out runs/ncp/closed_exact.ckpt
    drive closed-form --ckpt runs/ncp/last.ckpt --method approx --out runs/ncp/cf_approx.ckpt \\
        --recordings data/test/* --km 2

Writes the converted checkpoint (loads with :func:`drive.checkpoint.load_policy`, drives with
``drive evaluate``, explains with ``drive saliency``, exports with ``drive export``) and, beside
it, ``<out>.fidelity.json`` / ``.md``: output MSE of the converted policy against the ODE LTC
(fused solver, its ``ode_unfolds``) on test recordings in (1/km)^2 (the CfC paper reports 0.006
on driving data), closed-loop interventions of both in the built-in world, and the speed ratio of
the recurrent module (1 thread, interleaved timing). Without ``--recordings`` a short drive on the
world's held-out test split is recorded to a temporary folder and used.

The conversion is :mod:`drive.export.closed_form`; the fidelity report
:mod:`drive.evaluate.closed_form_fidelity`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from drive.cli.outputs import SEED, THREADS
from drive.evaluate.closed_form_fidelity import closed_form_report, markdown_report
from drive.export.closed_form import METHODS

COMMAND = "closed-form"
HELP = "convert a trained LTC policy to its closed form (no ODE solver)"
OUTPUTS = {"out": "file"}  # drive.cli.outputs: --out is checked before anything is read
INPUTS = {"ckpt": "file", "recordings": "logs"}
RANGES = {
    "sim_minutes": dict(low=0.0, high=1e4, low_open=True),
    "km": dict(low=0.0, high=1e4),  # 0 skips the closed loop
    "seed": SEED,
    "substeps": dict(low=1, high=1000, integer=True),
    "threads": THREADS,
}
__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ckpt", required=True, help="policy checkpoint whose recurrent module is an LTC")
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="exact",
        help="exact: Corollary 1 per step (default); approx: CfC paper Eq. 8 / Algorithm 1",
    )
    parser.add_argument("--out", required=True, help="converted checkpoint to write (.ckpt or .pt)")
    parser.add_argument(
        "--recordings",
        nargs="*",
        default=None,
        help="test recordings for the open-loop fidelity (default: record a short test drive)",
    )
    parser.add_argument(
        "--sim-minutes",
        type=float,
        default=0.5,
        help="minutes recorded in the world when no --recordings are given (default 0.5)",
    )
    parser.add_argument(
        "--km", type=float, default=1.0, help="closed-loop distance per policy, 0 to skip (default 1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="world seed (default 0)")
    parser.add_argument(
        "--substeps",
        type=int,
        default=1,
        help="exact: recurrent activations re-evaluated this many times per step (default 1)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (default 1; 0 = torch's default)"
    )


def run(args: argparse.Namespace) -> int:
    report = closed_form_report(
        args.ckpt,
        args.method,
        args.out,
        recordings=args.recordings,
        km=args.km,
        seed=args.seed,
        substeps=args.substeps,
        sim_minutes=args.sim_minutes,
        threads=args.threads,
    )
    print(markdown_report(report))
    print(f"wrote {report['converted']} and {Path(report['converted']).with_suffix('.fidelity.md')}")
    return 0
