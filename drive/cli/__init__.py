"""The `drive` command: a thin dispatcher over the library.

Every subcommand lives in this package (``drive.cli.<name>``), in a module exposing
``add_arguments(parser)`` and ``run(args) -> int`` that parses, calls the library and prints.
Modules are imported only when their subcommand runs, so ``drive --help`` stays instant.

The LightningCLI subcommands (fit / validate / test / predict) hand the rest of the command
line to :mod:`drive.cli.fit`, which owns its own ``--help``.

Errors caused by input (a missing or damaged file, a bad option value, a read-only or full
output location) are answered with one line on stderr, ``drive <command>: error: <what>``, naming
the file or option, and exit status 2; no traceback. ``--debug`` (anywhere on the command line,
or ``DRIVE_DEBUG=1``) shows the traceback instead. Anything else (a bug) keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from drive import __version__
from drive.cli.errors import INPUT_ERRORS, error_line, report_input_error

__all__ = ["main", "COMMANDS", "INPUT_ERRORS", "error_line", "report_input_error"]

# name -> (module, one-line help)
COMMANDS: Dict[str, Tuple[str, str]] = {
    "demo": (
        "drive.cli.demo",
        "the whole pipeline on built-in data: simulate, train, drive, explain, export",
    ),
    "simulate": ("drive.cli.simulate", "record driving logs in the built-in world"),
    "evaluate": ("drive.cli.evaluate", "closed-loop driving of a policy (expert, checkpoint, exported file)"),
    "data": ("drive.cli.data", "inspect or convert driving logs (`drive data inspect|convert`)"),
    "saliency": ("drive.cli.saliency", "VisualBackProp saliency video of a policy on a recording"),
    "robustness": (
        "drive.cli.robustness",
        "noise-robustness report: open loop, closed loop, saliency stability",
    ),
    "closed-form": (
        "drive.cli.closed_form",
        "convert a trained LTC policy to its closed form (no ODE solver)",
    ),
    "export": ("drive.cli.export", "export a policy for the vehicle (TorchScript, AOTInductor, ONNX)"),
}
LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def _check_out(out: object) -> None:
    """Refuse an ``--out`` that cannot be written (read-only file system, no permission) before
    any work, naming it; the nearest existing folder on its path is what is tested."""
    if out is None:
        return
    probe = Path(str(out)).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_file():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        read_only = bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
        raise PermissionError(
            f"--out {out}: cannot write in {probe} "
            f"({'read-only file system' if read_only else 'permission denied'})"
        )


def _debug(argv: List[str]) -> bool:
    return "--debug" in argv or os.environ.get("DRIVE_DEBUG", "") not in ("", "0")


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
        print(__version__)
        return 0
    debug = _debug(argv)
    argv = [a for a in argv if a != "--debug"]
    if not argv:
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name in LIGHTNING_COMMANDS:
        # imported when it runs: Lightning takes seconds to import, `drive --help` none
        from drive.cli.fit import lightning_main

        return lightning_main([name, *rest], debug=debug)
    if name not in COMMANDS:
        print(f"drive: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"drive {name}", description=COMMANDS[name][1])
    module.add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = parser.parse_args(rest)
    try:
        _check_out(getattr(args, "out", None))
        return int(module.run(args) or 0)
    except SystemExit as stop:  # a command refusing an option with SystemExit("drive x: ...")
        if not isinstance(stop.code, str) or debug:
            raise
        message = stop.code.strip()
        prefix = f"drive {name}: "
        message = message[len(prefix) :] if message.startswith(prefix) else message
        message = message[len("error: ") :] if message.startswith("error: ") else message
        return report_input_error(name, ValueError(message))
    except INPUT_ERRORS as err:
        if debug:
            raise
        if hasattr(args, "overwrite"):  # the library's advice, in the command's words
            err = type(err)(error_line(err).replace("pass overwrite=True", "pass --overwrite"))
        return report_input_error(name, err)


if __name__ == "__main__":
    sys.exit(main())
