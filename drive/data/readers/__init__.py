"""Readers: foreign driving logs -> canonical :class:`~drive.io.recording.Recording` objects.

Each format is one module here that registers itself (:mod:`drive.data.readers.registry`: its name,
how to detect and read it, what it looks like on disk, which files a folder walk looks at); its
docstring describes the format and its label defaults (docs/data.md has the table). Importing the
package imports every module in it and the plugins (:mod:`drive.plugins`): :data:`FORMATS` lists
them all, in detection order.

:func:`read_logs` expands globs, walks directories that are not themselves a log (finding every
log below them), detects each log's format unless one is given, and returns the recordings.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from drive.data.errors import DataError, Problems
from drive.data.readers.base import ReaderOptions
from drive.data.readers.registry import FORMATS, walked_suffixes
from drive.io.recording import Recording
from drive.plugins import import_all, load_plugins

__all__ = ["FORMATS", "detect_format", "discover", "read_logs", "ReaderOptions", "no_log_message"]


def no_log_message(path: Union[str, Path]) -> str:
    """Why ``path`` holds no driving log, and the layouts that would be one (one line)."""
    p = Path(path)
    hint = ""
    if p.is_file() and p.parent != p and detect_format(p.parent) is not None:
        hint = f" (it is part of the {detect_format(p.parent)} log {p.parent}: pass that instead)"
    elif p.is_dir() and not any(p.iterdir()):
        hint = " (the folder is empty)"
    layouts = "; ".join(f"{name}: {reader.layout}" for name, reader in FORMATS.items())
    return f"no driving log found{hint}; recognised layouts: {layouts}"


def detect_format(path: Union[str, Path]) -> Optional[str]:
    """The format of one log path, or None."""
    p = Path(path)
    for name, reader in FORMATS.items():
        if reader.detect(p):
            return name
    return None


def discover(path: Union[str, Path], format: Optional[str] = None) -> List[Tuple[Path, str]]:
    """Every (log path, format) at or below ``path`` (a file, directory or glob), sorted by path."""
    text = str(path)
    if any(ch in text for ch in "*?["):
        hits = sorted(glob.glob(text, recursive=True))
        if not hits:
            raise FileNotFoundError(f"{text}: the pattern matches nothing")
        return [item for hit in hits for item in discover(hit, format)]
    p = Path(text)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"unknown format {format!r}; known: {list(FORMATS)}")
        if FORMATS[format].detect(p):
            return [(p, format)]
    else:
        found = detect_format(p)
        if found is not None:
            return [(p, found)]
    if p.is_dir():
        walked = walked_suffixes()
        children = [c for c in sorted(p.iterdir()) if c.is_dir() or c.suffix.lower() in walked]
        return [item for c in children for item in discover(c, format)]
    if format is not None:
        raise ValueError(f"{p}: does not look like a {format!r} log")
    return []


def read_logs(
    paths: Union[str, Sequence[str]],
    format: Optional[str] = None,
    options: Optional[object] = None,
    problems: Optional[Problems] = None,
    on_error: str = "raise",
) -> List[Recording]:
    """Read every log at ``paths`` (files, directories, globs) into recordings.

    Args:
        format: one of :data:`FORMATS`, or None to detect each log's format.
        options: :class:`ReaderOptions` or a dict of its fields.
        problems: collector to report into (one is made from ``on_error`` when None).
    Raises:
        DataError: first bad row/file when ``on_error="raise"``; also when nothing usable is found.
    """
    problems = problems if problems is not None else Problems(on_error)
    opts = ReaderOptions.from_any(options)
    items = [
        item for p in ([paths] if isinstance(paths, (str, Path)) else paths) for item in discover(p, format)
    ]
    if not items:
        given = [paths] if isinstance(paths, (str, Path)) else list(paths)
        raise DataError(
            ", ".join(map(str, given)),
            None,
            "no_logs",
            no_log_message(given[0]) if len(given) == 1 else no_log_message(""),
        )
    out: List[Recording] = []
    for path, name in items:
        out.extend(FORMATS[name].read(path, opts, problems))
    return out


import_all(__name__, __path__)  # every reader in this package registers: a new one is one module
load_plugins()  # and the readers (and cells) of DRIVE_PLUGINS and the drive.plugins entry points
