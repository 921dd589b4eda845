"""Reader for ROS bags: ROS 1 ``.bag``, rosbag2 with sqlite3 (``.db3``) or MCAP storage.

Built on the pure-Python ``rosbags`` library, so no ROS installation is needed. A bag is one
recording: frames from one camera topic, curvature from one steering topic, each topic on its own
clock and at its own rate.

Topics (``camera_topic``, ``steering_topic``, ``speed_topic`` reader options) are picked
automatically when the bag has exactly one candidate; otherwise the error (and
``drive data inspect BAG``) lists every topic with its type and message count.

Camera: ``sensor_msgs/msg/CompressedImage`` (JPEG, PNG, anything OpenCV decodes) or
``sensor_msgs/msg/Image`` with encoding rgb8, bgr8, rgba8, bgra8, mono8, bayer_{rggb,bggr,gbrg,grbg}8
(demosaiced by OpenCV), yuv422 (UYVY) or yuv422_yuy2. Rows padded beyond ``width x channels``
(``step``) are handled.

Steering -> curvature (1/m, positive = left, REP 103: +z yaw is counter-clockwise):

====================================  =====================================================
``ackermann_msgs/msg/AckermannDrive``  ``kappa = tan(steering_angle) / wheelbase_m`` (road-wheel
``[Stamped]``                          angle in rad; set ``label: {wheelbase_m: ...}``); speed
                                       from ``speed``
``geometry_msgs/msg/Twist[Stamped]``   ``kappa = angular.z / linear.x`` (yaw rate / speed); speed
                                       from ``linear.x``; samples below ``min_speed_mps`` have no
                                       curvature and are reported (``standstill``)
``std_msgs/msg/Float32`` / ``Float64`` already curvature in 1/m, unless ``label`` names another
                                       unit (e.g. ``{unit: steering_wheel_deg}``)
====================================  =====================================================

Speed (``speed_topic``, optional): Float32/Float64 (m/s), Twist[Stamped] (linear.x),
``nav_msgs/msg/Odometry`` (twist.twist.linear.x) or AckermannDrive[Stamped] (speed); without one,
the steering message's own speed, else ``speed_mps``.

Time (``stamp`` option): ``header`` uses each message's ``header.stamp``, ``bag`` the time the
recorder received it; ``auto`` (default) uses header stamps when both the camera and the steering
message carry a header, else receive times for both (never two clocks mixed).

Alignment, with the rules of the other readers: steering and speed samples are checked like log
rows (non-finite values, duplicate or decreasing timestamps are problems), then interpolated
linearly to each frame's time. A frame outside the steering samples' time range, or inside a
steering dropout longer than ``gap_factor`` (3) x the steering topic's median period, has no
label (``unlabelled_frames``). Frames with duplicate or decreasing stamps are problems too; dropped
frames leave time gaps that training windows never cross.

Frames are never held in memory: the first pass keeps only timestamps; :class:`BagFrames` then
reads one message at a time (sequential reads stream, random reads seek by timestamp).

Every problem names ``<bag> <topic>`` as the file and the message's 0-based index on that topic
as the row.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import cv2
import numpy as np

from drive.data.errors import Problems
from drive.data.labels import to_curvature_per_m
from drive.data.readers.base import ReaderOptions, build_recording
from drive.io.recording import Recording, RecordingError

__all__ = ["read", "detect", "list_topics", "BagFrames", "decode_image", "typestore", "BAG_SUFFIXES",
           "IMAGE_TYPES", "STEERING_TYPES", "SPEED_TYPES", "ACKERMANN_MSGS"]

BAG_SUFFIXES = (".bag", ".mcap", ".db3")
IMAGE_TYPES = ("sensor_msgs/msg/CompressedImage", "sensor_msgs/msg/Image")
STEERING_TYPES = ("ackermann_msgs/msg/AckermannDriveStamped", "ackermann_msgs/msg/AckermannDrive",
                  "geometry_msgs/msg/TwistStamped", "geometry_msgs/msg/Twist",
                  "std_msgs/msg/Float32", "std_msgs/msg/Float64")
SPEED_TYPES = STEERING_TYPES + ("nav_msgs/msg/Odometry",)

# ackermann_msgs is not in rosbags' built-in typestores; its definitions (ROS 2, identical in ROS 1
# apart from the Header) are registered from text for bags that carry no definitions of their own.
ACKERMANN_MSGS = {
    "ackermann_msgs/msg/AckermannDrive": "float32 steering_angle\nfloat32 steering_angle_velocity\n"
                                         "float32 speed\nfloat32 acceleration\nfloat32 jerk\n",
    "ackermann_msgs/msg/AckermannDriveStamped": "std_msgs/Header header\nackermann_msgs/AckermannDrive drive\n",
}
DEFAULT_MIN_SPEED_MPS = 0.5
GAP_FACTOR = 3.0
# ROS names the Bayer pattern by its first row; OpenCV by the second row's first two pixels, so
# ROS "rggb" is OpenCV "BayerBG" (https://docs.opencv.org/4.x/de/d25/imgproc_color_conversions.html).
_BAYER = {"bayer_rggb8": cv2.COLOR_BayerBG2RGB, "bayer_bggr8": cv2.COLOR_BayerRG2RGB,
          "bayer_gbrg8": cv2.COLOR_BayerGR2RGB, "bayer_grbg8": cv2.COLOR_BayerGB2RGB}


@functools.lru_cache(maxsize=2)
def typestore(ros1: bool = False) -> Any:
    """rosbags' ROS 2 (or ROS 1 Noetic) typestore with ackermann_msgs registered."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.LATEST)
    types: Dict[str, Any] = {}
    for name, text in ACKERMANN_MSGS.items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store


def detect(path: Path) -> bool:
    if path.is_file():
        return path.suffix.lower() in BAG_SUFFIXES
    meta = path / "metadata.yaml"
    if path.is_dir() and meta.is_file():
        try:
            head = meta.read_text(errors="replace")[:4096]
        except OSError:
            return False
        return "rosbag2_bagfile_information" in head
    return False


def _open(path: Path) -> Any:
    from rosbags.highlevel import AnyReader

    reader = AnyReader([path], default_typestore=typestore(ros1=path.suffix == ".bag"))
    reader.open()
    return reader


def _open_or_report(path: Path, problems: Problems) -> Optional[Any]:
    try:
        return _open(path)
    except Exception as e:  # rosbags raises its own error types for every kind of damage
        problems.report(str(path), None, "unreadable", f"cannot open the bag ({type(e).__name__}: {e})")
        return None


def list_topics(path: Path) -> List[Dict[str, Any]]:
    """Every topic of a bag: name, type, message count, and the role drive can give it."""
    reader = _open(Path(path))
    try:
        out = []
        for name, info in sorted(reader.topics.items()):
            roles = [r for r, types in (("camera", IMAGE_TYPES), ("steering", STEERING_TYPES),
                                        ("speed", SPEED_TYPES)) if info.msgtype in types]
            out.append({"topic": name, "type": info.msgtype, "messages": int(info.msgcount), "roles": roles})
        return out
    finally:
        reader.close()


def _topic_table(reader: Any) -> str:
    return "; ".join(f"{n} ({i.msgtype}, {i.msgcount} msgs)" for n, i in sorted(reader.topics.items()))


def _pick_topic(reader: Any, bag: Path, given: Optional[str], types: Sequence[str], role: str,
                option: str, required: bool) -> Optional[str]:
    topics = reader.topics
    if given:
        if given not in topics:
            raise ValueError(f"{bag}: no topic {given!r} ({option}); topics: {_topic_table(reader)}")
        if topics[given].msgtype not in types:
            raise ValueError(f"{bag}: {option} {given!r} is a {topics[given].msgtype}; a {role} topic must be one of "
                             f"{', '.join(types)}")
        return given
    candidates = [n for n, i in sorted(topics.items()) if i.msgtype in types and i.msgcount > 0]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates and not required:
        return None
    if not candidates:
        raise ValueError(f"{bag}: no {role} topic (types {', '.join(types)}); topics: {_topic_table(reader)}")
    listed = "; ".join(f"{n} ({topics[n].msgtype}, {topics[n].msgcount} msgs)" for n in candidates)
    raise ValueError(f"{bag}: {len(candidates)} {role} topics: {listed}; name one with {option} "
                     f"(--set {option}=TOPIC)")


# ----------------------------------------------------------------------------------------------
# images

def decode_image(msg: Any, msgtype: str) -> np.ndarray:
    """An image message as uint8 RGB [H, W, 3]; ValueError says what is wrong."""
    if msgtype.endswith("CompressedImage"):
        data = np.frombuffer(bytes(msg.data), dtype=np.uint8) if not isinstance(msg.data, np.ndarray) else msg.data
        if "compressedDepth" in str(msg.format):
            raise ValueError(f"format {msg.format!r} is a depth image, not a camera frame")
        image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
        if image is None:
            raise ValueError(f"compressed image (format {msg.format!r}, {data.size} bytes) cannot be decoded")
        return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    enc = str(msg.encoding).lower()
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, dtype=np.uint8).reshape(-1)
    channels = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1, "8uc1": 1, "8uc3": 3,
                "yuv422": 2, "uyvy": 2, "yuv422_yuy2": 2, "yuyv": 2, **{b: 1 for b in _BAYER}}.get(enc)
    if channels is None:
        raise ValueError(f"image encoding {msg.encoding!r} is not supported (rgb8, bgr8, rgba8, bgra8, mono8, "
                         f"bayer_*8, yuv422, yuv422_yuy2)")
    if h <= 0 or w <= 0 or step < w * channels or data.size < step * h:
        raise ValueError(f"{msg.encoding} image {w}x{h} with step {step} needs {step * h} bytes, has {data.size}")
    rows = data[: step * h].reshape(h, step)[:, : w * channels]
    img = np.ascontiguousarray(rows.reshape(h, w, channels) if channels > 1 else rows.reshape(h, w))
    if enc in ("rgb8", "8uc3"):
        return img
    if enc == "bgr8":
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    if enc == "rgba8":
        return cv2.cvtColor(img, cv2.COLOR_RGBA2RGB)
    if enc == "bgra8":
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    if enc in ("mono8", "8uc1"):
        return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    if enc in ("yuv422", "uyvy"):
        return cv2.cvtColor(img, cv2.COLOR_YUV2RGB_UYVY)
    if enc in ("yuv422_yuy2", "yuyv"):
        return cv2.cvtColor(img, cv2.COLOR_YUV2RGB_YUY2)
    return cv2.cvtColor(img, _BAYER[enc])


class BagFrames:
    """The frames of one camera topic, read from the bag one message at a time.

    ``times_ns[i]`` is the bag (receive) time of frame ``i`` and ``ordinals[i]`` its 0-based index
    on the topic. Reading ``i`` after ``i - 1`` continues one open iterator; any other index opens
    a new one at that receive time (an indexed seek in every storage kind). Picklable for
    DataLoader workers (the reader reopens lazily in each process).
    """

    def __init__(self, path: Path, topic: str, times_ns: np.ndarray, ordinals: np.ndarray):
        self.path, self.topic = Path(path), topic
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.ordinals = np.asarray(ordinals, dtype=np.int64)
        self._reader: Any = None
        self._iter: Optional[Iterator] = None
        self._next = -1

    def __len__(self) -> int:
        return len(self.times_ns)

    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "topic": self.topic, "times_ns": self.times_ns, "ordinals": self.ordinals}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["path"], state["topic"], state["times_ns"], state["ordinals"])

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader, self._iter, self._next = None, None, -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _where(self, index: int) -> str:
        return f"{self.path} {self.topic}, message {int(self.ordinals[index])}"

    def read(self, index: int) -> np.ndarray:
        if not 0 <= index < len(self):
            raise IndexError(f"{self.path} {self.topic}: frame {index} out of range 0..{len(self) - 1}")
        if self._reader is None:
            try:
                self._reader = _open(self.path)
            except Exception as e:
                raise RecordingError(f"{self.path}: cannot open the bag ({type(e).__name__}: {e})") from None
        if index != self._next or self._iter is None:
            # messages at the same receive time as frame `index` but before it on the topic are skipped
            t = int(self.times_ns[index])
            conns = [c for c in self._reader.connections if c.topic == self.topic]
            self._iter = self._reader.messages(connections=conns, start=t)
            earlier = int(np.sum(self.times_ns[:index] == t))
            # frames dropped by the reader (bad stamps) with this receive time count too
            skip = int(self.ordinals[index]) - int(self.ordinals[index - earlier]) if earlier else 0
            skip = max(skip, earlier)
            for _ in range(skip):
                next(self._iter, None)
        else:
            gap = int(self.ordinals[index]) - int(self.ordinals[index - 1]) - 1 if index > 0 else 0
            for _ in range(gap):  # messages dropped between two kept frames
                next(self._iter, None)
        item = next(self._iter, None)
        if item is None:
            self._iter = None
            raise RecordingError(f"{self._where(index)}: the message is missing (bag truncated?)")
        conn, _, raw = item
        self._next = index + 1
        try:
            msg = self._reader.deserialize(raw, conn.msgtype)
            return decode_image(msg, conn.msgtype)
        except Exception as e:
            raise RecordingError(f"{self._where(index)}: {e}") from None


# ----------------------------------------------------------------------------------------------
# steering and speed

@dataclass
class _Series:
    """One topic's samples: receive and header times (ns), values, 0-based message ordinals."""

    topic: str
    msgtype: str
    bag_ns: np.ndarray
    header_ns: Optional[np.ndarray]
    ordinals: np.ndarray
    values: Dict[str, np.ndarray]


def _has_header(msgtype: str) -> bool:
    return msgtype.endswith("Stamped") or msgtype in IMAGE_TYPES or msgtype == "nav_msgs/msg/Odometry"


def _stamp_ns(msg: Any) -> int:
    st = msg.header.stamp
    return int(st.sec) * 1_000_000_000 + int(st.nanosec)


def _fields(msg: Any, msgtype: str) -> Dict[str, float]:
    """Raw physical values of a steering/speed message."""
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
        return {"speed": msg.twist.twist.linear.x}
    return {"value": msg.data}


def _scan(reader: Any, bag: Path, topics: Dict[str, str], problems: Problems) -> Dict[str, _Series]:
    """One streaming pass over the chosen topics: timestamps (and scalar values) only."""
    wanted = set(topics.values())
    conns = [c for c in reader.connections if c.topic in wanted]
    acc: Dict[str, Dict[str, list]] = {t: {"bag": [], "hdr": [], "ord": [], "vals": []} for t in wanted}
    types = {t: reader.topics[t].msgtype for t in wanted}
    counts = {t: 0 for t in wanted}
    for conn, t_ns, raw in reader.messages(connections=conns):
        topic = conn.topic
        ordinal = counts[topic]
        counts[topic] += 1
        a = acc[topic]
        try:
            msg = reader.deserialize(raw, conn.msgtype)
            hdr = _stamp_ns(msg) if _has_header(conn.msgtype) else None
            vals = None if conn.msgtype in IMAGE_TYPES else _fields(msg, conn.msgtype)
        except Exception as e:
            problems.report(f"{bag} {topic}", ordinal, "unreadable_message", f"cannot deserialize ({e})")
            continue
        a["bag"].append(t_ns)
        a["hdr"].append(hdr)
        a["ord"].append(ordinal)
        a["vals"].append(vals)
    out = {}
    for topic in wanted:
        a = acc[topic]
        mt = types[topic]
        vals = a["vals"]
        keys = list(vals[0]) if vals and vals[0] is not None else []
        out[topic] = _Series(topic, mt, np.asarray(a["bag"], dtype=np.int64),
                             np.asarray(a["hdr"], dtype=np.int64) if _has_header(mt) else None,
                             np.asarray(a["ord"], dtype=np.int64),
                             {k: np.asarray([v[k] for v in vals], dtype=np.float64) for k in keys})
    return out


def _times_s(series: _Series, use_header: bool, t0_ns: int) -> np.ndarray:
    ns = series.header_ns if use_header else series.bag_ns
    t = (ns - t0_ns).astype(np.float64) * 1e-9
    if use_header:
        t[series.header_ns == 0] = np.nan  # an unset stamp: reported as a bad timestamp
    return t


def _steering_curvature(series: _Series, options: ReaderOptions, bag: Path, problems: Problems
                        ) -> Tuple[np.ndarray, Optional[np.ndarray], Dict[str, Any]]:
    """(curvature 1/m [N], speed m/s [N] or None, label description for meta)."""
    short = series.msgtype.rsplit("/", 1)[-1]
    label = dict(options.label or {})
    if short.startswith("AckermannDrive"):
        unknown = set(label) - {"wheelbase_m", "sign"}
        if unknown:
            raise ValueError(f"{bag} {series.topic}: {series.msgtype} steering_angle is a road-wheel angle in rad; "
                             f"label may set only wheelbase_m and sign, not {sorted(unknown)}")
        spec = options.label_spec(unit="wheel_rad", **label)
        return (to_curvature_per_m(series.values["angle"], spec), series.values["speed"],
                {"from": series.msgtype, "conversion": "tan(steering_angle) / wheelbase_m",
                 "wheelbase_m": spec.wheelbase_m, "sign": spec.sign})
    if short.startswith("Twist"):
        min_speed = float(label.pop("min_speed_mps", DEFAULT_MIN_SPEED_MPS))
        sign = float(label.pop("sign", 1.0))
        if label:
            raise ValueError(f"{bag} {series.topic}: {series.msgtype} gives yaw rate and speed; label may set only "
                             f"sign and min_speed_mps, not {sorted(label)}")
        v, w = series.values["speed"], series.values["yaw_rate"]
        slow = np.abs(v) < min_speed
        with np.errstate(divide="ignore", invalid="ignore"):
            kappa = np.where(slow, np.nan, sign * w / np.where(slow, 1.0, v))
        # one problem per run of standstill samples (they have no curvature), not one per message
        edges = np.flatnonzero(np.diff(np.concatenate([[0], slow.astype(np.int8), [0]])))
        for start, stop in zip(edges[::2], edges[1::2]):
            problems.report(f"{bag} {series.topic}", int(series.ordinals[start]), "standstill",
                            f"{stop - start} message(s) from here have |linear.x| < {min_speed:g} m/s: yaw rate / speed "
                            f"gives no curvature (frames there are unlabelled; label: {{min_speed_mps: ...}} lowers it)")
        return kappa, v, {"from": series.msgtype, "conversion": "angular.z / linear.x", "sign": sign,
                          "min_speed_mps": min_speed}
    spec = options.label_spec()
    return (to_curvature_per_m(series.values["value"], spec), None,
            {"from": series.msgtype, "unit": spec.unit, "sign": spec.sign})


def _speed(series: _Series) -> np.ndarray:
    v = series.values
    return v["speed"] if "speed" in v else v["value"]


def _unlabelled_in_gaps(frame_t: np.ndarray, lt: np.ndarray) -> np.ndarray:
    """[N] True for frames that fall inside a steering dropout (> GAP_FACTOR x median period)."""
    if len(lt) < 2:
        return np.zeros(len(frame_t), dtype=bool)
    dt = np.diff(lt)
    limit = GAP_FACTOR * float(np.median(dt))
    j = np.searchsorted(lt, frame_t, side="right")  # lt[j-1] <= t < lt[j]
    inside = (j > 0) & (j < len(lt))
    out = np.zeros(len(frame_t), dtype=bool)
    out[inside] = dt[j[inside] - 1] > limit
    out[inside] &= np.abs(frame_t[inside] - lt[j[inside] - 1]) > 1e-9  # a frame on a sample has its label
    return out


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    stamp = (options.stamp or "auto").lower()
    if stamp not in ("auto", "header", "bag"):
        raise ValueError(f"stamp must be auto, header or bag, got {options.stamp!r}")
    reader = _open_or_report(path, problems)
    if reader is None:
        return []
    try:
        try:
            cam = _pick_topic(reader, path, options.camera_topic, IMAGE_TYPES, "camera", "camera_topic", True)
            steer = _pick_topic(reader, path, options.steering_topic, STEERING_TYPES, "steering", "steering_topic",
                                True)
            speed_topic = (_pick_topic(reader, path, options.speed_topic, SPEED_TYPES, "speed", "speed_topic", True)
                           if options.speed_topic else None)
        except ValueError as e:  # inspect lists the bag's topics beside this problem
            problems.report(str(path), None, "topic", str(e).split(": ", 1)[1])
            return []
        topics = {"camera": cam, "steering": steer, **({"speed": speed_topic} if speed_topic else {})}
        series = _scan(reader, path, topics, problems)
    finally:
        reader.close()
    cs, ss = series[cam], series[steer]
    sp = series[speed_topic] if speed_topic else None
    chosen = [s for s in (cs, ss, sp) if s is not None]
    if stamp == "header":
        lacking = [s.topic for s in chosen if s.header_ns is None]
        if lacking:
            raise ValueError(f"{path}: stamp=header but {', '.join(lacking)} carry no header; use stamp: bag")
    use_header = stamp == "header" or (stamp == "auto" and all(s.header_ns is not None for s in chosen))
    if len(cs.bag_ns) == 0:
        problems.report(f"{path} {cam}", None, "empty", "no readable camera messages")
        return []
    # times count from the first camera message (header stamp or receive time), on the chosen clock
    t0 = (int(cs.header_ns[cs.header_ns > 0].min()) if use_header and np.any(cs.header_ns > 0)
          else int(cs.bag_ns.min()))

    # steering samples -> curvature, checked like rows of a label log
    if len(ss.bag_ns) < 2:
        problems.report(f"{path} {steer}", None, "empty", f"{len(ss.bag_ns)} readable steering message(s); "
                                                         "need at least two to interpolate")
        return []
    kappa, own_speed, label_meta = _steering_curvature(ss, options, path, problems)
    _, _, default_speed = options.units()
    lt = _times_s(ss, use_header, t0)
    raw_speed = own_speed if own_speed is not None else np.full(len(lt), default_speed)
    standstill = np.isnan(kappa) & np.isfinite(raw_speed) & ~np.isnan(_raw_steer(ss))
    keep = ~standstill
    from drive.data.readers.video_csv import _NoFrames

    labels = build_recording(file=f"{path} {steer}", rows=ss.ordinals,
                             log={"timestamp_s": lt, "curvature": kappa, "speed_mps": raw_speed},
                             source=_NoFrames(len(lt)), problems=problems,
                             meta={"fps": 1.0, "width": 1, "height": 1}, keep=keep)
    if labels is None:
        return []
    st, sk = labels.log["timestamp_s"], labels.log["curvature"]
    if sp is not None:
        pt = _times_s(sp, use_header, t0)
        speeds = build_recording(file=f"{path} {speed_topic}", rows=sp.ordinals,
                                 log={"timestamp_s": pt, "curvature": np.zeros(len(pt)), "speed_mps": _speed(sp)},
                                 source=_NoFrames(len(pt)), problems=problems,
                                 meta={"fps": 1.0, "width": 1, "height": 1})
        if speeds is None:
            return []
        spt, spv = speeds.log["timestamp_s"], speeds.log["speed_mps"]
    else:
        spt, spv = st, labels.log["speed_mps"]

    # frames: times, then labels interpolated to them
    ft = _times_s(cs, use_header, t0)
    frame_rows = cs.ordinals
    lo, hi = max(st[0], spt[0]), min(st[-1], spt[-1])
    in_range = (ft >= lo - 1e-9) & (ft <= hi + 1e-9)
    in_gap = _unlabelled_in_gaps(ft, st)
    finite = np.isfinite(ft)
    outside = finite & ~in_range
    for i in np.flatnonzero(outside)[:1]:
        problems.report(f"{path} {cam}", int(frame_rows[i]), "unlabelled_frames",
                        f"{int(outside.sum())} frame(s) lie outside the time range {lo:.3f}..{hi:.3f} s of the "
                        f"steering{'/speed' if sp is not None else ''} samples (first: this message at {ft[i]:.3f} s)")
    gapped = finite & in_range & in_gap
    if gapped.any():
        starts = np.flatnonzero(gapped & ~np.concatenate([[False], gapped[:-1]]))
        for i in starts:
            j = int(np.searchsorted(st, ft[i], side="right"))
            run = int(np.argmin(gapped[i:])) if not gapped[i:].all() else len(gapped) - i
            problems.report(f"{path} {cam}", int(frame_rows[i]), "unlabelled_frames",
                            f"{run} frame(s) from here fall in a {st[j] - st[j - 1]:.3f} s gap of {steer} "
                            f"(> {GAP_FACTOR:g} x its median period {float(np.median(np.diff(st))):.3f} s)")
    keep = ~(outside | gapped)
    log = {"timestamp_s": ft, "curvature": np.interp(ft, st, sk), "speed_mps": np.interp(ft, spt, spv)}
    source = BagFrames(path, cam, cs.bag_ns, cs.ordinals)
    meta = {"source": f"rosbag:{path}", "camera": options.calibration(),
            "extra": {"drive": str(path), "camera_topic": cam, "steering_topic": steer,
                      **({"speed_topic": speed_topic} if speed_topic else {}),
                      "stamp": "header" if use_header else "bag", "label": label_meta,
                      "start_time_ns": t0}}
    rec = build_recording(file=f"{path} {cam}", rows=frame_rows, log=log, source=source, problems=problems,
                          meta=meta, keep=keep, path=path)
    return [rec] if rec is not None else []


def _raw_steer(series: _Series) -> np.ndarray:
    v = series.values
    return v.get("angle", v.get("yaw_rate", v.get("value")))
