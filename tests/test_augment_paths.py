"""Augmentation in the DataLoader workers (one window at a time, on the CPU) and on the training
device (whole batches after the transfer, ``augment_on: device``) must give statistically the same
batches: the same share of viewpoint-corrected labels and size of the correction, the same change
of brightness, of pixels and of fine detail (blur, noise, JPEG). Every effect is on, at the
probabilities of ``drive/configs/data.yaml``. On a machine with CUDA the device path also runs
there (nvJPEG included).

Tolerance: two-sample means agree within 4 standard errors of their difference plus a stated
absolute slack (each statistic over ~300 windows per path).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from drive.data.augment import AugmentConfig
from drive.data.datamodule import DriveDataModule
from drive.io.recording import CameraCalibration, RecordingMeta, RecordingWriter

CAM = CameraCalibration(fx=80, fy=80, cx=79.5, cy=39.5, height_m=1.4, pitch_rad=0.05)
FULL = AugmentConfig(
    jpeg_p=0.3, blur_p=0.3, lookahead_s=2.0
)  # data.yaml's settings; JPEG and blur more often, to see them
EPOCHS = 3


def _scene(rng: np.random.Generator, h: int, w: int, i: int) -> np.ndarray:
    """A road-like frame: sky gradient, textured ground, a lane line that moves with i."""
    y = np.linspace(0, 1, h)[:, None, None]
    img = np.where(y < 0.4, 200 - 80 * y, 90 + 40 * y) * np.ones((h, w, 3))
    img += rng.normal(0, 12, (h, w, 3))
    col = int(w / 2 + 20 * math.sin(i / 7))
    img[int(0.4 * h) :, max(0, col - 2) : col + 2] = 240
    return np.clip(img, 0, 255).astype(np.uint8)


def _logs(root, h=80, w=160):
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        with RecordingWriter(
            root / name, RecordingMeta(fps=10, width=w, height=h, camera=CAM, source=name)
        ) as wr:
            for i in range(240):
                wr.append(
                    _scene(rng, h, w, i), timestamp_s=i * 0.1, curvature=0.01 * math.sin(i / 9), speed_mps=8.0
                )
    return root


def _datamodule(tmp_path, augment_on: str) -> DriveDataModule:
    dm = DriveDataModule(
        train=[str(tmp_path / "logs")],
        cache_dir=str(tmp_path / "cache"),
        batch_size=16,
        num_workers=0,
        seq_len=8,
        stride=4,
        image_size=[40, 80],
        augment=FULL,
        augment_on=augment_on,
        val_split="none",
    )
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _stats(raw: torch.Tensor, aug: torch.Tensor, k_raw: np.ndarray, k_aug: np.ndarray) -> np.ndarray:
    """Per window: [label corrected?, |correction|, change of mean brightness, mean |pixel change|,
    fine-detail energy ratio aug/raw] (frames uint8 [W,T,3,H,W] on the CPU)."""
    x, y = raw.float() / 255, aug.float() / 255
    dk = np.abs(k_aug - k_raw).mean(1)

    def detail(v: torch.Tensor) -> torch.Tensor:
        return (v[..., 1:, :] - v[..., :-1, :]).abs().mean((1, 2, 3, 4)) + (
            v[..., 1:] - v[..., :-1]
        ).abs().mean((1, 2, 3, 4))

    return np.stack(
        [
            (dk > 1e-6).astype(float),
            dk,
            (y.mean((1, 2, 3, 4)) - x.mean((1, 2, 3, 4))).numpy(),
            (y - x).abs().mean((1, 2, 3, 4)).numpy(),
            (detail(y) / detail(x)).numpy(),
        ],
        axis=1,
    )


def _worker_path(tmp_path) -> np.ndarray:
    dm = _datamodule(tmp_path, "workers")
    ds = dm.datasets["train"]
    rows = []
    for epoch in range(EPOCHS):
        for i in range(len(ds)):
            w = ds.windows[i]
            rec = ds.recordings[w.recording]
            raw = torch.from_numpy(np.array(rec.frames[w.start : w.start + w.length]))[None]
            k_raw = np.asarray(rec.curvature[w.start : w.start + w.length])[None]
            item = ds[(i, epoch)]
            rows.append(
                _stats(raw, item["frames"][None], k_raw, item["curvature"].numpy()[None].astype(np.float64))
            )
    return np.concatenate(rows)


def _device_path(tmp_path, device: str) -> np.ndarray:
    dm = _datamodule(tmp_path, "device")
    rows, n = [], 0
    for _ in range(EPOCHS):
        for batch in dm.train_dataloader():
            moved = {k: v.to(device) for k, v in batch.items()}
            out = dm.augment_batch(moved, batch_number=n)
            n += 1
            rows.append(
                _stats(
                    batch["frames"],
                    out["frames"].cpu(),
                    batch["curvature"].numpy(),
                    out["curvature"].cpu().numpy(),
                )
            )
    return np.concatenate(rows)


# the CPU JPEG codec (torchvision.transforms.v2.functional.jpeg) warns on every call since 0.29
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding:DeprecationWarning")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_device_augmentation_matches_worker_augmentation_statistically(tmp_path, device):
    _logs(tmp_path / "logs")
    workers, dev = _worker_path(tmp_path), _device_path(tmp_path, device)
    assert len(workers) == len(dev) >= 300
    names = ["corrected share", "|correction| 1/m", "brightness change", "|pixel change|", "detail ratio"]
    slack = [0.02, 2e-4, 0.003, 0.003, 0.02]
    for j, name in enumerate(names):
        a, b = workers[:, j], dev[:, j]
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        assert abs(a.mean() - b.mean()) <= 4 * se + slack[j], (name, a.mean(), b.mean(), se)
    # and the augmentation did something of every kind
    assert 0.35 < workers[:, 0].mean() < 0.65  # viewpoint_p 0.5
    assert workers[:, 3].mean() > 0.01
    assert (workers[:, 4] < 0.9).mean() > 0.1 and (workers[:, 4] > 1.1).mean() > 0.05  # blur; noise/JPEG
