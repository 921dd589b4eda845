"""One video writer for every video drive makes (a drive in the world, a replayed log, a saliency video):
an MP4 (``mp4v``) written whole or not at all.

Frames go to a hidden temporary beside the destination (:mod:`drive.io.atomic`'s rule). On
:meth:`VideoFile.close` the container's own index must hold every frame written (OpenCV's writer fails
silently: a full disk leaves a cut-short file), then the file is renamed into place; ``close(keep=False)``
(a failed run) deletes it. The frame size is the first frame's.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Optional, Union

import cv2
import numpy as np

from drive.io.atomic import commit
from drive.io.video_index import complete_video_frames

__all__ = ["VIDEO_SUFFIXES", "VideoFile"]

# the containers OpenCV's mp4v writer opens (a name without a suffix is written as MP4 too)
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".avi", ".mkv")


class VideoFile:
    """``write(rgb)`` frames of one size, then ``close()`` (module docstring)."""

    def __init__(self, path: Union[str, Path], fps: float) -> None:
        if not (isinstance(fps, (int, float)) and fps > 0):
            raise ValueError(f"{path}: fps must be positive, got {fps!r}")
        self.path, self.fps = Path(path), float(fps)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.parent / f".{self.path.stem}.{os.getpid()}.tmp{self.path.suffix or '.mp4'}"
        self._writer: Any = None
        self.frames = 0

    def _open(self, width: int, height: int) -> None:
        self._writer = cv2.VideoWriter(
            str(self._tmp), cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (width, height)
        )
        if not self._writer.isOpened():
            self._tmp.unlink(missing_ok=True)
            raise ValueError(f"{self.path}: OpenCV cannot write this video")

    def write(self, rgb: np.ndarray) -> None:
        """Append a uint8 RGB frame ``[H, W, 3]``."""
        self.write_bgr(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))

    def write_bgr(self, bgr: np.ndarray) -> None:
        """Append a uint8 BGR frame ``[H, W, 3]`` (OpenCV's order, for frames drawn on with OpenCV)."""
        if self._writer is None:
            self._open(bgr.shape[1], bgr.shape[0])
        self._writer.write(np.ascontiguousarray(bgr))
        self.frames += 1

    def close(self, keep: bool = True) -> Optional[Path]:
        """Finish the file and rename it into place (``keep``; the path), or delete it (None). An empty or
        cut-short video is an error naming the file (``ENOSPC`` on a full disk), and nothing is left."""
        if self._writer is not None:
            self._writer.release()
            self._writer = None
        try:
            if keep:
                self._check()
                commit(self._tmp, self.path)
                return self.path
            return None
        finally:
            self._tmp.unlink(missing_ok=True)

    def _check(self) -> None:
        if self.frames == 0:
            raise ValueError(f"{self.path}: no frames were written")
        held = complete_video_frames(self._tmp)
        if held != self.frames:
            full = os.statvfs(self._tmp.parent).f_bavail == 0
            what = "no readable index" if held is None else f"{held} of {self.frames} frames"
            raise OSError(
                errno.ENOSPC if full else errno.EIO,
                f"{self.path}: the video could not be written: "
                + (os.strerror(errno.ENOSPC) if full else f"it holds {what}"),
            )
