"""Issue 48, the path from a log's own poses: pose columns of folder+CSV and video+CSV logs, a ROS
bag's odometry topic, comma2k19's global pose, each read from real files written here and compared
with what was written; the replay path built from them; bad pose input answered in one line.

Tolerances: CSV poses are the written numbers (1e-9); poses interpolated to frame times (video, bag)
lie on the written circle within 1e-3 m (linear interpolation between samples 0.16 m apart on a
50 m radius is off the arc by < 1e-4 m); yaw within 1e-6 rad (it is linear in time); comma2k19's
east-north-up positions within 1e-4 m of the local positions the ECEF ones were made from."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List, Sequence

import cv2
import numpy as np
import pytest
from bad_input_util import one_line
from rosbag_util import bag_path, drive_frames, steering_samples, write_bag

from drive.cli import main
from drive.data.errors import DataError, Problems
from drive.data.readers import read_logs
from drive.io.recording import POSE_COLUMNS, Recording
from drive.replay import reference_paths, replay_recording
from drive.sim.closed_loop import summarize
from drive.sim.expert import PurePursuitExpert
from drive.sim.record import simulate

K, V = 0.02, 8.0  # the test drives: a left-hand circle of 50 m radius at 8 m/s


def circle(t: np.ndarray, yaw0: float = 0.0) -> Dict[str, np.ndarray]:
    """Pose at times ``t`` (s) on the test circle, starting at the origin heading ``yaw0``."""
    s = V * np.asarray(t, dtype=np.float64)
    yaw = yaw0 + K * s
    return {
        "x_m": (np.sin(yaw) - math.sin(yaw0)) / K,
        "y_m": (math.cos(yaw0) - np.cos(yaw)) / K,
        "yaw_rad": yaw,
    }


def _wrapped(a: np.ndarray) -> np.ndarray:
    return np.angle(np.exp(1j * np.asarray(a)))


def folder_log(root: Path, header: Sequence[str], values: List[Dict[str, float]], n: int = 60) -> Path:
    """An image folder with ``log.csv``: image, timestamp, curvature, speed and ``header``'s columns
    (``values[i]`` by column name); tiny PNGs at 10 Hz on the circle."""
    root.mkdir(parents=True)
    rows = [",".join(["image", "timestamp", "curvature", "speed", *header])]
    for i in range(n):
        cv2.imwrite(str(root / f"{i:04d}.png"), np.full((8, 16, 3), 40 + i, np.uint8))
        extra = [repr(values[i][c]) if isinstance(values[i][c], float) else str(values[i][c]) for c in header]
        rows.append(",".join([f"{i:04d}.png", f"{i / 10}", f"{K}", f"{V}", *extra]))
    (root / "log.csv").write_text("\n".join(rows) + "\n")
    return root


def circle_rows(n: int = 60, yaw_deg: bool = False, names=POSE_COLUMNS) -> List[Dict[str, float]]:
    p = circle(np.arange(n) / 10)
    yaw = np.degrees(p["yaw_rad"]) if yaw_deg else p["yaw_rad"]
    return [
        {names[0]: float(p["x_m"][i]), names[1]: float(p["y_m"][i]), names[2]: float(yaw[i])}
        for i in range(n)
    ]


# -- folder + CSV, video + CSV --------------------------------------------------------------------
def test_folder_csv_reads_named_pose_columns_in_degrees_and_the_x_m_y_m_yaw_rad_columns(tmp_path):
    named = ("east", "north", "heading_deg")
    log = folder_log(tmp_path / "named", named, circle_rows(yaw_deg=True, names=named))
    options = dict(x_column="east", y_column="north", yaw_column="heading_deg", yaw_unit="deg")
    (rec,) = read_logs(str(log), options=options)
    truth = circle(np.arange(60) / 10)
    for c in POSE_COLUMNS:
        np.testing.assert_allclose(rec.log[c], truth[c], atol=1e-9)
    assert rec.meta.extra["poses"] == "CSV columns"
    (path,) = reference_paths(rec)
    assert path.source == "poses" and path.length_m == pytest.approx(V * 5.9, rel=1e-3)
    # the columns x_m, y_m, yaw_rad need no option; a log without them has no pose
    (auto,) = read_logs(str(folder_log(tmp_path / "auto", POSE_COLUMNS, circle_rows())))
    np.testing.assert_allclose(auto.log["yaw_rad"], truth["yaw_rad"], atol=1e-12)
    (plain,) = read_logs(str(folder_log(tmp_path / "plain", (), [{}] * 60)))
    assert not set(POSE_COLUMNS) & set(plain.log) and reference_paths(plain)[0].source == "curvature"


def test_video_csv_poses_are_interpolated_to_the_frame_times(tmp_path):
    vw = cv2.VideoWriter(str(tmp_path / "drive.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (32, 24))
    for i in range(40):
        vw.write(np.full((24, 32, 3), 5 * i, np.uint8))
    vw.release()
    t = np.arange(0.0, 4.0, 0.02)  # 50 Hz samples, yaw through +-pi: starting at 3.0 rad
    p = circle(t, yaw0=3.0)
    rows = ["time_s,curvature,speed,x_m,y_m,yaw_rad"]
    rows += [
        f"{float(t[i])!r},{K},{V},{float(p['x_m'][i])!r},{float(p['y_m'][i])!r},{float(_wrapped(p['yaw_rad'][i]))!r}"
        for i in range(len(t))
    ]
    (tmp_path / "drive.csv").write_text("\n".join(rows) + "\n")
    (rec,) = read_logs(str(tmp_path / "drive.mp4"))
    frame_t = rec.log["timestamp_s"]
    truth = circle(frame_t, yaw0=3.0)
    assert len(rec) == 40 and rec.meta.extra["poses"].startswith("CSV columns")
    np.testing.assert_allclose(rec.log["x_m"], truth["x_m"], atol=1e-3)
    np.testing.assert_allclose(rec.log["y_m"], truth["y_m"], atol=1e-3)
    assert np.abs(_wrapped(rec.log["yaw_rad"] - truth["yaw_rad"])).max() < 1e-6  # through pi, not round
    assert reference_paths(rec)[0].source == "poses"


# -- bad pose input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "header,options,must",
    [
        (
            ("x_m", "y_m"),
            [],
            ["log.csv: pose column(s) x_m, y_m without yaw_rad", "x_column, y_column, yaw_column"],
        ),
        (
            ("east", "north", "yaw"),
            ["x_column=east"],
            ["--set x_column: reader option x_column:", "y_column, yaw_column not given"],
        ),
        (
            ("east", "north", "yaw"),
            ["x_column=e", "y_column=north", "yaw_column=yaw"],
            ["log.csv: no x (x_column) column 'e'", "'east'"],
        ),
        (
            ("east", "north", "yaw"),
            ["x_column=east", "y_column=north", "yaw_column=yaw", "yaw_unit=grad"],
            ["reader option yaw_unit must be one of ['rad', 'deg'], got 'grad'"],
        ),
        # degrees read as radians: the yaw does not point where the positions go
        (
            ("east", "north", "yaw"),
            ["x_column=east", "y_column=north", "yaw_column=yaw"],
            ["log.csv: the pose's yaw differs from the direction its positions travel", "[pose_heading]"],
        ),
    ],
    ids=["partial-columns", "partial-options", "no-such-column", "yaw-unit", "yaw-in-degrees"],
)
def test_bad_pose_columns_are_one_line_errors_and_nothing_is_written(header, options, must, tmp_path, capsys):
    rows = circle_rows(yaw_deg=True, names=("east", "north", "yaw")) if header[0] == "east" else circle_rows()
    log = folder_log(tmp_path / "log", header, [{c: r[c] for c in header} for r in rows])
    sets = [arg for option in options for arg in ("--set", option)]
    assert main(["data", "convert", str(log), "--out", str(tmp_path / "out"), *sets]) == 2
    one_line(capsys.readouterr().err, "data", *must)
    assert not (tmp_path / "out").exists()


def test_a_bad_pose_row_raises_naming_its_line_or_is_skipped_and_counted(tmp_path):
    rows = circle_rows()
    rows[5]["x_m"] = "nan"
    nan = folder_log(tmp_path / "nan", POSE_COLUMNS, rows)
    with pytest.raises(DataError, match=r"nan/log.csv, row 7: x_m is nan \[non_finite_pose\]"):
        read_logs(str(nan))
    rows[9]["yaw_rad"] = "north"
    both = folder_log(tmp_path / "both", POSE_COLUMNS, rows)
    with pytest.raises(DataError, match=r"both/log.csv, row 11: yaw_rad = 'north' is not a number"):
        read_logs(str(both))
    problems = Problems("skip")
    (rec,) = read_logs(str(both), problems=problems)
    assert len(rec) == 58 and problems.counts() == {"non_finite_pose": 1, "not_a_number": 1}
    assert sorted(p.row for p in problems.items) == [7, 11]
    assert reference_paths(rec)[0].source == "poses"


def test_a_yaw_against_the_travel_is_skipped_with_its_poses_only(tmp_path):
    """With on_error: skip a pose whose yaw does not fit its positions is dropped, the frames kept."""
    log = folder_log(tmp_path / "log", POSE_COLUMNS, circle_rows(yaw_deg=True))
    problems = Problems("skip")
    (rec,) = read_logs(str(log), problems=problems)
    assert len(rec) == 60 and problems.counts() == {"pose_heading": 1}
    assert not set(POSE_COLUMNS) & set(rec.log) and reference_paths(rec)[0].source == "curvature"


# -- ROS bags -------------------------------------------------------------------------------------
T0 = 1_700_000_000_000_000_000


def _pose_bag(tmp_path: Path, kind: str, pose_type: str, skip: slice = slice(0, 0)) -> Path:
    t = np.arange(-0.2, 4.4, 0.02)  # 50 Hz around the camera's 4 s at 10 Hz
    p = circle(t, yaw0=3.0)
    keep = np.ones(len(t), bool)
    keep[skip] = False
    poses = [
        (T0 + int(round(t[i] * 1e9)), float(p["x_m"][i]), float(p["y_m"][i]), float(p["yaw_rad"][i]))
        for i in np.flatnonzero(keep)
    ]
    return write_bag(
        bag_path(tmp_path, kind),
        kind,
        frames=drive_frames(4, 10),
        steering=steering_samples(4, 50),
        poses=poses,
        pose_type=pose_type,
    )


@pytest.mark.parametrize(
    "kind,pose_type", [("rosbag1", "nav_msgs/msg/Odometry"), ("mcap", "geometry_msgs/msg/PoseStamped")]
)
def test_a_bag_odometry_topic_gives_the_poses_at_the_frame_times(kind, pose_type, tmp_path, capsys):
    bag = _pose_bag(tmp_path, kind, pose_type)
    assert main(["data", "inspect", str(bag), "--quick", "--set", "odometry_topic=/odom"]) == 0
    out = capsys.readouterr().out
    role = "speed/pose" if pose_type.endswith("Odometry") else "pose"
    assert f"/odom  {pose_type}  231 msgs  <- {role}" in out and ", poses (31 m)" in out  # 3.9 s at 8 m/s
    (rec,) = read_logs(str(bag), options={"odometry_topic": "/odom"})
    truth = circle(rec.log["timestamp_s"], yaw0=3.0)  # header stamps: t = 0 at the first frame
    assert len(rec) == 40 and rec.meta.extra["odometry_topic"] == "/odom"
    np.testing.assert_allclose(rec.log["x_m"], truth["x_m"], atol=1e-3)
    np.testing.assert_allclose(rec.log["y_m"], truth["y_m"], atol=1e-3)
    assert np.abs(_wrapped(rec.log["yaw_rad"] - truth["yaw_rad"])).max() < 1e-6
    assert reference_paths(rec)[0].source == "poses"
    # never picked unless named: an odometry topic often has a speed and no pose
    (plain,) = read_logs(str(bag))
    assert not set(POSE_COLUMNS) & set(plain.log)


def test_frames_in_a_pose_dropout_have_no_pose_and_a_steering_topic_is_no_pose(tmp_path, capsys):
    bag = _pose_bag(tmp_path, "sqlite3", "nav_msgs/msg/Odometry", skip=slice(60, 90))  # none in 1.0..1.58 s
    problems = Problems("skip")
    (rec,) = read_logs(str(bag), options={"odometry_topic": "/odom"}, problems=problems)
    (p,) = problems.items
    assert p.kind == "unlabelled_frames" and p.file.endswith("/camera/image") and p.row == 10
    assert "6 frame(s) have no pose" in p.message and "in a gap of /odom" in p.message  # 1.0..1.5 s
    assert len(rec) == 34
    assert (
        main(
            [
                "data",
                "convert",
                str(bag),
                "--out",
                str(tmp_path / "o"),
                "--set",
                "odometry_topic=/vehicle/steering",
            ]
        )
        == 2
    )
    one_line(
        capsys.readouterr().err, "data", "odometry_topic '/vehicle/steering' is a", "nav_msgs/msg/Odometry"
    )


# -- comma2k19 ------------------------------------------------------------------------------------
WGS84_A, WGS84_E2 = 6378137.0, 6.69437999014e-3


def _ecef(lat: float, lon: float, h: float) -> np.ndarray:
    n = WGS84_A / math.sqrt(1 - WGS84_E2 * math.sin(lat) ** 2)
    return np.array(
        [
            (n + h) * math.cos(lat) * math.cos(lon),
            (n + h) * math.cos(lat) * math.sin(lon),
            (n * (1 - WGS84_E2) + h) * math.sin(lat),
        ]
    )


def _quaternion_wxyz(r: np.ndarray) -> np.ndarray:
    """w, x, y, z of a rotation matrix (Shepperd's method, the largest of the four first)."""
    t = np.trace(r)
    cand = [(t, 0), (r[0, 0], 1), (r[1, 1], 2), (r[2, 2], 3)]
    k = max(cand)[1]
    q = np.zeros(4)
    if k == 0:
        q[0] = math.sqrt(1 + t) / 2
        q[1:] = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]]) / (4 * q[0])
    else:
        i, j, m = k - 1, k % 3, (k + 1) % 3
        q[k] = math.sqrt(1 + r[i, i] - r[j, j] - r[m, m]) / 2
        q[0] = (r[m, j] - r[j, m]) / (4 * q[k])
        q[1 + j] = (r[j, i] + r[i, j]) / (4 * q[k])
        q[1 + m] = (r[m, i] + r[i, m]) / (4 * q[k])
    return q


def comma_segment(
    root: Path, n: int = 40, lat_deg: float = 37.4, lon_deg: float = -122.1, order="wxyz"
) -> Dict[str, np.ndarray]:
    """A comma2k19 segment (frames, CAN steering and speed, global pose) of the car on the test circle
    at 30 m/s, started heading 30 deg north of east, at (lat, lon); returns the local truth."""
    vw = cv2.VideoWriter(str(root / "v.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 20.0, (64, 48))
    for i in range(n):
        vw.write(np.full((48, 64, 3), 3 * i, np.uint8))
    vw.release()
    (root / "v.mp4").rename(root / "video.hevc")

    def save(rel: str, name: str, array: np.ndarray) -> None:
        (root / rel).mkdir(parents=True, exist_ok=True)
        with open(root / rel / name, "wb") as f:
            np.save(f, array)

    ft = 50.0 + np.arange(n) * 0.05
    t = np.arange(49.0, 53.0, 0.01)
    save("global_pose", "frame_times", ft)
    save("processed_log/CAN/steering_angle", "t", t)
    save("processed_log/CAN/steering_angle", "value", np.full(len(t), 10.0))
    save("processed_log/CAN/speed", "t", t)
    save("processed_log/CAN/speed", "value", np.full(len(t), 30.0))
    s = 30.0 * (ft - ft[0])
    yaw0 = math.radians(30.0)
    yaw = yaw0 + K * s
    east, north = (np.sin(yaw) - math.sin(yaw0)) / K, (math.cos(yaw0) - np.cos(yaw)) / K
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    e = np.array([-math.sin(lon), math.cos(lon), 0.0])
    nn = np.array([-math.sin(lat) * math.cos(lon), -math.sin(lat) * math.sin(lon), math.cos(lat)])
    u = np.cross(e, nn)
    origin = _ecef(lat, lon, 12.0)
    positions = origin + east[:, None] * e + north[:, None] * nn + 0.01 * s[:, None] * u  # a gentle climb
    quats = []
    for a in yaw:  # the camera frame [forward, right, down] in ECEF: the columns of ecef_from_device
        forward = math.cos(a) * e + math.sin(a) * nn
        right = np.cross(forward, u)
        q = _quaternion_wxyz(np.stack([forward, right, -u], axis=1))
        quats.append(q if order == "wxyz" else np.roll(q, -1))
    save("global_pose", "frame_positions", positions)
    save("global_pose", "frame_orientations", np.array(quats))
    return {"x_m": east, "y_m": north, "yaw_rad": yaw}


def test_comma2k19_global_pose_becomes_east_north_up_at_the_first_frame(tmp_path):
    truth = comma_segment(tmp_path)
    (rec,) = read_logs(str(tmp_path))
    np.testing.assert_allclose(rec.log["x_m"], truth["x_m"], atol=1e-4)
    np.testing.assert_allclose(rec.log["y_m"], truth["y_m"], atol=1e-4)
    assert np.abs(_wrapped(rec.log["yaw_rad"] - truth["yaw_rad"])).max() < 1e-6
    assert rec.meta.extra["poses"].startswith("global_pose") and reference_paths(rec)[0].source == "poses"


def test_comma2k19_quaternions_in_another_order_are_refused_and_a_lone_pose_array_is_named(tmp_path):
    comma_segment(tmp_path, order="xyzw")  # scalar last: the forward axis points elsewhere
    with pytest.raises(DataError, match=r"video.hevc: the pose's yaw differs .*\[pose_heading\]"):
        read_logs(str(tmp_path))
    (tmp_path / "global_pose" / "frame_orientations").unlink()
    with pytest.raises(
        DataError,
        match=r"global_pose: poses not read: frame_positions without frame_orientations \[bad_pose\]",
    ):
        read_logs(str(tmp_path))
    problems = Problems("skip")
    (rec,) = read_logs(str(tmp_path), problems=problems)
    assert problems.counts() == {"bad_pose": 1} and "x_m" not in rec.log and len(rec) == 40


# -- the replay path and the report ---------------------------------------------------------------
def _as_folder_log(rec: Recording, out: Path, poses: bool) -> Path:
    """A recording of the world as a user's folder + CSV: PNGs, labels and the pose (or none)."""
    out.mkdir()
    rows = ["image,t,curvature_per_m,speed" + (",x_m,y_m,yaw_rad" if poses else "")]
    for i in range(len(rec)):
        cv2.imwrite(str(out / f"{i:05d}.png"), cv2.cvtColor(rec.frame(i), cv2.COLOR_RGB2BGR))
        log = rec.log
        pose = (
            f",{float(log['x_m'][i])!r},{float(log['y_m'][i])!r},{float(log['yaw_rad'][i])!r}"
            if poses
            else ""
        )
        rows.append(
            f"{i:05d}.png,{float(log['timestamp_s'][i])!r},{float(log['curvature'][i])!r},{float(log['speed_mps'][i])!r}{pose}"
        )
    (out / "labels.csv").write_text("\n".join(rows) + "\n")
    return out


def test_a_curved_log_is_driven_on_its_own_poses_and_the_report_says_which_path(tmp_path, capsys):
    """A world log recorded with steering noise (DART): its labels are the expert's commands, not what
    the car did, so integrating them goes astray (tens of metres over 150 m); its poses are the path."""
    (world,) = simulate(
        tmp_path / "world", minutes=0.3, seed=3, split="test", fps=10.0, recording_minutes=0.3
    )
    recorded = Recording.open(world)
    logs = tmp_path / "logs"
    logs.mkdir()
    _as_folder_log(recorded, logs / "with_poses", poses=True)
    _as_folder_log(recorded, logs / "labels_only", poses=False)
    options = {"camera": "approximate"}  # the world's own camera
    (rec,) = read_logs(str(logs / "with_poses"), options=options)
    (path,) = reference_paths(rec)
    assert path.source == "poses" and path.length_m > 140
    np.testing.assert_allclose(
        path.frame_pose[:, :2], np.stack([recorded.log["x_m"], recorded.log["y_m"]], 1), atol=1e-9
    )
    (integrated,) = reference_paths(rec, use_poses=False)  # from (0, 0, 0): put where the poses start
    x0, y0, yaw0 = path.frame_pose[0]
    c, s, q = math.cos(yaw0), math.sin(yaw0), integrated.frame_pose
    aligned = np.stack([x0 + c * q[:, 0] - s * q[:, 1], y0 + s * q[:, 0] + c * q[:, 1]], axis=1)
    assert np.hypot(*(aligned - path.frame_pose[:, :2]).T).max() > 20.0  # metres astray
    # the expert drives the recorded path: every driven point within 0.3 m of where the car went
    (seg,) = replay_recording(rec, PurePursuitExpert(), 10.0, use_poses=True).segments
    dense = np.linspace(0, len(rec) - 1, 20 * len(rec))
    xs = np.interp(dense, np.arange(len(rec)), recorded.log["x_m"])
    ys = np.interp(dense, np.arange(len(rec)), recorded.log["y_m"])
    gap = np.hypot(seg.x_m[:, None] - xs[None], seg.y_m[:, None] - ys[None]).min(axis=1)
    assert summarize([seg])["interventions"] == 0 and gap.max() < 0.3
    # drive data inspect says which log has poses; the log replay report which path each drove
    sets = [a for k, v in options.items() for a in ("--set", f"{k}={v}")]
    assert main(["data", "inspect", str(logs), "--quick", *sets]) == 0
    said = {
        line.split(" ")[1]: line for line in capsys.readouterr().out.splitlines() if line.startswith("- ")
    }
    assert said["with_poses"].endswith(", poses (149 m)") and said["labels_only"].endswith(", no poses")
    out = tmp_path / "replay"
    args = ["evaluate", "--logs", str(logs), "--policy", "expert", "--out", str(out), "--workers", "1"]
    assert main([*args, *sets]) == 0
    printed = capsys.readouterr().out
    assert "path from poses" in printed and "path from curvature" in printed
    m = json.loads((out / "metrics.json").read_text())
    assert m["path_sources"] == {"poses": 1, "curvature": 1}
    assert {Path(r["name"]).parent.name: r["path_source"] for r in m["per_recording"]} == {
        "with_poses": "poses",
        "labels_only": "curvature",
    }
    report = (out / "REPORT.md").read_text()
    assert (
        "- Recorded path: from the log's own poses (x, y, yaw) in 1 recording(s); integrated from " in report
    )
    assert "| log's poses |" in report and "| integrated |" in report
