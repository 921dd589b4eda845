"""Shared machinery for readers: options, CSV tables, path re-rooting, row validation.

A reader parses a foreign log into full columns plus a frame source, marks rows it already knows
are bad (missing image files, rows outside the label range), and hands everything to
:func:`build_recording`, which checks labels and timestamps, drops or raises through
:class:`~drive.data.errors.Problems`, and returns a canonical :class:`~drive.io.recording.Recording`.

Row numbers in messages: for text files the 1-based line number in the file (so an editor jumps
there); for arrays (HDF5, video) the 0-based frame index.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path, PureWindowsPath
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from drive.data.errors import DataError, Problems
from drive.data.labels import LabelSpec
from drive.io.recording import (
    CameraCalibration,
    FrameSource,
    Recording,
    RecordingError,
    RecordingMeta,
    SubsetFrames,
)

__all__ = [
    "ReaderOptions",
    "CsvTable",
    "read_csv_table",
    "reroot",
    "build_recording",
    "SubsetFrames",
    "IMAGE_EXTENSIONS",
    "estimate_fps",
    "rows_as_float",
    "resolve_images",
    "NoFrames",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp", ".tif", ".tiff")


@dataclasses.dataclass
class ReaderOptions:
    """Everything a user may need to tell a reader about a foreign log (all optional).

    Attributes:
        label: steering semantics (:class:`~drive.data.labels.LabelSpec` fields as a dict); each
            format has its own default (curvature for canonical/HDF5, normalized x 25 deg for the
            Udacity simulator, steering-wheel radians for the Udacity car).
        image_column, timestamp_column, steering_column, speed_column: CSV column names (or
            0-based indices as strings for headerless files).
        time_unit: timestamps in s | ms | us | ns (default: the format's own, else s).
        speed_unit: mps | kph | mph (default: the format's own, else mps).
        speed_mps: speed assumed when the log has none (default 8.33 m/s = 30 km/h; 2 m/s for
            Donkeycar's 1/10-scale cars).
        fps: frame rate when the log has no timestamps (frames at i / fps).
        camera: camera calibration for logs that carry none; needed by viewpoint synthesis. Either
            ``CameraCalibration`` fields (``fx, fy, cx, cy, height_m, pitch_rad``, pixels at the
            log's image size), or a field of view and mounting, ``{hfov_deg, height_m, pitch_rad}``
            (optional ``vfov_deg``; square pixels and a centred principal point otherwise), resolved
            at each recording's image size, or ``approximate``: :data:`APPROXIMATE_CAMERA`.
        side_cameras: also read left/right cameras (Udacity) as extra recordings whose labels
            steer back toward the centre by ``side_offset`` (in the log's own steering unit:
            the left camera's label turns right by it, the right camera's turns left).
        csv: label CSV for a video (default: same stem as the video, else the only CSV beside it).
        video_start_s: CSV time of the video's first frame (default: the first CSV timestamp).
        camera_topic, steering_topic, speed_topic: ROS bag topics (default: the only candidate;
            ``drive data inspect BAG`` lists them).
        stamp: ROS bag message time: auto | header | bag (see :mod:`drive.data.readers.rosbag`).
    """

    label: Optional[Dict[str, Any]] = None
    image_column: Optional[str] = None
    timestamp_column: Optional[str] = None
    steering_column: Optional[str] = None
    speed_column: Optional[str] = None
    time_unit: Optional[str] = None
    speed_unit: Optional[str] = None
    speed_mps: Optional[float] = None
    fps: Optional[float] = None
    camera: Optional[Any] = None
    side_cameras: bool = False
    side_offset: float = 0.2
    csv: Optional[str] = None
    video_start_s: Optional[float] = None
    camera_topic: Optional[str] = None
    steering_topic: Optional[str] = None
    speed_topic: Optional[str] = None
    stamp: Optional[str] = None

    @classmethod
    def from_any(cls, value: Optional[object]) -> "ReaderOptions":
        if isinstance(value, ReaderOptions):
            return value
        d = dict(value or {})
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(
                f"unknown reader option(s) {sorted(unknown)}; "
                f"known: {[f.name for f in dataclasses.fields(cls)]}"
            )
        return cls(**d)

    def units(self, time: str = "s", speed: str = "mps", speed_mps: float = 8.33) -> Tuple[str, str, float]:
        """(time unit, speed unit, assumed speed) with the format's defaults for unset options."""
        return (
            self.time_unit or time,
            self.speed_unit or speed,
            float(self.speed_mps if self.speed_mps is not None else speed_mps),
        )

    def label_spec(self, **defaults: Any) -> LabelSpec:
        return LabelSpec.from_any(self.label, **defaults)

    def calibration(self) -> Optional[Any]:
        """A :class:`CameraCalibration`, a :class:`FieldOfViewCamera` (resolved by
        :func:`build_recording` at the image size) or None, from the ``camera`` option."""
        camera = self.camera
        if not camera:
            return None
        if isinstance(camera, str):
            if camera != "approximate":
                raise ValueError(
                    f"reader option camera: expected calibration fields, "
                    f"{{hfov_deg, height_m, pitch_rad}} or 'approximate', got {camera!r}"
                )
            return FieldOfViewCamera(**APPROXIMATE_CAMERA)
        if not isinstance(camera, dict):
            raise ValueError(f"reader option camera: expected a mapping or 'approximate', got {camera!r}")
        if "hfov_deg" in camera:
            unknown = set(camera) - {f.name for f in dataclasses.fields(FieldOfViewCamera)}
            if unknown:
                raise ValueError(
                    f"reader option camera: unknown keys {sorted(unknown)} beside hfov_deg "
                    "(allowed: hfov_deg, vfov_deg, height_m, pitch_rad)"
                )
            return FieldOfViewCamera(**{k: float(v) for k, v in camera.items()})
        try:
            return CameraCalibration.from_dict(camera)
        except (TypeError, RecordingError) as err:
            raise ValueError(
                f"reader option camera: {err} (give fx, fy, cx, cy, height_m, pitch_rad, "
                "or hfov_deg, height_m, pitch_rad)"
            ) from None


# The stated approximation for logs whose camera is unknown (reader option ``camera: approximate``):
# the built-in world's camera, a forward camera 1.5 m above the road, 80 deg horizontal field of view,
# pitched 0.15 rad down. Viewpoint synthesis with it is only as right as the guess: shifts warp the
# road as if seen from there, and the label correction assumes the same geometry.
APPROXIMATE_CAMERA: Dict[str, float] = {"hfov_deg": 80.0, "height_m": 1.5, "pitch_rad": 0.15}


@dataclasses.dataclass(frozen=True)
class FieldOfViewCamera:
    """A camera given by its field of view and mounting; :meth:`resolve` gives the calibration at an
    image size (square pixels unless ``vfov_deg``, principal point at the centre)."""

    hfov_deg: float
    height_m: float = 1.5
    pitch_rad: float = 0.0
    vfov_deg: Optional[float] = None

    def __post_init__(self) -> None:
        if not 1.0 <= self.hfov_deg < 179.0 or (
            self.vfov_deg is not None and not 1.0 <= self.vfov_deg < 179.0
        ):
            raise ValueError(
                f"reader option camera: field of view must be in [1, 179) degrees, got {self.hfov_deg}"
            )
        if not self.height_m > 0:
            raise ValueError(f"reader option camera: height_m must be positive, got {self.height_m}")

    def resolve(self, width: int, height: int) -> CameraCalibration:
        fx = 0.5 * width / math.tan(math.radians(self.hfov_deg) / 2.0)
        fy = fx if self.vfov_deg is None else 0.5 * height / math.tan(math.radians(self.vfov_deg) / 2.0)
        return CameraCalibration(
            fx=fx,
            fy=fy,
            cx=(width - 1) / 2.0,
            cy=(height - 1) / 2.0,
            height_m=self.height_m,
            pitch_rad=self.pitch_rad,
        )


@dataclasses.dataclass
class CsvTable:
    """A CSV file as text columns. ``lines[i]`` is the 1-based file line of data row i."""

    path: Path
    header: Optional[List[str]]
    rows: List[List[str]]
    lines: List[int]

    def __len__(self) -> int:
        return len(self.rows)

    def column_index(self, name: str, what: str) -> int:
        """Index of column ``name`` (a header name, or an integer index for headerless files)."""
        if self.header is not None and name in self.header:
            return self.header.index(name)
        if name.isdigit() and (self.header is None or int(name) < len(self.header)):
            return int(name)
        have = (
            self.header
            if self.header is not None
            else f"{len(self.rows[0]) if self.rows else 0} unnamed columns"
        )
        raise ValueError(f"{self.path}: no {what} column {name!r} (columns: {have})")

    def column(self, index: int) -> List[str]:
        return [r[index] if index < len(r) else "" for r in self.rows]


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def read_csv_table(
    path: Path, problems: Problems, header: Optional[bool] = None, numeric_columns: Sequence[int] = ()
) -> CsvTable:
    """Read a CSV. ``header=None`` detects one: the first row is a header when it has a field that
    is neither a number nor a file path. Rows with the wrong number of fields are reported."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        raw = [(i + 1, row) for i, row in enumerate(csv.reader(f)) if row and any(c.strip() for c in row)]
    if not raw:
        return CsvTable(path, None, [], [])
    first = [c.strip() for c in raw[0][1]]
    if header is None:
        header = any(not _is_number(c) and not _looks_like_path(c) for c in first)
    names = first if header else None
    body = raw[1:] if header else raw
    width = len(first)
    rows, lines = [], []
    for line, row in body:
        row = [c.strip() for c in row]
        if len(row) != width:
            problems.report(str(path), line, "malformed_row", f"{len(row)} fields, expected {width}")
            continue
        bad = [j for j in numeric_columns if not _is_number(row[j])]
        if bad:
            col = names[bad[0]] if names else f"column {bad[0]}"
            problems.report(str(path), line, "not_a_number", f"{col} = {row[bad[0]]!r} is not a number")
            continue
        rows.append(row)
        lines.append(line)
    return CsvTable(path, names, rows, lines)


def _looks_like_path(text: str) -> bool:
    return text.lower().endswith(IMAGE_EXTENSIONS) or "/" in text or "\\" in text


def reroot(recorded: str, base: Path) -> Optional[Path]:
    """Find an image a log names by a path from another machine (absolute Unix or Windows paths).

    Tries the path as written (relative to ``base`` when relative), then ever shorter trailing
    parts of it under ``base`` (``C:\\Users\\me\\run1\\IMG\\c.jpg`` -> ``base/IMG/c.jpg`` ->
    ``base/c.jpg``). Returns None when nothing exists.
    """
    text = recorded.strip()
    direct = Path(text)
    candidate = direct if direct.is_absolute() else base / direct
    if candidate.is_file():
        return candidate
    parts = [
        p for p in PureWindowsPath(text).parts if p not in ("\\", "/") and not re.match(r"^[A-Za-z]:\\?$", p)
    ]
    for k in range(len(parts), 0, -1):
        candidate = base.joinpath(*parts[-k:])
        if candidate.is_file():
            return candidate
    return None


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
        log: columns [N] incl. ``timestamp_s``, ``curvature`` (1/m), ``speed_mps``.
        source: N frames, aligned with ``log``.
        keep: [N] bool, rows already known to be unusable are False (already reported).
        meta: :class:`RecordingMeta` keyword arguments (``fps`` is estimated when absent, ``width``
            and ``height`` are read from the first kept frame when absent).
    Returns:
        The recording of the kept rows, or None when nothing is left (reported as ``empty``).
    """
    n = len(log["timestamp_s"])
    keep = np.ones(n, dtype=bool) if keep is None else keep.copy()
    for name, column in log.items():
        column = np.asarray(column)
        if column.dtype.kind != "f":
            continue
        for i in np.flatnonzero(keep & ~np.isfinite(column)):
            problems.report(
                file,
                int(rows[i]),
                "non_finite_label" if name != "timestamp_s" else "bad_timestamp",
                f"{name} is {column[i]}",
            )
            keep[i] = False
    t = log["timestamp_s"]
    last = -np.inf
    for i in np.flatnonzero(keep):
        if t[i] <= last:
            kind = "duplicate_timestamp" if t[i] == last else "non_monotonic_timestamp"
            problems.report(
                file, int(rows[i]), kind, f"timestamp {t[i]!r} s is not after the previous {last!r} s"
            )
            keep[i] = False
        else:
            last = t[i]
    index = np.flatnonzero(keep)
    if len(index) == 0:
        problems.report(file, None, "empty", "no usable frames")
        return None
    if len(index) < n:
        source = SubsetFrames(source, index)
    columns = {k: np.asarray(v, dtype=np.float64)[index] for k, v in log.items() if k != "frame"}
    columns["frame"] = np.arange(len(index), dtype=np.int64)
    meta = dict(meta)
    meta.setdefault("fps", estimate_fps(columns["timestamp_s"]))
    if "width" not in meta or "height" not in meta:
        meta["height"], meta["width"] = _first_frame_size(source, file)
    if isinstance(meta.get("camera"), FieldOfViewCamera):
        meta["camera"] = meta["camera"].resolve(int(meta["width"]), int(meta["height"]))
    return Recording(
        RecordingMeta(**meta),
        columns,
        source,
        path if path is not None else Path(file),
        origin=(file, np.asarray(rows, dtype=np.int64)[index]),
    )


def _first_frame_size(source: FrameSource, file: str) -> Tuple[int, int]:
    """(H, W) of the first decodable frame; undecodable frames are reported later by the cache."""
    for i in range(min(len(source), 16)):
        try:
            frame = source.read(i)
        except (RecordingError, OSError, IndexError):
            continue
        return int(frame.shape[0]), int(frame.shape[1])
    raise DataError(file, None, "unreadable_frames", "none of the first 16 frames can be decoded")


def rows_as_float(table: CsvTable, index: int) -> np.ndarray:
    """Column ``index`` of a table as float64 (unparseable -> NaN, caught by build_recording)."""
    out = np.empty(len(table), dtype=np.float64)
    for i, r in enumerate(table.rows):
        try:
            out[i] = float(r[index])
        except (ValueError, IndexError):
            out[i] = np.nan
    return out


def resolve_images(
    table: CsvTable, index: int, base: Path, problems: Problems
) -> Tuple[List[Path], np.ndarray]:
    """Image paths of column ``index`` re-rooted under ``base``; missing ones reported, keep=False."""
    paths: List[Path] = []
    keep = np.ones(len(table), dtype=bool)
    for i, row in enumerate(table.rows):
        found = reroot(row[index], base)
        if found is None:
            problems.report(
                str(table.path),
                table.lines[i],
                "missing_image",
                f"image {row[index]!r} not found under {base}",
            )
            keep[i] = False
            paths.append(base / PureWindowsPath(row[index]).name)
        else:
            paths.append(found)
    return paths, keep


class NoFrames:
    """A frame source for validating label rows that have no frames of their own."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def read(self, index: int) -> np.ndarray:
        raise IndexError("label rows have no frames")
