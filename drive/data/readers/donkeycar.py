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
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from drive.data.errors import DataError, Problems
from drive.data.label_units import time_to_s, to_curvature_per_m
from drive.data.readers.base import ReaderOptions, build_recording, reroot
from drive.data.readers.registry import register_reader
from drive.io.checks import decode_lines
from drive.io.recording import ImageFiles, Recording

__all__ = ["read", "detect", "LABEL_DEFAULTS"]

LABEL_DEFAULTS = {"unit": "normalized", "sign": -1.0, "max_angle_deg": 25.0, "wheelbase_m": 0.26}


def detect(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").is_file() and any(path.glob("catalog_*.catalog"))


def _manifest(path: Path) -> Dict[str, Any]:
    """The manifest's last JSON line that names the catalogs (tub v2 writes five lines); a line
    that is not JSON, or catalogs and deleted records that are not lists, are an error naming it."""
    found: Dict[str, Any] = {}
    where = path / "manifest.json"

    def refuse(line: int, message: str) -> None:
        raise DataError(str(where), line, "bad_manifest", message)

    for number, line in enumerate(decode_lines(where, refuse).splitlines(), start=1):
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                refuse(number, f"not JSON ({e.msg})")
            if "paths" in d or "deleted_indexes" in d:
                if not all(isinstance(d.get(k, []), list) for k in ("paths", "deleted_indexes")):
                    refuse(number, "paths and deleted_indexes must be lists")
                found = d
    return found


def _number(value: Any) -> float:
    """A record's number (None is a missing value, NaN, reported as such by build_recording)."""
    if value is None:
        return np.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def _reporter(catalog: Path, problems: Problems) -> Any:
    def not_utf8(line: int, message: str) -> None:
        problems.report(str(catalog), line, "not_utf8", message)

    return not_utf8


def _record(
    path: Path, catalog: Path, number: int, text: str, keys: tuple, deleted: set, problems: Problems
) -> Optional[Tuple[Path, float, float]]:
    """(image, angle, timestamp) of one catalog line, or None: deleted, or reported (not a JSON
    record, a key missing, no image, not a number)."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        problems.report(str(catalog), number, "malformed_row", f"not JSON ({e.msg})")
        return None
    if not isinstance(record, dict):
        problems.report(str(catalog), number, "malformed_row", "not a JSON record ({...})")
        return None
    if isinstance(record.get("_index"), int) and record["_index"] in deleted:
        return None
    missing = [k for k in keys if k not in record]
    if missing:
        problems.report(str(catalog), number, "malformed_row", f"record lacks {missing}")
        return None
    image = path / "images" / str(record[keys[0]])
    if reroot(str(record[keys[0]]), path / "images") != image:  # not there (or not a file name at all)
        problems.report(str(catalog), number, "missing_image", f"image {image} not found")
        return None
    try:
        return image, _number(record[keys[1]]), _number(record[keys[2]])
    except ValueError as e:
        problems.report(str(catalog), number, "not_a_number", str(e))
        return None


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    manifest = _manifest(path)
    deleted = {i for i in manifest.get("deleted_indexes", []) if isinstance(i, int)}
    catalogs = [path / c for c in manifest.get("paths", [])] or sorted(
        path.glob("catalog_*.catalog"), key=lambda p: int(p.stem.split("_")[-1])
    )
    keys = (
        options.image_column or "cam/image_array",
        options.steering_column or "user/angle",
        options.timestamp_column or "_timestamp_ms",
    )
    files, lines, stamps, angles, images = [], [], [], [], []
    for catalog in catalogs:
        if not catalog.is_file():
            problems.report(str(catalog), None, "missing_catalog", "the manifest names it, it is not there")
            continue
        for number, text in enumerate(decode_lines(catalog, _reporter(catalog, problems)).splitlines(), 1):
            row = _record(path, catalog, number, text, keys, deleted, problems) if text.strip() else None
            if row is not None:
                files.append(str(catalog))
                lines.append(number)
                images.append(row[0])
                angles.append(row[1])
                stamps.append(row[2])
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
