"""The canonical recording: the one on-disk and in-memory shape of a driving log.

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
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

import cv2
import numpy as np

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
    "Problem",
    "read_log_csv",
    "read_log_rows",
    "complete_video_frames",
]

FORMAT_NAME = "drive-recording"
FORMAT_VERSION = 1
REQUIRED_COLUMNS = ("frame", "timestamp_s", "curvature", "speed_mps")
PathLike = Union[str, os.PathLike]
# report(file, row, kind, message): drive.data.errors.Problems.report (raises, or records and goes on)
Report = Callable[[str, Optional[int], str, str], None]


class RecordingError(ValueError):
    """A recording is malformed; the message names the file (and row) and what is wrong."""


@dataclass
class CameraCalibration:
    """Pinhole intrinsics (pixels, at the recorded image size) and mounting on the vehicle.

    The camera looks forward along the vehicle's x axis; ``pitch_rad`` > 0 tilts it down,
    ``yaw_rad`` > 0 turns it left, ``lateral_m`` > 0 mounts it left of the centre line.
    """

    fx: float
    fy: float
    cx: float
    cy: float
    height_m: float = 1.5
    pitch_rad: float = 0.0
    yaw_rad: float = 0.0
    roll_rad: float = 0.0
    lateral_m: float = 0.0
    forward_m: float = 0.0

    def matrix(self) -> np.ndarray:
        """The 3x3 intrinsic matrix K."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "CameraCalibration":
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise RecordingError(f"camera calibration: unknown keys {sorted(unknown)}")
        return cls(**{k: float(v) for k, v in d.items()})


@dataclass
class RecordingMeta:
    """What ``meta.json`` holds. ``label`` is always curvature in 1/m in the canonical model."""

    fps: float
    width: int
    height: int
    camera: Optional[CameraCalibration] = None
    source: str = "unknown"
    conditions: Dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = None
    storage: str = "frames"
    video: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise RecordingError(f"fps must be a positive number, got {self.fps!r}")
        if self.width <= 0 or self.height <= 0:
            raise RecordingError(f"image size must be positive, got {self.width}x{self.height}")
        if self.storage not in ("frames", "video"):
            raise RecordingError(f"storage must be 'frames' or 'video', got {self.storage!r}")

    def to_dict(self) -> Dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "fps": self.fps,
            "image": {"width": self.width, "height": self.height},
            "camera": self.camera.to_dict() if self.camera else None,
            "label": {"name": "curvature", "unit": "1/m"},
            "speed_unit": "m/s",
            "source": self.source,
            "conditions": self.conditions,
            "seed": self.seed,
            "storage": self.storage,
            "video": self.video,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: Dict[str, Any], where: str = "meta.json") -> "RecordingMeta":
        if d.get("format") != FORMAT_NAME:
            raise RecordingError(f"{where}: not a drive recording (format={d.get('format')!r})")
        if int(d.get("version", -1)) > FORMAT_VERSION:
            raise RecordingError(f"{where}: format version {d['version']} is newer than {FORMAT_VERSION}")
        label = d.get("label", {})
        if label.get("name") != "curvature" or label.get("unit") != "1/m":
            raise RecordingError(f"{where}: label must be curvature in 1/m, got {label!r}")
        try:
            camera = CameraCalibration.from_dict(d["camera"]) if d.get("camera") else None
            return cls(
                fps=float(d["fps"]),
                width=int(d["image"]["width"]),
                height=int(d["image"]["height"]),
                camera=camera,
                source=str(d.get("source", "unknown")),
                conditions=dict(d.get("conditions") or {}),
                seed=d.get("seed"),
                storage=str(d.get("storage", "frames")),
                video=d.get("video"),
                extra=dict(d.get("extra") or {}),
            )
        except (KeyError, TypeError) as e:
            raise RecordingError(f"{where}: missing or malformed field {e}") from None
        except RecordingError as e:
            raise RecordingError(f"{where}: {e}") from None


class FrameSource(Protocol):
    """Random access to a recording's frames as uint8 RGB arrays [H, W, 3]."""

    def __len__(self) -> int: ...

    def read(self, index: int) -> np.ndarray: ...


def _to_rgb(bgr: np.ndarray) -> np.ndarray:
    if bgr.ndim == 2:
        return cv2.cvtColor(bgr, cv2.COLOR_GRAY2RGB)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


class ImageFiles:
    """Frames stored as image files (JPEG, PNG, ...), one per frame."""

    def __init__(self, paths: Sequence[PathLike]):
        self.paths = [Path(p) for p in paths]

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, index: int) -> np.ndarray:
        path = self.paths[index]
        data = np.fromfile(path, dtype=np.uint8) if path.is_file() else None
        if data is None:
            raise RecordingError(f"{path}: image file is missing (frame {index})")
        image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
        if image is None:
            raise RecordingError(f"{path}: not a readable image (frame {index})")
        return _to_rgb(image)


class VideoFrames:
    """Frames of one video file, decoded with OpenCV; sequential reads do not seek.

    A file cut short inside a frame (:func:`complete_video_frames`) raises for that frame and
    the ones after it ("video is truncated"), instead of returning the half-decoded frame."""

    def __init__(self, path: PathLike, count: Optional[int] = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise RecordingError(f"{self.path}: video file is missing")
        self._cap: Optional[cv2.VideoCapture] = None
        self._next = 0
        self._complete: Optional[int] = None
        self._complete_known = False
        if count is None:
            cap = cv2.VideoCapture(str(self.path))
            if not cap.isOpened():
                raise RecordingError(f"{self.path}: cannot open video")
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
            cap.release()
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getstate__(self) -> Dict[str, Any]:  # picklable for DataLoader workers
        return {"path": self.path, "count": self.count}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.path, self.count, self._cap, self._next = state["path"], state["count"], None, 0
        self._complete, self._complete_known = None, False

    def read(self, index: int) -> np.ndarray:
        if not 0 <= index < self.count:
            raise IndexError(f"{self.path}: frame {index} out of range 0..{self.count - 1}")
        if not self._complete_known:
            self._complete, self._complete_known = complete_video_frames(self.path), True
        if self._complete is not None and index >= self._complete:
            raise RecordingError(f"{self.path}: video is truncated, frame {index} is cut short by the end of the "
                                 f"file (only frames 0..{self._complete - 1} are whole)")
        if self._cap is None:
            self._cap = cv2.VideoCapture(str(self.path))
            self._next = 0
        if index != self._next:
            self._cap.set(cv2.CAP_PROP_POS_FRAMES, index)
        ok, image = self._cap.read()
        if not ok or image is None:
            raise RecordingError(f"{self.path}: video is truncated, frame {index} cannot be decoded")
        self._next = index + 1
        return _to_rgb(image)


class ArrayFrames:
    """Frames held in an array-like [N, H, W, 3] uint8 RGB (numpy, memmap, HDF5 dataset)."""

    def __init__(self, array: Any):
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def read(self, index: int) -> np.ndarray:
        return np.asarray(self.array[index])


class SubsetFrames:
    """The frames ``indices`` of another source, renumbered 0..len-1."""

    def __init__(self, source: FrameSource, indices: np.ndarray):
        self.source, self.indices = source, np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.indices)

    def read(self, index: int) -> np.ndarray:
        return self.source.read(int(self.indices[index]))


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

    def __init__(self, meta: RecordingMeta, log: Dict[str, np.ndarray], source: FrameSource,
                 path: Optional[PathLike] = None, origin: Optional[Tuple[str, np.ndarray]] = None):
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
            out.append(Problem(log_name, int(lines[i + 1]), f"{kind}_timestamp",
                               f"{kind} timestamp_s {t[i + 1]!r} after {t[i]!r}"))
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
            meta = RecordingMeta.from_dict(json.loads(meta_path.read_text()), str(meta_path))
        except json.JSONDecodeError as e:
            raise RecordingError(f"{meta_path}: invalid JSON ({e})") from None
        log, lines, positions, total = read_log_rows(root / "log.csv", report)
        frames = log["frame"]
        if not np.array_equal(frames, positions):
            bad = int(np.flatnonzero(frames != positions)[0])
            raise RecordingError(f"{root / 'log.csv'}, row {int(lines[bad])}: frame column must count 0, 1, 2, ... "
                                 f"(one per data row), got {int(frames[bad])} on data row {int(positions[bad])}")
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


def read_log_rows(path: Path, report: Optional[Report] = None
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

    with open(path, newline="", encoding="utf-8-sig") as f:
        numbered = [(i + 1, row) for i, row in enumerate(csv.reader(f)) if any(c.strip() for c in row)]
    if not numbered:
        raise RecordingError(f"{path}: empty file")
    header = [c.strip() for c in numbered[0][1]]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise RecordingError(f"{path}: header lacks columns {missing} (has {header})")
    rows: List[List[float]] = []
    lines: List[int] = []
    positions: List[int] = []
    for position, (line, row) in enumerate(numbered[1:]):
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
    return (columns, np.asarray(lines, dtype=np.int64), np.asarray(positions, dtype=np.int64),
            len(numbered) - 1)


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


class RecordingWriter:
    """Write a canonical recording atomically.

    Usage::

        with RecordingWriter(out_dir, meta) as w:
            for frame_rgb, row in ...:
                w.append(frame_rgb, timestamp_s=t, curvature=k, speed_mps=v)

    Frames are uint8 RGB [H, W, 3] of the size in ``meta``. The directory appears only when the
    writer closes without error; an exception discards everything written.
    """

    def __init__(self, directory: PathLike, meta: RecordingMeta, jpeg_quality: int = 95,
                 overwrite: bool = False):
        self.directory = Path(directory)
        if self.directory.exists() and not overwrite:
            raise RecordingError(f"{self.directory}: already exists (pass overwrite=True to replace)")
        self.meta = meta
        self.jpeg_quality = int(jpeg_quality)
        self._tmp = self.directory.with_name(f".{self.directory.name}.partial-{os.getpid()}")
        shutil.rmtree(self._tmp, ignore_errors=True)
        (self._tmp / "frames").mkdir(parents=True)
        self._rows: List[Dict[str, float]] = []
        self._columns: List[str] = list(REQUIRED_COLUMNS)
        self._video: Optional[cv2.VideoWriter] = None
        if meta.storage == "video":
            meta.video = meta.video or "video.mp4"
            (self._tmp / "frames").rmdir()
            fourcc = cv2.VideoWriter_fourcc(*"mp4v")
            self._video = cv2.VideoWriter(str(self._tmp / meta.video), fourcc, meta.fps,
                                          (meta.width, meta.height))
            if not self._video.isOpened():
                raise RecordingError(f"{self._tmp / meta.video}: OpenCV cannot write this video")

    def __enter__(self) -> "RecordingWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, frame_rgb: np.ndarray, *, timestamp_s: float, curvature: float, speed_mps: float,
               **extra: float) -> None:
        """Add one frame and its log row (``extra`` columns: lateral_offset_m, heading_error_rad, ...)."""
        expected = (self.meta.height, self.meta.width, 3)
        if frame_rgb.shape != expected or frame_rgb.dtype != np.uint8:
            raise RecordingError(f"frame {len(self._rows)}: expected uint8 {expected}, "
                                 f"got {frame_rgb.dtype} {frame_rgb.shape}")
        row = {"frame": len(self._rows), "timestamp_s": timestamp_s, "curvature": curvature,
               "speed_mps": speed_mps, **extra}
        for name in extra:
            if name not in self._columns:
                if self._rows:
                    raise RecordingError(f"frame {len(self._rows)}: new column {name!r} after the first row")
                self._columns.append(name)
        bgr = cv2.cvtColor(frame_rgb, cv2.COLOR_RGB2BGR)
        if self._video is not None:
            self._video.write(bgr)
        else:
            ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, self.jpeg_quality])
            if not ok:
                raise RecordingError(f"frame {len(self._rows)}: JPEG encoding failed")
            data.tofile(self._tmp / "frames" / f"{len(self._rows):06d}.jpg")
        self._rows.append(row)

    def close(self) -> Path:
        """Finish the files and move the recording into place; returns its directory."""
        if self._video is not None:
            self._video.release()
            self._video = None
        if not self._rows:
            self.abort()
            raise RecordingError(f"{self.directory}: no frames were written")
        with open(self._tmp / "log.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(self._columns)
            for row in self._rows:
                writer.writerow([_format(row.get(c, float("nan"))) for c in self._columns])
        (self._tmp / "meta.json").write_text(json.dumps(self.meta.to_dict(), indent=2) + "\n")
        if self.directory.exists():
            shutil.rmtree(self.directory)
        os.replace(self._tmp, self.directory)
        return self.directory

    def abort(self) -> None:
        """Discard everything written so far."""
        if self._video is not None:
            self._video.release()
            self._video = None
        shutil.rmtree(self._tmp, ignore_errors=True)


def _format(value: float) -> str:
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return repr(float(value))
