"""The options of every command that reads foreign logs: ``--format``, ``--reader``, ``--set``.

Shared by ``drive data`` and ``drive evaluate --logs``; it imports no torch (``--help`` stays instant).
"""

from __future__ import annotations

import argparse
from typing import Any, Dict

import yaml

from drive.data.readers import FORMATS
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


def reader_options(args: argparse.Namespace) -> Dict[str, Any]:
    """Reader options from ``--reader`` (a file) and ``--set KEY=VALUE`` (YAML values, which win)."""
    options: Dict[str, Any] = {}
    if args.reader:
        with open(resolve_config(args.reader, "--reader")) as f:
            loaded = yaml.safe_load(f) or {}
        if "data" in loaded and isinstance(loaded["data"], dict):
            loaded = loaded["data"].get("init_args", loaded["data"])
        options.update(loaded.get("reader", loaded) if isinstance(loaded, dict) else {})
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        options[key.strip()] = yaml.safe_load(value)
    return options
