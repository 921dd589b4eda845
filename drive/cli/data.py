"""``drive data inspect|convert``: look at driving logs, or turn them into canonical recordings.

    drive data inspect LOGS... [--format F] [--reader opts.yaml] [--set key=value] [--json] [--quick]
                               [--plot PNG]
    drive data convert LOGS... --out DIR [--format F] [--storage frames|video] [--on-error skip]

Reader options (label units, column names, camera calibration, ...) come from a YAML file
(``--reader``; a ``reader:`` section of a data config is accepted too) and ``--set key=value``
(YAML values, e.g. ``--set label='{unit: normalized, max_angle_deg: 25}'``).
``inspect`` exits 1 when it found problems, so scripts can gate on it. Errors (unreadable logs,
bad options) go to stderr as ``drive data: error: ...`` with exit status 2.
"""

from __future__ import annotations

import argparse
import json

from drive.cli.reader_args import add_reader_arguments, reader_options
from drive.data.inspect import convert_logs, format_report, inspect_logs
from drive.io.atomic import all_or_nothing, no_empty_dir_on_error

COMMAND = "data"
HELP = "inspect or convert driving logs (`drive data inspect|convert`)"
OUTPUTS = {"out": "folder", "plot": "file"}  # drive.cli.outputs: --out is checked before any log is read
INPUTS = {"logs": "logs", "reader": "config"}
RANGES = {"gap_factor": dict(low=1.0, high=1e6, low_open=True)}
__all__ = ["add_arguments", "run"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("logs", nargs="+", help="log files, directories or globs")
    add_reader_arguments(p)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True, metavar="inspect|convert")
    p = sub.add_parser("inspect", help="what the readers find: recordings, timing, gaps, labels, problems")
    _common(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quick", action="store_true", help="do not decode every frame")
    p.add_argument("--gap-factor", type=float, default=3.0, help="a step > this x median dt is a gap")
    p.add_argument("--plot", metavar="PNG", help="also draw curvature and speed over time, gaps shaded")
    c = sub.add_parser("convert", help="write canonical recordings (meta.json, log.csv, frames/ or video)")
    _common(c)
    c.add_argument("--out", required=True, help="output directory (one recording per subdirectory)")
    c.add_argument("--storage", choices=("frames", "video"), default="frames")
    c.add_argument("--on-error", choices=("raise", "skip"), default="raise")
    c.add_argument("--overwrite", action="store_true")


def run(args: argparse.Namespace) -> int:
    # errors of input (unreadable logs, bad options, a full or read-only --out) propagate to
    # drive.cli: one line, exit 2, the traceback with --debug
    options = reader_options(args)
    if args.data_command == "inspect":
        if not args.gap_factor > 1:
            raise ValueError(f"--gap-factor must be > 1, got {args.gap_factor:g}")
        report = inspect_logs(
            args.logs, args.format, options, decode=not args.quick, gap_factor=args.gap_factor, plot=args.plot
        )
        print(json.dumps(report, indent=2) if args.json else format_report(report))
        return 1 if report["problems"] else 0
    with no_empty_dir_on_error(args.out), all_or_nothing():  # a refused run leaves nothing behind
        written = convert_logs(
            args.logs, args.out, args.format, options, args.on_error, args.storage, args.overwrite
        )
    for path in written:
        print(path)
    return 0
