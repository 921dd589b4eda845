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


def _boxes(f, start: int, end: int) -> Iterator[Tuple[bytes, int, int]]:
    """(type, payload start, payload end) of the ISO-BMFF boxes in ``[start, end)`` (ends clipped
    to ``end``: a box cut short by the end of the file still lists)."""
    pos = start
    while pos + 8 <= end:
        f.seek(pos)
        head = f.read(16)
        if len(head) < 8:
            return
        size, kind, payload = int.from_bytes(head[:4], "big"), head[4:8], pos + 8
        if size == 1:
            if len(head) < 16:
                return
            size, payload = int.from_bytes(head[8:16], "big"), pos + 16
        elif size == 0:
            size = end - pos
        if size < payload - pos:
            return
        yield kind, payload, min(pos + size, end)
        pos += size


def _child(f, start: int, end: int, path: Sequence[bytes]) -> Optional[Tuple[int, int]]:
    for kind, a, b in _boxes(f, start, end):
        if kind == path[0]:
            return (a, b) if len(path) == 1 else _child(f, a, b, path[1:])
    return None


def _mp4_complete_frames(f, size: int) -> Optional[int]:
    """Complete frames of an MP4/MOV's video track in presentation order: the prefix before the
    first frame whose sample, or any sample decoded after it, ends past the end of the file. The
    samples come from the sample tables in ``moov`` and, for a fragmented file, from every
    ``moof``'s track runs. None when the index cannot be read."""
    moov = _child(f, 0, size, [b"moov"])
    if moov is None:
        return None
    track = _video_track(f, moov)
    if track is None:
        return None
    track_id, stbl = track
    samples = _stbl_samples(f, stbl) if stbl is not None else None
    if samples is None:
        return None
    ends, times = [samples[0]], [samples[1]]
    clock = int(samples[1][-1]) + 1 if len(samples[1]) else 0
    for kind, a, b in _boxes(f, 0, size):
        if kind == b"moof":
            found = _fragment_samples(f, a - 8, a, b, track_id, clock)
            if found is None:
                return None
            ends.append(found[0])
            times.append(found[1])
            clock = int(found[2])
    end = np.concatenate(ends)
    pts = np.concatenate(times)
    if len(end) == 0:
        return None
    cut = np.flatnonzero(end > size)
    if len(cut) == 0:
        return int(len(end))
    order = np.argsort(pts, kind="stable")  # decode index of each presented frame
    return int(np.flatnonzero(order >= cut[0])[0])


def _video_track(f, moov: Tuple[int, int]) -> Optional[Tuple[int, Optional[Tuple[int, int]]]]:
    """(track ID, stbl span) of the first video track."""
    for kind, a, b in _boxes(f, *moov):
        if kind != b"trak":
            continue
        hdlr = _child(f, a, b, [b"mdia", b"hdlr"])
        tkhd = _child(f, a, b, [b"tkhd"])
        if hdlr is None or tkhd is None:
            continue
        f.seek(hdlr[0] + 8)
        if f.read(4) != b"vide":
            continue
        f.seek(tkhd[0])
        version = f.read(1)[0]
        f.seek(tkhd[0] + (20 if version == 1 else 12))
        return int.from_bytes(f.read(4), "big"), _child(f, a, b, [b"mdia", b"minf", b"stbl"])
    return None


def _stbl_samples(f, stbl: Tuple[int, int]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(end offset, presentation time) of every sample in a sample table, in decode order."""
    tables = {kind: (x, y) for kind, x, y in _boxes(f, *stbl)}

    def table(kind: bytes) -> Optional[bytes]:
        if kind not in tables:
            return None
        x, y = tables[kind]
        f.seek(x)
        return f.read(y - x)

    stsz, stsc = table(b"stsz"), table(b"stsc")
    stco, co64 = table(b"stco"), table(b"co64")
    if stsz is None or stsc is None or (stco is None and co64 is None):
        return None
    fixed, count = int.from_bytes(stsz[4:8], "big"), int.from_bytes(stsz[8:12], "big")
    sizes = (np.full(count, fixed, np.int64) if fixed else
             np.frombuffer(stsz[12:12 + 4 * count], ">u4").astype(np.int64))
    if stco is not None:
        n = int.from_bytes(stco[4:8], "big")
        chunks = np.frombuffer(stco[8:8 + 4 * n], ">u4").astype(np.int64)
    else:
        n = int.from_bytes(co64[4:8], "big")
        chunks = np.frombuffer(co64[8:8 + 8 * n], ">u8").astype(np.int64)
    runs = np.frombuffer(stsc[8:8 + 12 * int.from_bytes(stsc[4:8], "big")], ">u4").reshape(-1, 3).astype(np.int64)
    if len(sizes) != count or len(chunks) != n or (count and len(runs) == 0):
        return None
    offsets = np.empty(count, np.int64)
    sample = 0
    for r, (first, per_chunk, _) in enumerate(runs):
        last = runs[r + 1][0] - 1 if r + 1 < len(runs) else n
        for chunk in range(first - 1, min(last, n)):
            pos = chunks[chunk]
            for _ in range(per_chunk):
                if sample >= count:
                    break
                offsets[sample] = pos
                pos += sizes[sample]
                sample += 1
    if sample != count:
        return None
    times = np.arange(count, dtype=np.int64)  # decode times (stts) plus composition offsets (ctts)
    stts = table(b"stts")
    if stts is not None and count:
        entries = np.frombuffer(stts[8:8 + 8 * int.from_bytes(stts[4:8], "big")], ">u4").reshape(-1, 2)
        deltas = np.repeat(entries[:, 1].astype(np.int64), entries[:, 0].astype(np.int64))[:count]
        if len(deltas) == count:
            times = np.concatenate([[0], np.cumsum(deltas)[:-1]])
    ctts = table(b"ctts")
    if ctts is not None and count:
        entries = np.frombuffer(ctts[8:8 + 8 * int.from_bytes(ctts[4:8], "big")], ">i4").reshape(-1, 2)
        shifts = np.repeat(entries[:, 1].astype(np.int64), entries[:, 0].astype(np.int64))[:count]
        if len(shifts) == count:
            times = times + shifts
    return offsets + sizes, times


def _fragment_samples(f, moof_start: int, a: int, b: int, track_id: int, clock: int
                      ) -> Optional[Tuple[np.ndarray, np.ndarray, int]]:
    """(end offset, presentation time, next decode time) of the video track's samples in one
    ``moof`` (ISO 14496-12 8.8: tfhd defaults, trun sizes, durations and composition offsets)."""
    ends: List[int] = []
    times: List[int] = []
    for kind, x, y in _boxes(f, a, b):
        if kind != b"traf":
            continue
        tfhd = _child(f, x, y, [b"tfhd"])
        if tfhd is None:
            return None
        f.seek(tfhd[0])
        head = f.read(tfhd[1] - tfhd[0])
        flags = int.from_bytes(head[1:4], "big")
        if int.from_bytes(head[4:8], "big") != track_id:
            continue
        pos, base, duration, size = 8, moof_start, 0, 0
        if flags & 0x1:
            base = int.from_bytes(head[pos:pos + 8], "big")
            pos += 8
        pos += 4 if flags & 0x2 else 0
        if flags & 0x8:
            duration = int.from_bytes(head[pos:pos + 4], "big")
            pos += 4
        if flags & 0x10:
            size = int.from_bytes(head[pos:pos + 4], "big")
        offset = base
        for kind2, u, v in _boxes(f, x, y):
            if kind2 != b"trun":
                continue
            f.seek(u)
            run = f.read(v - u)
            rflags, count = int.from_bytes(run[1:4], "big"), int.from_bytes(run[4:8], "big")
            q = 8
            if rflags & 0x1:
                offset = base + int.from_bytes(run[q:q + 4], "big", signed=True)
                q += 4
            q += 4 if rflags & 0x4 else 0
            for _ in range(count):
                d, n, shift = duration, size, 0
                if rflags & 0x100:
                    d = int.from_bytes(run[q:q + 4], "big")
                    q += 4
                if rflags & 0x200:
                    n = int.from_bytes(run[q:q + 4], "big")
                    q += 4
                q += 4 if rflags & 0x400 else 0
                if rflags & 0x800:
                    shift = int.from_bytes(run[q:q + 4], "big", signed=run[0] == 1)
                    q += 4
                if q > len(run):  # the run itself is cut short: its samples are not whole
                    ends.append(1 << 62)
                else:
                    ends.append(offset + n)
                times.append(clock + shift)
                offset += n
                clock += d
    return np.asarray(ends, np.int64), np.asarray(times, np.int64), clock


def _avi_complete_frames(f, size: int) -> Optional[int]:
    """Complete video chunks (``##dc``/``##db``) in an AVI's ``movi`` list before the first one the
    end of the file cuts short; None when the file is not a RIFF AVI."""
    f.seek(0)
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"AVI ":
        return None
    pos, end, complete = 12, size, 0
    stack: List[int] = []
    while pos + 8 <= end or stack:
        if pos + 8 > end:
            pos, end = end, stack.pop()
            continue
        f.seek(pos)
        chunk = f.read(12)
        kind, length = chunk[:4], int.from_bytes(chunk[4:8], "little")
        if kind == b"LIST" and len(chunk) == 12 and chunk[8:12] in (b"movi", b"rec "):
            stack.append(end)
            end, pos = min(pos + 8 + length, size), pos + 12
            continue
        if kind[2:] in (b"dc", b"db") and stack:
            if pos + 8 + length > size:
                return complete
            complete += 1
        pos += 8 + length + (length & 1)
    return None


def complete_video_frames(path: PathLike) -> Optional[int]:
    """How many leading frames of a video are stored whole, when a file cut short (a copy or a
    recording that stopped mid-write) ends inside a frame: OpenCV decodes that last, partial
    frame without an error, half garbage. Read from the container's own index (MP4/MOV sample
    tables, AVI chunks); None when the container says nothing (unknown format, no index).
    For an intact MP4/MOV this is its frame count; for an intact AVI, None."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(12)
            if head[:4] == b"RIFF":
                return _avi_complete_frames(f, size)
            if head[4:8] in (b"ftyp", b"moov", b"free", b"mdat", b"wide", b"skip"):
                return _mp4_complete_frames(f, size)
    except (OSError, ValueError, IndexError):
        return None
    return None


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
