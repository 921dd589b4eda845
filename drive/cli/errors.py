"""One-line error reporting shared by every ``drive`` command.

Errors caused by input (a missing or damaged file, a bad option value, a read-only or full output
location) are answered with one line on stderr, ``drive <command>: error: <what>``, and exit
status 2. The dispatcher (:mod:`drive.cli`) and the LightningCLI commands (:mod:`drive.cli.fit`)
both report through here, so neither imports the other for it.
Lines that processes may share a stream for (torchrun's ranks) go out through :func:`say`.
"""

from __future__ import annotations

import argparse
import errno
import re
import sys
import zipfile
from typing import Optional, TextIO

import yaml

from drive.io.checks import yaml_problem

__all__ = ["INPUT_ERRORS", "UsageError", "error_line", "report_input_error", "say"]


class UsageError(ValueError):
    """A command line argparse refuses (an unknown option, a value of the wrong type): one line,
    not argparse's usage dump."""


# what bad input raises: drive's own errors are ValueErrors (DataError, RecordingError, checkpoint
# errors ...) naming the file or option; OSError covers missing files, permissions, full disks;
# argparse's and YAML's own errors are a command line or a file that does not parse
INPUT_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, argparse.ArgumentError, yaml.YAMLError)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int|uint|bool|complex|str)\w*\(([^()]*)\)")


def error_line(err: BaseException) -> str:
    """``err`` as one line with plain numbers (``np.float64(2.5)`` -> ``2.5``). A DataLoader
    worker's re-raised error keeps only the original message (its last line)."""
    text = yaml_problem(err) if isinstance(err, yaml.YAMLError) else str(err)
    if isinstance(err, UnicodeDecodeError):  # a reader that did not name its file: say what it can
        text = (
            f"an input file is not {err.encoding} text (byte 0x{err.object[err.start]:02x} at offset "
            f"{err.start} of what was read); --debug shows where it was read"
        )
    if isinstance(err, OSError) and err.strerror and not str(err).startswith(err.strerror):
        name = err.filename
        text = err.strerror if name is None or str(name) in err.strerror else f"{name}: {err.strerror}"
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT) and "free some" not in text:
        text += " (the disk is full: free some space or write elsewhere)"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("Caught ") and "worker process" in lines[0]:
        lines = lines[-1:]
        lines[0] = re.sub(r"^\w+(Error|Exception): ", "", lines[0])
    line = " ".join(lines) or type(err).__name__
    return _NUMPY_SCALAR.sub(r"\1", line)


def report_input_error(command: str, err: BaseException) -> int:
    """Print ``drive <command>: error: ...`` (one line) on stderr; the exit status 2."""
    say(f"drive {command}: error: {error_line(err)}", sys.stderr)
    return 2


def say(line: str, stream: Optional[TextIO] = None) -> None:
    """Write ``line`` and its newline in one write and flush. ``print`` writes the text and the
    newline apart, and unbuffered output (``PYTHONUNBUFFERED``, ``python -u``) sends them to the
    terminal or pipe as two writes, so the lines of processes that share it (torchrun's ranks)
    could run together; one write of a line under the pipe's atomic size (4 KiB) never does."""
    stream = sys.stdout if stream is None else stream
    stream.write(line + "\n")
    stream.flush()
