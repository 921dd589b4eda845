"""Shared machinery for readers: row validation into a canonical recording (options and CSV
tables live in :mod:`drive.data.readers.options` and :mod:`drive.data.readers.csv_table`, and are
re-exported here, where every reader imports them from).

A reader parses a foreign log into full columns plus a frame source, marks rows it already knows
are bad (missing image files, rows outside the label range), and hands everything to
:func:`build_recording`, which checks labels and timestamps, drops or raises through
:class:`~drive.data.errors.Problems`, and returns a canonical :class:`~drive.io.recording.Recording`.

Row numbers in messages: for text files the 1-based line number in the file (so an editor jumps
there); for arrays (HDF5, video) the 0-based frame index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np

from drive.data.errors import DataError, Problems
from drive.data.readers.csv_table import (
    IMAGE_EXTENSIONS,
    CsvTable,
    read_csv_table,
    reroot,
    resolve_images,
    rows_as_float,
)
from drive.data.readers.options import APPROXIMATE_CAMERA, FieldOfViewCamera, ReaderOptions
from drive.data.readers.poses import POSE_LIMITS, check_heading
from drive.io.recording import (
    POSE_COLUMNS,
    FrameSource,
    Recording,
    RecordingError,
    RecordingMeta,
    SubsetFrames,
)

__all__ = [
    "ReaderOptions",
    "FieldOfViewCamera",
    "APPROXIMATE_CAMERA",
    "CsvTable",
    "read_csv_table",
    "reroot",
    "build_recording",
    "IMAGE_EXTENSIONS",
    "estimate_fps",
    "rows_as_float",
    "resolve_images",
    "NoFrames",
]


def estimate_fps(timestamps_s: np.ndarray, default: float = 10.0) -> float:
    """Median frame rate of strictly increasing timestamps (``default`` for fewer than 2)."""
    if len(timestamps_s) < 2:
        return default
    dt = float(np.median(np.diff(timestamps_s)))
    return 1.0 / dt if dt > 0 else default


def build_recording(
    *,
    file: str,
    rows: np.ndarray,
    log: Dict[str, np.ndarray],
    source: FrameSource,
    problems: Problems,
    meta: Dict[str, Any],
    keep: Optional[np.ndarray] = None,
    path: Optional[Path] = None,
) -> Optional[Recording]:
    """Validate a parsed log and turn it into a :class:`Recording`.

    Args:
        file: the file whose ``rows`` are reported in messages.
        rows: [N] row number of every entry (line numbers for text files, indices for arrays).
        log: columns [N] incl. ``timestamp_s``, ``curvature`` (1/m), ``speed_mps``; optionally the
            pose ``x_m``, ``y_m``, ``yaw_rad`` (all three), checked like the labels and against the
            direction of travel (:func:`~drive.data.readers.poses.check_heading`: with ``on_error:
            skip`` a failed check drops the pose columns, not the rows).
        source: N frames, aligned with ``log``.
        keep: [N] bool, rows already known to be unusable are False (already reported).
        meta: :class:`RecordingMeta` keyword arguments (``fps`` is estimated when absent, ``width``
            and ``height`` are read from the first kept frame when absent).
    Returns:
        The recording of the kept rows, or None when nothing is left (reported as ``empty``).
    """
    n = len(log["timestamp_s"])
    keep = np.ones(n, dtype=bool) if keep is None else keep.copy()
    _drop_non_finite(file, rows, log, keep, problems)
    _drop_implausible(file, rows, log, keep, problems)
    _drop_unordered_times(file, rows, log["timestamp_s"], keep, problems)
    index = np.flatnonzero(keep)
    if len(index) == 0:
        problems.report(file, None, "empty", "no usable frames")
        return None
    if len(index) < n:
        source = SubsetFrames(source, index)
    columns = {k: np.asarray(v, dtype=np.float64)[index] for k, v in log.items() if k != "frame"}
    columns["frame"] = np.arange(len(index), dtype=np.int64)
    if all(c in columns for c in POSE_COLUMNS) and not check_heading(file, columns, problems):
        columns = {k: v for k, v in columns.items() if k not in POSE_COLUMNS}
    meta = dict(meta)
    meta.setdefault("fps", estimate_fps(columns["timestamp_s"]))
    if "width" not in meta or "height" not in meta:
        meta["height"], meta["width"] = _first_frame_size(source, file)
    try:  # a rate estimated from timestamps, a size or a calibration out of range: named by file
        if isinstance(meta.get("camera"), FieldOfViewCamera):
            meta["camera"] = meta["camera"].resolve(int(meta["width"]), int(meta["height"]))
        recording_meta = RecordingMeta(**meta)
    except RecordingError as e:
        raise DataError(file, None, "bad_meta", str(e)) from None
    return Recording(
        recording_meta,
        columns,
        source,
        path if path is not None else Path(file),
        origin=(file, np.asarray(rows, dtype=np.int64)[index]),
    )


def _drop_non_finite(
    file: str, rows: np.ndarray, log: Dict[str, np.ndarray], keep: np.ndarray, problems: Problems
) -> None:
    """Clear ``keep`` (and report) where a float column is NaN or infinite."""
    for name, column in log.items():
        column = np.asarray(column)
        if column.dtype.kind != "f":
            continue
        for i in np.flatnonzero(keep & ~np.isfinite(column)):
            kind = "bad_timestamp" if name == "timestamp_s" else "non_finite_label"
            problems.report(
                file,
                int(rows[i]),
                "non_finite_pose" if name in POSE_COLUMNS else kind,
                f"{name} is {float(column[i])!r}",
            )
            keep[i] = False


# beyond these a label or speed is no measurement of a car: a 0.1 m turning radius, 360 km/h
MAX_CURVATURE_PER_M = 10.0
MAX_SPEED_MPS = 100.0


def _drop_implausible(
    file: str, rows: np.ndarray, log: Dict[str, np.ndarray], keep: np.ndarray, problems: Problems
) -> None:
    """Clear ``keep`` (and report) where |curvature| or |speed| is beyond what a car does (1e308 in
    a label column is a damaged row, not a sharp turn), or a pose beyond any place (``POSE_LIMITS``)."""
    limits = [("curvature", MAX_CURVATURE_PER_M, "1/m"), ("speed_mps", MAX_SPEED_MPS, "m/s")]
    limits += [(name, limit, unit) for name, (limit, unit) in POSE_LIMITS.items() if name in log]
    for name, limit, unit in limits:
        column = np.asarray(log[name], dtype=np.float64)
        for i in np.flatnonzero(keep & (np.abs(column) > limit)):
            problems.report(
                file,
                int(rows[i]),
                "implausible_value",
                f"{name} is {float(column[i])!r} {unit}, beyond ±{limit:g}",
            )
            keep[i] = False


def _drop_unordered_times(
    file: str, rows: np.ndarray, t: np.ndarray, keep: np.ndarray, problems: Problems
) -> None:
    """Clear ``keep`` (and report) where a kept row's time is not after the previous kept row's."""
    last = -np.inf
    for i in np.flatnonzero(keep):
        if t[i] <= last:
            kind = "duplicate_timestamp" if t[i] == last else "non_monotonic_timestamp"
            problems.report(
                file,
                int(rows[i]),
                kind,
                f"timestamp {float(t[i])!r} s is not after the previous {float(last)!r} s",
            )
            keep[i] = False
        else:
            last = t[i]


def _first_frame_size(source: FrameSource, file: str) -> Tuple[int, int]:
    """(H, W) of the first decodable frame; undecodable frames are reported later by the cache."""
    for i in range(min(len(source), 16)):
        try:
            frame = source.read(i)
        except (RecordingError, OSError, IndexError):
            continue
        return int(frame.shape[0]), int(frame.shape[1])
    raise DataError(file, None, "unreadable_frames", "none of the first 16 frames can be decoded")


class NoFrames:
    """A frame source for validating label rows that have no frames of their own."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def read(self, index: int) -> np.ndarray:
        raise IndexError("label rows have no frames")
