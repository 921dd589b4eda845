"""The canonical recording: the one on-disk and in-memory shape of a driving log, and reading it.

A recording is a directory (documented in docs/formats.md)::

    meta.json      fps, image size, camera calibration, label name/unit, source, conditions, seed
    frames/        000000.jpg, 000001.jpg, ...   (storage "frames")   -- or --
    video.mp4      one video file                (storage "video")
    log.csv        frame, timestamp_s, curvature, speed_mps[, lateral_offset_m, heading_error_rad, ...]

Units: curvature in 1/m, positive = turning left (counter-clockwise, ISO 8855); lateral_offset_m
positive = car left of the lane centre; heading_error_rad positive = car pointing left of the lane.

Every reader of a foreign log (drive.data.readers) produces a :class:`Recording` in memory; its
frames come from any :class:`FrameSource` (image files, a video, an array, an HDF5 dataset).
:class:`RecordingWriter` writes the canonical directory atomically: it builds it under a temporary
name and renames it into place on :meth:`RecordingWriter.close`, so a crash never leaves a
half-written recording behind.

Layout: ``meta.json`` and the error type in :mod:`drive.io.recording_meta`, frame sources in
:mod:`drive.io.frames`, writing in :mod:`drive.io.recording_writer`; this module reads, and
re-exports all of them (``from drive.io.recording import Recording, RecordingWriter`` works).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from drive.io.checks import decode_lines, read_text

# the format's pieces live beside this module; they are re-exported here, the one import path users need
from drive.io.frames import ArrayFrames, FrameSource, ImageFiles, SubsetFrames, VideoFrames
from drive.io.recording_meta import (
    FORMAT_NAME,
    FORMAT_VERSION,
    POSE_COLUMNS,
    REQUIRED_COLUMNS,
    CameraCalibration,
    PathLike,
    RecordingError,
    RecordingMeta,
)
from drive.io.recording_writer import RecordingWriter
from drive.io.video_index import complete_video_frames

__all__ = [
    "CameraCalibration",
    "RecordingMeta",
    "Recording",
    "RecordingWriter",
    "RecordingError",
    "FrameSource",
    "ImageFiles",
    "VideoFrames",
    "ArrayFrames",
    "SubsetFrames",
    "REQUIRED_COLUMNS",
    "POSE_COLUMNS",
    "Problem",
    "read_log_csv",
    "read_log_rows",
    "complete_video_frames",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]

# report(file, row, kind, message): drive.data.errors.Problems.report (raises, or records and goes on)
Report = Callable[[str, Optional[int], str, str], None]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a log: ``file``, ``row`` (its 1-based line in that file, the header being
    line 1; None = the whole file), a short ``kind`` and a message."""

    file: str
    row: Optional[int]
    kind: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.row is None else f"{self.file}, row {self.row}"
        return f"{where}: {self.message} [{self.kind}]"


class Recording:
    """A driving log in the canonical model.

    Attributes:
        meta: :class:`RecordingMeta`.
        log: column name -> np.ndarray [N] (float64; ``frame`` as int64).
        source: the :class:`FrameSource` giving frame ``i`` as uint8 RGB [H, W, 3].
        path: the directory (or foreign file) it came from, for messages.
        origin: ``(file, rows)``: the file whose row ``rows[i]`` frame i's label came from (a log's
            line number, or the frame's index in a video or HDF5 file), for messages that name the
            row of the user's file even after unusable rows were dropped; None: ``(path, i)``.
    """

    def __init__(
        self,
        meta: RecordingMeta,
        log: Dict[str, np.ndarray],
        source: FrameSource,
        path: Optional[PathLike] = None,
        origin: Optional[Tuple[str, np.ndarray]] = None,
    ):
        missing = [c for c in REQUIRED_COLUMNS if c not in log]
        where = str(path) if path is not None else "recording"
        if missing:
            raise RecordingError(f"{where}: log lacks columns {missing}")
        n = len(log["frame"])
        for name, column in log.items():
            if len(column) != n:
                raise RecordingError(f"{where}: column {name!r} has {len(column)} rows, expected {n}")
        if len(source) != n:
            raise RecordingError(f"{where}: {len(source)} frames but {n} log rows")
        self.meta, self.log, self.source = meta, log, source
        self.path = Path(path) if path is not None else None
        if origin is not None and len(origin[1]) != n:
            raise RecordingError(f"{where}: origin has {len(origin[1])} rows, expected {n}")
        self.origin = origin
        self.log_rows = n  # data rows of the log file; more when Recording.open dropped bad rows

    def origin_of(self, index: int) -> Tuple[str, int]:
        """(file, row) that frame ``index`` came from, as messages name it."""
        if self.origin is None:
            return str(self.path) if self.path is not None else "recording", int(index)
        return self.origin[0], int(self.origin[1][index])

    def __len__(self) -> int:
        return len(self.log["frame"])

    def __repr__(self) -> str:
        return f"Recording({self.path}, {len(self)} frames at {self.meta.fps:g} fps)"

    @property
    def timestamps_s(self) -> np.ndarray:
        return self.log["timestamp_s"]

    @property
    def curvature(self) -> np.ndarray:
        """Steering label, curvature in 1/m."""
        return self.log["curvature"]

    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` as uint8 RGB [H, W, 3]."""
        return self.source.read(index)

    def frames(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self.source.read(i)

    def problems(self, log_name: str = "log.csv") -> List[Problem]:
        """Label and timing problems: non-finite values, non-increasing timestamps.

        Rows are lines of ``log_name`` (the header is line 1): frame i's row of the file it came
        from (:meth:`origin_of`), else line i + 2.
        """
        out: List[Problem] = []
        lines = self.origin[1] if self.origin is not None else np.arange(len(self)) + 2
        for name, column in self.log.items():
            if column.dtype.kind == "f":
                for i in np.flatnonzero(~np.isfinite(column)):
                    out.append(Problem(log_name, int(lines[i]), "non_finite", f"{name} is {column[i]}"))
        t = self.log["timestamp_s"]
        for i in np.flatnonzero(np.diff(t) <= 0):
            kind = "duplicate" if t[i + 1] == t[i] else "decreasing"
            out.append(
                Problem(
                    log_name,
                    int(lines[i + 1]),
                    f"{kind}_timestamp",
                    f"{kind} timestamp_s {float(t[i + 1])!r} after {float(t[i])!r}",
                )
            )
        return out

    @classmethod
    def open(cls, directory: PathLike, report: Optional[Report] = None) -> "Recording":
        """Open a canonical recording directory, checking its structure (not yet its pixels).

        Without ``report`` a bad row of ``log.csv`` (wrong field count, a value that is not a
        number) is a :class:`RecordingError` naming the file and row. With ``report``
        (``Problems.report``) each bad row is reported (``malformed_row``, ``not_a_number``) and
        dropped on its own, its frame with it. Blank lines and a UTF-8 BOM are accepted.
        ``log_rows`` is then the number of data rows in the file, dropped ones included.
        """
        root = Path(directory)
        meta_path = root / "meta.json"
        if not meta_path.is_file():
            raise RecordingError(f"{meta_path}: missing (is {root} a drive recording?)")
        try:
            meta = RecordingMeta.from_dict(json.loads(read_text(meta_path)), str(meta_path))
        except json.JSONDecodeError as e:
            raise RecordingError(f"{meta_path}: invalid JSON ({e})") from None
        except ValueError as e:  # not UTF-8 (a RecordingError passes through as it is)
            raise e if isinstance(e, RecordingError) else RecordingError(str(e)) from None
        log, lines, positions, total = read_log_rows(root / "log.csv", report)
        frames = log["frame"]
        if not np.array_equal(frames, positions):
            bad = int(np.flatnonzero(frames != positions)[0])
            raise RecordingError(
                f"{root / 'log.csv'}, row {int(lines[bad])}: frame column must count 0, 1, 2, ... "
                f"(one per data row), got {int(frames[bad])} on data row {int(positions[bad])}"
            )
        if meta.storage == "video":
            source: FrameSource = VideoFrames(root / (meta.video or "video.mp4"), count=total)
            if len(frames) < total:
                source = SubsetFrames(source, frames)
        else:
            source = ImageFiles([root / "frames" / f"{int(i):06d}.jpg" for i in frames])
        rec = cls(meta, log, source, root, origin=(str(root / "log.csv"), lines))
        rec.log_rows = total
        return rec


def read_log_csv(path: Path) -> Dict[str, np.ndarray]:
    """Read a canonical log.csv into columns; a bad row is an error naming the file and row."""
    return read_log_rows(path)[0]


def read_log_rows(
    path: Path, report: Optional[Report] = None
) -> Tuple[Dict[str, np.ndarray], np.ndarray, np.ndarray, int]:
    """Read a canonical log.csv: (columns, line [K], data-row index [K], data rows in the file).

    Lines are 1-based file lines (the header is line 1); blank lines are skipped (they count as
    lines, not as data rows) and a UTF-8 BOM is accepted. A row with the wrong number of fields
    (``malformed_row``) or a value that is not a number (``not_a_number``) raises a
    :class:`RecordingError` naming file and row, or, with ``report``, is reported and dropped
    (the K kept rows' data-row indices then have holes). A missing file, an empty one or a header
    without the required columns is always an error.
    """
    if not path.is_file():
        raise RecordingError(f"{path}: missing")
    where = str(path)

    def bad_row(line: int, kind: str, message: str) -> None:
        if report is None:
            raise RecordingError(f"{where}, row {line}: {message}")
        report(where, line, kind, message)

    numbered = _numbered_rows(path, lambda line, message: bad_row(line, "not_utf8", message))
    header = [c.strip() for c in numbered[0][1] or []]  # checked by _numbered_rows
    rows: List[List[float]] = []
    lines: List[int] = []
    positions: List[int] = []
    for position, (line, row) in enumerate(numbered[1:]):
        if row is None:  # not UTF-8: reported, dropped, and still a data row of the file
            continue
        if len(row) != len(header):
            bad_row(line, "malformed_row", f"{len(row)} fields, header has {len(header)}")
            continue
        try:
            values = [float(v) for v in row]
        except ValueError:
            name, text = next((h, v) for h, v in zip(header, row) if not _is_float(v))
            bad_row(line, "not_a_number", f"{name} is not a number: {text.strip()!r}")
            continue
        frame = values[header.index("frame")]
        if not (math.isfinite(frame) and frame == int(frame)):
            bad_row(line, "not_a_number", f"frame is not an integer: {row[header.index('frame')].strip()!r}")
            continue
        rows.append(values)
        lines.append(line)
        positions.append(position)
    table = np.array(rows, dtype=np.float64).reshape(len(rows), len(header))
    columns = {name: table[:, j] for j, name in enumerate(header)}
    columns["frame"] = columns["frame"].astype(np.int64)
    return (
        columns,
        np.asarray(lines, dtype=np.int64),
        np.asarray(positions, dtype=np.int64),
        len(numbered) - 1,
    )


def _numbered_rows(path: Path, not_utf8: Callable[[int, str], None]) -> List[Tuple[int, Optional[List[str]]]]:
    """The non-blank rows of a canonical log.csv with their file lines, the header first, checked:
    not empty, every required column named, none twice. A line that is not UTF-8 goes to
    ``not_utf8`` and stays in the list as ``(line, None)`` (a data row of the file, without values)."""
    bad: List[int] = []

    def report(line: int, message: str) -> None:
        not_utf8(line, message)
        bad.append(line)

    reader = csv.reader(io.StringIO(decode_lines(path, report), newline=""))
    numbered: List[Tuple[int, Optional[List[str]]]] = [
        (i + 1, None if i + 1 in bad else row)
        for i, row in enumerate(reader)
        if i + 1 in bad or any(c.strip() for c in row)
    ]
    if not numbered or numbered[0][1] is None:
        raise RecordingError(f"{path}: {'empty file' if not numbered else 'its header is not UTF-8 text'}")
    header = [c.strip() for c in numbered[0][1]]
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise RecordingError(f"{path}, row {numbered[0][0]}: column(s) {twice} appear twice in the header")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise RecordingError(f"{path}: header lacks columns {missing} (has {header})")
    return numbered


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
