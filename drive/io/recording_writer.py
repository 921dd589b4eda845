"""Writing the canonical recording directory atomically (docs/formats.md): :class:`RecordingWriter`
builds it under a temporary name and renames it into place on :meth:`RecordingWriter.close`, so a
crash never leaves a half-written recording behind."""

from __future__ import annotations

import csv
import errno
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import cv2
import numpy as np

from drive.io.atomic import WriteError, commit
from drive.io.recording_meta import REQUIRED_COLUMNS, PathLike, RecordingError, RecordingMeta
from drive.io.video_index import complete_video_frames

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
        with self._written():
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

    @contextmanager
    def _written(self) -> Iterator[None]:
        """File-system errors (a full disk, no permission) as a :class:`WriteError` naming the
        recording, not its temporary folder; the recording is discarded."""
        try:
            yield
        except OSError as e:
            self.abort()
            if isinstance(e, WriteError):
                raise
            reason = e.strerror or str(e)
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                reason += " (free some space or write elsewhere)"
            err = WriteError(e.errno, f"{self.directory}: the recording could not be written: {reason}")
            err.filename = str(self.directory)
            raise err from None

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
            with self._written(), open(self._tmp / "frames" / f"{len(self._rows):06d}.jpg", "wb") as f:
                f.write(data.tobytes())  # not ndarray.tofile: its full-disk error names no errno
        self._rows.append(row)

    def close(self) -> Path:
        """Finish the files and move the recording into place; returns its directory. Whatever
        fails here discards the recording (nothing half-written is left)."""
        try:
            return self._finish()
        except BaseException:
            self.abort()
            raise

    def _finish(self) -> Path:
        if self._video is not None:
            self._video.release()
            self._video = None
            self._check_video()
        if not self._rows:
            raise RecordingError(f"{self.directory}: no frames were written")
        try:  # no NaN or infinity in meta.json: a calibration or rate that is not a number is refused
            meta = json.dumps(self.meta.to_dict(), indent=2, allow_nan=False)
        except ValueError:
            raise RecordingError(
                f"{self.directory}: meta.json would hold a number that is not finite"
            ) from None
        with self._written():
            with open(self._tmp / "log.csv", "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(self._columns)
                for row in self._rows:
                    writer.writerow([_format(row.get(c, float("nan"))) for c in self._columns])
            (self._tmp / "meta.json").write_text(meta + "\n")
            commit(self._tmp, self.directory)  # every file synced before the rename: no half recording
        return self.directory

    def _check_video(self) -> None:
        """OpenCV's video writer fails silently (a full disk leaves a cut-short file): the frames the
        container's own index holds whole must be the rows written (read without a decoder, which
        would print its complaints about a cut-short file on stderr)."""
        count = complete_video_frames(self._tmp / str(self.meta.video))
        if count != len(self._rows):
            full = os.statvfs(self._tmp).f_bavail == 0
            held = "no readable index" if count is None else f"{count} of {len(self._rows)} frames"
            with self._written():
                raise OSError(
                    errno.ENOSPC if full else errno.EIO,
                    os.strerror(errno.ENOSPC) if full else f"the video holds {held}",
                )

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
