"""Reader for a video file (MP4, AVI, ...) plus a timestamped CSV of steering.

Frame ``i`` is taken at ``video_start_s + i / fps`` (fps from the container unless given), and
steering and speed are interpolated linearly to those times from the CSV's own (possibly faster,
irregular) samples, and so is the car's pose where the CSV has one (``x_column``, ``y_column``,
``yaw_column`` or the columns ``x_m``, ``y_m``, ``yaw_rad``; yaw unwrapped first). Frames outside
the CSV's time range have no label: an error, or dropped with ``on_error: skip``. A video that stops
decoding before its announced length is reported as truncated when the cache decodes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import cv2
import numpy as np

from drive.data.errors import Problems
from drive.data.readers.base import NoFrames, ReaderOptions, build_recording, read_csv_table
from drive.data.readers.folder_csv import csv_labels
from drive.data.readers.poses import csv_poses, interpolate_poses
from drive.data.readers.registry import FALLBACK, register_reader
from drive.io.recording import POSE_COLUMNS, Recording, VideoFrames

__all__ = ["read", "detect", "VIDEO_EXTENSIONS"]

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".mov", ".m4v", ".hevc")


def detect(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in VIDEO_EXTENSIONS


def _label_csv(video: Path, options: ReaderOptions) -> Path:
    if options.csv:
        given = Path(options.csv)
        return given if given.is_absolute() else video.parent / given
    same = video.with_suffix(".csv")
    if same.is_file():
        return same
    csvs = sorted(video.parent.glob("*.csv"))
    if len(csvs) == 1:
        return csvs[0]
    raise ValueError(f"{video}: cannot tell which CSV holds its labels ({len(csvs)} CSVs beside it); set csv")


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    video = _video(path, options, problems)
    if video is None:
        return []
    count, fps, width, height = video
    csv_path = _label_csv(path, options)
    labels = _labels(csv_path, options, problems)
    if labels is None:
        return []
    lt = labels.log["timestamp_s"]
    start = float(options.video_start_s) if options.video_start_s is not None else float(lt[0])
    frame_t = start + np.arange(count) / fps
    keep = (frame_t >= lt[0] - 1e-9) & (frame_t <= lt[-1] + 1e-9)
    for i in np.flatnonzero(~keep)[:1]:
        problems.report(
            str(path),
            int(i),
            "unlabelled_frames",
            f"{int((~keep).sum())} frame(s) lie outside the label time range "
            f"{lt[0]:.3f}..{lt[-1]:.3f} s of {csv_path.name} (first: frame {i} at {frame_t[i]:.3f} s)",
        )
    log = {
        "timestamp_s": frame_t,
        "curvature": np.interp(frame_t, lt, labels.log["curvature"]),
        "speed_mps": np.interp(frame_t, lt, labels.log["speed_mps"]),
    }
    extra = {"drive": str(path), "labels": str(csv_path)}
    if all(c in labels.log for c in POSE_COLUMNS):
        log.update(interpolate_poses(frame_t, lt, labels.log))
        extra["poses"] = "CSV columns, interpolated to frame times"
    meta = {
        "fps": fps,
        "width": width,
        "height": height,
        "source": f"video_csv:{path}",
        "camera": options.calibration(),
        "extra": extra,
    }
    rec = build_recording(
        file=str(path),
        rows=np.arange(count),
        log=log,
        source=VideoFrames(path, count=count),
        problems=problems,
        meta=meta,
        keep=keep,
        path=path,
    )
    return [rec] if rec is not None else []


def _video(path: Path, options: ReaderOptions, problems: Problems) -> Optional[Tuple[int, float, int, int]]:
    """(frame count, fps, width, height) from the container (``fps`` option first); None (reported)
    when it does not open or has no frames."""
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        problems.report(str(path), None, "unreadable", "OpenCV cannot open this video")
        return None
    count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    fps = float(options.fps or cap.get(cv2.CAP_PROP_FPS) or 0.0)
    width, height = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    cap.release()
    if count <= 0:
        problems.report(str(path), None, "empty", "video has no frames")
        return None
    if not fps > 0:
        raise ValueError(f"{path}: the container has no frame rate; set fps")
    return count, fps, width, height


def _labels(csv_path: Path, options: ReaderOptions, problems: Problems) -> Optional[Recording]:
    """The label CSV's rows in canonical units, validated (bad rows named by CSV line) as a recording
    without frames; None when fewer than two usable rows remain."""
    table = read_csv_table(csv_path, problems)
    if len(table) < 2:
        problems.report(
            str(csv_path), None, "empty", "need at least two timestamped label rows to interpolate"
        )
        return None
    t, curv, speed = csv_labels(table, csv_path, options, problems)
    poses = csv_poses(table, options, problems) or {}
    if t is None:
        raise ValueError(
            f"{csv_path}: name the timestamp column in the reader options (columns: {table.header})"
        )
    return build_recording(
        file=str(csv_path),
        rows=np.asarray(table.lines),
        log={"timestamp_s": t, "curvature": curv, "speed_mps": speed, **poses},
        source=NoFrames(len(table)),
        problems=problems,
        meta={"fps": 1.0, "width": 1, "height": 1},
        keep=table.keep(),
    )


register_reader(
    "video",
    detect=detect,
    read=read,
    layout="an .mp4/.avi with a CSV beside it",
    suffixes=VIDEO_EXTENSIONS,
    priority=FALLBACK,
)
