"""What every command's ``--out`` is checked for before anything is read or written.

A command module may declare, beside ``COMMAND`` and ``HELP``::

    OUTPUTS = {"out": "folder"}  # options naming outputs: a folder ("file": one file, "video": a video file)
    INPUTS = {"logs": "logs", "policy": "policy"}   # its options that name inputs, and their kind
    RANGES = {"km": dict(low=0.0, high=1e4, low_open=True)}   # number options and their ranges

and the dispatcher (:mod:`drive.cli`) refuses a number out of its range (every ``float`` option is
finite already: the dispatcher's parser refuses ``nan`` and ``inf``), and, in one line naming the
option, an output that

* cannot be written: a read-only file system, no permission, a file in its path where a folder
  should be (``ENOTDIR``);
* is of the wrong kind: an existing file where a folder is written, a folder where a file is, a
  name a video cannot be written to (``v.txt``; :data:`drive.io.video.VIDEO_SUFFIXES`);
* is an input, contains one or lies inside one (``logs`` inputs: log files and folders), or is
  an input file (``file`` inputs: a checkpoint, a YAML file): a user's recordings and checkpoints
  are never written over. A ``config`` input is the file it names (a shipped profile's name is the
  profile, not a folder of that name), a ``policy`` input a file unless it names a built-in driver
  (``expert``, ``constant:K``): so ``drive demo --out demo`` and ``drive evaluate --policy expert
  --out expert`` can run again into the folder they wrote.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from drive.io.checks import check_writable, existing_paths, number
from drive.train.profiles import resolve_config

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


def check_out(out: object, kind: Optional[str] = None, flag: str = "--out") -> None:
    """Refuse an output (``flag``: ``--out``) that cannot be written or is of the wrong ``kind``
    (``"folder"`` / ``"file"`` / ``"video"`` / None: either), naming it; nothing is created."""
    if out is None:
        return
    if not str(out).strip():
        raise ValueError(f"{flag}: an empty path; give a {kind or 'path'}")
    path = Path(str(out)).absolute()
    if kind == "video":
        from drive.io.video import VIDEO_SUFFIXES  # at run time: OpenCV's import (start-up time)

        if path.suffix and path.suffix.lower() not in VIDEO_SUFFIXES:
            raise ValueError(
                f"{flag} {out}: a video cannot be written as {path.suffix}; "
                f"give a name ending in {', '.join(VIDEO_SUFFIXES)}"
            )
        kind = "file"
    if path.exists() and not (path.is_file() or path.is_dir()):  # a device, a pipe: never replaced
        raise FileExistsError(f"{flag} {out}: is not a regular file or folder; write elsewhere")
    if kind == "folder" and path.is_file():
        raise FileExistsError(f"{flag} {out}: is a file; give a folder (new or existing)")
    if kind == "file" and path.is_dir():
        raise IsADirectoryError(f"{flag} {out}: is a folder; give a file name")
    check_writable(path, f"{flag} {out}")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _in_a_log(target: Path, folder: Path) -> bool:
    """Whether a file written at ``target`` (below ``folder``) lands inside a log: a folder on the
    way from ``folder`` down to it is itself a log (a PNG beside a folder log's images joins them)."""
    from drive.data.readers import detect_format  # at run time: the readers' imports (start-up time)

    return any(detect_format(p) is not None for p in [*target.parents] if _inside(p, folder))


def _on_disk(option: str, kind: Optional[str], value: object) -> object:
    """What input ``--option``'s value names on disk (module docstring); None: nothing."""
    if value is None:
        return None
    if kind == "config":  # an unknown profile: its one-line error, before anything runs
        return resolve_config(str(value), "--" + option.replace("_", "-"))
    if kind == "policy" and (value == "expert" or str(value).startswith("constant:")):
        return None
    return value


def check_out_against_inputs(
    out: object,
    inputs: Mapping[str, object],
    kinds: Mapping[str, str],
    flag: str = "--out",
    out_kind: Optional[str] = None,
) -> None:
    """Refuse an output (``flag``: ``--out``) that is an input, or (``logs`` inputs) contains one or
    lies inside one; a file output (``out_kind`` ``"file"`` or ``"video"``) below a folder of logs
    only when it would land inside one of the logs. ``inputs``: option name -> value; ``kinds``:
    option name -> ``"logs"`` | ``"file"`` | ``"config"`` | ``"policy"``."""
    if out is None:
        return
    target = Path(os.path.realpath(str(out)))
    for option, value in inputs.items():
        for path in existing_paths([_on_disk(option, kinds.get(option), value)]):
            given = f"the input --{option.replace('_', '-')} {path}"
            if path == target:
                raise ValueError(f"{flag} {out}: is {given}; write the output elsewhere")
            if kinds.get(option) != "logs":
                continue
            if _inside(target, path) and (out_kind not in ("file", "video") or _in_a_log(target, path)):
                raise ValueError(f"{flag} {out}: lies inside {given}; write the output elsewhere")
            if _inside(path, target):
                raise ValueError(
                    f"{flag} {out}: contains {given} (it could be written over); write the output elsewhere"
                )


def check_ranges(args: object, ranges: Mapping[str, Mapping[str, object]]) -> None:
    """Every number option in ``ranges`` (its dest -> :func:`drive.io.checks.number`'s limits) in
    its range, each value of a list option too: a ``ValueError`` naming the option (``--km``)."""
    for dest, limits in ranges.items():
        value = getattr(args, dest, None)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None:
                number(item, "--" + dest.replace("_", "-"), **limits)  # type: ignore[arg-type]
