"""What every command's ``--out`` is checked for before anything is read or written.

A command module may declare, beside ``COMMAND`` and ``HELP``::

    OUTPUT = "folder"            # --out is a folder (or "file": --out is one file)
    INPUTS = {"logs": "logs", "policy": "file"}   # its options that name inputs, and their kind
    RANGES = {"km": dict(low=0.0, high=1e4, low_open=True)}   # number options and their ranges

and the dispatcher (:mod:`drive.cli`) refuses a number out of its range (every ``float`` option is
finite already: the dispatcher's parser refuses ``nan`` and ``inf``), and, in one line naming
``--out``, an output that

* cannot be written: a read-only file system, no permission, a file in its path where a folder
  should be (``ENOTDIR``);
* is of the wrong kind: an existing file where a folder is written, a folder where a file is;
* is an input, contains one or lies inside one (``logs`` inputs: log files and folders), or is
  an input file (``file`` inputs: a checkpoint, a YAML file): a user's recordings and checkpoints
  are never written over.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from drive.io.checks import check_writable, existing_paths, number

__all__ = [
    "check_out",
    "check_out_against_inputs",
    "check_ranges",
    "SEED",
    "KM",
    "THREADS",
    "WORKERS",
    "COUNT",
]

# ranges several commands share (RANGES entries)
SEED = dict(low=0, high=1e9, high_open=True, integer=True)  # the world's seeds: drive.sim.road
KM = dict(low=0.0, high=1e4, low_open=True)  # a distance to drive
THREADS = dict(low=0, high=4096, integer=True)  # torch threads; 0 = torch's default
WORKERS = dict(low=1, high=1024, integer=True)  # processes
COUNT = dict(low=1, high=1e9, integer=True)  # frames, rounds, samples


def check_out(out: object, kind: Optional[str] = None) -> None:
    """Refuse an ``--out`` that cannot be written or is of the wrong ``kind`` (``"folder"`` /
    ``"file"`` / None: either), naming it; nothing is created."""
    if out is None:
        return
    path = Path(str(out)).absolute()
    if kind == "folder" and path.is_file():
        raise FileExistsError(f"--out {out}: is a file; give a folder (new or existing)")
    if kind == "file" and path.is_dir():
        raise IsADirectoryError(f"--out {out}: is a folder; give a file name")
    check_writable(path, f"--out {out}")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_out_against_inputs(out: object, inputs: Mapping[str, object], kinds: Mapping[str, str]) -> None:
    """Refuse an ``--out`` that is an input, or (``logs`` inputs) contains one or lies inside one.
    ``inputs``: option name -> value; ``kinds``: option name -> ``"logs"`` | ``"file"``."""
    if out is None:
        return
    target = Path(os.path.realpath(str(out)))
    for option, value in inputs.items():
        for path in existing_paths([value]):
            flag = "--" + option.replace("_", "-")
            if path == target:
                raise ValueError(f"--out {out}: is the input {flag} {path}; write the output elsewhere")
            if kinds.get(option) != "logs":
                continue
            if _inside(target, path):
                raise ValueError(
                    f"--out {out}: lies inside the input {flag} {path}; write the output elsewhere"
                )
            if _inside(path, target):
                raise ValueError(
                    f"--out {out}: contains the input {flag} {path} (it could be written over); "
                    "write the output elsewhere"
                )


def check_ranges(args: object, ranges: Mapping[str, Mapping[str, object]]) -> None:
    """Every number option in ``ranges`` (its dest -> :func:`drive.io.checks.number`'s limits) in
    its range, each value of a list option too: a ``ValueError`` naming the option (``--km``)."""
    for dest, limits in ranges.items():
        value = getattr(args, dest, None)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None:
                number(item, "--" + dest.replace("_", "-"), **limits)  # type: ignore[arg-type]
