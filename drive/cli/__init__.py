"""The `drive` command: a thin dispatcher over the library.

Every subcommand is one module (``drive/cli/<name>.py``, or a plugin named in ``DRIVE_PLUGINS``)
declaring ``COMMAND`` (its name) and ``HELP`` (one line) and exposing ``add_arguments(parser)`` and
``run(args) -> int`` that parses, calls the library and prints; there is no list to extend
(:mod:`drive.cli.discover` reads the two strings from the modules' source). A module is imported
only when its subcommand runs, so ``drive --help`` stays instant.

The LightningCLI subcommands (fit / validate / test / predict) hand the rest of the command
line to :mod:`drive.cli.fit`, which owns its own ``--help``.

Errors caused by input (a missing or damaged file, a bad option value, a read-only or full
output location) are answered with one line on stderr, ``drive <command>: error: <what>``, naming
the file or option, and exit status 2; no traceback. Every command's errors take this one path (a
command raises, it does not print them): argparse's refusals too (no usage dump), and YAML, OS and
decoding errors. ``--debug`` (anywhere on the command line, or ``DRIVE_DEBUG=1``) shows the
traceback instead, for every command. Anything else (a bug) keeps its traceback. Before a command
runs, its float options are finite (the parser's type), and its ``RANGES``, ``OUTPUTS`` and
``INPUTS`` are checked (:mod:`drive.cli.outputs`).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from types import ModuleType
from typing import Any, Dict, List, NoReturn, Optional

from drive import __version__
from drive.cli.discover import RESERVED, Command, find_commands
from drive.cli.errors import INPUT_ERRORS, UsageError, error_line, report_input_error, say
from drive.cli.outputs import check_out, check_out_against_inputs, check_ranges

__all__ = ["main"]


def _finite_float(text: str) -> float:
    """argparse's ``type=float`` for every command: ``nan`` and ``inf`` are not settings."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """Every command's parser (and its sub-commands'): a refused command line is one line (a
    :class:`UsageError`, reported by the dispatcher), not argparse's usage dump; every ``float``
    option is finite."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("type", float, _finite_float)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _debug(argv: List[str]) -> bool:
    return "--debug" in argv or os.environ.get("DRIVE_DEBUG", "") not in ("", "0")


def _usage(commands: Dict[str, Command]) -> str:
    width = max(len(n) for n in list(commands) + list(RESERVED))
    lines = ["usage: drive <command> [options]", "", "commands:"]
    for name in RESERVED:
        lines.append(f"  {name:<{width}}  {name} a policy with Lightning (`drive {name} --help`)")
    for name in sorted(commands):
        lines.append(f"  {name:<{width}}  {commands[name].help}")
    lines += ["", "Run `drive <command> --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:
        print(__version__)
        return 0
    debug = _debug(argv)
    argv = [a for a in argv if a != "--debug"]
    try:
        return _dispatch(argv, debug)
    except KeyboardInterrupt:  # Ctrl-C: one line, not the traceback of wherever the work was
        if debug:
            raise
        name = f"drive {argv[0]}" if argv and not argv[0].startswith("-") else "drive"
        say(f"{name}: interrupted; outputs it had not finished were not written", sys.stderr)
        return 130


def _dispatch(argv: List[str], debug: bool) -> int:
    if argv and argv[0] in RESERVED:
        # imported when it runs: Lightning takes seconds to import, `drive --help` none
        from drive.cli.fit import lightning_main

        return lightning_main(argv, debug=debug)
    try:
        commands = find_commands()
    except (ImportError, ValueError, SyntaxError) as err:  # a plugin not found, a name declared twice
        if debug:
            raise
        print(f"drive: error: {error_line(err)}", file=sys.stderr)
        return 2
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(commands))
        return 0
    if argv[0] not in commands:
        print(f"drive: unknown command {argv[0]!r}\n\n{_usage(commands)}", file=sys.stderr)
        return 2
    return _run(commands[argv[0]], argv[1:], debug)


def _check_outputs(module: ModuleType, args: argparse.Namespace) -> None:
    """Numbers and ``--out`` checked before the command reads anything (:mod:`drive.cli.outputs`):
    numbers in range (``RANGES``), every output (``OUTPUTS``, else ``--out``) writable, of the kind
    the command writes, never an input (``INPUTS``)."""
    check_ranges(args, getattr(module, "RANGES", {}))
    kinds = getattr(module, "INPUTS", {})
    inputs = {name: getattr(args, name, None) for name in kinds}
    for dest, kind in getattr(module, "OUTPUTS", {"out": None}).items():
        flag = "--" + dest.replace("_", "-")
        check_out(getattr(args, dest, None), kind, flag)
        check_out_against_inputs(getattr(args, dest, None), inputs, kinds, flag, kind)


def _run(command: Command, rest: List[str], debug: bool) -> int:
    """Parse ``rest`` with the command's options, run it, and answer input errors in one line:
    every command's errors take this one path (``--debug`` re-raises them all)."""
    name = command.name
    module = importlib.import_module(command.module)
    parser = _Parser(prog=f"drive {name}", description=command.help)
    module.add_arguments(parser)
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args: Optional[argparse.Namespace] = None
    try:
        args = parser.parse_args(rest)
        _check_outputs(module, args)
        return int(module.run(args) or 0)
    except SystemExit as stop:  # a command refusing an option with SystemExit("drive x: ...")
        if not isinstance(stop.code, str):
            raise
        message = stop.code.strip()
        prefix = f"drive {name}: "
        message = message[len(prefix) :] if message.startswith(prefix) else message
        message = message[len("error: ") :] if message.startswith("error: ") else message
        if debug:
            raise ValueError(message) from stop
        return report_input_error(name, ValueError(message))
    except INPUT_ERRORS as err:
        if debug:
            raise
        line = error_line(err)
        if hasattr(args, "overwrite"):  # the library's advice, in the command's words
            line = line.replace("pass overwrite=True", "pass --overwrite")
        return report_input_error(name, ValueError(line))


if __name__ == "__main__":
    sys.exit(main())
