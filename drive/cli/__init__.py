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
the file or option, and exit status 2; no traceback. ``--debug`` (anywhere on the command line,
or ``DRIVE_DEBUG=1``) shows the traceback instead. Anything else (a bug) keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

from drive import __version__
from drive.cli.discover import RESERVED, Command, find_commands
from drive.cli.errors import INPUT_ERRORS, error_line, report_input_error

__all__ = ["main"]


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


def _run(command: Command, rest: List[str], debug: bool) -> int:
    """Parse ``rest`` with the command's options, run it, and answer input errors in one line."""
    name = command.name
    module = importlib.import_module(command.module)
    parser = argparse.ArgumentParser(prog=f"drive {name}", description=command.help)
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
