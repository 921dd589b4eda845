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

    def matrix(self) -> np.ndarray:
        """The 3x3 intrinsic matrix K."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "CameraCalibration":
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise RecordingError(f"camera calibration: unknown keys {sorted(unknown)}")
        return cls(**{k: float(v) for k, v in d.items()})


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
        if not (math.isfinite(self.fps) and self.fps > 0):
            raise RecordingError(f"fps must be a positive number, got {self.fps!r}")
        if self.width <= 0 or self.height <= 0:
            raise RecordingError(f"image size must be positive, got {self.width}x{self.height}")
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
    def from_dict(cls, d: Dict[str, Any], where: str = "meta.json") -> "RecordingMeta":
        if d.get("format") != FORMAT_NAME:
            raise RecordingError(f"{where}: not a drive recording (format={d.get('format')!r})")
        if int(d.get("version", -1)) > FORMAT_VERSION:
            raise RecordingError(f"{where}: format version {d['version']} is newer than {FORMAT_VERSION}")
        label = d.get("label", {})
        if label.get("name") != "curvature" or label.get("unit") != "1/m":
            raise RecordingError(f"{where}: label must be curvature in 1/m, got {label!r}")
        try:
            camera = CameraCalibration.from_dict(d["camera"]) if d.get("camera") else None
            return cls(
                fps=float(d["fps"]),
                width=int(d["image"]["width"]),
                height=int(d["image"]["height"]),
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
        except RecordingError as e:
            raise RecordingError(f"{where}: {e}") from None
