"""The canonical recording's description: ``meta.json`` (:class:`RecordingMeta`), the camera
calibration, the format's name and version and its error type (docs/formats.md).

:mod:`drive.io.recording` reads recordings, :mod:`drive.io.recording_writer` writes them; both
(and every frame source in :mod:`drive.io.frames`) share these definitions.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Optional, Union

import numpy as np

from drive.io.checks import number

__all__ = [
    "CameraCalibration",
    "RecordingMeta",
    "RecordingError",
    "REQUIRED_COLUMNS",
    "POSE_COLUMNS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]

FORMAT_NAME = "drive-recording"
FORMAT_VERSION = 1
REQUIRED_COLUMNS = ("frame", "timestamp_s", "curvature", "speed_mps")
POSE_COLUMNS = ("x_m", "y_m", "yaw_rad")  # optional: the car's pose (world frame, yaw left-positive)
PathLike = Union[str, os.PathLike]


class RecordingError(ValueError):
    """A recording is malformed; the message names the file (and row) and what is wrong."""


# What a camera calibration may hold: focal lengths and the principal point in pixels, the mounting
# in metres and radians. A camera pitched a quarter turn or more sees no road ahead.
_HALF_PI = math.pi / 2
MAX_FPS = 1000.0  # frames per second a camera log may have
MAX_SIDE = 100_000  # pixels of an image side
CALIBRATION_RANGES: Dict[str, Dict[str, Any]] = {
    "fx": dict(low=0.0, low_open=True, high=1e6),
    "fy": dict(low=0.0, low_open=True, high=1e6),
    "cx": dict(low=-1e6, high=1e6),
    "cy": dict(low=-1e6, high=1e6),
    "height_m": dict(low=0.0, low_open=True, high=100.0),
    "pitch_rad": dict(low=-_HALF_PI, high=_HALF_PI, low_open=True, high_open=True),
    "yaw_rad": dict(low=-math.pi, high=math.pi),
    "roll_rad": dict(low=-math.pi, high=math.pi),
    "lateral_m": dict(low=-100.0, high=100.0),
    "forward_m": dict(low=-100.0, high=100.0),
}


@dataclass
class CameraCalibration:
    """Pinhole intrinsics (pixels, at the recorded image size) and mounting on the vehicle.

    The camera looks forward along the vehicle's x axis; ``pitch_rad`` > 0 tilts it down,
    ``yaw_rad`` > 0 turns it left, ``lateral_m`` > 0 mounts it left of the centre line.
    """

    fx: float
    fy: float
    cx: float
    cy: float
    height_m: float = 1.5
    pitch_rad: float = 0.0
    yaw_rad: float = 0.0
    roll_rad: float = 0.0
    lateral_m: float = 0.0
    forward_m: float = 0.0

    def __post_init__(self) -> None:
        """Every field a finite number in its range (a NaN pitch drove as if calibrated, and was
        written into meta.json): a :class:`RecordingError` naming the field otherwise."""
        try:
            for name, limits in CALIBRATION_RANGES.items():
                setattr(self, name, number(getattr(self, name), name, **limits))
        except ValueError as e:
            raise RecordingError(f"camera calibration: {e}") from None

    def matrix(self) -> np.ndarray:
        """The 3x3 intrinsic matrix K."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> "CameraCalibration":
        if not isinstance(d, dict):
            raise RecordingError(f"camera calibration: expected a mapping of fields, got {d!r}")
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise RecordingError(f"camera calibration: unknown keys {sorted(unknown)}")
        missing = [k for k in ("fx", "fy", "cx", "cy") if k not in d]
        if missing:
            raise RecordingError(f"camera calibration: missing {missing}")
        return cls(**d)


@dataclass
class RecordingMeta:
    """What ``meta.json`` holds. ``label`` is always curvature in 1/m in the canonical model."""

    fps: float
    width: int
    height: int
    camera: Optional[CameraCalibration] = None
    source: str = "unknown"
    conditions: Dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = None
    storage: str = "frames"
    video: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            self.fps = number(self.fps, "fps", low=0.0, low_open=True, high=MAX_FPS)
        except ValueError:
            raise RecordingError(
                f"fps must be a positive number up to {MAX_FPS:g}, got {self.fps!r}"
            ) from None
        try:
            self.width = int(number(self.width, "image width", low=1, high=MAX_SIDE, integer=True))
            self.height = int(number(self.height, "image height", low=1, high=MAX_SIDE, integer=True))
        except ValueError as e:
            raise RecordingError(str(e)) from None
        if self.storage not in ("frames", "video"):
            raise RecordingError(f"storage must be 'frames' or 'video', got {self.storage!r}")

    def to_dict(self) -> Dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "fps": self.fps,
            "image": {"width": self.width, "height": self.height},
            "camera": self.camera.to_dict() if self.camera else None,
            "label": {"name": "curvature", "unit": "1/m"},
            "speed_unit": "m/s",
            "source": self.source,
            "conditions": self.conditions,
            "seed": self.seed,
            "storage": self.storage,
            "video": self.video,
            "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str = "meta.json") -> "RecordingMeta":
        if not isinstance(d, dict):
            raise RecordingError(f"{where}: expected a JSON object, got {type(d).__name__}")
        if d.get("format") != FORMAT_NAME:
            raise RecordingError(f"{where}: not a drive recording (format={d.get('format')!r})")
        try:
            if number(d.get("version", -1), "version") > FORMAT_VERSION:
                raise RecordingError(f"format version {d['version']} is newer than {FORMAT_VERSION}")
            label = d.get("label", {})
            if not isinstance(label, dict) or label.get("name") != "curvature" or label.get("unit") != "1/m":
                raise RecordingError(f"label must be curvature in 1/m, got {label!r}")
            camera = CameraCalibration.from_dict(d["camera"]) if d.get("camera") else None
            return cls(
                fps=d["fps"],
                width=d["image"]["width"],
                height=d["image"]["height"],
                camera=camera,
                source=str(d.get("source", "unknown")),
                conditions=dict(d.get("conditions") or {}),
                seed=d.get("seed"),
                storage=str(d.get("storage", "frames")),
                video=d.get("video"),
                extra=dict(d.get("extra") or {}),
            )
        except (KeyError, TypeError) as e:
            raise RecordingError(f"{where}: missing or malformed field {e}") from None
        except ValueError as e:  # RecordingError included: the field's own message
            raise RecordingError(f"{where}: {e}") from None
