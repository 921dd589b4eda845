"""Reader for the Udacity real-car logs exported from ROS bags to ``interpolated.csv``
(``index, timestamp, width, height, frame_id, filename, angle, torque, speed, ...``).

``timestamp`` in nanoseconds, ``angle`` = steering-wheel angle in radians (positive = left),
``speed`` in m/s, ``frame_id`` = center_camera | left_camera | right_camera, ``filename`` relative
to the CSV. Curvature = tan(angle / steering_ratio) / wheelbase with the test car's defaults
(Lincoln MKZ: ratio 14.8, wheelbase 2.85 m). One recording per camera (side cameras only with
``side_cameras``, their labels offset by ``side_offset`` radians toward the centre).
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np

from drive.data.errors import Problems
from drive.data.label_units import speed_to_mps, time_to_s, to_curvature_per_m
from drive.data.readers.base import (
    CsvTable,
    ReaderOptions,
    build_recording,
    read_csv_table,
    resolve_images,
    rows_as_float,
)
from drive.data.readers.registry import register_reader
from drive.io.recording import ImageFiles, Recording

__all__ = ["read", "detect", "LABEL_DEFAULTS"]

LABEL_DEFAULTS = {"unit": "steering_wheel_rad", "sign": 1.0, "steering_ratio": 14.8, "wheelbase_m": 2.85}


def detect(path: Path) -> bool:
    if path.is_dir():
        return (path / "interpolated.csv").is_file()
    return path.name == "interpolated.csv"


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    log_path = path / "interpolated.csv" if path.is_dir() else path
    table = read_csv_table(log_path, problems, header=True)
    if len(table) == 0:
        problems.report(str(log_path), None, "empty", "no data rows")
        return []
    spec = options.label_spec(**LABEL_DEFAULTS)
    time_unit, speed_unit, _ = options.units(time="ns")
    frame_ids = table.column(table.column_index("frame_id", "frame_id"))
    cameras = [("center_camera", 0.0)]
    if options.side_cameras:
        cameras += [
            ("left_camera", -options.side_offset * spec.sign),
            ("right_camera", options.side_offset * spec.sign),
        ]
    out: List[Recording] = []
    for camera, offset in cameras:
        pick = [i for i, f in enumerate(frame_ids) if f == camera]
        sub = CsvTable(
            table.path, table.header, [table.rows[i] for i in pick], [table.lines[i] for i in pick]
        )
        if len(sub) == 0:
            problems.report(str(log_path), None, "empty", f"no rows for {camera}")
            continue
        t = time_to_s(rows_as_float(sub, sub.column_index("timestamp", "timestamp"), problems), time_unit)
        angle = rows_as_float(sub, sub.column_index("angle", "angle"), problems)
        speed = speed_to_mps(rows_as_float(sub, sub.column_index("speed", "speed"), problems), speed_unit)
        paths, keep = resolve_images(sub, sub.column_index("filename", "filename"), log_path.parent, problems)
        log = {"timestamp_s": t, "curvature": to_curvature_per_m(angle + offset, spec), "speed_mps": speed}
        meta = {
            "source": f"udacity_real:{log_path}:{camera}",
            "camera": options.calibration(),
            "extra": {"drive": str(log_path), "camera": camera},
        }
        rec = build_recording(
            file=str(log_path),
            rows=np.asarray(sub.lines),
            log=log,
            source=ImageFiles(paths),
            problems=problems,
            meta=meta,
            keep=keep & sub.keep(),
            path=log_path,
        )
        if rec is not None:
            out.append(rec)
    return out


register_reader("udacity_real", detect=detect, read=read, layout="interpolated.csv")
