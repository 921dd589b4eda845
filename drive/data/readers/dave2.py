"""Reader for DAVE-2 style logs (e.g. Sully Chen's driving datasets): ``data.txt`` lines
``<image> <steering-wheel angle in degrees>`` and optionally ``,<YYYY-MM-DD HH:MM:SS:mmm>``.

The angle is a steering-wheel angle in degrees, positive = RIGHT in those datasets, so the default
label is steering_wheel_deg / 15 (steering ratio) with sign -1, wheelbase 2.7 m. Without
timestamps the frames are at ``fps`` (required then). Images are re-rooted under the folder of
``data.txt`` (or its ``data/`` subfolder).
"""

from __future__ import annotations

import calendar
import re
from pathlib import Path
from typing import List, Optional

import numpy as np

from drive.data.errors import Problems
from drive.data.label_units import to_curvature_per_m
from drive.data.readers.base import ReaderOptions, build_recording, reroot
from drive.data.readers.registry import register_reader
from drive.io.checks import decode_lines
from drive.io.recording import ImageFiles, Recording

__all__ = ["read", "detect", "LABEL_DEFAULTS"]

LABEL_DEFAULTS = {"unit": "steering_wheel_deg", "sign": -1.0, "steering_ratio": 15.0, "wheelbase_m": 2.7}
_LINE = re.compile(
    r"^\s*(\S+)\s+([-+0-9.eE]+|nan|inf|-inf)\s*(?:,\s*(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d):(\d+))?\s*$"
)


def detect(path: Path) -> bool:
    return (path.is_dir() and (path / "data.txt").is_file()) or path.name == "data.txt"


def _stamp(groups: tuple) -> Optional[float]:
    if groups[2] is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in groups[2:8])
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + float("0." + groups[8])


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    log_path = path / "data.txt" if path.is_dir() else path
    base = log_path.parent
    images, lines, angles, stamps = [], [], [], []

    def not_utf8(line: int, message: str) -> None:
        problems.report(str(log_path), line, "not_utf8", message)

    for number, text in enumerate(decode_lines(log_path, not_utf8).splitlines(), start=1):
        if not text.strip():
            continue
        m = _LINE.match(text)
        if m is None:
            problems.report(
                str(log_path), number, "malformed_row", f"expected '<image> <angle>[,<time>]', got {text!r}"
            )
            continue
        image = reroot(m.group(1), base) or reroot(m.group(1), base / "data")
        if image is None:
            problems.report(
                str(log_path), number, "missing_image", f"image {m.group(1)!r} not found under {base}"
            )
            continue
        images.append(image)
        lines.append(number)
        angles.append(float(m.group(2)))
        stamps.append(_stamp(m.groups()))
    if not images:
        problems.report(str(log_path), None, "empty", "no usable lines")
        return []
    if all(s is not None for s in stamps):
        t = np.asarray(stamps, dtype=np.float64)
    elif options.fps:
        t = np.arange(len(images)) / float(options.fps)
    else:
        raise ValueError(f"{log_path}: lines carry no timestamps; set fps")
    _, _, speed_mps = options.units()
    log = {
        "timestamp_s": t,
        "curvature": to_curvature_per_m(np.asarray(angles), options.label_spec(**LABEL_DEFAULTS)),
        "speed_mps": np.full(len(t), speed_mps),
    }
    meta = {"source": f"dave2:{log_path}", "camera": options.calibration(), "extra": {"drive": str(log_path)}}
    if options.fps:
        meta["fps"] = float(options.fps)
    rec = build_recording(
        file=str(log_path),
        rows=np.asarray(lines),
        log=log,
        source=ImageFiles(images),
        problems=problems,
        meta=meta,
        path=log_path,
    )
    return [rec] if rec is not None else []


register_reader("dave2", detect=detect, read=read, layout="data.txt")
