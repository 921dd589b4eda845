"""Where a recording's frames come from: random access to uint8 RGB frames ``[H, W, 3]`` held in
image files, one video file, an array (numpy, memmap, HDF5 dataset) or a subset of another source.

Every reader (:mod:`drive.data.readers`) hands a :class:`drive.io.recording.Recording` one of these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Protocol, Sequence

import cv2
import numpy as np

from drive.io.recording_meta import PathLike, RecordingError
from drive.io.video_index import complete_video_frames

__all__ = ["FrameSource", "ImageFiles", "VideoFrames", "ArrayFrames", "SubsetFrames"]


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
            raise RecordingError(
                f"{self.path}: video is truncated, frame {index} is cut short by the end of the "
                f"file (only frames 0..{self._complete - 1} are whole)"
            )
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
