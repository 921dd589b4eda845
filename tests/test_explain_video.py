"""Saliency along a recording: policy saliency stream, noise, videos read back with OpenCV, CLI."""

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from drive.checkpoint import policy_meta, save_policy
from drive.cli import main as drive_main
from drive.data.preprocess import Preprocessing
from drive.explain.policy_saliency import policy_saliency
from drive.explain.video import contact_sheet_path, saliency_video
from drive.explain.visual_backprop import visual_backprop
from drive.io.recording import Recording, RecordingMeta, RecordingWriter
from drive.nn.heads import NCPConvHead
from drive.nn.policy import Policy

FPS = 15.0
PREPROCESSING = Preprocessing(size=(78, 200), crop=(20, 110, 0, 240))


def _write_recording(directory: Path, frames: int = 12) -> Path:
    rng = np.random.default_rng(3)
    with RecordingWriter(directory, RecordingMeta(fps=FPS, width=240, height=120)) as writer:
        for i in range(frames):
            image = np.zeros((120, 240, 3), np.uint8)
            image[60:110, 90 + 3 * i : 140 + 3 * i] = 200  # a moving bright block
            image += rng.integers(0, 30, image.shape, dtype=np.uint8)
            writer.append(image, timestamp_s=i / FPS, curvature=0.004 * np.sin(i / 3), speed_mps=8.0)
    return directory


def _policy() -> Policy:
    torch.manual_seed(0)
    return Policy(NCPConvHead(), None, frame_period_s=1 / FPS).eval()


def _read_back(path: Path):
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened()
    info = (
        int(capture.get(cv2.CAP_PROP_FRAME_COUNT)),
        capture.get(cv2.CAP_PROP_FPS),
        int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
        int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
    )
    decoded = 0
    while capture.read()[0]:
        decoded += 1
    capture.release()
    return info, decoded


def test_cli_side_by_side_video_has_the_frame_count_size_and_fps_of_the_recording(tmp_path):
    recording = _write_recording(tmp_path / "rec")
    policy = _policy()
    ckpt = save_policy(tmp_path / "policy.pt", policy, policy_meta(policy, PREPROCESSING, FPS, "cnn"))
    out = tmp_path / "videos" / "saliency.mp4"
    code = drive_main(
        [
            "saliency",
            "--ckpt",
            str(ckpt),
            "--recording",
            str(recording),
            "--out",
            str(out),
            "--side-by-side",
            "--noise",
            "0.2",
            "--max-frames",
            "9",
            "--still",
            str(tmp_path / "still.png"),
            "--still-frame",
            "4",
        ]
    )
    assert code == 0
    (count, fps, width, height), decoded = _read_back(out)
    assert (count, decoded, fps) == (9, 9, FPS)
    assert (width, height) == (3 * 3 * 200, 2 * 3 * 78)  # 3 panels x3 wide, clean + noisy rows
    sheet = cv2.imread(str(contact_sheet_path(out)))
    assert sheet is not None and sheet.shape[1] == 2 * (width // 2)
    assert not [p for p in out.parent.iterdir() if "partial" in p.name]
    still = cv2.imread(str(tmp_path / "still.png"))
    assert still is not None and still.shape == (height, width, 3)


def test_single_row_video_covers_the_whole_recording(tmp_path):
    recording = _write_recording(tmp_path / "rec", frames=7)
    policy = _policy()
    result = saliency_video(
        policy, policy_meta(policy, PREPROCESSING, FPS, "cnn"), recording, tmp_path / "v.mp4", method="ncp"
    )
    assert result["frames"] == 7 and result["size"] == [1800, 234] and result["rows"] == ["clean"]
    assert _read_back(tmp_path / "v.mp4") == ((7, FPS, 1800, 234), 7)


def test_stream_gives_the_heads_masks_and_the_policys_steering_on_preprocessed_frames(tmp_path):
    recording = Recording.open(_write_recording(tmp_path / "rec"))
    policy = _policy()
    stream = list(policy_saliency(policy, recording.frames(), PREPROCESSING, recording.timestamps_s, chunk=5))
    x = PREPROCESSING(np.stack(list(recording.frames()))).float() / 255.0
    expected_masks = visual_backprop(policy.head, x)
    with torch.no_grad():
        expected_steering, _ = policy(x[None])
    assert len(stream) == len(recording)
    for i, item in enumerate(stream):
        assert item.frame.shape == (78, 200, 3) and item.frame.dtype == np.uint8
        np.testing.assert_allclose(item.mask, expected_masks[i].numpy(), atol=1e-6)
        assert item.prediction == pytest.approx(float(expected_steering[0, i]), abs=1e-7)


def test_noisy_row_sees_noisy_frames_and_the_clean_row_does_not(tmp_path):
    recording = Recording.open(_write_recording(tmp_path / "rec", frames=3))
    policy = _policy()
    clean = list(policy_saliency(policy, recording.frames(), PREPROCESSING))
    noisy = list(policy_saliency(policy, recording.frames(), PREPROCESSING, noise=0.2, seed=4))
    again = list(policy_saliency(policy, recording.frames(), PREPROCESSING, noise=0.2, seed=4))
    expected = PREPROCESSING(recording.frame(0))[0].permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(clean[0].frame, expected)
    spread = (noisy[0].frame.astype(float) - clean[0].frame.astype(float)).std() / 255.0
    assert 0.12 < spread < 0.2  # std 0.2 minus what clipping removes
    np.testing.assert_array_equal(noisy[2].frame, again[2].frame)


def test_a_failing_run_leaves_no_video_behind(tmp_path):
    recording = _write_recording(tmp_path / "rec", frames=3)
    policy = _policy()
    wrong_size = policy_meta(policy, Preprocessing(size=(66, 200)), FPS, "cnn")
    with pytest.raises((AssertionError, RuntimeError), match="input_size"):
        saliency_video(policy, wrong_size, recording, tmp_path / "v.mp4")
    assert list(tmp_path.iterdir()) == [tmp_path / "rec"]


def test_recurrent_state_and_elapsed_time_are_carried_across_chunks():
    from drive.nn.families import build_policy

    torch.manual_seed(1)
    policy = build_policy("ncp_ltc", frame_period_s=1 / FPS).eval()
    with torch.no_grad():
        policy.rnn.cm.fill_(20.0)  # slow neurons: the state needs many frames to settle
    frames = [np.random.default_rng(i).integers(0, 255, (78, 200, 3), dtype=np.uint8) for i in range(9)]
    timestamps = np.array([0, 1, 2, 3, 5, 6, 7, 9, 10]) / FPS  # two dropped frames
    stream = [s.prediction for s in policy_saliency(policy, frames, None, timestamps, chunk=4)]
    x = torch.as_tensor(np.stack(frames)).permute(0, 3, 1, 2).float()[None] / 255.0
    dt = torch.as_tensor(np.diff(np.concatenate([[-1 / FPS], timestamps])), dtype=torch.float32)[None]
    with torch.no_grad():
        whole, _ = policy(x, None, dt)
        regular, _ = policy(x, None, None)
        restarted = torch.cat([policy(x[:, i : i + 4], None, dt[:, i : i + 4])[0] for i in (0, 4, 8)], dim=1)
    np.testing.assert_allclose(stream, whole[0].numpy(), rtol=1e-5, atol=1e-9)
    assert abs(stream[-1] - float(regular[0, -1])) > 0.1 * abs(stream[-1])  # the gaps were used
    assert abs(stream[-1] - float(restarted[0, -1])) > 0.5 * abs(stream[-1])  # the state was not reset
