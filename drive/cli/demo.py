"""``drive demo``: the whole pipeline on built-in data (simulate, train, drive, explain, robustness,
closed form, export), one command, about 15 minutes on 2 CPU cores::

    drive demo                                   # everything in runs/demo, REPORT.md there
    drive demo --out runs/demo_winter --conditions winter --km 10

Each option is a field of :class:`drive.demo.settings.DemoSettings`; the stages are
:func:`drive.demo.run.run_demo`. Exit status 0 when the acceptance criteria pass, 1 when not
(the failed ones are printed).
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import get_type_hints

from drive.demo.settings import DemoSettings

COMMAND = "demo"
HELP = "the whole pipeline on built-in data: simulate, train, drive, explain, export"
OUTPUTS = {"out": "folder"}  # drive.cli.outputs: --out is checked before anything runs
INPUTS = {"config": "config"}
__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per field of :class:`DemoSettings`: ``--train-minutes`` for ``train_minutes``, the
    field's type (a string field takes the text as it is), default and ``metadata["help"]``."""
    types = get_type_hints(DemoSettings)
    for f in fields(DemoSettings):
        kind = types[f.name]
        if kind not in (str, int, float):
            raise TypeError(f"DemoSettings.{f.name}: {kind} is not an option type (str, int, float)")
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(
            flag, type=None if kind is str else kind, default=f.default, help=f.metadata["help"]
        )


def run(args: argparse.Namespace) -> int:
    from drive.demo.run import run_demo  # at run time: it imports Lightning (seconds), --help need not

    settings = DemoSettings(**{f.name: getattr(args, f.name) for f in fields(DemoSettings)})
    report = run_demo(settings)
    acceptance = report["acceptance"]
    if acceptance["passed"]:
        print(f"\ndemo: PASSED acceptance; report: {report['report']}")
        return 0
    print(f"\ndemo: FAILED acceptance: {'; '.join(acceptance['failed'])}; report: {report['report']}")
    return 1
