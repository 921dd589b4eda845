"""Writing the canonical recording directory atomically (docs/formats.md): :class:`RecordingWriter`
builds it under a temporary name and renames it into place on :meth:`RecordingWriter.close`, so a
crash never leaves a half-written recording behind."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional

import cv2
import numpy as np

from drive.io.atomic import commit
from drive.io.recording_meta import REQUIRED_COLUMNS, PathLike, RecordingError, RecordingMeta

__all__ = ["RecordingWriter"]


class RecordingWriter:
    """Write a canonical recording atomically.

    Usage::

        with RecordingWriter(out_dir, meta) as w:
            for frame_rgb, row in ...:
                w.append(frame_rgb, timestamp_s=t, curvature=k, speed_mps=v)

    Frames are uint8 RGB [H, W, 3] of the size in ``meta``. The directory appears only when the
    writer closes without error; an exception discards everything written.
    """

    def __init__(
        self, directory: PathLike, meta: RecordingMeta, jpeg_quality: int = 95, overwrite: bool = False
    ):
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
            self._video = cv2.VideoWriter(
                str(self._tmp / meta.video), fourcc, meta.fps, (meta.width, meta.height)
            )
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

    def append(
        self, frame_rgb: np.ndarray, *, timestamp_s: float, curvature: float, speed_mps: float, **extra: float
    ) -> None:
        """Add one frame and its log row (``extra`` columns: lateral_offset_m, heading_error_rad, ...)."""
        expected = (self.meta.height, self.meta.width, 3)
        if frame_rgb.shape != expected or frame_rgb.dtype != np.uint8:
            raise RecordingError(
                f"frame {len(self._rows)}: expected uint8 {expected}, got {frame_rgb.dtype} {frame_rgb.shape}"
            )
        row = {
            "frame": len(self._rows),
            "timestamp_s": timestamp_s,
            "curvature": curvature,
            "speed_mps": speed_mps,
            **extra,
        }
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
        commit(self._tmp, self.directory)  # every file synced before the rename: no half recording
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
