"""Reader for the canonical recording directory (drive.io.recording): validates rows, drops or raises."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import cv2
import numpy as np

from drive.data.errors import Problems
from drive.data.readers.base import ReaderOptions, build_recording
from drive.data.readers.registry import FIRST, register_reader
from drive.io.recording import Recording, RecordingError, SubsetFrames, VideoFrames

__all__ = ["read", "detect"]


def detect(path: Path) -> bool:
    """A folder with meta.json, or one shaped like a recording that lost it (``log.csv`` beside a
    ``frames/`` folder): that one is read as a canonical recording and refused for its missing
    meta.json, not taken for an image folder with a CSV."""
    if not path.is_dir():
        return False
    return (path / "meta.json").is_file() or ((path / "log.csv").is_file() and (path / "frames").is_dir())


def _stored_frames(rec: Recording) -> Optional[Tuple[int, Path]]:
    """(number of frames stored, where) -- the JPEGs in ``frames/``, or the video's frame count from
    its header (None when the container does not say)."""
    source = rec.source.source if isinstance(rec.source, SubsetFrames) else rec.source
    if isinstance(source, VideoFrames):
        cap = cv2.VideoCapture(str(source.path))
        count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) if cap.isOpened() else 0
        cap.release()
        return (count, source.path) if count > 0 else None
    frames = rec.path / "frames"
    return len(list(frames.glob("*.jpg"))), frames


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    """One canonical recording directory -> [Recording] (empty list when skipped). A bad row of
    ``log.csv`` (``malformed_row``, ``not_a_number``) is reported and dropped on its own."""
    try:
        rec = Recording.open(path, report=problems.report)
    except RecordingError as e:
        problems.report(str(path), None, "unreadable", str(e))
        return []
    stored = _stored_frames(rec)
    if stored is not None and stored[0] != rec.log_rows:
        problems.report(
            str(path / "log.csv"),
            None,
            "count_mismatch",
            f"{rec.log_rows} log rows but {stored[0]} frames in {stored[1]}",
        )
    meta = rec.meta
    fields = dict(
        fps=meta.fps,
        width=meta.width,
        height=meta.height,
        camera=meta.camera,
        source=meta.source,
        conditions=meta.conditions,
        seed=meta.seed,
        storage=meta.storage,
        video=meta.video,
        extra=meta.extra,
    )
    if fields["camera"] is None:
        fields["camera"] = options.calibration()
    lines = rec.origin[1] if rec.origin is not None else np.arange(len(rec)) + 2  # file lines, header = 1
    out = build_recording(
        file=str(path / "log.csv"),
        rows=lines,
        log=rec.log,
        source=rec.source,
        problems=problems,
        meta=fields,
        path=path,
    )
    return [out] if out is not None else []


register_reader(
    "canonical", detect=detect, read=read, layout="a folder with meta.json and log.csv", priority=FIRST
)
