"""Reader for comma2k19 segments (Schafer et al. 2018): ``video.hevc`` (20 fps, 1164x874) plus
per-signal arrays saved with numpy, each a pair of files ``t`` (seconds, boot time) and ``value``:

    <segment>/video.hevc
    <segment>/global_pose/frame_times                  frame timestamps [N]
    <segment>/global_pose/frame_positions              camera position, ECEF (m) [N, 3]     (optional)
    <segment>/global_pose/frame_orientations           camera orientation, ECEF [N, 4]      (optional)
    <segment>/processed_log/CAN/steering_angle/{t,value}   steering-wheel angle, degrees, + = left
    <segment>/processed_log/CAN/speed/{t,value}            m/s

Steering and speed are interpolated to the frame times (their CAN rates differ from the camera's);
frames outside the signals' time range are reported as ``unlabelled_frames``. Default label:
steering-wheel degrees / 15.3 (steering ratio) on a 2.70 m wheelbase (the dataset's Honda Civic).

Poses, where the segment has both pose arrays: positions in the east-north-up frame at the first
frame (x east, y north, metres) and yaw of the camera's forward axis counter-clockwise from east
(:func:`drive.data.readers.poses.ecef_poses` has the conventions and their source). They are the
camera's pose: a small yaw of the camera's mounting against the car's axis stays in them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from drive.data.errors import Problems
from drive.data.label_units import to_curvature_per_m
from drive.data.readers.base import ReaderOptions, build_recording
from drive.data.readers.poses import ecef_poses
from drive.data.readers.registry import register_reader
from drive.io.recording import Recording, VideoFrames

__all__ = ["read", "detect", "LABEL_DEFAULTS"]

LABEL_DEFAULTS = {"unit": "steering_wheel_deg", "sign": 1.0, "steering_ratio": 15.3, "wheelbase_m": 2.70}
_STEER = Path("processed_log/CAN/steering_angle")
_SPEED = Path("processed_log/CAN/speed")
_POSE = ("frame_positions", "frame_orientations")


def detect(path: Path) -> bool:
    return path.is_dir() and (path / "video.hevc").is_file() and (path / _STEER / "t").is_file()


def _signal(folder: Path) -> Tuple[np.ndarray, np.ndarray]:
    """(t, value) of one CAN signal, sorted by time; repeated timestamps keep their first sample."""
    with open(folder / "t", "rb") as ft, open(folder / "value", "rb") as fv:
        t, v = np.load(ft).astype(np.float64).reshape(-1), np.load(fv).astype(np.float64).reshape(-1)
    if len(t) != len(v):
        raise ValueError(f"{folder}: {len(t)} times but {len(v)} values")
    t, first = np.unique(t, return_index=True)
    return t, v[first]


def _poses(path: Path, frames: int, problems: Problems) -> Dict[str, np.ndarray]:
    """The segment's poses as ``x_m, y_m, yaw_rad`` columns (module docstring); none when it has no
    pose arrays, or (reported: ``bad_pose``) when one is missing or their shapes do not fit."""
    folder = path / "global_pose"
    present = [name for name in _POSE if (folder / name).is_file()]
    if not present:
        return {}
    try:
        if len(present) < len(_POSE):
            raise ValueError(f"{present[0]} without {[n for n in _POSE if n not in present][0]}")
        arrays = []
        for name, width in zip(_POSE, (3, 4)):
            with open(folder / name, "rb") as f:
                a = np.load(f).astype(np.float64)
            if a.shape != (frames, width):
                raise ValueError(f"{name} has shape {list(a.shape)}, expected [{frames}, {width}]")
            arrays.append(a)
    except (OSError, ValueError) as e:
        problems.report(str(folder), None, "bad_pose", f"poses not read: {e}")
        return {}
    return ecef_poses(*arrays)


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    try:
        with open(path / "global_pose" / "frame_times", "rb") as f:
            frame_t = np.load(f).astype(np.float64).reshape(-1)
        st, sv = _signal(path / _STEER)
        vt, vv = _signal(path / _SPEED) if (path / _SPEED / "t").is_file() else (None, None)
    except (OSError, ValueError) as e:
        problems.report(str(path), None, "unreadable", f"cannot read the segment's arrays ({e})")
        return []
    for name, (t, v) in {"steering_angle": (st, sv), "speed": (vt, vv)}.items():
        if t is not None and (len(t) < 2 or not np.all(np.isfinite(v)) or not np.all(np.isfinite(t))):
            problems.report(
                str(path / "processed_log/CAN" / name),
                None,
                "bad_signal",
                "needs at least two samples, all finite",
            )
            return []
    keep = (frame_t >= st[0]) & (frame_t <= st[-1])
    if vt is not None:
        keep &= (frame_t >= vt[0]) & (frame_t <= vt[-1])
    for i in np.flatnonzero(~keep)[:1]:
        problems.report(
            str(path / "video.hevc"),
            int(i),
            "unlabelled_frames",
            f"{int((~keep).sum())} frame(s) lie outside the CAN signals' time range",
        )
    _, _, speed_mps = options.units()
    steer = np.interp(frame_t, st, sv)
    poses = _poses(path, len(frame_t), problems)
    log = {
        "timestamp_s": frame_t,
        "curvature": to_curvature_per_m(steer, options.label_spec(**LABEL_DEFAULTS)),
        "speed_mps": np.interp(frame_t, vt, vv) if vt is not None else np.full(len(frame_t), speed_mps),
        **poses,
    }
    extra = {"drive": str(path), **({"poses": "global_pose, ECEF to east-north-up"} if poses else {})}
    meta = {"source": f"comma2k19:{path}", "camera": options.calibration(), "extra": extra}
    rec = build_recording(
        file=str(path / "video.hevc"),
        rows=np.arange(len(frame_t)),
        log=log,
        source=VideoFrames(path / "video.hevc", count=len(frame_t)),
        problems=problems,
        meta=meta,
        keep=keep,
        path=path,
    )
    return [rec] if rec is not None else []


register_reader(
    "comma2k19", detect=detect, read=read, layout="a segment folder with video.hevc and global_pose/"
)
