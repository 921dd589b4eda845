"""Cache, windows, splits, augmentation and the DataModule batch contract on real recordings."""

import json
import math
import os

import numpy as np
import torch
from torchvision.transforms.v2 import functional as TF

from drive.data.augment import AugmentConfig, Augmenter, color_matrix
from drive.data.cache import build_cache
from drive.data.datamodule import DriveDataModule
from drive.data.dataset import sample_weights
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs
from drive.data.sequences import split_ranges, stateful_windows, train_windows
from drive.io.recording import CameraCalibration, RecordingMeta, RecordingWriter
from drive.sim.appearance import sample_appearance
from drive.sim.render import render_view
from drive.sim.road import generate_road

CAM = CameraCalibration(fx=120, fy=120, cx=79.5, cy=59.5, height_m=1.5, pitch_rad=0.1)
YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])  # NTSC RGB -> YIQ


def _write(root, name, times, h=120, w=160):
    rng = np.random.default_rng(len(times))
    with RecordingWriter(
        root / name, RecordingMeta(fps=10, width=w, height=h, camera=CAM, source=name)
    ) as wr:
        for i, t in enumerate(times):
            wr.append(
                rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
                timestamp_s=t,
                curvature=0.02 * math.sin(i / 5),
                speed_mps=8.0,
            )
    return root / name


def test_cache_holds_exactly_the_shared_preprocessing(tmp_path):
    path = _write(tmp_path, "a", np.arange(10) * 0.1)
    (rec,) = read_logs(str(path))
    pre = Preprocessing(size=(30, 40), crop=(20, 100, 0, 160))
    cached = build_cache(rec, pre, tmp_path / "cache")
    expect = pre(np.stack(list(rec.frames()))).numpy()
    assert cached.frames.shape == (10, 3, 30, 40) and np.array_equal(np.asarray(cached.frames), expect)


def test_cache_rebuilds_on_log_image_or_preprocessing_change_only(tmp_path):
    path = _write(tmp_path, "a", np.arange(10) * 0.1)
    pre = Preprocessing(size=(30, 40))
    first = build_cache(read_logs(str(path))[0], pre, tmp_path / "c")
    stamp = os.stat(first.directory / "frames.npy").st_mtime_ns
    build_cache(read_logs(str(path))[0], pre, tmp_path / "c")
    assert os.stat(first.directory / "frames.npy").st_mtime_ns == stamp  # unchanged: reused
    log = (path / "log.csv").read_text().splitlines()
    fields = log[3].split(",")
    fields[2] = "0.5"
    (path / "log.csv").write_text("\n".join(log[:3] + [",".join(fields)] + log[4:]) + "\n")
    assert build_cache(read_logs(str(path))[0], pre, tmp_path / "c").curvature[2] == 0.5
    import cv2

    cv2.imwrite(str(path / "frames" / "000004.jpg"), np.zeros((120, 160, 3), np.uint8))
    assert np.asarray(build_cache(read_logs(str(path))[0], pre, tmp_path / "c").frames[4]).max() == 0
    assert build_cache(read_logs(str(path))[0], Preprocessing(size=(15, 20)), tmp_path / "c").frames.shape[
        2:
    ] == (15, 20)
    assert not list(first.directory.glob("*tmp*"))
    meta = json.loads((path / "meta.json").read_text())
    meta["camera"]["height_m"] = 1.7  # a corrected calibration
    (path / "meta.json").write_text(json.dumps(meta))
    assert build_cache(read_logs(str(path))[0], pre, tmp_path / "c").info["camera"]["height_m"] == 1.7


def test_windows_never_cross_gaps_or_invalid_frames(tmp_path):
    times = np.concatenate([np.arange(30) * 0.1, 10 + np.arange(25) * 0.1])  # 7 s pause after frame 29
    (rec,) = read_logs(str(_write(tmp_path, "g", times)))
    cached = build_cache(rec, Preprocessing(size=(12, 16)), tmp_path / "c")
    cached.valid[40] = False
    ranges = [(0, 0, len(cached))]
    wins = train_windows([cached], ranges, 8, 2)
    for w in wins:
        span = set(range(w.start, w.start + w.length))
        assert not ({29, 30} <= span) and 40 not in span
    assert [w.start for w in wins if w.reset] == [0, 30, 41]
    full = stateful_windows([cached], ranges, 8)
    covered = [i for w in full for i in range(w.start, w.start + w.length)]
    assert covered == [i for i in range(55) if i != 40]
    assert [w.start for w in full if w.reset] == [0, 30, 41]


def test_ncp_split_validates_on_first_and_last_5_percent_of_each_drive(tmp_path):
    recs = [
        build_cache(
            read_logs(str(_write(tmp_path, n, np.arange(40) * 0.1)))[0],
            Preprocessing(size=(12, 16)),
            tmp_path / "c",
        )
        for n in ("a", "b")
    ]
    train, val = split_ranges(recs, "ncp", 0.1)
    assert train == [(0, 2, 38), (1, 2, 38)] and val == [(0, 0, 2), (0, 38, 40), (1, 0, 2), (1, 38, 40)]
    t1, v1 = split_ranges(recs, "drives", 0.5, seed=3)
    assert split_ranges(recs, "drives", 0.5, seed=3) == (t1, v1) and len(t1) == len(v1) == 1


def test_fused_colour_jitter_matches_torchvision():
    x = torch.rand(2, 3, 20, 30) * 0.6 + 0.2
    m = torch.from_numpy(color_matrix(1.1, 0.9, 1.2, 0.0).astype(np.float32))
    grey = (x * torch.tensor([0.2989, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1).mean((1, 2))
    fused = torch.einsum("ij,tjhw->tihw", m[:, :3], x) + (m[:, 3][None] * grey[:, None])[..., None, None]
    ref = TF.adjust_saturation(TF.adjust_contrast(TF.adjust_brightness(x, 1.1), 0.9), 1.2)
    assert (fused - ref).abs().max() < 2e-3


def _hue(img: np.ndarray, hue: float) -> np.ndarray:
    """uint8 [H, W, 3] through the hue-only colour matrix, clamped and rounded as the Augmenter does."""
    m = color_matrix(1.0, 1.0, 1.0, hue)
    assert np.abs(m[:, 3]).max() < 1e-12  # hue adds no offset
    return np.round(np.clip(img / 255.0 @ m[:, :3].T, 0.0, 1.0) * 255.0).astype(np.uint8)


def test_hue_jitter_turns_the_yiq_chroma_plane_of_a_rendered_frame():
    """Hue jitter h turns (I, Q) by 2 pi h: luma and chroma magnitude kept, h = 0 the identity, +h then -h
    the original (up to uint8 rounding), grey pixels untouched; the Augmenter's colour step does the same."""
    img = render_view(generate_road(3, 400.0), sample_appearance(3), 100.0)  # uint8 [78, 200, 3]
    yiq = img / 255.0 @ YIQ.T
    chroma = yiq[..., 1] + 1j * yiq[..., 2]
    coloured = np.abs(chroma) > 0.02
    turns = {}
    for h in (0.05, -0.05, 0.3):
        turned = img / 255.0 @ color_matrix(1.0, 1.0, 1.0, h)[:, :3].T @ YIQ.T  # before clamping
        np.testing.assert_allclose(turned[..., 0], yiq[..., 0], atol=1e-12)
        np.testing.assert_allclose(np.abs(turned[..., 1] + 1j * turned[..., 2]), np.abs(chroma), atol=1e-12)
        turn = np.angle((turned[..., 1] + 1j * turned[..., 2]) / np.where(coloured, chroma, 1.0))[coloured]
        np.testing.assert_allclose(turn, turn[0], atol=1e-9)  # one turn for every coloured pixel
        assert math.isclose(abs(turn[0]), 2 * math.pi * abs(h), abs_tol=1e-9)
        turns[h] = turn[0]
    assert math.isclose(turns[-0.05], -turns[0.05], abs_tol=1e-12)

    assert np.array_equal(_hue(img, 0.0), img)
    there = _hue(img, 0.05)
    unclamped = img / 255.0 @ color_matrix(1.0, 1.0, 1.0, 0.05)[:, :3].T
    kept = ((unclamped >= 0.0) & (unclamped <= 1.0)).all(-1)  # pixels no channel of which was clamped
    assert kept.mean() > 0.5 and not np.array_equal(there, img)
    assert np.abs(there @ YIQ[0] - img @ YIQ[0])[kept].max() <= 0.5 + 1e-9  # luma, to uint8 rounding
    back = _hue(there, -0.05)
    assert np.abs(back.astype(int) - img.astype(int))[kept].max() <= 1
    grey = np.repeat(np.round(img @ YIQ[0]).astype(np.uint8)[..., None], 3, axis=-1)
    assert np.array_equal(_hue(grey, 0.05), grey) and np.array_equal(_hue(grey, -0.3), grey)

    hue_only = AugmentConfig(
        photometric_p=1.0,
        brightness=0.0,
        contrast=0.0,
        saturation=0.0,
        hue=0.5,
        gamma=0.0,
        shadow_p=0.0,
        blur_p=0.0,
        noise_p=0.0,
        jpeg_p=0.0,
        viewpoint_p=0.0,
    )
    frames = torch.from_numpy(np.stack([img, grey])).permute(0, 3, 1, 2)  # one window of 2 frames
    out, _ = Augmenter(hue_only)(frames, np.zeros(2), np.full(2, 8.0), np.random.default_rng(1))
    out = out.permute(0, 2, 3, 1).numpy()
    assert np.array_equal(out[1], grey) and not np.array_equal(out[0], img)
    inside = ((out[0] > 0) & (out[0] < 255)).all(-1)
    assert inside.mean() > 0.5
    assert np.abs(out[0] @ YIQ[0] - img @ YIQ[0])[inside].max() <= 0.5 + 1e-3


def test_augmentation_is_consistent_across_a_window_unless_per_frame():
    frames = torch.full((6, 3, 24, 32), 128, dtype=torch.uint8)
    cfg = dict(viewpoint_p=0.0, photometric_p=1.0, shadow_p=1.0, noise_p=0.0, blur_p=0.0, jpeg_p=0.0)
    out, _ = Augmenter(AugmentConfig(**cfg))(frames, np.zeros(6), np.full(6, 8.0), np.random.default_rng(0))
    assert (out != 128).any() and all(torch.equal(out[0], out[i]) for i in range(6))
    out, _ = Augmenter(AugmentConfig(per_frame=True, **cfg))(
        frames, np.zeros(6), np.full(6, 8.0), np.random.default_rng(0)
    )
    assert not torch.equal(out[0], out[1])


def test_sample_weights_follow_ncp_formula():
    np.testing.assert_allclose(sample_weights(np.array([0.0, 0.01, -0.02]), 0.1), [1.0, math.e, math.e**2])


def test_datamodule_batch_contract_with_two_workers(tmp_path):
    for name in ("a", "b"):
        _write(tmp_path / "logs", name, np.arange(40) * 0.1)
    dm = DriveDataModule(
        train=[str(tmp_path / "logs")],
        cache_dir=str(tmp_path / "cache"),
        batch_size=4,
        num_workers=2,
        augment=AugmentConfig(lookahead_s=2.0),
        seq_len=8,
        stride=4,
    )
    dm.prepare_data()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["frames"].dtype == torch.uint8 and batch["frames"].shape == (4, 8, 3, 78, 200)
    for key in ("curvature", "dt", "weight"):
        assert batch[key].dtype == torch.float32 and batch[key].shape == (4, 8)
    assert batch["reset"].shape == (4,) and batch["reset"].dtype == torch.bool
    np.testing.assert_allclose(batch["dt"].numpy(), 0.1, atol=1e-5)
    val = next(iter(dm.val_dataloader()))
    assert val["mask"][:, :2].all() and not val["mask"][:, 2:].any() and val["reset"].all()
    assert (val["weight"][:, 2:] == 0).all()


def test_interrupted_cache_build_is_rebuilt(tmp_path):
    path = _write(tmp_path, "a", np.arange(6) * 0.1)
    pre = Preprocessing(size=(12, 16))
    cached = build_cache(read_logs(str(path))[0], pre, tmp_path / "c")
    (cached.directory / "frames.npy").unlink()  # as if the build died between the two renames
    (cached.directory / "frames.999.tmp.npy").write_bytes(b"partial")
    again = build_cache(read_logs(str(path))[0], pre, tmp_path / "c")
    assert again.frames.shape == (6, 3, 12, 16) and not list(again.directory.glob("*.tmp.*"))


def test_device_side_augmentation_replaces_frames_labels_and_weights(tmp_path):
    for name in ("a", "b"):
        _write(tmp_path / "logs", name, np.arange(40) * 0.1)
    dm = DriveDataModule(
        train=[str(tmp_path / "logs")],
        cache_dir=str(tmp_path / "cache"),
        batch_size=4,
        num_workers=0,
        seq_len=8,
        augment=AugmentConfig(viewpoint_p=1.0, max_shift_m=0.5, lookahead_s=2.0),
        augment_on="device",
        val_split="none",
    )
    dm.prepare_data()
    dm.setup("fit")
    raw = next(iter(dm.train_dataloader()))
    ds = dm.datasets["train"]
    plain = np.stack(
        [
            ds.recordings[r].curvature[s : s + 8]
            for r, s in zip(raw["recording"].tolist(), raw["start"].tolist())
        ]
    )
    np.testing.assert_allclose(raw["curvature"].numpy(), plain, rtol=1e-6)  # workers did not augment
    out = dm.augment_batch(raw)
    assert out["frames"].shape == raw["frames"].shape and out["frames"].dtype == torch.uint8
    assert not torch.equal(out["frames"], raw["frames"])
    shift_effect = out["curvature"].numpy() - plain
    assert np.abs(shift_effect).max() > 1e-3 and np.allclose(shift_effect, shift_effect[:, :1], atol=1e-6)
    np.testing.assert_allclose(
        out["weight"].numpy(), sample_weights(out["curvature"].numpy(), 0.1), rtol=1e-5
    )


def test_validate_and_test_stages_need_no_training_logs(tmp_path):
    _write(tmp_path / "logs", "a", np.arange(20) * 0.1)
    dm = DriveDataModule(
        val=[str(tmp_path / "logs")],
        test=[str(tmp_path / "logs")],
        cache_dir=str(tmp_path / "cache"),
        num_workers=0,
        seq_len=8,
    )
    dm.setup("validate")
    dm.setup("test")
    assert "train" not in dm.datasets
    for split in ("val", "test"):
        windows = dm.datasets[split].windows
        assert [(w.start, w.length, w.reset) for w in windows] == [
            (0, 8, True),
            (8, 8, False),
            (16, 4, False),
        ]
