"""Reader options: what a user may tell a reader about a foreign log, and the camera it was shot with.

:class:`ReaderOptions` collects every option (all optional; each reader applies its format's own
defaults to the unset ones). The ``camera`` option is either a full calibration, or a field of view
and mounting (:class:`FieldOfViewCamera`, resolved at each recording's image size), or the stated
approximation :data:`APPROXIMATE_CAMERA`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

from drive.data.label_units import SPEED_UNITS, TIME_UNITS, LabelSpec
from drive.io.checks import number, text
from drive.io.recording import CameraCalibration
from drive.io.recording_meta import CALIBRATION_RANGES

__all__ = ["ReaderOptions", "FieldOfViewCamera", "APPROXIMATE_CAMERA"]


# the options that are texts (None: any text), and the numbers with their ranges
_TEXT_OPTIONS: Dict[str, Optional[tuple]] = {
    "image_column": None,
    "timestamp_column": None,
    "steering_column": None,
    "speed_column": None,
    "time_unit": tuple(TIME_UNITS),
    "speed_unit": tuple(SPEED_UNITS),
    "csv": None,
    "camera_topic": None,
    "steering_topic": None,
    "speed_topic": None,
    "odometry_topic": None,
    "x_column": None,
    "y_column": None,
    "yaw_column": None,
    "yaw_unit": ("rad", "deg"),
}
POSE_OPTIONS = ("x_column", "y_column", "yaw_column")
_NUMBER_OPTIONS: Dict[str, Dict[str, Any]] = {
    "speed_mps": dict(low=0.0, high=100.0, low_open=True),  # up to 360 km/h
    "fps": dict(low=0.0, high=1000.0, low_open=True),
    "side_offset": dict(low=0.0, high=10.0),
    "video_start_s": dict(low=-1e12, high=1e12),
}


@dataclasses.dataclass
class ReaderOptions:
    """Everything a user may need to tell a reader about a foreign log (all optional).

    Attributes:
        label: steering semantics (:class:`~drive.data.label_units.LabelSpec` fields as a dict); each
            format has its own default (curvature for canonical/HDF5, normalized x 25 deg for the
            Udacity simulator, steering-wheel radians for the Udacity car).
        image_column, timestamp_column, steering_column, speed_column: CSV column names (or
            0-based indices as strings for headerless files).
        time_unit: timestamps in s | ms | us | ns (default: the format's own, else s).
        speed_unit: mps | kph | mph (default: the format's own, else mps).
        speed_mps: speed assumed when the log has none (default 8.33 m/s = 30 km/h; 2 m/s for
            Donkeycar's 1/10-scale cars).
        fps: frame rate when the log has no timestamps (frames at i / fps).
        camera: camera calibration for logs that carry none; needed by viewpoint synthesis. Either
            ``CameraCalibration`` fields (``fx, fy, cx, cy, height_m, pitch_rad``, pixels at the
            log's image size), or a field of view and mounting, ``{hfov_deg, height_m, pitch_rad}``
            (optional ``vfov_deg``; square pixels and a centred principal point otherwise), resolved
            at each recording's image size, or ``approximate``: :data:`APPROXIMATE_CAMERA`.
        side_cameras: also read left/right cameras (Udacity) as extra recordings whose labels
            steer back toward the centre by ``side_offset`` (in the log's own steering unit:
            the left camera's label turns right by it, the right camera's turns left).
        csv: label CSV for a video (default: same stem as the video, else the only CSV beside it).
        video_start_s: CSV time of the video's first frame (default: the first CSV timestamp).
        camera_topic, steering_topic, speed_topic: ROS bag topics (default: the only candidate;
            ``drive data inspect BAG`` lists them).
        odometry_topic: a ROS bag topic of the car's pose (``nav_msgs/Odometry``,
            ``geometry_msgs/PoseStamped`` or ``PoseWithCovarianceStamped``), read into the pose
            columns; only when named (an odometry topic often carries a speed and no pose).
        x_column, y_column, yaw_column: CSV columns of the car's pose (metres, metres, yaw counter-
            clockwise from x); all three or none (default: columns named ``x_m``, ``y_m``,
            ``yaw_rad`` when the CSV has them).
        yaw_unit: rad | deg, the unit of the yaw column (default rad).
        stamp: ROS bag message time: auto | header | bag (see :mod:`drive.data.readers.rosbag`).
    """

    label: Optional[Dict[str, Any]] = None
    image_column: Optional[str] = None
    timestamp_column: Optional[str] = None
    steering_column: Optional[str] = None
    speed_column: Optional[str] = None
    time_unit: Optional[str] = None
    speed_unit: Optional[str] = None
    speed_mps: Optional[float] = None
    fps: Optional[float] = None
    camera: Optional[Any] = None
    side_cameras: bool = False
    side_offset: float = 0.2
    csv: Optional[str] = None
    video_start_s: Optional[float] = None
    camera_topic: Optional[str] = None
    steering_topic: Optional[str] = None
    speed_topic: Optional[str] = None
    stamp: Optional[str] = None
    odometry_topic: Optional[str] = None
    x_column: Optional[str] = None
    y_column: Optional[str] = None
    yaw_column: Optional[str] = None
    yaw_unit: Optional[str] = None

    def __post_init__(self) -> None:
        """Every option checked when the options are made, before any log is read: its type, its
        range, a number finite (a NaN camera pitch drove as if calibrated); a ``ValueError`` naming
        the option (``reader option fps: ...``) otherwise."""
        try:
            self._check()
        except ValueError as e:
            raise ValueError(f"reader option {e}") from None
        self.calibration()  # the camera too, however it is given (its errors name it)

    def _check(self) -> None:
        for name in _TEXT_OPTIONS:
            if getattr(self, name) is not None:
                setattr(self, name, text(getattr(self, name), name, _TEXT_OPTIONS[name]))
        if self.stamp is not None:
            self.stamp = text(self.stamp, "stamp").lower()
            if self.stamp not in ("auto", "header", "bag"):
                raise ValueError(f"stamp must be auto, header or bag, got {self.stamp!r}")
        for name, limits in _NUMBER_OPTIONS.items():
            if getattr(self, name) is not None:
                setattr(self, name, number(getattr(self, name), name, **limits))
        given = [name for name in POSE_OPTIONS if getattr(self, name) is not None]
        if given and len(given) < len(POSE_OPTIONS):
            missing = [name for name in POSE_OPTIONS if name not in given]
            raise ValueError(
                f"{given[0]}: a pose needs x_column, y_column and yaw_column; {', '.join(missing)} "
                "not given (name all three, or none to read columns x_m, y_m, yaw_rad)"
            )
        if not isinstance(self.side_cameras, bool):
            raise ValueError(f"side_cameras must be true or false, got {self.side_cameras!r}")
        if self.label is not None:
            LabelSpec.from_any(self.label)  # unit, sign, angles, lengths (the format's unit may follow)

    @classmethod
    def from_any(cls, value: Optional[object]) -> "ReaderOptions":
        if isinstance(value, ReaderOptions):
            return value
        if value is not None and not isinstance(value, dict):
            raise ValueError(
                f"reader options must be a mapping of option: value, got {type(value).__name__} {value!r}"
            )
        d = dict(value or {})
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = set(d) - set(names)
        if unknown:
            raise ValueError(f"unknown reader option(s) {sorted(unknown, key=str)}; known: {names}")
        return cls(**d)

    def units(self, time: str = "s", speed: str = "mps", speed_mps: float = 8.33) -> Tuple[str, str, float]:
        """(time unit, speed unit, assumed speed) with the format's defaults for unset options."""
        return (
            self.time_unit or time,
            self.speed_unit or speed,
            float(self.speed_mps if self.speed_mps is not None else speed_mps),
        )

    def label_spec(self, **defaults: Any) -> LabelSpec:
        return LabelSpec.from_any(self.label, **defaults)

    def calibration(self) -> Optional[Any]:
        """A :class:`CameraCalibration`, a :class:`FieldOfViewCamera` (resolved by
        :func:`build_recording` at the image size) or None, from the ``camera`` option."""
        camera = self.camera
        if camera is None:
            return None
        if camera == "approximate":
            return FieldOfViewCamera(**APPROXIMATE_CAMERA)
        if not isinstance(camera, dict) or not camera:
            raise ValueError(
                "reader option camera: expected calibration fields {fx, fy, cx, cy, height_m, pitch_rad}, "
                f"{{hfov_deg, height_m, pitch_rad}} or 'approximate', got {camera!r}"
            )
        try:
            if "hfov_deg" in camera:
                unknown = set(camera) - {f.name for f in dataclasses.fields(FieldOfViewCamera)}
                if unknown:
                    raise ValueError(
                        f"unknown keys {sorted(unknown, key=str)} beside hfov_deg "
                        "(allowed: hfov_deg, vfov_deg, height_m, pitch_rad)"
                    )
                return FieldOfViewCamera(**camera)
            return CameraCalibration.from_dict(camera)
        except (TypeError, ValueError) as err:  # RecordingError is a ValueError
            message = str(err).replace("camera calibration: ", "")
            raise ValueError(f"reader option camera: {message}") from None


_MOUNTING = tuple((name, CALIBRATION_RANGES[name]) for name in ("height_m", "pitch_rad"))

# The stated approximation for logs whose camera is unknown (reader option ``camera: approximate``):
# the built-in world's camera, a forward camera 1.5 m above the road, 80 deg horizontal field of view,
# pitched 0.15 rad down. Viewpoint synthesis with it is only as right as the guess: shifts warp the
# road as if seen from there, and the label correction assumes the same geometry.
APPROXIMATE_CAMERA: Dict[str, float] = {"hfov_deg": 80.0, "height_m": 1.5, "pitch_rad": 0.15}


@dataclasses.dataclass(frozen=True)
class FieldOfViewCamera:
    """A camera given by its field of view and mounting; :meth:`resolve` gives the calibration at an
    image size (square pixels unless ``vfov_deg``, principal point at the centre)."""

    hfov_deg: float
    height_m: float = 1.5
    pitch_rad: float = 0.0
    vfov_deg: Optional[float] = None

    def __post_init__(self) -> None:
        fov = dict(low=1.0, high=179.0, high_open=True)
        for name, limits in (("hfov_deg", fov), ("vfov_deg", fov), *_MOUNTING):
            if getattr(self, name) is not None or name != "vfov_deg":
                object.__setattr__(self, name, number(getattr(self, name), name, **limits))

    def resolve(self, width: int, height: int) -> CameraCalibration:
        fx = 0.5 * width / math.tan(math.radians(self.hfov_deg) / 2.0)
        fy = fx if self.vfov_deg is None else 0.5 * height / math.tan(math.radians(self.vfov_deg) / 2.0)
        return CameraCalibration(
            fx=fx,
            fy=fy,
            cx=(width - 1) / 2.0,
            cy=(height - 1) / 2.0,
            height_m=self.height_m,
            pitch_rad=self.pitch_rad,
        )
