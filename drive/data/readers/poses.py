"""The car's pose in a foreign log: a CSV's pose columns, yaw from a quaternion, ECEF to a local level
frame, poses interpolated to frame times, and the check that a yaw points where its positions go.

A pose is the canonical log's ``x_m, y_m, yaw_rad`` (:data:`~drive.io.recording.POSE_COLUMNS`): a
world frame in metres, yaw the angle of the car's forward axis counter-clockwise from the x axis in
radians (ISO 8855 and ROS REP 103: x forward, y left, z up on the car; a right-handed, z-up world).
Log replay builds its reference path from them where a log has them (:mod:`drive.replay.path`).

- CSV logs (folder, video): columns named in the reader options ``x_column``, ``y_column``,
  ``yaw_column`` (``yaw_unit`` rad or deg), else the columns ``x_m``, ``y_m``, ``yaw_rad`` when the
  header has them. Some but not all three is an error naming what is missing.
- ROS bags: yaw of a ``geometry_msgs/Quaternion`` (:func:`yaw_from_quaternion`, REP 103).
- comma2k19: ``global_pose/frame_positions`` (ECEF, m) and ``frame_orientations`` (Hamilton
  quaternions w, x, y, z of the camera's [forward, right, down] frame in ECEF) to a local
  east-north-up frame at the first frame (:func:`ecef_poses`).

Every reader's poses pass :func:`check_heading` in :func:`~drive.data.readers.base.build_recording`:
a yaw that disagrees with the direction its own positions travel (degrees read as radians, a compass
heading clockwise from north, the wrong quaternion order) would give a path whose heading is not its
direction, and is refused (``pose_heading``) rather than driven.
"""

from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from drive.data.errors import Problems
from drive.data.readers.csv_table import CsvTable, rows_as_float
from drive.data.readers.options import ReaderOptions
from drive.io.recording import POSE_COLUMNS

__all__ = [
    "csv_poses",
    "yaw_from_quaternion",
    "ecef_poses",
    "interpolate_poses",
    "check_heading",
    "heading_mismatch",
    "POSE_LIMITS",
    "MAX_HEADING_MISMATCH_RAD",
]

# beyond these a pose is a damaged row, not a place: no local frame on Earth reaches 1e8 m (the
# equator is 4e7 m), and 1e4 rad is 1,600 turns of unwrapped yaw
POSE_LIMITS = {"x_m": (1e8, "m"), "y_m": (1e8, "m"), "yaw_rad": (1e4, "rad")}
# the check of yaw against the direction of travel: chords of at least HEADING_CHORD_M along the
# positions (GPS noise over shorter steps is a heading of its own), at least HEADING_MIN_CHORDS of
# them, and the median difference above MAX_HEADING_MISMATCH_RAD (below the replay's intervention
# rule, pi/10: a yaw that far off would read as a heading error from the first step)
HEADING_CHORD_M = 2.0
HEADING_MIN_CHORDS = 5
MAX_HEADING_MISMATCH_RAD = 0.25


def _pose_column_names(table: CsvTable, options: ReaderOptions) -> Optional[Tuple[str, str, str]]:
    """The x, y and yaw columns: named in the options (all three, checked there), else ``x_m``,
    ``y_m``, ``yaw_rad`` when the header has them; None when the table has no pose."""
    if options.x_column is not None:
        return options.x_column, options.y_column or "", options.yaw_column or ""
    header = table.header or []
    found = [name for name in POSE_COLUMNS if name in header]
    if not found:
        return None
    if len(found) < len(POSE_COLUMNS):
        missing = [name for name in POSE_COLUMNS if name not in found]
        raise ValueError(
            f"{table.path}: pose column(s) {', '.join(found)} without {', '.join(missing)}; a pose needs "
            "all three (or name them: x_column, y_column, yaw_column)"
        )
    x, y, yaw = POSE_COLUMNS
    return x, y, yaw


def csv_poses(
    table: CsvTable, options: ReaderOptions, problems: Optional[Problems] = None
) -> Optional[Dict[str, np.ndarray]]:
    """A CSV table's poses as ``x_m, y_m, yaw_rad`` columns (yaw in radians whatever ``yaw_unit``),
    or None when it has none. A text that is not a number is reported by its row, like a label's."""
    names = _pose_column_names(table, options)
    if names is None:
        return None
    x, y, yaw = (
        rows_as_float(table, table.column_index(name, what), problems)
        for name, what in zip(names, ("x (x_column)", "y (y_column)", "yaw (yaw_column)"))
    )
    if (options.yaw_unit or "rad") == "deg":
        yaw = np.radians(yaw)
    return {"x_m": x, "y_m": y, "yaw_rad": yaw}


def yaw_from_quaternion(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Yaw (rad, counter-clockwise about +z) of a body's forward axis (+x) rotated by the quaternion
    (x, y, z, w), projected on the x-y plane: ``atan2(R[1,0], R[0,0])``, the ZYX Euler yaw (REP 103).
    Need not be normalised (the angle of the projection does not depend on the scale)."""
    x, y, z, w = (np.asarray(v, dtype=np.float64) for v in (x, y, z, w))
    return np.arctan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z)


# WGS84, the ellipsoid of GPS (and of comma2k19's ECEF frame, ITRF)
_WGS84_A = 6378137.0
_WGS84_E2 = (1.0 / 298.257223563) * (2.0 - 1.0 / 298.257223563)


def _enu_axes(p: np.ndarray) -> np.ndarray:
    """[3, 3] rows: the east, north and up unit vectors (in ECEF) at the ECEF point ``p`` (m), from
    its geodetic latitude (iterated to well below a micro-radian) and longitude."""
    lon = math.atan2(p[1], p[0])
    r = math.hypot(p[0], p[1])
    lat = math.atan2(p[2], r * (1.0 - _WGS84_E2))
    for _ in range(6):
        n = _WGS84_A / math.sqrt(1.0 - _WGS84_E2 * math.sin(lat) ** 2)
        lat = math.atan2(p[2] + _WGS84_E2 * n * math.sin(lat), r)
    sl, cl, so, co = math.sin(lat), math.cos(lat), math.sin(lon), math.cos(lon)
    return np.array([[-so, co, 0.0], [-sl * co, -sl * so, cl], [cl * co, cl * so, sl]])


def ecef_poses(positions: np.ndarray, orientations: np.ndarray) -> Dict[str, np.ndarray]:
    """comma2k19's ``frame_positions`` [N, 3] (ECEF, m) and ``frame_orientations`` [N, 4] as poses
    in the east-north-up frame at the first finite position: ``x_m`` east, ``y_m`` north, ``yaw_rad``
    the camera's forward axis projected on that horizontal plane, counter-clockwise from east.

    The orientation is the Hamilton quaternion (w, x, y, z) whose rotation matrix maps the camera's
    [forward, right, down] frame into ECEF (the dataset's README; its notebooks and openpilot's
    ``orientation.py`` use ``ecef_from_local = rot_from_quat(q)`` and read the forward axis as the
    first column), so the forward axis in ECEF is that matrix's first column. One tangent plane for
    the whole segment: over a 1-minute segment (< 2.5 km) the Earth's curvature moves a point by
    under 0.5 m vertically and a few millimetres horizontally.
    """
    p = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
    q = np.asarray(orientations, dtype=np.float64).reshape(-1, 4)
    finite = np.flatnonzero(np.isfinite(p).all(axis=1))
    if len(finite) == 0:
        nan = np.full(len(p), np.nan)
        return {"x_m": nan, "y_m": nan.copy(), "yaw_rad": nan.copy()}
    origin = p[finite[0]]
    axes = _enu_axes(origin)
    local = (p - origin) @ axes.T
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    forward = np.stack([w * w + x * x - y * y - z * z, 2.0 * (x * y + w * z), 2.0 * (x * z - w * y)], axis=1)
    forward_enu = forward @ axes.T
    return {
        "x_m": local[:, 0],
        "y_m": local[:, 1],
        "yaw_rad": np.arctan2(forward_enu[:, 1], forward_enu[:, 0]),
    }


def interpolate_poses(
    t_new: np.ndarray, t: np.ndarray, poses: Mapping[str, np.ndarray]
) -> Dict[str, np.ndarray]:
    """Poses sampled at times ``t`` (increasing) interpolated linearly to ``t_new``; yaw is unwrapped
    first, so a turn through +-pi interpolates through it, not back round the circle."""
    return {
        "x_m": np.interp(t_new, t, poses["x_m"]),
        "y_m": np.interp(t_new, t, poses["y_m"]),
        "yaw_rad": np.interp(t_new, t, np.unwrap(np.asarray(poses["yaw_rad"], dtype=np.float64))),
    }


def heading_mismatch(x: np.ndarray, y: np.ndarray, yaw: np.ndarray) -> Optional[Tuple[float, int]]:
    """(median |yaw - direction of travel| in rad, chords used), or None when the positions travel
    too little to tell (fewer than ``HEADING_MIN_CHORDS`` chords of ``HEADING_CHORD_M``).

    The direction of travel is that of chords between the first samples at least ``HEADING_CHORD_M``
    apart along the positions; the yaw compared is the mean of the chord's end yaws."""
    x, y, yaw = (np.asarray(v, dtype=np.float64) for v in (x, y, yaw))
    s = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(x), np.diff(y)))])
    if len(s) < 2 or s[-1] < HEADING_CHORD_M * HEADING_MIN_CHORDS:
        return None
    marks = np.unique(np.searchsorted(s, np.arange(0.0, s[-1], HEADING_CHORD_M)))
    a, b = marks[:-1], marks[1:]
    travel = np.arctan2(y[b] - y[a], x[b] - x[a])
    mean_yaw = np.arctan2(np.sin(yaw[a]) + np.sin(yaw[b]), np.cos(yaw[a]) + np.cos(yaw[b]))
    diff = np.abs(np.angle(np.exp(1j * (travel - mean_yaw))))
    return float(np.median(diff)), len(a)


def check_heading(file: str, log: Mapping[str, np.ndarray], problems: Problems) -> bool:
    """True when the log's yaw agrees with the direction its positions travel (or they travel too
    little to tell); else the problem is reported (``pose_heading``: raised, or with ``on_error:
    skip`` counted, and the caller drops the poses, so the path is integrated from curvature)."""
    found = heading_mismatch(log["x_m"], log["y_m"], log["yaw_rad"])
    if found is None or found[0] <= MAX_HEADING_MISMATCH_RAD:
        return True
    median, chords = found
    problems.report(
        file,
        None,
        "pose_heading",
        f"the pose's yaw differs from the direction its positions travel by {median:.2f} rad "
        f"({math.degrees(median):.0f} deg, median over {chords} chords of {HEADING_CHORD_M:g} m; at most "
        f"{MAX_HEADING_MISMATCH_RAD:g} rad): yaw must be counter-clockwise from the x axis (a compass "
        "heading is clockwise from north), in the unit yaw_unit says (rad or deg)",
    )
    return False
