"""Readers: foreign driving logs -> canonical :class:`~drive.io.recording.Recording` objects.

=============  ==================================================  ===================================
format         what the user points at                             steering unit default
=============  ==================================================  ===================================
canonical      a recording directory (meta.json, log.csv,          curvature 1/m
               frames/ | video)
udacity_sim    ``driving_log.csv`` or its folder                   normalized x 25 deg, + = right
udacity_real   ``interpolated.csv`` or its folder                  steering-wheel rad / 14.8
comma2k19      a segment folder (video.hevc, global_pose/,         steering-wheel deg / 15.3, + = left
               processed_log/)
donkeycar      a Donkeycar tub v2 (manifest.json,                  normalized x 25 deg, + = right
               catalog_*.catalog)
dave2          ``data.txt`` (``<image> <angle>[,<time>]``) or      steering-wheel deg / 15, + = right
               its folder
hdf5           an NCP ``.h5`` drive (camera_front, inverse_r,      curvature 1/m
               timestamp)
video          an ``.mp4``/``.avi`` with a timestamped CSV         named in options
               beside it
folder         an image folder with one CSV (or the CSV itself)    named in options
rosbag         a ROS 1 ``.bag``, a rosbag2 folder (sqlite3 or      by message type:
               MCAP) or a bare ``.mcap``/``.db3``; camera +        Ackermann, Twist, Float
               steering topics
=============  ==================================================  ===================================

:func:`read_logs` expands globs, walks directories that are not themselves a log (finding every
log below them), detects each log's format unless one is given, and returns the recordings.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from drive.data.errors import DataError, Problems
from drive.data.readers import (
    canonical,
    comma2k19,
    dave2,
    donkeycar,
    folder_csv,
    hdf5_ncp,
    rosbag,
    udacity_real,
    udacity_sim,
    video_csv,
)
from drive.data.readers.base import ReaderOptions
from drive.io.recording import Recording

__all__ = ["FORMATS", "LAYOUTS", "detect_format", "discover", "read_logs", "ReaderOptions", "no_log_message"]

# name -> (detect(path) -> bool, read(path, options, problems) -> [Recording]); detection order matters.
FORMATS: Dict[str, Tuple[Callable[[Path], bool], Callable[..., List[Recording]]]] = {
    "canonical": (canonical.detect, canonical.read),
    "udacity_sim": (udacity_sim.detect, udacity_sim.read),
    "udacity_real": (udacity_real.detect, udacity_real.read),
    "comma2k19": (comma2k19.detect, comma2k19.read),
    "donkeycar": (donkeycar.detect, donkeycar.read),
    "dave2": (dave2.detect, dave2.read),
    "hdf5": (hdf5_ncp.detect, hdf5_ncp.read),
    "rosbag": (rosbag.detect, rosbag.read),
    "video": (video_csv.detect, video_csv.read),
    "folder": (folder_csv.detect, folder_csv.read),
}
_WALKABLE = hdf5_ncp.HDF5_EXTENSIONS + video_csv.VIDEO_EXTENSIONS + rosbag.BAG_SUFFIXES
# what each format looks like on disk, for messages that say what was expected
LAYOUTS: Dict[str, str] = {
    "canonical": "a folder with meta.json and log.csv",
    "udacity_sim": "driving_log.csv",
    "udacity_real": "interpolated.csv",
    "comma2k19": "a segment folder with video.hevc and global_pose/",
    "donkeycar": "a tub with manifest.json",
    "dave2": "data.txt",
    "hdf5": "an NCP .h5 file",
    "video": "an .mp4/.avi with a CSV beside it",
    "folder": "an image folder with one CSV, or the CSV",
    "rosbag": "a ROS 1 .bag, a rosbag2 folder (metadata.yaml) or an .mcap/.db3 file",
}


def no_log_message(path: Union[str, Path]) -> str:
    """Why ``path`` holds no driving log, and the layouts that would be one (one line)."""
    p = Path(path)
    hint = ""
    if p.is_file() and p.parent != p and detect_format(p.parent) is not None:
        hint = f" (it is part of the {detect_format(p.parent)} log {p.parent}: pass that instead)"
    elif p.is_dir() and not any(p.iterdir()):
        hint = " (the folder is empty)"
    layouts = "; ".join(f"{name}: {what}" for name, what in LAYOUTS.items())
    return f"no driving log found{hint}; recognised layouts: {layouts}"


def detect_format(path: Union[str, Path]) -> Optional[str]:
    """The format of one log path, or None."""
    p = Path(path)
    for name, (detect, _) in FORMATS.items():
        if detect(p):
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
        if FORMATS[format][0](p):
            return [(p, format)]
    else:
        found = detect_format(p)
        if found is not None:
            return [(p, found)]
    if p.is_dir():
        children = [c for c in sorted(p.iterdir()) if c.is_dir() or c.suffix.lower() in _WALKABLE]
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
        out.extend(FORMATS[name][1](path, opts, problems))
    return out
