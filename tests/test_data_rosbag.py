"""ROS bags (rosbag1, rosbag2 sqlite3, rosbag2 MCAP) written by rosbags' own writers, read by drive:
topic picking, steering conversions, timestamp alignment, image encodings, problems named by
bag/topic/message, streaming, `drive data inspect/convert`, and training on them."""

from __future__ import annotations

import json
import math
import pickle
import tracemalloc

import numpy as np
import pytest
from rosbag_util import KINDS, bag_path, curvature_at, drive_frames, steering_samples, store, write_bag

from drive.cli import main
from drive.data.errors import DataError, Problems
from drive.data.readers import detect_format, read_logs
from drive.data.readers.rosbag_io import BagFrames
from drive.io.recording import Recording

ACK = "ackermann_msgs/msg/AckermannDriveStamped"
TWIST = "geometry_msgs/msg/TwistStamped"
F32 = "std_msgs/msg/Float32"
T0 = 1_700_000_000_000_000_000


def _expected(rec: Recording) -> np.ndarray:
    return np.array([curvature_at(t) for t in rec.log["timestamp_s"]])


@pytest.mark.parametrize("kind", KINDS)
def test_each_storage_kind_inspects_and_converts_with_labels_aligned_across_rates(kind, tmp_path, capsys):
    # camera at 10 Hz (JPEG), Ackermann steering at 50 Hz, plus a distractor topic drive must ignore
    bag = write_bag(
        bag_path(tmp_path, kind),
        kind,
        frames=drive_frames(4, 10),
        steering=steering_samples(4, 50),
        steering_type=ACK,
        wheelbase=2.9,
        extra_topics={"/battery": "std_msgs/msg/Float64"},
    )
    assert detect_format(bag) == "rosbag"
    # the Float64 distractor is a steering candidate too: picking must ask for a name ...
    assert main(["data", "inspect", str(bag)]) == 1
    out = capsys.readouterr().out
    assert "/camera/image  sensor_msgs/msg/CompressedImage  40 msgs  <- camera" in out
    assert "/vehicle/steering  ackermann_msgs/msg/AckermannDriveStamped" in out and "/battery" in out
    assert "2 steering topics: /battery (std_msgs/msg/Float64, 1 msgs); /vehicle/steering" in out
    assert "name one with steering_topic" in out
    # ... and with it named, everything lines up
    args = ["--set", "steering_topic=/vehicle/steering", "--set", "label={wheelbase_m: 2.9}"]
    assert main(["data", "inspect", str(bag), "--json", *args]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["logs"][0]["format"] == "rosbag" and report["totals"]["frames"] == 40
    s = report["recordings"][0]
    assert s["fps"] == pytest.approx(10.0) and s["decodable_frames"] == 40 and s["size"] == [64, 48]
    assert main(["data", "convert", str(bag), "--out", str(tmp_path / "out"), *args]) == 0
    rec = Recording.open(tmp_path / "out" / bag.stem)
    assert len(rec) == 40 and rec.meta.extra["camera_topic"] == "/camera/image"
    assert rec.meta.extra["stamp"] == "header" and rec.meta.extra["label"]["wheelbase_m"] == 2.9
    # header stamps start at 0 s; curvature = tan(delta) / L exactly (float32 angle in the message)
    assert rec.log["timestamp_s"][0] == pytest.approx(0.0) and rec.log["timestamp_s"][-1] == pytest.approx(
        3.9
    )
    np.testing.assert_allclose(rec.curvature, _expected(rec), atol=2e-6)
    np.testing.assert_allclose(rec.log["speed_mps"], 8.0)
    # the frames are the bag's: the bar sits where the steering put it
    for i in (0, 13, 39):
        frame = rec.frame(i)
        col = int(round((64 - 8) * (0.5 + curvature_at(i / 10) * 10.0)))
        assert abs(int(frame[24, col + 4, 0]) - 230) < 20 and abs(int(frame[24, col + 4, 2]) - 40) < 20


@pytest.mark.parametrize(
    "kind,steering,encoding,label",
    [
        ("rosbag1", TWIST, "bgr8", None),
        ("sqlite3", F32, "mono8", None),
        ("mcap", TWIST, "rgb8", None),
        ("rosbag1", ACK, "bayer_rggb8", {"wheelbase_m": 2.7}),
        ("mcap", F32, "png", {"unit": "curvature_per_m", "sign": -1}),
    ],
)
def test_steering_kinds_and_raw_image_encodings(kind, steering, encoding, label, tmp_path):
    bag = write_bag(
        bag_path(tmp_path, kind),
        kind,
        frames=drive_frames(2, 15),
        steering=steering_samples(2, 40),
        steering_type=steering,
        encoding=encoding,
    )
    options = {"label": label} if label else None
    (rec,) = read_logs(str(bag), options=options)
    expected = _expected(rec) * (-1 if label and label.get("sign") == -1 else 1)
    # Float32 has no header: receive times for both topics (same 3 ms delay), so labels still align
    assert rec.meta.extra["stamp"] == ("bag" if steering == F32 else "header")
    # 15 Hz frames between 40 Hz samples: linear interpolation of the sine is off by <= dt^2/8 |k''| = 8e-6
    np.testing.assert_allclose(rec.curvature, expected, atol=1e-5)
    frame = rec.frame(7)
    assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8
    col = int(round((64 - 8) * (0.5 + curvature_at(7 / 15) * 10.0)))
    pixel = frame[24, col + 4].astype(int)
    if encoding == "mono8":
        assert pixel[0] == pixel[1] == pixel[2] and pixel[0] > 150
    else:  # colour kept and not swapped: R 230, G 200, B 40 (bgr8 and Bayer would swap R/B if wrong)
        np.testing.assert_allclose(pixel, [230, 200, 40], atol=12)


def test_float32_in_other_units_converts_through_the_label_spec(tmp_path):
    # a team logging the steering-wheel angle in degrees on a Float32
    kind = "sqlite3"
    ts = store(kind)
    frames = drive_frames(2, 10)
    wheel_deg = [(t, math.degrees(math.atan(k * 2.7)) * 15.0, v) for t, k, v in steering_samples(2, 20)]
    bag = write_bag(bag_path(tmp_path, kind), kind, frames=frames, steering=wheel_deg, steering_type=F32)
    (rec,) = read_logs(str(bag), options={"label": {"unit": "steering_wheel_deg", "steering_ratio": 15.0}})
    np.testing.assert_allclose(rec.curvature, _expected(rec), atol=1e-5)
    assert ts is not None


def test_steering_dropout_and_duplicate_frames_are_problems_named_by_bag_topic_and_message(tmp_path, capsys):
    kind = "mcap"
    frames = drive_frames(4, 10)
    frames[20] = (frames[19][0], frames[20][1])  # camera message 20 repeats message 19's stamp
    steer = [s for s in steering_samples(4, 50) if not (T0 + 1.0e9 <= s[0] <= T0 + 1.6e9)]  # 0.6 s dropout
    bag = write_bag(bag_path(tmp_path, kind), kind, frames=frames, steering=steer, steering_type=ACK)
    with pytest.raises(DataError) as err:  # convert's default: stop at the first problem, named
        read_logs(str(bag))
    # steering samples at 0.98 s and 1.62 s bracket the dropout: frames 10..16 (1.0..1.6 s) have no label
    assert f"{bag} /camera/image, row 10: 7 frame(s)" in str(err.value) and "unlabelled_frames" in str(
        err.value
    )
    assert "gap of /vehicle/steering" in str(err.value)
    problems = Problems("skip")
    (rec,) = read_logs(str(bag), problems=problems)
    kinds = {(p.kind, p.file, p.row) for p in problems.items}
    assert ("unlabelled_frames", f"{bag} /camera/image", 10) in kinds
    assert ("duplicate_timestamp", f"{bag} /camera/image", 20) in kinds
    assert len(rec) == 40 - 7 - 1
    np.testing.assert_allclose(rec.curvature, _expected(rec), atol=2e-6)
    # the training windows see the hole as a time gap
    assert np.max(np.diff(rec.log["timestamp_s"])) == pytest.approx(0.8)
    # inspect lists every problem; convert with --on-error skip writes the rest
    assert main(["data", "inspect", str(bag)]) == 1
    out = capsys.readouterr().out
    assert f"{bag} /camera/image, row 20: timestamp" in out and "[duplicate_timestamp]" in out
    assert main(["data", "convert", str(bag), "--out", str(tmp_path / "out")]) == 2
    err_text = capsys.readouterr().err
    assert err_text.count("\n") == 1 and err_text.startswith("drive data: error: ") and "row 10" in err_text
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert main(["data", "convert", str(bag), "--out", str(tmp_path / "out"), "--on-error", "skip"]) == 0
    assert len(Recording.open(tmp_path / "out" / bag.stem)) == 32


def test_twist_at_standstill_has_no_curvature_and_is_reported_once_per_stop(tmp_path):
    kind = "rosbag1"
    steer = [(t, k, 0.0 if (T0 + 0.5e9 <= t <= T0 + 0.9e9) else v) for t, k, v in steering_samples(3, 20)]
    bag = write_bag(
        bag_path(tmp_path, kind), kind, frames=drive_frames(3, 10), steering=steer, steering_type=TWIST
    )
    problems = Problems("skip")
    (rec,) = read_logs(str(bag), problems=problems)
    stand = [p for p in problems.items if p.kind == "standstill"]
    assert (
        len(stand) == 1 and stand[0].file == f"{bag} /vehicle/steering" and "9 message(s)" in stand[0].message
    )
    np.testing.assert_allclose(rec.curvature, _expected(rec), atol=2e-3)  # interpolated over the stop
    # frames inside the stop (a 0.5 s hole in the steering) are unlabelled, not invented
    assert any(p.kind == "unlabelled_frames" for p in problems.items)


def test_unknown_encoding_and_corrupt_jpeg_name_the_message(tmp_path):
    kind = "sqlite3"
    bag = write_bag(
        bag_path(tmp_path, kind),
        kind,
        frames=drive_frames(1, 10),
        steering=steering_samples(1, 20),
        steering_type=ACK,
        encoding="rgb8",
    )
    # rewrite one frame's encoding by writing a second bag whose camera message 4 is 16-bit
    from rosbags.rosbag2 import StoragePlugin, Writer

    from drive.data.readers.rosbag_io import open_bag

    reader = open_bag(bag)
    bad = bag_path(tmp_path, kind, "bad")
    with Writer(bad, version=9, storage_plugin=StoragePlugin.SQLITE3) as w:
        conns = {
            c.topic: w.add_connection(c.topic, c.msgtype, typestore=store(kind)) for c in reader.connections
        }
        count = 0
        for conn, t, raw in reader.messages():
            if conn.topic == "/camera/image":
                msg = reader.deserialize(raw, conn.msgtype)
                if count == 4:
                    msg.encoding = "mono16"
                if count == 6:
                    msg = store(kind).types["sensor_msgs/msg/CompressedImage"](
                        header=msg.header, format="jpeg", data=np.frombuffer(b"\xff\xd8not a jpeg", np.uint8)
                    )
                    conns.setdefault(
                        "cc",
                        w.add_connection(
                            "/camera/compressed", "sensor_msgs/msg/CompressedImage", typestore=store(kind)
                        ),
                    )
                    w.write(conns["cc"], t, store(kind).serialize_cdr(msg, "sensor_msgs/msg/CompressedImage"))
                count += 1
                raw = store(kind).serialize_cdr(msg, conn.msgtype) if count - 1 != 6 else raw
            w.write(conns[conn.topic], t, raw)
    reader.close()
    problems = Problems("skip")
    (rec,) = read_logs(str(bad), options={"camera_topic": "/camera/image"}, problems=problems)
    from drive.data.cache import iter_decoded

    good = [i for i, f in iter_decoded(rec, problems) if f is not None]
    assert len(good) == len(rec) - 1
    (p,) = [p for p in problems.items if p.kind == "unreadable_frame"]
    assert p.file == f"{bad} /camera/image" and p.row == 4 and "mono16" in p.message
    with pytest.raises(
        DataError, match=f"{bad} /camera/compressed: none of the first 16 frames can be decoded"
    ):
        read_logs(str(bad), options={"camera_topic": "/camera/compressed"})
    source = BagFrames(
        bad,
        "/camera/compressed",
        np.array([t for t in _receive_times(bad, "/camera/compressed")]),
        np.array([0]),
    )
    with pytest.raises(
        Exception, match=r"/camera/compressed, message 0: compressed image .* cannot be decoded"
    ):
        source.read(0)


def _receive_times(bag, topic):
    from drive.data.readers.rosbag_io import open_bag

    reader = open_bag(bag)
    try:
        return [t for c, t, _ in reader.messages() if c.topic == topic]
    finally:
        reader.close()


def test_topic_errors_are_one_line_naming_the_bag_and_the_topics(tmp_path, capsys):
    bag = write_bag(
        bag_path(tmp_path, "mcap"), "mcap", frames=drive_frames(1, 10), steering=steering_samples(1, 20)
    )
    for opt, expect in (
        ("camera_topic=/nope", "no topic '/nope'"),
        ("camera_topic=/vehicle/steering", "a camera topic must be one of"),
    ):
        assert main(["data", "convert", str(bag), "--out", str(tmp_path / "o"), "--set", opt]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(bag) in err and expect in err
    broken = tmp_path / "broken.bag"
    broken.write_bytes(b"#ROSBAG V2.0\n" + b"\x00" * 50)
    assert main(["data", "convert", str(broken), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{broken}: cannot open the bag" in err


@pytest.mark.parametrize("kind", KINDS)
def test_frames_stream_from_the_bag_with_random_access_and_pickling(kind, tmp_path):
    big = drive_frames(10, 20, size=(320, 240))  # 200 raw rgb8 frames = 46 MB of pixels
    bag = write_bag(
        bag_path(tmp_path, kind), kind, frames=big, steering=steering_samples(10, 50), encoding="rgb8"
    )
    tracemalloc.start()
    (rec,) = read_logs(str(bag))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    pixels = 200 * 240 * 320 * 3
    # measured 6.8 MB (rosbags decompresses one ROS 1 chunk at a time); kept frames would be >= 46 MB
    assert peak < 0.25 * pixels, f"reading the bag held {peak / 1e6:.1f} MB: frames must not be kept"
    assert isinstance(rec.source, BagFrames) and len(rec) == 200
    seq = [rec.frame(i) for i in range(200)]
    for i in (150, 3, 4, 199, 0, 77):  # seeks, backwards and forwards
        np.testing.assert_array_equal(rec.frame(i), seq[i])
    clone = pickle.loads(pickle.dumps(rec.source))
    np.testing.assert_array_equal(clone.read(42), seq[42])


@pytest.mark.slow
def test_training_on_bags_learns_the_steering(tmp_path):
    """A tiny run straight from bags of all three kinds: the policy learns the bar -> curvature map."""
    import lightning.pytorch as pl
    import torch

    from drive.checkpoint import load_policy
    from drive.data.datamodule import DriveDataModule
    from drive.train.module import PolicyModule

    bags = []
    for j, kind in enumerate(KINDS):
        t0 = T0 + j * 10**12
        bags.append(
            str(
                write_bag(
                    bag_path(tmp_path, kind, f"train_{kind}"),
                    kind,
                    frames=drive_frames(12, 10, t0_ns=t0, size=(100, 40)),
                    steering=steering_samples(12, 30, t0_ns=t0),
                    steering_type=ACK,
                )
            )
        )
    val = str(
        write_bag(
            bag_path(tmp_path, "mcap", "val"),
            "mcap",
            frames=drive_frames(8, 10, t0_ns=T0 + 5 * 10**12, size=(100, 40)),
            steering=steering_samples(8, 30, t0_ns=T0 + 5 * 10**12),
            steering_type=ACK,
        )
    )
    pl.seed_everything(0)
    torch.set_num_threads(1)
    dm = DriveDataModule(
        train=bags,
        val=[val],
        image_size=[40, 100],
        seq_len=16,
        stride=4,
        batch_size=8,
        eval_batch_size=8,
        num_workers=0,
        cache_dir=str(tmp_path / "cache"),
        curve_factor=0.0,
    )
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100), lr=5e-3, lr_schedule="constant")
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_steps=120,
        gradient_clip_val=10.0,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=dm)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    policy, meta = load_policy(tmp_path / "last.ckpt")
    (rec,) = read_logs(val)
    from drive.policy_drivers import PolicyDriver
    from drive.sim.driver import Observation

    driver = PolicyDriver(policy, meta)
    preds = []
    for i in range(len(rec)):
        obs = Observation(
            image=rec.frame(i),
            dt_s=0.1,
            speed_mps=8.0,
            timestamp_s=i / 10,
            road=None,
            s_m=0,
            x_m=0,
            y_m=0,
            yaw_rad=0,
            lateral_offset_m=0,
            heading_error_rad=0,
        )
        preds.append(driver.act(obs))
    err = np.asarray(preds)[10:] - rec.curvature[10:]
    mse, var = float(np.mean(err**2)), float(np.var(rec.curvature[10:]))
    print(f"held-out bag: MSE {mse:.3e} vs label variance {var:.3e}")
    assert mse < 0.1 * var  # measured: 1.3e-5 vs 8.0e-4


def test_header_stamps_align_a_late_camera_that_receive_times_would_misalign(tmp_path):
    # the camera's messages arrive 150 ms after capture (a slow encoder), steering after 3 ms
    kind = "mcap"
    bag = write_bag(
        bag_path(tmp_path, kind),
        kind,
        frames=drive_frames(3, 10),
        steering=steering_samples(3, 50),
        steering_type=ACK,
        camera_delay_ns=150_000_000,
    )
    (rec,) = read_logs(str(bag))
    assert rec.meta.extra["stamp"] == "header"
    np.testing.assert_allclose(rec.curvature, _expected(rec), atol=2e-6)
    (late,) = read_logs(str(bag), options={"stamp": "bag"}, problems=Problems("skip"))
    assert late.meta.extra["stamp"] == "bag"
    lag = np.abs(late.curvature - np.array([curvature_at(t) for t in late.log["timestamp_s"]]))
    assert lag.max() > 5e-3  # labels 147 ms late: receive times are the wrong clock here
    f32 = write_bag(
        bag_path(tmp_path, kind, "f32"),
        kind,
        frames=drive_frames(1, 10),
        steering=steering_samples(1, 20),
        steering_type=F32,
    )
    with pytest.raises(ValueError, match="stamp=header but /vehicle/steering carry no header"):
        read_logs(str(f32), options={"stamp": "header"})
    with pytest.raises(ValueError, match="stamp must be auto, header or bag"):
        read_logs(str(f32), options={"stamp": "gps"})


@pytest.mark.parametrize("speed_type", [F32, "nav_msgs/msg/Odometry"])
def test_speed_from_its_own_topic_is_interpolated_to_frames(speed_type, tmp_path):
    kind = "sqlite3" if speed_type == F32 else "rosbag1"
    speeds = [(T0 + int((i / 5 - 0.4) * 1e9), 5.0 + 0.5 * (i / 5 - 0.4)) for i in range(20)]  # 5 Hz ramp
    bag = write_bag(
        bag_path(tmp_path, kind),
        kind,
        frames=drive_frames(2, 10),
        steering=steering_samples(2, 40),
        steering_type=F32,
        speed=speeds,
        speed_type=speed_type,
    )
    with pytest.raises(DataError, match="2 steering topics") if speed_type == F32 else _nothing():
        read_logs(str(bag))  # a Float32 speed topic is also a steering candidate: names are needed
    (rec,) = read_logs(
        str(bag), options={"steering_topic": "/vehicle/steering", "speed_topic": "/vehicle/speed"}
    )
    assert rec.meta.extra["speed_topic"] == "/vehicle/speed"
    np.testing.assert_allclose(rec.log["speed_mps"], 5.0 + 0.5 * rec.log["timestamp_s"], atol=1e-5)
    np.testing.assert_allclose(rec.curvature, _expected(rec), atol=1e-5)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize(
    "encoding",
    ["rgba8", "bgra8", "yuv422", "yuv422_yuy2", "bayer_rggb8", "bayer_bggr8", "bayer_gbrg8", "bayer_grbg8"],
)
def test_every_supported_raw_encoding_decodes_to_the_right_colours(encoding):
    from drive.data.readers.ros_messages import decode_image

    ts = store("mcap")
    h, w = 8, 12
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[:] = (200, 120, 30)  # flat orange: any channel swap shows
    if encoding in ("rgba8", "bgra8"):
        pix = np.dstack([rgb if encoding == "rgba8" else rgb[:, :, ::-1], np.full((h, w), 255, np.uint8)])
        step = w * 4
    elif encoding.startswith("yuv422"):
        # BT.601 video range, as YUV422 cameras send it (and OpenCV's UYVY/YUY2 decoders expect)
        r, g, b = (rgb[:, :, i].astype(np.float64) / 255.0 for i in range(3))
        y = np.round(16 + 65.481 * r + 128.553 * g + 24.966 * b).astype(np.uint8)
        u = np.round(128 - 37.797 * r - 74.203 * g + 112.0 * b).astype(np.uint8)[:, 0::2]
        v = np.round(128 + 112.0 * r - 93.786 * g - 18.214 * b).astype(np.uint8)[:, 0::2]
        pix = np.empty((h, w * 2), np.uint8)
        if encoding == "yuv422":  # U Y0 V Y1
            pix[:, 0::4], pix[:, 1::4], pix[:, 2::4], pix[:, 3::4] = u, y[:, 0::2], v, y[:, 1::2]
        else:  # Y0 U Y1 V
            pix[:, 0::4], pix[:, 1::4], pix[:, 2::4], pix[:, 3::4] = y[:, 0::2], u, y[:, 1::2], v
        step = w * 2
    else:
        pattern = encoding.split("_")[1][:4]  # e.g. "rggb": row 0 = r g, row 1 = g b
        chan = {"r": 0, "g": 1, "b": 2}
        pix = np.empty((h, w), np.uint8)
        for (dy, dx), c in zip(((0, 0), (0, 1), (1, 0), (1, 1)), pattern):
            pix[dy::2, dx::2] = rgb[dy::2, dx::2, chan[c]]
        step = w
    Image = ts.types["sensor_msgs/msg/Image"]
    from rosbag_util import _header

    msg = Image(
        header=_header(ts, "mcap", 0),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=0,
        step=step,
        data=np.ascontiguousarray(pix).reshape(-1),
    )
    out = decode_image(msg, "sensor_msgs/msg/Image")
    assert out.shape == (h, w, 3) and out.dtype == np.uint8
    np.testing.assert_allclose(out[2:-2, 2:-2].reshape(-1, 3).mean(0), (200, 120, 30), atol=6)
