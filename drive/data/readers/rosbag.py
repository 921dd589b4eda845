"""Reader for ROS bags: ROS 1 ``.bag``, rosbag2 with sqlite3 (``.db3``) or MCAP storage.

Built on the pure-Python ``rosbags`` library, so no ROS installation is needed. A bag is one
recording: frames from one camera topic, curvature from one steering topic, each topic on its own
clock and at its own rate.

Topics (``camera_topic``, ``steering_topic``, ``speed_topic`` reader options) are picked
automatically when the bag has exactly one candidate; otherwise the error (and
``drive data inspect BAG``) lists every topic with its type and message count. The car's pose comes
from ``odometry_topic`` (``nav_msgs/msg/Odometry``, ``geometry_msgs/msg/PoseStamped`` or
``PoseWithCovarianceStamped``), only when named (:mod:`drive.data.readers.rosbag_poses`).

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

Decoding single messages (images, steering, speed, stamps) lives in
:mod:`drive.data.readers.ros_messages`; opening bags, picking topics and streaming frames in
:mod:`drive.data.readers.rosbag_io`; this module scans the chosen topics and aligns them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

import numpy as np

from drive.data.errors import Problems
from drive.data.readers.base import NoFrames, ReaderOptions, build_recording
from drive.data.readers.registry import register_reader
from drive.data.readers.ros_messages import (
    IMAGE_TYPES,
    POSE_TYPES,
    SPEED_TYPES,
    STEERING_TYPES,
    Series,
    has_header,
    message_values,
    raw_steer,
    speed_values,
    stamp_ns,
    steering_curvature,
)
from drive.data.readers.rosbag_io import BagFrames, open_or_report, pick_topic
from drive.data.readers.rosbag_poses import GAP_FACTOR, add_poses
from drive.data.readers.rosbag_poses import unlabelled_in_gaps as _unlabelled_in_gaps
from drive.io.recording import Recording

__all__ = ["read", "detect", "BAG_SUFFIXES"]

BAG_SUFFIXES = (".bag", ".mcap", ".db3")


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


# ----------------------------------------------------------------------------------------------
# steering and speed


def _scan(reader: Any, bag: Path, topics: Dict[str, str], problems: Problems) -> Dict[str, Series]:
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
            hdr = stamp_ns(msg) if has_header(conn.msgtype) else None
            vals = None if conn.msgtype in IMAGE_TYPES else message_values(msg, conn.msgtype)
        # a damaged message fails with whatever its bytes trigger (struct, index, unicode errors,
        # rosbags' own): it is reported by its index on the topic, the scan goes on
        except Exception as e:  # noqa: BLE001
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
        out[topic] = Series(
            topic,
            mt,
            np.asarray(a["bag"], dtype=np.int64),
            np.asarray(a["hdr"], dtype=np.int64) if has_header(mt) else None,
            np.asarray(a["ord"], dtype=np.int64),
            {k: np.asarray([v[k] for v in vals], dtype=np.float64) for k in keys},
        )
    return out


def _times_s(series: Series, use_header: bool, t0_ns: int) -> np.ndarray:
    ns = series.header_ns if use_header else series.bag_ns
    t = (ns - t0_ns).astype(np.float64) * 1e-9
    if use_header:
        t[series.header_ns == 0] = np.nan  # an unset stamp: reported as a bad timestamp
    return t


class _Chosen(NamedTuple):
    """The scanned topics (speed and pose optional) and the clock their times are read on: header
    stamps or receive times, counted from ``t0_ns``, the first camera message."""

    camera: Series
    steering: Series
    speed: Optional[Series]
    pose: Optional[Series]
    use_header: bool
    t0_ns: int

    def times_s(self, series: Series) -> np.ndarray:
        return _times_s(series, self.use_header, self.t0_ns)


class _Labels(NamedTuple):
    """The steering samples that passed the row checks (times s, curvature 1/m) and the speed
    samples (times s, m/s) the frames' labels are interpolated from."""

    steer_t: np.ndarray
    curvature: np.ndarray
    speed_t: np.ndarray
    speed: np.ndarray
    label_meta: Dict[str, Any]


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    stamp = (options.stamp or "auto").lower()
    if stamp not in ("auto", "header", "bag"):
        raise ValueError(f"stamp must be auto, header or bag, got {options.stamp!r}")
    chosen = _scan_topics(path, options, stamp, problems)
    if chosen is None:
        return []
    labels = _labels(path, chosen, options, problems)
    if labels is None:
        return []
    ft = chosen.times_s(chosen.camera)
    keep = _labelled_frames(path, chosen, labels, ft, problems)
    log = {
        "timestamp_s": ft,
        "curvature": np.interp(ft, labels.steer_t, labels.curvature),
        "speed_mps": np.interp(ft, labels.speed_t, labels.speed),
    }
    cs = chosen.camera
    if chosen.pose is not None:
        keep &= add_poses(path, cs, chosen.pose, ft, chosen.times_s(chosen.pose), log, problems)
    rec = build_recording(
        file=f"{path} {cs.topic}",
        rows=cs.ordinals,
        log=log,
        source=BagFrames(path, cs.topic, cs.bag_ns, cs.ordinals),
        problems=problems,
        meta=_meta(path, chosen, options, labels.label_meta),
        keep=keep,
        path=path,
    )
    return [rec] if rec is not None else []


def _scan_topics(path: Path, options: ReaderOptions, stamp: str, problems: Problems) -> Optional[_Chosen]:
    """Pick the camera, steering and (if named) speed and pose topics, scan them in one pass and
    choose the clock; None (reported) when the bag does not open, a topic is missing or no frame is
    readable."""
    reader = open_or_report(path, problems)
    if reader is None:
        return None
    try:
        try:
            cam = pick_topic(reader, path, options.camera_topic, IMAGE_TYPES, "camera", "camera_topic", True)
            steer = pick_topic(
                reader, path, options.steering_topic, STEERING_TYPES, "steering", "steering_topic", True
            )
            optional = {
                role: pick_topic(reader, path, given, types, role, f"{option}_topic", True)
                for role, given, types, option in (
                    ("speed", options.speed_topic, SPEED_TYPES, "speed"),
                    ("pose", options.odometry_topic, POSE_TYPES, "odometry"),
                )
                if given
            }
        except ValueError as e:  # inspect lists the bag's topics beside this problem
            problems.report(str(path), None, "topic", str(e).split(": ", 1)[1])
            return None
        series = _scan(reader, path, {"camera": cam, "steering": steer, **optional}, problems)
    finally:
        reader.close()
    speed, pose = (series[optional[role]] if role in optional else None for role in ("speed", "pose"))
    return _choose_clock(path, series[cam], series[steer], speed, pose, stamp, problems)


def _choose_clock(
    path: Path,
    cs: Series,
    ss: Series,
    sp: Optional[Series],
    pose: Optional[Series],
    stamp: str,
    problems: Problems,
) -> Optional[_Chosen]:
    """Header stamps (``stamp`` header, or auto when every chosen topic has a header) or receive
    times, counted from the first camera message; None (reported) without a readable frame."""
    chosen = [s for s in (cs, ss, sp, pose) if s is not None]
    if stamp == "header":
        lacking = [s.topic for s in chosen if s.header_ns is None]
        if lacking:
            raise ValueError(f"{path}: stamp=header but {', '.join(lacking)} carry no header; use stamp: bag")
    use_header = stamp == "header" or (stamp == "auto" and all(s.header_ns is not None for s in chosen))
    if len(cs.bag_ns) == 0:
        problems.report(f"{path} {cs.topic}", None, "empty", "no readable camera messages")
        return None
    t0 = (
        int(cs.header_ns[cs.header_ns > 0].min())
        if use_header and np.any(cs.header_ns > 0)
        else int(cs.bag_ns.min())
    )
    return _Chosen(cs, ss, sp, pose, use_header, t0)


def _labels(path: Path, chosen: _Chosen, options: ReaderOptions, problems: Problems) -> Optional[_Labels]:
    """Steering samples -> curvature, and the speed samples, each checked like the rows of a label
    log (non-finite values, duplicate or decreasing times are problems); None when unusable."""
    ss, sp = chosen.steering, chosen.speed
    if len(ss.bag_ns) < 2:
        problems.report(
            f"{path} {ss.topic}",
            None,
            "empty",
            f"{len(ss.bag_ns)} readable steering message(s); need at least two to interpolate",
        )
        return None
    kappa, own_speed, label_meta = steering_curvature(ss, options, path, problems)
    _, _, default_speed = options.units()
    lt = chosen.times_s(ss)
    raw_speed = own_speed if own_speed is not None else np.full(len(lt), default_speed)
    standstill = np.isnan(kappa) & np.isfinite(raw_speed) & ~np.isnan(raw_steer(ss))
    labels = _samples(path, ss, lt, kappa, raw_speed, problems, keep=~standstill)
    if labels is None:
        return None
    st, sk = labels.log["timestamp_s"], labels.log["curvature"]
    if sp is None:
        return _Labels(st, sk, st, labels.log["speed_mps"], label_meta)
    pt = chosen.times_s(sp)
    speeds = _samples(path, sp, pt, np.zeros(len(pt)), speed_values(sp), problems)
    if speeds is None:
        return None
    return _Labels(st, sk, speeds.log["timestamp_s"], speeds.log["speed_mps"], label_meta)


def _samples(
    path: Path,
    series: Series,
    t: np.ndarray,
    curvature: np.ndarray,
    speed: np.ndarray,
    problems: Problems,
    keep: Optional[np.ndarray] = None,
) -> Optional[Recording]:
    """One topic's samples checked as label rows (a recording without frames), or None."""
    return build_recording(
        file=f"{path} {series.topic}",
        rows=series.ordinals,
        log={"timestamp_s": t, "curvature": curvature, "speed_mps": speed},
        source=NoFrames(len(t)),
        problems=problems,
        meta={"fps": 1.0, "width": 1, "height": 1},
        keep=keep,
    )


def _labelled_frames(
    path: Path, chosen: _Chosen, labels: _Labels, ft: np.ndarray, problems: Problems
) -> np.ndarray:
    """[N] False for the frames without a label, reported: outside the samples' time range, or in
    a steering dropout longer than ``GAP_FACTOR`` x its median period."""
    st, spt = labels.steer_t, labels.speed_t
    cam, frame_rows = chosen.camera.topic, chosen.camera.ordinals
    lo, hi = max(st[0], spt[0]), min(st[-1], spt[-1])
    in_range = (ft >= lo - 1e-9) & (ft <= hi + 1e-9)
    finite = np.isfinite(ft)
    outside = finite & ~in_range
    for i in np.flatnonzero(outside)[:1]:
        problems.report(
            f"{path} {cam}",
            int(frame_rows[i]),
            "unlabelled_frames",
            f"{int(outside.sum())} frame(s) lie outside the time range {lo:.3f}..{hi:.3f} s of the "
            f"steering{'/speed' if chosen.speed is not None else ''} samples (first: this message at "
            f"{ft[i]:.3f} s)",
        )
    gapped = finite & in_range & _unlabelled_in_gaps(ft, st)
    for i in np.flatnonzero(gapped & ~np.concatenate([[False], gapped[:-1]])):  # each run's start
        j = int(np.searchsorted(st, ft[i], side="right"))
        run = int(np.argmin(gapped[i:])) if not gapped[i:].all() else len(gapped) - i
        problems.report(
            f"{path} {cam}",
            int(frame_rows[i]),
            "unlabelled_frames",
            f"{run} frame(s) from here fall in a {st[j] - st[j - 1]:.3f} s gap of {chosen.steering.topic} "
            f"(> {GAP_FACTOR:g} x its median period {float(np.median(np.diff(st))):.3f} s)",
        )
    return ~(outside | gapped)


def _meta(path: Path, chosen: _Chosen, options: ReaderOptions, label_meta: Dict[str, Any]) -> Dict[str, Any]:
    """The recording's metadata: the camera calibration, the topics, the clock and the label unit."""
    speed = {"speed_topic": chosen.speed.topic} if chosen.speed is not None else {}
    if chosen.pose is not None:
        speed["odometry_topic"] = chosen.pose.topic
    return {
        "source": f"rosbag:{path}",
        "camera": options.calibration(),
        "extra": {
            "drive": str(path),
            "camera_topic": chosen.camera.topic,
            "steering_topic": chosen.steering.topic,
            **speed,
            "stamp": "header" if chosen.use_header else "bag",
            "label": label_meta,
            "start_time_ns": chosen.t0_ns,
        },
    }


register_reader(
    "rosbag",
    detect=detect,
    read=read,
    layout="a ROS 1 .bag, a rosbag2 folder (metadata.yaml) or an .mcap/.db3 file",
    suffixes=BAG_SUFFIXES,
)
