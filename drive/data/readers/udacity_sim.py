"""Reader for the Udacity simulator's ``driving_log.csv`` (docs/references.md, log formats).

Columns ``center, left, right, steering, throttle, brake, speed``, with or without a header.
Image paths are often absolute paths from the recording machine (Unix or Windows); they are
re-rooted under the log's folder (``.../IMG/center_*.jpg`` -> ``<log dir>/IMG/center_*.jpg``).
Steering is normalized to [-1, 1], positive = RIGHT, times ``max_angle_deg`` (default 25 deg);
curvature = -tan(angle) / wheelbase. Speed is in mph. Timestamps come from the image names
(``center_2016_12_01_13_30_48_287.jpg``, millisecond resolution) or from ``fps``.
With ``side_cameras`` the left and right images become two more recordings of the same drive
(``meta.extra["drive"]`` is shared, so splits keep them together).
"""

from __future__ import annotations

import calendar
import re
from pathlib import Path, PureWindowsPath
from typing import List, Optional

import numpy as np

from drive.data.errors import Problems
from drive.data.label_units import speed_to_mps, to_curvature_per_m
from drive.data.readers.base import (
    ReaderOptions,
    build_recording,
    read_csv_table,
    resolve_images,
    rows_as_float,
)
from drive.data.readers.registry import register_reader
from drive.io.recording import ImageFiles, Recording

__all__ = ["read", "detect", "timestamp_from_name", "LABEL_DEFAULTS"]

COLUMNS = ("center", "left", "right", "steering", "throttle", "brake", "speed")
LABEL_DEFAULTS = {"unit": "normalized", "sign": -1.0, "max_angle_deg": 25.0, "wheelbase_m": 2.5}
_NAME = re.compile(r"(\d{4})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{2})_(\d{3})\.\w+$")


def detect(path: Path) -> bool:
    if path.is_dir():
        return (path / "driving_log.csv").is_file()
    return path.name == "driving_log.csv"


def timestamp_from_name(name: str) -> Optional[float]:
    """Seconds since the epoch encoded in a simulator image name, or None."""
    m = _NAME.search(PureWindowsPath(name).name)
    if m is None:
        return None
    y, mo, d, h, mi, s, ms = (int(g) for g in m.groups())
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + ms / 1000.0


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    log_path = path / "driving_log.csv" if path.is_dir() else path
    table = read_csv_table(log_path, problems, numeric_columns=(3, 6))
    if len(table) == 0:
        problems.report(str(log_path), None, "empty", "no data rows")
        return []
    if len(table.rows[0]) < len(COLUMNS):
        raise ValueError(f"{log_path}: expected columns {COLUMNS}, got {len(table.rows[0])} fields")
    spec = options.label_spec(**LABEL_DEFAULTS)
    steering = rows_as_float(table, 3)
    speed = speed_to_mps(rows_as_float(table, 6), options.units(speed="mph")[1])
    names = table.column(0)
    stamps = [timestamp_from_name(n) for n in names]
    if all(s is not None for s in stamps):
        t = np.asarray(stamps, dtype=np.float64)
    elif options.fps:
        t = np.arange(len(table)) / float(options.fps)
    else:
        raise ValueError(f"{log_path}: image names carry no timestamps (e.g. {names[0]!r}); set fps")
    cameras = [("center", 0, 0.0)]
    if options.side_cameras:
        # The left camera sees the car shifted left: its label steers right by side_offset.
        cameras += [
            ("left", 1, -options.side_offset * spec.sign),
            ("right", 2, options.side_offset * spec.sign),
        ]
    out: List[Recording] = []
    for camera, column, offset in cameras:
        paths, keep = resolve_images(table, column, log_path.parent, problems)
        log = {"timestamp_s": t, "curvature": to_curvature_per_m(steering + offset, spec), "speed_mps": speed}
        meta = {
            "source": f"udacity_sim:{log_path}:{camera}",
            "camera": options.calibration(),
            "extra": {"drive": str(log_path), "camera": camera},
        }
        if options.fps:
            meta["fps"] = float(options.fps)
        rec = build_recording(
            file=str(log_path),
            rows=np.asarray(table.lines),
            log=log,
            source=ImageFiles(paths),
            problems=problems,
            meta=meta,
            keep=keep,
            path=log_path,
        )
        if rec is not None:
            out.append(rec)
    return out


register_reader("udacity_sim", detect=detect, read=read, layout="driving_log.csv")
