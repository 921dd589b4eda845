"""The options of every command that reads foreign logs: ``--format``, ``--reader``, ``--set``.

Shared by ``drive data`` and ``drive evaluate --logs``; it imports no torch (``--help`` stays instant).
The options are checked here, before any log is read: YAML that does not parse, a ``--reader`` file
that is not a mapping, an unknown option and a value out of its range are one line naming the option.
"""

from __future__ import annotations

import argparse
from typing import Any, Dict

from drive.data.readers import FORMATS, ReaderOptions
from drive.io.checks import load_yaml, read_yaml
from drive.train.profiles import resolve_config

__all__ = ["add_reader_arguments", "reader_options"]


def add_reader_arguments(p: argparse.ArgumentParser) -> None:
    """``--format``, ``--reader`` and ``--set``: how a command is told to read foreign logs."""
    p.add_argument("--format", choices=list(FORMATS), help="reader format (default: detect per log)")
    p.add_argument(
        "--reader",
        metavar="YAML",
        help="reader options file, or a data config with a reader: section (a file, or a shipped "
        "profile by name: data_udacity, data_ncp)",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="one reader option (YAML value)"
    )


def _reader_file(name: str) -> Dict[str, Any]:
    """The reader options of a ``--reader`` file: its mapping, or the ``reader:`` section of a data
    config (``data: {reader: ...}`` or ``data: {init_args: {reader: ...}}``). Anything that is not a
    mapping of options (a list, a scalar, an empty file) is refused, never ignored."""
    path = resolve_config(name, "--reader")
    where = f"--reader {name}"
    loaded = read_yaml(path, "--reader ")
    if not isinstance(loaded, dict):
        kind = "empty" if loaded is None else f"a YAML {type(loaded).__name__}"
        raise ValueError(f"{where}: the file is {kind}; expected a mapping of reader options (option: value)")
    if isinstance(loaded.get("data"), dict):
        loaded = loaded["data"].get("init_args", loaded["data"])
    section = loaded.get("reader", loaded) if isinstance(loaded, dict) else loaded
    if not isinstance(section, dict):
        raise ValueError(f"{where}: reader: must be a mapping of reader options, got {section!r}")
    return dict(section)


def reader_options(args: argparse.Namespace) -> Dict[str, Any]:
    """Reader options from ``--reader`` (a file) and ``--set KEY=VALUE`` (YAML values, which win),
    checked (:class:`~drive.data.readers.ReaderOptions`): a ``ValueError`` naming the option."""
    options: Dict[str, Any] = _reader_file(args.reader) if args.reader else {}
    origin = {key: f"--reader {args.reader}" for key in options}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        key = key.strip()
        options[key] = load_yaml(value, f"--set {key}")
        origin[key] = f"--set {key}"
    try:
        ReaderOptions.from_any(options)
    except ValueError as e:
        named = [k for k in options if f"option {k}" in str(e) or f"option(s) [{k!r}" in str(e)]
        given = sorted({origin[k] for k in named})
        raise ValueError(f"{', '.join(given) + ': ' if given else ''}{e}") from None
    return options
