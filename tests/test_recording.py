"""The canonical recording: round trip, atomic writes, clear errors."""

import json

import numpy as np
import pytest

from drive.io.recording import CameraCalibration, Recording, RecordingError, RecordingMeta, RecordingWriter


def _meta(storage="frames", **kw):
    cam = CameraCalibration(fx=100.0, fy=100.0, cx=100.0, cy=30.0, height_m=1.5, pitch_rad=0.05)
    return RecordingMeta(
        fps=30.0,
        width=64,
        height=32,
        camera=cam,
        source="test",
        conditions={"season": "summer"},
        seed=7,
        storage=storage,
        **kw,
    )


def _frames(n):
    # smooth images (JPEG is lossy; smooth content survives it nearly unchanged)
    yy, xx = np.mgrid[0:32, 0:64]
    base = np.stack([xx * 4, yy * 8, 128 + 0 * xx], axis=-1).astype(np.uint8)
    return [np.roll(base, i, axis=1) for i in range(n)]


def _write(path, storage="frames", n=5):
    with RecordingWriter(path, _meta(storage)) as w:
        for i, f in enumerate(_frames(n)):
            w.append(
                f,
                timestamp_s=i / 30.0,
                curvature=0.01 * i,
                speed_mps=8.3,
                lateral_offset_m=-0.1 * i,
                heading_error_rad=0.0,
            )
    return path


def test_jpeg_recording_round_trips_meta_log_and_frames(tmp_path):
    rec = Recording.open(_write(tmp_path / "rec"))
    assert len(rec) == 5
    assert rec.meta.camera.pitch_rad == pytest.approx(0.05)
    assert rec.meta.conditions == {"season": "summer"} and rec.meta.seed == 7
    np.testing.assert_allclose(rec.curvature, [0.0, 0.01, 0.02, 0.03, 0.04])
    np.testing.assert_allclose(rec.log["lateral_offset_m"], [0.0, -0.1, -0.2, -0.3, -0.4])
    frame = rec.frame(3)
    assert frame.shape == (32, 64, 3) and frame.dtype == np.uint8
    assert np.abs(frame.astype(int) - _frames(5)[3].astype(int)).mean() < 3
    assert rec.problems() == []


def test_video_recording_round_trips(tmp_path):
    rec = Recording.open(_write(tmp_path / "rec", storage="video", n=8))
    assert len(rec) == 8 and rec.meta.video == "video.mp4"
    assert [f.shape for f in rec.frames()] == [(32, 64, 3)] * 8
    assert rec.frame(2).shape == (32, 64, 3)  # a seek backwards works


def test_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "rec"
    with pytest.raises(RuntimeError):
        with RecordingWriter(target, _meta()) as w:
            w.append(_frames(1)[0], timestamp_s=0.0, curvature=0.0, speed_mps=1.0)
            raise RuntimeError("crash mid-recording")
    assert list(tmp_path.iterdir()) == []


def test_wrong_frame_size_is_rejected_with_frame_number(tmp_path):
    with RecordingWriter(tmp_path / "rec", _meta()) as w:
        w.append(_frames(1)[0], timestamp_s=0.0, curvature=0.0, speed_mps=1.0)
        with pytest.raises(RecordingError, match="frame 1: expected uint8"):
            w.append(np.zeros((10, 10, 3), np.uint8), timestamp_s=0.1, curvature=0.0, speed_mps=1.0)


def test_errors_name_file_and_row(tmp_path):
    root = _write(tmp_path / "rec")
    log = root / "log.csv"
    lines = log.read_text().splitlines()
    lines[3] = lines[3].replace(lines[3].split(",")[2], "abc", 1)  # file line 4
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordingError, match=r"log.csv, row 4: curvature is not a number"):
        Recording.open(root)


def test_missing_and_corrupt_frames_are_named(tmp_path):
    root = _write(tmp_path / "rec")
    (root / "frames" / "000002.jpg").write_bytes(b"not a jpeg")
    (root / "frames" / "000004.jpg").unlink()
    rec = Recording.open(root)
    with pytest.raises(RecordingError, match=r"000002.jpg: not a readable image \(frame 2\)"):
        rec.frame(2)
    with pytest.raises(RecordingError, match=r"000004.jpg: image file is missing"):
        rec.frame(4)


def test_problems_report_non_finite_labels_and_bad_timestamps(tmp_path):
    root = _write(tmp_path / "rec")
    rec = Recording.open(root)
    rec.log["curvature"][1] = np.nan
    rec.log["timestamp_s"][3] = rec.log["timestamp_s"][2]
    messages = [str(p) for p in rec.problems()]
    assert "log.csv, row 3: curvature is nan [non_finite]" in messages
    assert any("row 5: duplicate timestamp_s" in m for m in messages)


def test_frame_count_mismatch_is_an_error(tmp_path):
    root = _write(tmp_path / "rec", storage="video", n=4)
    meta = json.loads((root / "meta.json").read_text())
    assert meta["label"] == {"name": "curvature", "unit": "1/m"}
    with open(root / "log.csv", "a") as f:
        f.write("4,0.2,0.0,8.3,0.0,0.0\n")
    rec = Recording.open(root)
    with pytest.raises(RecordingError, match="truncated, frame 4"):
        rec.frame(4)
