"""Reader for an image folder plus a CSV: columns and units named in the options.

Either the CSV names each frame's image (``image_column``, paths relative to the CSV's folder or
absolute from another machine, re-rooted), or it has no image column and its rows pair in order
with the folder's images sorted by name (counts must match). Timestamps come from
``timestamp_column`` (``time_unit``) or, when the CSV has none, from ``fps``. The car's pose, where
the CSV has one, from ``x_column``, ``y_column``, ``yaw_column`` (``yaw_unit``) or the columns
``x_m``, ``y_m``, ``yaw_rad`` (:mod:`drive.data.readers.poses`).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from drive.data.errors import Problems
from drive.data.label_units import speed_to_mps, time_to_s, to_curvature_per_m
from drive.data.readers.base import (
    IMAGE_EXTENSIONS,
    CsvTable,
    ReaderOptions,
    build_recording,
    read_csv_table,
    resolve_images,
    rows_as_float,
)
from drive.data.readers.poses import csv_poses
from drive.data.readers.registry import FALLBACK, register_reader
from drive.io.recording import ImageFiles, Recording

__all__ = ["read", "detect", "find_csv", "csv_labels"]

_TIME_NAMES = ("timestamp_s", "timestamp", "time_s", "time", "t")
_STEER_NAMES = {
    "curvature": "curvature_per_m",
    "curvature_per_m": "curvature_per_m",
    "inverse_r": "curvature_per_m",
    "curvature_per_km": "curvature_per_km",
    "steering": None,
    "steering_angle": None,
    "angle": None,
}
_SPEED_NAMES = ("speed_mps", "speed")


def find_csv(folder: Path) -> Optional[Path]:
    csvs = sorted(folder.glob("*.csv"))
    return csvs[0] if len(csvs) == 1 else None


def detect(path: Path) -> bool:
    if path.is_file():
        return path.suffix.lower() == ".csv"
    if not path.is_dir() or find_csv(path) is None:
        return False
    return not any(p.suffix.lower() in (".mp4", ".avi", ".mkv", ".mov", ".m4v") for p in path.iterdir())


def _pick(
    header: Optional[List[str]], given: Optional[str], names, what: str, required: bool, where: object = ""
) -> Optional[str]:
    if given is not None:
        return given
    for name in names:
        if header and name in header:
            return name
    if required:
        have = header if header is not None else "none named: the CSV has no header"
        raise ValueError(f"{where}: name the {what} column in the reader options (columns: {have})")
    return None


def csv_labels(
    table: CsvTable, csv_path: Path, options: ReaderOptions, problems: Optional[Problems] = None
) -> Tuple[Optional[np.ndarray], np.ndarray, np.ndarray]:
    """A label table's (timestamps s or None without a timestamp column, curvature 1/m, speed m/s):
    the columns named in ``options`` or found by their usual names, in canonical units. A steering
    column of no known unit needs ``label: {unit: ...}``. With ``problems``, a text that is not a
    number is reported by its row (:func:`rows_as_float`; the row is out of ``table.keep()``)."""
    header = table.header
    time_unit, speed_unit, speed_mps = options.units()
    steer = _pick(header, options.steering_column, list(_STEER_NAMES), "steering", True, csv_path)
    default_unit = _STEER_NAMES.get(steer)
    if options.label is None and default_unit is None:
        raise ValueError(
            f"{csv_path}: the unit of steering column {steer!r} is ambiguous; set "
            f"label: {{unit: ...}} (curvature_per_m, normalized, wheel_deg, ...)"
        )
    spec = options.label_spec(**({"unit": default_unit} if default_unit else {}))
    curvature = to_curvature_per_m(
        rows_as_float(table, table.column_index(steer, "steering"), problems), spec
    )
    time_col = _pick(header, options.timestamp_column, _TIME_NAMES, "timestamp", False)
    timestamps = (
        time_to_s(rows_as_float(table, table.column_index(time_col, "timestamp"), problems), time_unit)
        if time_col is not None
        else None
    )
    speed_col = _pick(header, options.speed_column, _SPEED_NAMES, "speed", False)
    speed = (
        speed_to_mps(rows_as_float(table, table.column_index(speed_col, "speed"), problems), speed_unit)
        if speed_col is not None
        else np.full(len(table), speed_mps)
    )
    return timestamps, curvature, speed


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    csv_path = path if path.is_file() else find_csv(path)
    if csv_path is None:
        problems.report(str(path), None, "no_log", "expected exactly one CSV file in the folder")
        return []
    base = csv_path.parent
    table = read_csv_table(csv_path, problems)
    if len(table) == 0:
        problems.report(str(csv_path), None, "empty", "no data rows")
        return []
    timestamps, curvature, speed = csv_labels(table, csv_path, options, problems)
    poses = csv_poses(table, options, problems) or {}
    if timestamps is None:
        if not options.fps:
            raise ValueError(f"{csv_path}: no timestamp column (tried {_TIME_NAMES}); name one or set fps")
        timestamps = np.arange(len(table)) / float(options.fps)
    image_col = _pick(
        table.header, options.image_column, ("image", "filename", "frame_file", "path"), "image", False
    )
    if image_col is not None:
        paths, keep = resolve_images(table, table.column_index(image_col, "image"), base, problems)
    else:
        paths = sorted(p for p in base.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
        if len(paths) != len(table):
            problems.report(
                str(csv_path),
                None,
                "count_mismatch",
                f"{len(table)} label rows but {len(paths)} images in {base}",
            )
            n = min(len(paths), len(table))
            paths, table.rows, table.lines = paths[:n], table.rows[:n], table.lines[:n]
            curvature, timestamps, speed = curvature[:n], timestamps[:n], speed[:n]
            poses = {k: v[:n] for k, v in poses.items()}
        keep = np.ones(len(table), dtype=bool)
    keep = keep & table.keep()
    log = {"timestamp_s": timestamps, "curvature": curvature, "speed_mps": speed, **poses}
    meta = {
        "source": f"folder_csv:{csv_path}",
        "camera": options.calibration(),
        "extra": {"drive": str(csv_path), **({"poses": "CSV columns"} if poses else {})},
    }
    if options.fps:
        meta["fps"] = float(options.fps)
    rec = build_recording(
        file=str(csv_path),
        rows=np.asarray(table.lines),
        log=log,
        source=ImageFiles(paths),
        problems=problems,
        meta=meta,
        keep=keep,
        path=csv_path,
    )
    return [rec] if rec is not None else []


register_reader(
    "folder", detect=detect, read=read, layout="an image folder with one CSV, or the CSV", priority=FALLBACK
)
