"""Readers: real files of every supported format written here and read back; units and alignment."""

import math

import cv2
import h5py
import numpy as np
import pytest

from drive.data.readers import FORMATS, detect_format, read_logs
from drive.data.readers.registry import register_reader, walked_suffixes
from drive.io.recording import CameraCalibration, RecordingMeta, RecordingWriter


def _img(i, h=48, w=64):
    """Frame whose brightness encodes its index (survives JPEG/MP4 within a few levels)."""
    return np.full((h, w, 3), (i * 7) % 250, np.uint8)


def _index_of(frame):
    return int(round(frame.mean() / 7))


def test_the_formats_are_the_registered_readers_in_detection_order():
    """Each reader module registers itself; FORMATS and the walked suffixes derive from that."""
    names = list(FORMATS)
    assert names[0] == "canonical" and set(names[-2:]) == {"video", "folder"}  # specific layouts between
    assert set(names) == {
        "canonical",
        "udacity_sim",
        "udacity_real",
        "comma2k19",
        "donkeycar",
        "dave2",
        "hdf5",
        "rosbag",
        "video",
        "folder",
    }
    assert {".bag", ".mcap", ".h5", ".mp4"} <= set(walked_suffixes()) and ".csv" not in walked_suffixes()
    with pytest.raises(ValueError, match="log format 'dave2' is already registered"):
        register_reader("dave2", detect=lambda p: False, read=lambda *a: [], layout="x")


def test_canonical_roundtrip_keeps_labels_and_camera(tmp_path):
    cam = CameraCalibration(fx=50, fy=50, cx=32, cy=24, height_m=1.4, pitch_rad=0.1)
    with RecordingWriter(tmp_path / "r", RecordingMeta(fps=10, width=64, height=48, camera=cam)) as w:
        for i in range(5):
            w.append(_img(i), timestamp_s=i * 0.1, curvature=0.01 * i, speed_mps=5.0)
    assert detect_format(tmp_path / "r") == "canonical"
    (rec,) = read_logs(str(tmp_path))
    np.testing.assert_allclose(rec.log["curvature"], 0.01 * np.arange(5))
    assert rec.meta.camera.pitch_rad == pytest.approx(0.1)
    assert _index_of(rec.frame(3)) == 3


def test_folder_csv_wheel_degrees_and_millisecond_timestamps(tmp_path):
    for i in range(4):
        cv2.imwrite(str(tmp_path / f"f{i}.jpg"), _img(i))
    rows = ["file,t_ms,wheel,v"] + [f"f{i}.jpg,{1000 + 50 * i},{2.0 * i},{36}" for i in range(4)]
    (tmp_path / "labels.csv").write_text("\n".join(rows) + "\n")
    opts = {
        "image_column": "file",
        "timestamp_column": "t_ms",
        "steering_column": "wheel",
        "speed_column": "v",
        "time_unit": "ms",
        "speed_unit": "kph",
        "label": {"unit": "wheel_deg", "wheelbase_m": 2.5},
    }
    (rec,) = read_logs(str(tmp_path), "folder", opts)
    np.testing.assert_allclose(rec.log["timestamp_s"], 1.0 + 0.05 * np.arange(4))
    np.testing.assert_allclose(rec.log["curvature"], np.tan(np.radians(2.0 * np.arange(4))) / 2.5)
    np.testing.assert_allclose(rec.log["speed_mps"], 10.0)
    assert rec.meta.fps == pytest.approx(20.0)
    assert _index_of(rec.frame(2)) == 2


def test_folder_csv_with_ambiguous_steering_unit_is_refused(tmp_path):
    cv2.imwrite(str(tmp_path / "a.jpg"), _img(0))
    (tmp_path / "l.csv").write_text("image,timestamp,steering\na.jpg,0.0,0.1\n")
    with pytest.raises(ValueError, match="ambiguous"):
        read_logs(str(tmp_path))


def test_video_labels_interpolated_to_frame_times(tmp_path):
    fps, n = 10.0, 20
    vw = cv2.VideoWriter(str(tmp_path / "drive.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), fps, (64, 48))
    for i in range(n):
        vw.write(_img(i))
    vw.release()
    # 100 Hz CAN log of a steering ramp starting 0.5 s before the video, in steering-wheel degrees
    t = np.arange(-0.5, 2.5, 0.01)
    lines = ["time,steer_deg,speed"] + [f"{100 + x:.3f},{30 * x:.4f},10" for x in t]
    (tmp_path / "drive.csv").write_text("\n".join(lines) + "\n")
    opts = {
        "timestamp_column": "time",
        "steering_column": "steer_deg",
        "video_start_s": 100.0,
        "label": {"unit": "steering_wheel_deg", "steering_ratio": 15.0, "wheelbase_m": 3.0},
    }
    (rec,) = read_logs(str(tmp_path / "drive.mp4"), options=opts)
    ft = np.arange(n) / fps
    np.testing.assert_allclose(rec.log["timestamp_s"], 100 + ft)
    np.testing.assert_allclose(rec.log["curvature"], np.tan(np.radians(30 * ft / 15.0)) / 3.0, rtol=1e-6)
    assert [_index_of(rec.frame(i)) for i in (0, 7, 19)] == [0, 7, 19]


def test_hdf5_ncp_layout(tmp_path):
    path = tmp_path / "drive1.h5"
    with h5py.File(path, "w") as f:
        f["camera_front"] = np.stack([_img(i) for i in range(6)])
        f["inverse_r"] = np.linspace(-0.02, 0.02, 6)
        f["timestamp"] = 1600000000.0 + np.arange(6) / 20.0
    assert detect_format(path) == "hdf5"
    (rec,) = read_logs(str(tmp_path))
    np.testing.assert_allclose(rec.log["curvature"], np.linspace(-0.02, 0.02, 6))
    assert rec.meta.fps == pytest.approx(20.0)
    assert np.array_equal(rec.frame(4), _img(4))


def _udacity(tmp_path, header, windows=True):
    img_dir = tmp_path / "IMG"
    img_dir.mkdir()
    rows = ["center,left,right,steering,throttle,brake,speed"] if header else []
    for i in range(5):
        names = [f"{cam}_2016_12_01_13_30_48_{100 * i:03d}.jpg" for cam in ("center", "left", "right")]
        for k, name in enumerate(names):
            cv2.imwrite(str(img_dir / name), _img(i + 10 * k))
        paths = [f"C:\\Users\\someone\\Desktop\\data\\IMG\\{n}" if windows else f"IMG/{n}" for n in names]
        rows.append(", ".join(paths) + f", {0.1 * i - 0.2},0.5,0,{20.0}")
    (tmp_path / "driving_log.csv").write_text("\n".join(rows) + "\n")


def test_udacity_sim_windows_paths_units_and_side_cameras(tmp_path):
    _udacity(tmp_path, header=False)
    assert detect_format(tmp_path) == "udacity_sim"
    recs = read_logs(str(tmp_path), options={"side_cameras": True, "side_offset": 0.2})
    center, left, right = recs
    steer = 0.1 * np.arange(5) - 0.2  # positive = right in the simulator
    kappa = -np.tan(steer * math.radians(25.0)) / 2.5
    np.testing.assert_allclose(center.log["curvature"], kappa, atol=1e-12)
    np.testing.assert_allclose(center.log["speed_mps"], 20.0 * 0.44704)
    np.testing.assert_allclose(np.diff(center.log["timestamp_s"]), 0.1, atol=1e-6)
    # the left camera sees the car displaced left: its label steers more to the right
    assert np.all(left.log["curvature"] < center.log["curvature"])
    np.testing.assert_allclose(left.log["curvature"], -np.tan((steer + 0.2) * math.radians(25.0)) / 2.5)
    np.testing.assert_allclose(right.log["curvature"], -np.tan((steer - 0.2) * math.radians(25.0)) / 2.5)
    assert [_index_of(r.frame(1)) for r in recs] == [1, 11, 21]
    assert center.meta.extra["drive"] == left.meta.extra["drive"]


def test_udacity_sim_headed_relative_paths(tmp_path):
    _udacity(tmp_path, header=True, windows=False)
    (rec,) = read_logs(str(tmp_path / "driving_log.csv"))
    assert len(rec) == 5 and _index_of(rec.frame(4)) == 4


def test_udacity_real_interpolated_csv(tmp_path):
    (tmp_path / "center").mkdir()
    rows = ["index,timestamp,width,height,frame_id,filename,angle,torque,speed,lat,long,alt"]
    for i in range(4):
        cv2.imwrite(str(tmp_path / "center" / f"{i}.jpg"), _img(i))
        ts = 1479425441182877835 + i * 50_000_000
        rows.append(f"{i},{ts},64,48,center_camera,center/{i}.jpg,{0.5 * i},0,{12.0},0,0,0")
        rows.append(f"{i},{ts},64,48,left_camera,left/{i}.jpg,{0.5 * i},0,{12.0},0,0,0")
    (tmp_path / "interpolated.csv").write_text("\n".join(rows) + "\n")
    (rec,) = read_logs(str(tmp_path))
    np.testing.assert_allclose(rec.log["curvature"], np.tan(0.5 * np.arange(4) / 14.8) / 2.85)
    np.testing.assert_allclose(np.diff(rec.log["timestamp_s"]), 0.05, atol=1e-6)


def test_donkeycar_tub_skips_deleted_records(tmp_path):
    import json

    (tmp_path / "images").mkdir()
    records = []
    for i in range(5):
        name = f"{i}_cam_image_array_.jpg"
        cv2.imwrite(str(tmp_path / "images" / name), _img(i))
        records.append(
            json.dumps(
                {
                    "_index": i,
                    "_timestamp_ms": 1600000000000 + 50 * i,
                    "cam/image_array": name,
                    "user/angle": 0.2 * i - 0.4,
                    "user/throttle": 0.3,
                }
            )
        )
    (tmp_path / "catalog_0.catalog").write_text("\n".join(records) + "\n")
    manifest = [
        '["cam/image_array", "user/angle", "user/throttle"]',
        '["image_array", "float", "float"]',
        "{}",
        "{}",
        json.dumps({"paths": ["catalog_0.catalog"], "current_index": 5, "deleted_indexes": [2]}),
    ]
    (tmp_path / "manifest.json").write_text("\n".join(manifest) + "\n")
    assert detect_format(tmp_path) == "donkeycar"
    (rec,) = read_logs(str(tmp_path))
    angle = np.array([-0.4, -0.2, 0.2, 0.4])  # record 2 deleted; +1 = full right in Donkeycar
    np.testing.assert_allclose(rec.log["curvature"], -np.tan(angle * math.radians(25.0)) / 0.26)
    np.testing.assert_allclose(rec.log["timestamp_s"] - 1600000000.0, [0.0, 0.05, 0.15, 0.2], atol=1e-6)
    assert [_index_of(rec.frame(i)) for i in range(4)] == [0, 1, 3, 4]


def test_dave2_data_txt_with_timestamps(tmp_path):
    (tmp_path / "data").mkdir()
    lines = []
    for i in range(4):
        cv2.imwrite(str(tmp_path / "data" / f"{i}.jpg"), _img(i))
        lines.append(f"{i}.jpg {15.0 * i:.6f},2018-07-01 17:09:44:{100 + 50 * i:03d}")
    (tmp_path / "data.txt").write_text("\n".join(lines) + "\n")
    (rec,) = read_logs(str(tmp_path))
    assert rec.meta.source.startswith("dave2:")
    np.testing.assert_allclose(rec.log["curvature"], -np.tan(np.radians(15.0 * np.arange(4)) / 15.0) / 2.7)
    np.testing.assert_allclose(np.diff(rec.log["timestamp_s"]), 0.05, atol=1e-6)


def test_comma2k19_segment_interpolates_can_signals_to_frame_times(tmp_path):
    vw = cv2.VideoWriter(str(tmp_path / "v.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 20.0, (64, 48))
    for i in range(10):
        vw.write(_img(i))
    vw.release()
    (tmp_path / "v.mp4").rename(tmp_path / "video.hevc")  # OpenCV decodes by content, not by name

    def save(rel, name, array):
        (tmp_path / rel).mkdir(parents=True, exist_ok=True)
        with open(tmp_path / rel / name, "wb") as f:
            np.save(f, array)

    save("global_pose", "frame_times", 50.0 + np.arange(10) * 0.05)
    t = np.arange(49.0, 51.0, 0.01)  # 100 Hz CAN
    save("processed_log/CAN/steering_angle", "t", t)
    save("processed_log/CAN/steering_angle", "value", 100.0 * (t - 50.0))
    save("processed_log/CAN/speed", "t", t[::5])
    save("processed_log/CAN/speed", "value", np.full(len(t[::5]), 12.5))
    assert detect_format(tmp_path) == "comma2k19"
    (rec,) = read_logs(str(tmp_path))
    ft = np.arange(10) * 0.05
    np.testing.assert_allclose(rec.log["curvature"], np.tan(np.radians(100.0 * ft) / 15.3) / 2.70, atol=1e-9)
    np.testing.assert_allclose(rec.log["speed_mps"], 12.5)
    assert [_index_of(rec.frame(i)) for i in (0, 9)] == [0, 9]
