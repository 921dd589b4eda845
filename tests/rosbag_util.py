"""Write real ROS bags with rosbags' own writers (rosbag1, rosbag2 sqlite3, rosbag2 MCAP) for tests.

Nothing here uses drive's reader: the bags are what a vehicle's recorder would leave, with the
camera and the steering on separate topics, each at its own rate and on its own clock.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

ACKERMANN = {
    "ackermann_msgs/msg/AckermannDrive": "float32 steering_angle\nfloat32 steering_angle_velocity\n"
    "float32 speed\nfloat32 acceleration\nfloat32 jerk\n",
    "ackermann_msgs/msg/AckermannDriveStamped": "std_msgs/Header header\n"
    "ackermann_msgs/AckermannDrive drive\n",
}
KINDS = ("rosbag1", "sqlite3", "mcap")


def store(kind: str):
    ts = get_typestore(Stores.ROS1_NOETIC if kind == "rosbag1" else Stores.ROS2_HUMBLE)
    types = {}
    for name, text in ACKERMANN.items():
        types.update(get_types_from_msg(text, name))
    ts.register(types)
    return ts


def _writer(path: Path, kind: str):
    if kind == "rosbag1":
        from rosbags.rosbag1 import Writer

        return Writer(path)
    from rosbags.rosbag2 import StoragePlugin, Writer

    plugin = StoragePlugin.MCAP if kind == "mcap" else StoragePlugin.SQLITE3
    return Writer(path, version=9, storage_plugin=plugin)


def bag_path(root: Path, kind: str, name: str = "drive") -> Path:
    return root / (f"{name}.bag" if kind == "rosbag1" else name)


def _header(ts, kind: str, t_ns: int, frame_id: str = "base_link"):
    Time = ts.types["builtin_interfaces/msg/Time"]
    Header = ts.types["std_msgs/msg/Header"]
    stamp = Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000)
    if kind == "rosbag1":
        return Header(seq=0, stamp=stamp, frame_id=frame_id)
    return Header(stamp=stamp, frame_id=frame_id)


def serialize(ts, kind: str, msg, msgtype: str) -> bytes:
    return ts.serialize_ros1(msg, msgtype) if kind == "rosbag1" else ts.serialize_cdr(msg, msgtype)


def image_msg(ts, kind: str, t_ns: int, rgb: np.ndarray, encoding: str = "jpeg"):
    """A CompressedImage (encoding 'jpeg'/'png') or an Image (rgb8, bgr8, mono8, bayer_rggb8, ...)."""
    if encoding in ("jpeg", "png"):
        ok, data = cv2.imencode(
            "." + ("jpg" if encoding == "jpeg" else "png"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
        )
        assert ok
        return ts.types["sensor_msgs/msg/CompressedImage"](
            header=_header(ts, kind, t_ns), format=encoding, data=data.reshape(-1)
        ), "sensor_msgs/msg/CompressedImage"
    h, w = rgb.shape[:2]
    if encoding == "rgb8":
        pix = rgb
    elif encoding == "bgr8":
        pix = rgb[:, :, ::-1]
    elif encoding == "mono8":
        pix = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    elif encoding == "bayer_rggb8":  # R G / G B mosaic
        pix = np.empty((h, w), np.uint8)
        pix[0::2, 0::2] = rgb[0::2, 0::2, 0]
        pix[0::2, 1::2] = rgb[0::2, 1::2, 1]
        pix[1::2, 0::2] = rgb[1::2, 0::2, 1]
        pix[1::2, 1::2] = rgb[1::2, 1::2, 2]
    else:
        raise ValueError(encoding)
    pix = np.ascontiguousarray(pix)
    channels = 1 if pix.ndim == 2 else 3
    step = w * channels + 4  # padded rows, as some drivers write them
    padded = np.zeros((h, step), np.uint8)
    padded[:, : w * channels] = pix.reshape(h, w * channels)
    return ts.types["sensor_msgs/msg/Image"](
        header=_header(ts, kind, t_ns),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=0,
        step=step,
        data=padded.reshape(-1),
    ), "sensor_msgs/msg/Image"


def steering_msg(ts, kind: str, msgtype: str, t_ns: int, kappa: float, speed: float, wheelbase: float):
    """A steering message meaning curvature ``kappa`` (1/m) at ``speed`` (m/s)."""
    if msgtype == "ackermann_msgs/msg/AckermannDriveStamped":
        drive = ts.types["ackermann_msgs/msg/AckermannDrive"](
            steering_angle=math.atan(kappa * wheelbase),
            steering_angle_velocity=0.0,
            speed=speed,
            acceleration=0.0,
            jerk=0.0,
        )
        return ts.types[msgtype](header=_header(ts, kind, t_ns), drive=drive)
    if msgtype == "geometry_msgs/msg/TwistStamped":
        V = ts.types["geometry_msgs/msg/Vector3"]
        twist = ts.types["geometry_msgs/msg/Twist"](
            linear=V(x=speed, y=0.0, z=0.0), angular=V(x=0.0, y=0.0, z=kappa * speed)
        )
        return ts.types[msgtype](header=_header(ts, kind, t_ns), twist=twist)
    if msgtype in ("std_msgs/msg/Float32", "std_msgs/msg/Float64"):
        return ts.types[msgtype](data=kappa)
    raise ValueError(msgtype)


def write_bag(
    path: Path,
    kind: str,
    *,
    frames: Sequence[Tuple[int, np.ndarray]],
    steering: Sequence[Tuple[int, float, float]],
    steering_type: str = "ackermann_msgs/msg/AckermannDriveStamped",
    encoding: str = "jpeg",
    wheelbase: float = 2.7,
    camera_topic: str = "/camera/image",
    steering_topic: str = "/vehicle/steering",
    extra_topics: Optional[Dict[str, str]] = None,
    receive_delay_ns: int = 3_000_000,
    camera_delay_ns: Optional[int] = None,
    speed: Optional[Sequence[Tuple[int, float]]] = None,
    speed_type: str = "std_msgs/msg/Float32",
    speed_topic: str = "/vehicle/speed",
    poses: Optional[Sequence[Tuple[int, float, float, float]]] = None,
    pose_type: str = "nav_msgs/msg/Odometry",
    pose_topic: str = "/odom",
) -> Path:
    """Write ``frames`` [(stamp ns, rgb)] and ``steering`` [(stamp ns, kappa 1/m, speed m/s)].

    Messages are stored in receive order (bag time = stamp + ``receive_delay_ns``), the two topics
    interleaved as a recorder would (``camera_delay_ns``: the camera's own delay, e.g. a slow
    encoder). ``extra_topics`` {topic: msgtype} adds distractor topics (one message each at the
    start) to exercise topic picking. ``speed`` [(stamp ns, m/s)] adds a speed topic (an Odometry
    speed topic has a zero pose), ``poses`` [(stamp ns, x m, y m, yaw rad)] a pose topic.
    """
    ts = store(kind)
    records: List[Tuple[int, str, bytes]] = []
    cam_type = None
    for t_ns, rgb in frames:
        msg, cam_type = image_msg(ts, kind, t_ns, rgb, encoding)
        delay = receive_delay_ns if camera_delay_ns is None else camera_delay_ns
        records.append((t_ns + delay, "cam", serialize(ts, kind, msg, cam_type)))
    for t_ns, kappa, v_mps in steering:
        msg = steering_msg(ts, kind, steering_type, t_ns, kappa, v_mps, wheelbase)
        records.append((t_ns + receive_delay_ns, "steer", serialize(ts, kind, msg, steering_type)))
    records += _speed_and_pose_records(ts, kind, speed, speed_type, poses, pose_type, receive_delay_ns)
    t_first = min(r[0] for r in records)
    for topic, msgtype in (extra_topics or {}).items():
        msg = ts.types[msgtype](data=1.0) if msgtype.startswith("std_msgs") else None
        records.append((t_first, topic, serialize(ts, kind, msg, msgtype)))
    records.sort(key=lambda r: r[0])
    with _writer(path, kind) as w:
        conns = {
            "cam": w.add_connection(camera_topic, cam_type, typestore=ts),
            "steer": w.add_connection(steering_topic, steering_type, typestore=ts),
        }
        for topic, msgtype in (extra_topics or {}).items():
            conns[topic] = w.add_connection(topic, msgtype, typestore=ts)
        if speed:
            conns["speed"] = w.add_connection(speed_topic, speed_type, typestore=ts)
        if poses:
            conns["pose"] = w.add_connection(pose_topic, pose_type, typestore=ts)
        for t, key, raw in records:
            w.write(conns[key], t, raw)
    return path


def _speed_and_pose_records(ts, kind, speed, speed_type, poses, pose_type, delay_ns):
    records = []
    for t_ns, v in speed or ():
        if speed_type == "nav_msgs/msg/Odometry":
            msg = pose_msg(ts, kind, speed_type, t_ns, speed=v)
        else:
            msg = ts.types[speed_type](data=v)
        records.append((t_ns + delay_ns, "speed", serialize(ts, kind, msg, speed_type)))
    for t_ns, x, y, yaw in poses or ():
        msg = pose_msg(ts, kind, pose_type, t_ns, x=x, y=y, yaw=yaw)
        records.append((t_ns + delay_ns, "pose", serialize(ts, kind, msg, pose_type)))
    return records


def pose_msg(ts, kind: str, msgtype: str, t_ns: int, x=0.0, y=0.0, yaw=0.0, speed=0.0):
    """An Odometry, PoseStamped or PoseWithCovarianceStamped at (x, y) heading ``yaw`` (rad, about
    +z: quaternion (0, 0, sin(yaw/2), cos(yaw/2)), REP 103), an Odometry moving at ``speed``."""
    P, Q = ts.types["geometry_msgs/msg/Point"], ts.types["geometry_msgs/msg/Quaternion"]
    pose = ts.types["geometry_msgs/msg/Pose"](
        position=P(x=x, y=y, z=0.0), orientation=Q(x=0.0, y=0.0, z=math.sin(yaw / 2), w=math.cos(yaw / 2))
    )
    if msgtype == "geometry_msgs/msg/PoseStamped":
        return ts.types[msgtype](header=_header(ts, kind, t_ns, "odom"), pose=pose)
    with_cov = ts.types["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36))
    if msgtype == "geometry_msgs/msg/PoseWithCovarianceStamped":
        return ts.types[msgtype](header=_header(ts, kind, t_ns, "odom"), pose=with_cov)
    V = ts.types["geometry_msgs/msg/Vector3"]
    tw = ts.types["geometry_msgs/msg/TwistWithCovariance"](
        twist=ts.types["geometry_msgs/msg/Twist"](
            linear=V(x=speed, y=0.0, z=0.0), angular=V(x=0.0, y=0.0, z=0.0)
        ),
        covariance=np.zeros(36),
    )
    return ts.types[msgtype](
        header=_header(ts, kind, t_ns, "odom"), child_frame_id="base_link", pose=with_cov, twist=tw
    )


def drive_frames(
    seconds: float,
    fps: float,
    t0_ns: int = 1_700_000_000_000_000_000,
    seed: int = 0,
    size: Tuple[int, int] = (64, 48),
) -> List[Tuple[int, np.ndarray]]:
    """Frames whose content encodes the steering: a bright bar whose position moves with curvature."""
    out = []
    n = int(round(seconds * fps))
    w, h = size
    for i in range(n):
        t = i / fps
        kappa = curvature_at(t)
        img = np.full((h, w, 3), 60, np.uint8)
        col = int(round((w - 8) * (0.5 + kappa * 10.0)))
        img[:, max(0, col) : col + 8] = (230, 200, 40)
        out.append((t0_ns + int(round(t * 1e9)), img))
    return out


def curvature_at(t: float) -> float:
    """The steering signal of the test drives (1/m): a slow sine, +-0.04."""
    return 0.04 * math.sin(2 * math.pi * t / 4.0)


def steering_samples(
    seconds: float,
    hz: float,
    t0_ns: int = 1_700_000_000_000_000_000,
    speed: float = 8.0,
    start_s: float = -0.2,
) -> List[Tuple[int, float, float]]:
    n = int(round((seconds - start_s + 0.4) * hz))
    return [
        (t0_ns + int(round((start_s + i / hz) * 1e9)), curvature_at(start_s + i / hz), speed)
        for i in range(n)
    ]
