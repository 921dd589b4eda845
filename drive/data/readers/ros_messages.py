"""ROS messages as drive's quantities: camera images as RGB frames, steering messages
(``ackermann_msgs`` AckermannDrive[Stamped], ``geometry_msgs`` Twist[Stamped], ``std_msgs``
Float32/Float64) as curvature in 1/m, speed messages as m/s, poses (``nav_msgs`` Odometry,
``geometry_msgs`` PoseStamped, PoseWithCovarianceStamped) as x, y (m) and yaw (rad, REP 103), header
stamps as nanoseconds.

The conversions and supported encodings are listed in :mod:`drive.data.readers.rosbag`, the
reader that opens bags and aligns these values to the camera frames.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import cv2
import numpy as np

from drive.data.errors import Problems
from drive.data.label_units import to_curvature_per_m
from drive.data.readers.base import ReaderOptions
from drive.data.readers.poses import yaw_from_quaternion

__all__ = [
    "decode_image",
    "typestore",
    "steering_curvature",
    "Series",
    "IMAGE_TYPES",
    "STEERING_TYPES",
    "SPEED_TYPES",
    "POSE_TYPES",
    "ACKERMANN_MSGS",
    "DEFAULT_MIN_SPEED_MPS",
]

IMAGE_TYPES = ("sensor_msgs/msg/CompressedImage", "sensor_msgs/msg/Image")
STEERING_TYPES = (
    "ackermann_msgs/msg/AckermannDriveStamped",
    "ackermann_msgs/msg/AckermannDrive",
    "geometry_msgs/msg/TwistStamped",
    "geometry_msgs/msg/Twist",
    "std_msgs/msg/Float32",
    "std_msgs/msg/Float64",
)
SPEED_TYPES = STEERING_TYPES + ("nav_msgs/msg/Odometry",)
POSE_TYPES = (
    "nav_msgs/msg/Odometry",
    "geometry_msgs/msg/PoseStamped",
    "geometry_msgs/msg/PoseWithCovarianceStamped",
)

# ackermann_msgs is not in rosbags' built-in typestores; its definitions (ROS 2, identical in ROS 1
# apart from the Header) are registered from text for bags that carry no definitions of their own.
ACKERMANN_MSGS = {
    "ackermann_msgs/msg/AckermannDrive": "float32 steering_angle\nfloat32 steering_angle_velocity\n"
    "float32 speed\nfloat32 acceleration\nfloat32 jerk\n",
    "ackermann_msgs/msg/AckermannDriveStamped": "std_msgs/Header header\n"
    "ackermann_msgs/AckermannDrive drive\n",
}
DEFAULT_MIN_SPEED_MPS = 0.5
# ROS names the Bayer pattern by its first row; OpenCV by the second row's first two pixels, so
# ROS "rggb" is OpenCV "BayerBG" (https://docs.opencv.org/4.x/de/d25/imgproc_color_conversions.html).
_BAYER = {
    "bayer_rggb8": cv2.COLOR_BayerBG2RGB,
    "bayer_bggr8": cv2.COLOR_BayerRG2RGB,
    "bayer_gbrg8": cv2.COLOR_BayerGR2RGB,
    "bayer_grbg8": cv2.COLOR_BayerGB2RGB,
}


@functools.lru_cache(maxsize=2)
def typestore(ros1: bool = False) -> Any:
    """rosbags' ROS 2 (or ROS 1 Noetic) typestore with ackermann_msgs registered."""
    # imported on first use: rosbags costs ~0.1 s of start-up to every drive command otherwise
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.LATEST)
    types: Dict[str, Any] = {}
    for name, text in ACKERMANN_MSGS.items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store


# raw Image encodings: bytes per pixel, and OpenCV's conversion to RGB (None: already RGB)
_RAW: Dict[str, Tuple[int, Optional[int]]] = {
    "rgb8": (3, None),
    "8uc3": (3, None),
    "bgr8": (3, cv2.COLOR_BGR2RGB),
    "rgba8": (4, cv2.COLOR_RGBA2RGB),
    "bgra8": (4, cv2.COLOR_BGRA2RGB),
    "mono8": (1, cv2.COLOR_GRAY2RGB),
    "8uc1": (1, cv2.COLOR_GRAY2RGB),
    "yuv422": (2, cv2.COLOR_YUV2RGB_UYVY),
    "uyvy": (2, cv2.COLOR_YUV2RGB_UYVY),
    "yuv422_yuy2": (2, cv2.COLOR_YUV2RGB_YUY2),
    "yuyv": (2, cv2.COLOR_YUV2RGB_YUY2),
    **{name: (1, code) for name, code in _BAYER.items()},
}


def decode_image(msg: Any, msgtype: str) -> np.ndarray:
    """An image message as uint8 RGB [H, W, 3]; ValueError says what is wrong."""
    if msgtype.endswith("CompressedImage"):
        return _decode_compressed(msg)
    enc = str(msg.encoding).lower()
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, dtype=np.uint8).reshape(-1)
    if enc not in _RAW:
        raise ValueError(
            f"image encoding {msg.encoding!r} is not supported (rgb8, bgr8, rgba8, bgra8, mono8, "
            f"bayer_*8, yuv422, yuv422_yuy2)"
        )
    channels, to_rgb = _RAW[enc]
    if h <= 0 or w <= 0 or step < w * channels or data.size < step * h:
        raise ValueError(
            f"{msg.encoding} image {w}x{h} with step {step} needs {step * h} bytes, has {data.size}"
        )
    rows = data[: step * h].reshape(h, step)[:, : w * channels]
    img = np.ascontiguousarray(rows.reshape(h, w, channels) if channels > 1 else rows.reshape(h, w))
    return img if to_rgb is None else cv2.cvtColor(img, to_rgb)


def _decode_compressed(msg: Any) -> np.ndarray:
    """A CompressedImage (JPEG, PNG, anything OpenCV decodes) as uint8 RGB; a depth image is refused."""
    data = (
        np.frombuffer(bytes(msg.data), dtype=np.uint8) if not isinstance(msg.data, np.ndarray) else msg.data
    )
    if "compressedDepth" in str(msg.format):
        raise ValueError(f"format {msg.format!r} is a depth image, not a camera frame")
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise ValueError(f"compressed image (format {msg.format!r}, {data.size} bytes) cannot be decoded")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


@dataclass
class Series:
    """One topic's samples: receive and header times (ns), values, 0-based message ordinals."""

    topic: str
    msgtype: str
    bag_ns: np.ndarray
    header_ns: Optional[np.ndarray]
    ordinals: np.ndarray
    values: Dict[str, np.ndarray]


def has_header(msgtype: str) -> bool:
    return msgtype.endswith("Stamped") or msgtype in IMAGE_TYPES or msgtype == "nav_msgs/msg/Odometry"


def stamp_ns(msg: Any) -> int:
    st = msg.header.stamp
    return int(st.sec) * 1_000_000_000 + int(st.nanosec)


def message_values(msg: Any, msgtype: str) -> Dict[str, float]:
    """Raw physical values of a steering, speed or pose message."""
    short = msgtype.rsplit("/", 1)[-1]
    if short == "AckermannDriveStamped":
        return {"angle": msg.drive.steering_angle, "speed": msg.drive.speed}
    if short == "AckermannDrive":
        return {"angle": msg.steering_angle, "speed": msg.speed}
    if short == "TwistStamped":
        return {"yaw_rate": msg.twist.angular.z, "speed": msg.twist.linear.x}
    if short == "Twist":
        return {"yaw_rate": msg.angular.z, "speed": msg.linear.x}
    if short == "Odometry":
        return {"speed": msg.twist.twist.linear.x, **_pose_values(msg.pose.pose)}
    if short == "PoseStamped":
        return _pose_values(msg.pose)
    if short == "PoseWithCovarianceStamped":
        return _pose_values(msg.pose.pose)
    return {"value": msg.data}


def _pose_values(pose: Any) -> Dict[str, float]:
    """A ``geometry_msgs/Pose`` as x, y (m) and the yaw of its orientation (rad, + = counter-clockwise)."""
    q = pose.orientation
    return {
        "x": float(pose.position.x),
        "y": float(pose.position.y),
        "yaw": float(yaw_from_quaternion(q.x, q.y, q.z, q.w)),
    }


def steering_curvature(
    series: Series, options: ReaderOptions, bag: Path, problems: Problems
) -> Tuple[np.ndarray, Optional[np.ndarray], Dict[str, Any]]:
    """(curvature 1/m [N], speed m/s [N] or None, label description for meta)."""
    short = series.msgtype.rsplit("/", 1)[-1]
    label = dict(options.label or {})
    if short.startswith("AckermannDrive"):
        unknown = set(label) - {"wheelbase_m", "sign"}
        if unknown:
            raise ValueError(
                f"{bag} {series.topic}: {series.msgtype} steering_angle is a road-wheel angle in rad; "
                f"label may set only wheelbase_m and sign, not {sorted(unknown)}"
            )
        spec = options.label_spec(unit="wheel_rad", **label)
        return (
            to_curvature_per_m(series.values["angle"], spec),
            series.values["speed"],
            {
                "from": series.msgtype,
                "conversion": "tan(steering_angle) / wheelbase_m",
                "wheelbase_m": spec.wheelbase_m,
                "sign": spec.sign,
            },
        )
    if short.startswith("Twist"):
        min_speed = float(label.pop("min_speed_mps", DEFAULT_MIN_SPEED_MPS))
        sign = float(label.pop("sign", 1.0))
        if label:
            raise ValueError(
                f"{bag} {series.topic}: {series.msgtype} gives yaw rate and speed; label may set only "
                f"sign and min_speed_mps, not {sorted(label)}"
            )
        v, w = series.values["speed"], series.values["yaw_rate"]
        slow = np.abs(v) < min_speed
        with np.errstate(divide="ignore", invalid="ignore"):
            kappa = np.where(slow, np.nan, sign * w / np.where(slow, 1.0, v))
        # one problem per run of standstill samples (they have no curvature), not one per message
        edges = np.flatnonzero(np.diff(np.concatenate([[0], slow.astype(np.int8), [0]])))
        for start, stop in zip(edges[::2], edges[1::2]):
            problems.report(
                f"{bag} {series.topic}",
                int(series.ordinals[start]),
                "standstill",
                f"{stop - start} message(s) from here have |linear.x| < {min_speed:g} m/s: yaw rate / speed "
                f"gives no curvature (frames there are unlabelled; label: {{min_speed_mps: ...}} lowers it)",
            )
        return (
            kappa,
            v,
            {
                "from": series.msgtype,
                "conversion": "angular.z / linear.x",
                "sign": sign,
                "min_speed_mps": min_speed,
            },
        )
    spec = options.label_spec()
    return (
        to_curvature_per_m(series.values["value"], spec),
        None,
        {"from": series.msgtype, "unit": spec.unit, "sign": spec.sign},
    )


def speed_values(series: Series) -> np.ndarray:
    v = series.values
    return v["speed"] if "speed" in v else v["value"]


def raw_steer(series: Series) -> np.ndarray:
    v = series.values
    return v.get("angle", v.get("yaw_rate", v.get("value")))
