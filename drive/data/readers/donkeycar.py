"""Reader for Donkeycar tubs (v2: ``manifest.json`` + ``catalog_*.catalog`` JSON lines + ``images/``).

Each catalog line is a record such as ``{"_index": 7, "_timestamp_ms": 1600000000123,
"cam/image_array": "7_cam_image_array_.jpg", "user/angle": 0.25, "user/throttle": 0.3}``;
records listed in the manifest's ``deleted_indexes`` are left out. ``user/angle`` is normalized
steering, +1 = full RIGHT (Donkeycar's convention), so the default label is
normalized x ``max_angle_deg`` (25 deg) with sign -1 on a 1/10-scale car (wheelbase 0.26 m).
Donkeycar logs no speed: ``speed_mps`` from the options (default 2 m/s here) fills it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from drive.data.errors import Problems
from drive.data.labels import time_to_s, to_curvature_per_m
from drive.data.readers.base import ReaderOptions, build_recording
from drive.data.readers.registry import register_reader
from drive.io.recording import ImageFiles, Recording

__all__ = ["read", "detect", "LABEL_DEFAULTS"]

LABEL_DEFAULTS = {"unit": "normalized", "sign": -1.0, "max_angle_deg": 25.0, "wheelbase_m": 0.26}


def detect(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").is_file() and any(path.glob("catalog_*.catalog"))


def _manifest(path: Path) -> Dict[str, Any]:
    """The manifest's last JSON line that names the catalogs (tub v2 writes five lines)."""
    found: Dict[str, Any] = {}
    for line in (path / "manifest.json").read_text().splitlines():
        line = line.strip()
        if line.startswith("{"):
            d = json.loads(line)
            if "paths" in d or "deleted_indexes" in d:
                found = d
    return found


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    manifest = _manifest(path)
    deleted = set(manifest.get("deleted_indexes", []))
    catalogs = [path / c for c in manifest.get("paths", [])] or sorted(
        path.glob("catalog_*.catalog"), key=lambda p: int(p.stem.split("_")[-1])
    )
    files, lines, stamps, angles, images = [], [], [], [], []
    image_key = options.image_column or "cam/image_array"
    angle_key = options.steering_column or "user/angle"
    time_key = options.timestamp_column or "_timestamp_ms"
    for catalog in catalogs:
        for number, text in enumerate(catalog.read_text().splitlines(), start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                problems.report(str(catalog), number, "malformed_row", f"not JSON ({e.msg})")
                continue
            if record.get("_index") in deleted:
                continue
            missing = [k for k in (image_key, angle_key, time_key) if k not in record]
            if missing:
                problems.report(str(catalog), number, "malformed_row", f"record lacks {missing}")
                continue
            image = path / "images" / str(record[image_key])
            if not image.is_file():
                problems.report(str(catalog), number, "missing_image", f"image {image} not found")
                continue
            files.append(str(catalog))
            lines.append(number)
            stamps.append(float(record[time_key]) if record[time_key] is not None else np.nan)
            angles.append(float(record[angle_key]) if record[angle_key] is not None else np.nan)
            images.append(image)
    if not images:
        problems.report(str(path), None, "empty", "no usable records")
        return []
    time_unit, _, speed_mps = options.units(time="ms", speed_mps=2.0)
    t = time_to_s(np.asarray(stamps), time_unit)
    log = {
        "timestamp_s": t,
        "curvature": to_curvature_per_m(np.asarray(angles), options.label_spec(**LABEL_DEFAULTS)),
        "speed_mps": np.full(len(t), speed_mps),
    }
    meta = {"source": f"donkeycar:{path}", "camera": options.calibration(), "extra": {"drive": str(path)}}
    # rows are reported as catalog line numbers; name the first catalog in messages about them
    rec = build_recording(
        file=files[0] if len(set(files)) == 1 else str(path),
        rows=np.asarray(lines),
        log=log,
        source=ImageFiles(images),
        problems=problems,
        meta=meta,
        path=path,
    )
    return [rec] if rec is not None else []


register_reader("donkeycar", detect=detect, read=read, layout="a tub with manifest.json")
