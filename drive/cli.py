"""The `drive` command: a thin dispatcher over the library.

Each subcommand lives next to the library code it drives, in a module exposing
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when their
subcommand runs, so ``drive --help`` stays instant.

The LightningCLI subcommands (fit / validate / test / predict) hand the rest of the command
line to :mod:`drive.train.cli`, which owns its own ``--help``.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Dict, List, Optional, Tuple

__all__ = ["main", "COMMANDS"]

# name -> (module, one-line help)
COMMANDS: Dict[str, Tuple[str, str]] = {
    "demo": ("drive.demo", "the whole pipeline on built-in data: simulate, train, drive, explain, export"),
    "simulate": ("drive.sim.cli", "record driving logs in the built-in world"),
    "evaluate": ("drive.sim.evaluate_cli", "closed-loop driving of a policy (expert, checkpoint, exported file)"),
    "data": ("drive.data.cli", "inspect or convert driving logs (`drive data inspect|convert`)"),
    "saliency": ("drive.explain.cli", "VisualBackProp saliency video of a policy on a recording"),
    "robustness": ("drive.evaluate.cli", "noise-robustness report: open loop, closed loop, saliency stability"),
    "closed-form": ("drive.nn.closed_form_cli", "convert a trained LTC policy to its closed form (no ODE solver)"),
    "export": ("drive.export_cli", "export a policy for the vehicle (TorchScript, AOTInductor, ONNX)"),
}
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def _usage() -> str:
    width = max(len(n) for n in list(COMMANDS) + list(LIGHTNING_COMMANDS))
    lines = ["usage: drive <command> [options]", "", "commands:"]
    for name in LIGHTNING_COMMANDS:
        lines.append(f"  {name:<{width}}  {name} a policy with Lightning (`drive {name} --help`)")
    for name, (_, text) in COMMANDS.items():
        lines.append(f"  {name:<{width}}  {text}")
    lines += ["", "Run `drive <command> --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] == "--version":
        from drive import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name in LIGHTNING_COMMANDS:
        from drive.train.cli import lightning_main

        return lightning_main([name, *rest])
    if name not in COMMANDS:
        print(f"drive: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"drive {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
