"""Data pipeline throughput: frames/s delivered to the training loop, and first-pass decode rates.

    python tools/bench_data.py [--workers 2] [--frames 2000] [--device cpu|cuda]

1. Writes a synthetic 1920x1208 recording as JPEG files and as an MP4 (NCP camera size, so the
   NCP crop + resize to 200x78 is exercised) and times the first pass: decode + preprocess into
   the cache, frames/s, for each.
2. Iterates the training DataLoader (full augmentation incl. viewpoint synthesis, ``--workers``
   workers, batches of 20 x 16) over the cache and reports frames/s delivered (moved to
   ``--device``), against the target of 3000 frames/s; the same without augmentation (the bound),
   with augmentation on ``--device`` after the transfer (``augment_on="device"``), and one worker's
   job in-process on one thread (the per-core rate).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from drive.data.augment import AugmentConfig
from drive.data.cache import build_cache
from drive.data.datamodule import DriveDataModule
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs
from drive.io.recording import CameraCalibration, RecordingMeta, RecordingWriter


def _write(root: Path, frames: int, storage: str, h: int, w: int) -> Path:
    cam = CameraCalibration(fx=1000, fy=1000, cx=w / 2, cy=h / 2, height_m=1.5, pitch_rad=0.1)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    base = cv2.GaussianBlur(base, (0, 0), 8)  # camera-like content compresses like a real frame
    with RecordingWriter(
        root / storage, RecordingMeta(fps=30, width=w, height=h, camera=cam, storage=storage)
    ) as wr:
        for i in range(frames):
            wr.append(
                np.roll(base, 3 * i, axis=1),
                timestamp_s=i / 30,
                curvature=0.01 * np.sin(i / 30),
                speed_mps=8.0,
            )
    return root / storage


def _loader_rate(
    tmp: Path, augment, workers: int, batches: int, device: torch.device, augment_on: str = "workers"
) -> float:
    """Frames/s the training DataLoader delivers (batches of 20 x 16) to ``device``, after worker
    start-up; with ``augment_on="device"`` each batch is augmented after the transfer."""
    dm = DriveDataModule(
        train=[str(tmp / "train")],
        cache_dir=str(tmp / "cache2"),
        batch_size=20,
        seq_len=16,
        stride=4,
        num_workers=workers,
        augment=augment,
        val_split="none",
        augment_on=augment_on,
    )
    dm.prepare_data()
    dm.setup("fit")
    it = iter(dm.train_dataloader())
    try:
        for _ in range(3):
            next(it)
        n, t0 = 0, time.perf_counter()
        for i in range(batches):
            try:
                batch = next(it)
            except StopIteration:
                del it
                gc.collect()  # (see below)
                it = iter(dm.train_dataloader())
                batch = next(it)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            if augment_on == "device":
                batch = dm.augment_batch(batch, batch_number=i)
            n += batch["frames"].shape[0] * batch["frames"].shape[1]
        if device.type == "cuda":
            torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)
    finally:
        # stop this loader's workers here: an iterator left for the garbage collector would be
        # inherited by the next loader's forked workers and collected there, where its shutdown fails
        # ("Exception ignored ... can only test a child process")
        del it
        gc.collect()


def _worker_job_rate(tmp: Path, windows: int) -> float:
    """Frames/s of what one worker does (read a window from the cache, augment it), one thread,
    no other process involved: what each of N workers delivers on N otherwise idle cores."""
    dm = DriveDataModule(
        train=[str(tmp / "train")],
        cache_dir=str(tmp / "cache2"),
        seq_len=16,
        stride=4,
        num_workers=0,
        augment=AugmentConfig(lookahead_s=2.0),
        val_split="none",
    )
    dm.setup("fit")
    ds = dm.datasets["train"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        for i in range(windows):
            ds[i % len(ds)]
        return windows * 16 / (time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--frames", type=int, default=300, help="frames of the 1920x1208 decode test")
    ap.add_argument("--train-frames", type=int, default=4000, help="frames of the training-loop test")
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_data_"))
    try:
        pre = Preprocessing.ncp()
        for storage in ("frames", "video"):
            path = _write(tmp / "raw", args.frames, storage, 1208, 1920)
            (rec,) = read_logs(str(path))
            t0 = time.perf_counter()
            build_cache(rec, pre, tmp / "cache")
            dt = time.perf_counter() - t0
            print(
                f"first pass {'JPEG' if storage == 'frames' else 'MP4 '} 1920x1208 -> 200x78: "
                f"{args.frames / dt:8.1f} frames/s"
            )
        _write(tmp / "train", args.train_frames, "frames", 78, 200)
        rates = {}
        for name, augment in (
            ("no augmentation (bound)", None),
            ("full augmentation", AugmentConfig(lookahead_s=2.0)),
        ):
            rates[name] = _loader_rate(tmp, augment, args.workers, args.batches, torch.device(args.device))
            print(f"training loop, {name}, {args.workers} workers: {rates[name]:8.1f} frames/s")
        on_device = _loader_rate(
            tmp,
            AugmentConfig(lookahead_s=2.0),
            args.workers,
            args.batches,
            torch.device(args.device),
            "device",
        )
        print(
            f"training loop, full augmentation on {args.device} after transfer (augment_on=device): "
            f"{on_device:8.1f} frames/s"
        )
        per_core = _worker_job_rate(tmp, args.batches * 20)
        print(f"one worker's job in-process (1 thread, full augmentation): {per_core:8.1f} frames/s per core")
        full = rates["full augmentation"]
        print(
            f"full augmentation = {full / rates['no augmentation (bound)']:.2f} x the no-augmentation rate, "
            f"{full / 3000:.2f} x the 3000 frames/s target"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
