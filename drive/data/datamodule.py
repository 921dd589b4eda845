"""``DriveDataModule``: driving logs -> cached, windowed, augmented batches for Lightning.

Batch contract (a dict; B windows of T = ``seq_len`` frames; see :mod:`drive.data.dataset`)::

    frames     uint8   [B, T, 3, H, W]  preprocessed RGB, augmented in training (model makes it float)
    curvature  float32 [B, T]  label in 1/m (positive = left), viewpoint-corrected when augmented
    dt         float32 [B, T]  elapsed seconds before each frame (irregular sampling is kept)
    weight     float32 [B, T]  NCP weights exp(|1000 curvature| curve_factor); 0 on padding
    mask       bool    [B, T]  False on padding (only in val/test/predict full-recording windows)
    speed      float32 [B, T]  m/s
    reset      bool    [B]     window starts a segment: fresh hidden state for stateful evaluation
    recording  int64   [B]     index into ``self.recordings(split)``
    start      int64   [B]     first frame of the window in that recording

Training windows overlap (``stride``), never cross a time gap or recording boundary, and are
shuffled; the order and every augmentation draw follow from (seed, epoch, window), so a run killed
mid-epoch resumes exactly where it stopped (:mod:`drive.data.sampling`). Validation/test/predict
iterate every recording in time order with consecutive, non-overlapping windows (the last one of a
segment padded): carry the hidden state from a batch to the next unless ``reset`` when evaluating
statefully with ``eval_batch_size=1``.

Splits: ``val`` paths when given; otherwise ``val_split`` = ``ncp`` (first and last 5% of every
training drive, the paper's scheme), ``drives`` (a seeded share of whole drives) or ``none``.
Caches are built in :meth:`prepare_data` (once per node) and reused everywhere else.
Under DDP each rank trains its interleaved share of the global batches one process would train at
``batch_size x world_size`` (:class:`~drive.data.sampling.EpochShards`); the evaluation loaders give
each rank whole streams in order (:class:`~drive.data.sampling.RecordingShards`; a rank without one
evaluates a window that counts nothing), so stateful evaluation is the same as in one process.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from drive.data.augment import AugmentConfig, Augmenter
from drive.data.cache import CachedRecording, cache_recordings
from drive.data.dataset import SequenceDataset, sample_weights
from drive.data.errors import Problems
from drive.data.preprocess import MODEL_SIZE, Preprocessing
from drive.data.readers import ReaderOptions, read_logs
from drive.data.sampling import (
    BalancedSampler,
    EpochSampler,
    EpochShards,
    Padding,
    RecordingShards,
    ResumableLoader,
    rarity_weights,
)
from drive.data.sequences import split_ranges, stateful_windows, train_windows
from drive.io.checks import number

__all__ = ["DriveDataModule"]


def _host_labels(batch: Dict[str, torch.Tensor]) -> Dict[str, np.ndarray]:
    """The labels device augmentation reads, as host arrays (a copy back if they are on a device)."""
    return {k: batch[k].cpu().numpy() for k in ("curvature", "speed", "mask", "recording")}


def _worker_init(_: int) -> None:
    torch.set_num_threads(1)


# the datamodule's numbers and their ranges (checked when it is made, before any log is read)
_NUMBERS: Dict[str, Dict[str, Any]] = {
    "seq_len": dict(low=1, high=100_000, integer=True),
    "stride": dict(low=1, high=100_000, integer=True),
    "batch_size": dict(low=1, high=1_000_000, integer=True),
    "eval_batch_size": dict(low=1, high=1_000_000, integer=True),
    "num_workers": dict(low=0, high=1024, integer=True),
    "curve_factor": dict(low=0.0, high=1e6),
    "gap_factor": dict(low=1.0, high=1e6, low_open=True),
    "val_fraction": dict(low=0.0, high=1.0, high_open=True),
    "balance": dict(low=0.0, high=1.0),
}


def _check_numbers(given: Dict[str, Any]) -> None:
    """Every number of the datamodule finite and in its range, ``image_size`` two sides of 8 to
    10000 pixels: a ``ValueError`` naming the option (``--data.seq_len``)."""
    for name, limits in _NUMBERS.items():
        if given[name] is not None:
            number(given[name], f"--data.{name}", **limits)
    size = given["image_size"]
    if not isinstance(size, (list, tuple)) or len(size) != 2:
        raise ValueError(f"--data.image_size must be [height, width], got {size!r}")
    for side in size:
        number(side, "--data.image_size", low=8, high=10_000, integer=True)


class _Uncounted(Dataset):
    """An evaluation dataset whose :class:`~drive.data.sampling.Padding` windows count nothing: mask and
    weight 0, a fresh stream (what a DDP rank without a stream of its own evaluates)."""

    def __init__(self, dataset: SequenceDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int) -> Dict[str, torch.Tensor]:
        item = self.dataset[key]
        if isinstance(key, Padding):
            item["mask"] = torch.zeros_like(item["mask"])
            item["weight"] = torch.zeros_like(item["weight"])
            item["reset"] = torch.tensor(True)
        return item


class DriveDataModule(L.LightningDataModule):
    """Driving logs -> batches (contract in the module docstring).

    Args:
        train, val, test: log paths, directories or globs (any format :mod:`drive.data.readers` reads).
        predict: logs for ``predict`` (defaults to ``test``).
        format: force one reader format (None = detect per log).
        reader: reader options (:class:`~drive.data.readers.base.ReaderOptions` fields: label units,
            column names, camera calibration, side cameras, ...).
        seq_len, stride: window length T and training window step, frames.
        batch_size: training windows per batch (paper: 20); ``eval_batch_size`` for val/test
            (None = batch_size; 1 for stateful streaming).
        num_workers, pin_memory: DataLoader settings (workers run one torch thread each).
        augment: :class:`~drive.data.augment.AugmentConfig` (None = no augmentation); train only.
        image_size, crop: preprocessing ([H, W]; [top, bottom, left, right] or None), as exported.
        cache_dir: where preprocessed frames are memory-mapped.
        on_error: "raise" on the first bad file/row, or "skip" (drop, count, print a summary).
        curve_factor: c of the weighted MSE (0.1 open loop, 0 for closed-loop runs).
        gap_factor: a step longer than gap_factor x median dt starts a new segment.
        val_split, val_fraction: split when ``val`` is not given (see module docstring).
        seed: split and augmentation seed.
        augment_on: "workers" (each DataLoader worker augments its windows on the CPU) or "device"
            (workers only slice the cache; whole batches are augmented after the transfer to the
            training device, e.g. the GPU, in :meth:`augment_batch`).
        balance: draw training windows by how rare their curvature is
            (:class:`~drive.data.sampling.BalancedSampler`; the weight of a window is the share of windows
            in its curvature bin to the power ``-balance``): 0 every window once per epoch, 1 every bin
            equally often.
    """

    def __init__(
        self,
        train: Optional[List[str]] = None,
        val: Optional[List[str]] = None,
        test: Optional[List[str]] = None,
        predict: Optional[List[str]] = None,
        format: Optional[str] = None,
        reader: Optional[Dict[str, Any]] = None,
        seq_len: int = 16,
        stride: int = 4,
        batch_size: int = 20,
        eval_batch_size: Optional[int] = None,
        num_workers: int = 2,
        pin_memory: bool = True,
        augment: Optional[AugmentConfig] = None,
        # never mutated (read into a tuple below); a list, so LightningCLI parses, shows and saves
        # the option as [H, W] exactly as before
        image_size: List[int] = list(MODEL_SIZE),  # noqa: B006
        crop: Optional[List[int]] = None,
        cache_dir: str = ".cache/drive-data",
        on_error: str = "raise",
        curve_factor: float = 0.1,
        gap_factor: float = 3.0,
        val_split: str = "ncp",
        val_fraction: float = 0.1,
        seed: int = 0,
        augment_on: str = "workers",
        balance: float = 0.0,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.paths = {
            "train": list(train or []),
            "val": list(val or []),
            "test": list(test or []),
            "predict": list(predict or test or []),
        }
        self.format, self.reader = format, dict(reader or {})
        try:  # every reader option checked now, before any log is read or a logger has a folder
            ReaderOptions.from_any(self.reader)
        except ValueError as e:
            raise ValueError(f"--data.reader: {e}") from None
        _check_numbers(locals())
        self.seq_len, self.stride = seq_len, stride
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self.augment = AugmentConfig.from_any(augment)
        self.preprocessing = Preprocessing(size=tuple(image_size), crop=tuple(crop) if crop else None)
        self.cache_dir = Path(cache_dir)
        self.on_error, self.curve_factor, self.gap_factor = on_error, curve_factor, gap_factor
        self.val_split, self.val_fraction, self.seed = val_split, val_fraction, seed
        if augment_on not in ("workers", "device"):
            raise ValueError(f"augment_on must be 'workers' or 'device', got {augment_on!r}")
        self.augment_on = augment_on
        rarity_weights(np.zeros(0), balance)  # refuses a value outside [0, 1] before any data is read
        self.balance = float(balance)
        self.problems = Problems(on_error)
        self.datasets: Dict[str, SequenceDataset] = {}
        self._host: Optional[Dict[str, np.ndarray]] = None  # labels of the batch in transfer

    def _load(self, paths: List[str]) -> List[CachedRecording]:
        recs = read_logs(paths, self.format, self.reader, self.problems)
        return cache_recordings(recs, self.preprocessing, self.cache_dir, self.problems)

    def prepare_data(self) -> None:
        """Build (or validate) every cache once; problems are raised here or summarised in setup."""
        for split in ("train", "val", "test"):
            if self.paths[split]:
                self._load(self.paths[split])
        self.problems = Problems(self.on_error)

    def setup(self, stage: Optional[str] = None) -> None:
        if stage in (None, "fit", "validate") and "train" not in self.datasets and self.paths["train"]:
            recs = self._load(self.paths["train"])
            train_r, val_r = split_ranges(
                recs, "none" if self.paths["val"] else self.val_split, self.val_fraction, self.seed
            )
            self.datasets["train"] = SequenceDataset(
                recs,
                train_windows(recs, train_r, self.seq_len, self.stride, self.gap_factor),
                self.seq_len,
                self.augment if self.augment_on == "workers" else None,
                self.curve_factor,
                self.seed,
            )
            if self.augment is not None and self.augment.needs_camera():
                self.datasets["train"].require_camera()
            if len(self.datasets["train"]) == 0:
                raise ValueError(
                    f"no training window of {self.seq_len} gap-free frames in {self.paths['train']}"
                )
            if val_r:
                self.datasets["val"] = self._stream(recs, val_r)
        if stage in (None, "fit", "validate") and "val" not in self.datasets and self.paths["val"]:
            recs = self._load(self.paths["val"])
            self.datasets["val"] = self._stream(recs, [(i, 0, len(r)) for i, r in enumerate(recs)])
        for split in ("test", "predict"):
            if stage in (None, split) and split not in self.datasets and self.paths[split]:
                recs = self._load(self.paths[split])
                self.datasets[split] = self._stream(recs, [(i, 0, len(r)) for i, r in enumerate(recs)])
        if len(self.problems):
            print(f"drive.data: {self.problems.summary()}", file=sys.stderr)
            self.problems = Problems(self.on_error)

    def _stream(self, recs: List[CachedRecording], ranges: List[Tuple[int, int, int]]) -> SequenceDataset:
        """Full-recording iteration (val/test/predict): consecutive windows in time order, no augmentation."""
        return SequenceDataset(
            recs,
            stateful_windows(recs, ranges, self.seq_len, self.gap_factor),
            self.seq_len,
            None,
            self.curve_factor,
            self.seed,
        )

    def augment_batch(
        self,
        batch: Dict[str, torch.Tensor],
        rank: int = 0,
        batch_number: int = 0,
        host: Optional[Dict[str, np.ndarray]] = None,
    ) -> Dict[str, torch.Tensor]:
        """Augment a training batch where it lies (``augment_on="device"``): frames, corrected
        curvature and weights are replaced; deterministic in (seed, rank, batch_number). ``host``:
        the batch's curvature, speed, mask and recording as host arrays, taken before the transfer
        (:meth:`on_before_batch_transfer`), so that reading them does not wait for the device."""
        if self.augment is None:
            return batch
        host = host if host is not None else _host_labels(batch)
        ds = self.datasets["train"]
        rng = np.random.default_rng([self.seed, rank, batch_number])
        frames, curvature = Augmenter(self.augment).augment(
            batch["frames"],
            host["curvature"],
            host["speed"],
            rng,
            [ds.geometry(r) for r in host["recording"].tolist()],
        )
        dev = batch["frames"].device
        out = dict(batch)
        out["frames"] = frames
        weight = sample_weights(curvature, self.curve_factor) * host["mask"]
        labels = torch.from_numpy(np.stack([curvature, weight]).astype(np.float32))
        if dev.type == "cuda":
            labels = labels.pin_memory()
        out["curvature"], out["weight"] = labels.to(dev, non_blocking=True).unbind(0)
        return out

    def _augments_on_device(self) -> bool:
        trainer = self.trainer
        return self.augment_on == "device" and trainer is not None and trainer.training

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self._host = _host_labels(batch) if self._augments_on_device() else None
        return batch

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self._augments_on_device():
            trainer = self.trainer
            # the run's batch count, restored with a checkpoint: a resumed run draws the same
            return self.augment_batch(
                batch, trainer.global_rank, trainer.fit_loop.epoch_loop.batch_progress.total.ready, self._host
            )
        return batch

    def recordings(self, split: str) -> List[str]:
        """Source names of the recordings a split's ``recording`` indices refer to."""
        return self.datasets[split].names()

    def _loader(
        self, split: str, batch_size: int, dataset: Optional[Dataset] = None, **kw: Any
    ) -> DataLoader:
        if split not in self.datasets:
            raise ValueError(f"no {split} data: give {split} paths (and call setup)")
        sampler = kw.get("sampler")
        cls = ResumableLoader if isinstance(sampler, (EpochSampler, EpochShards)) else DataLoader
        return cls(
            self.datasets[split] if dataset is None else dataset,
            batch_size=batch_size,
            drop_last=False,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory and torch.cuda.is_available(),
            persistent_workers=self.num_workers > 0,
            worker_init_fn=_worker_init,
            **kw,
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled by (seed, epoch), or drawn by rarity with ``balance`` > 0, and resumable mid-epoch
        (:mod:`drive.data.sampling`); under DDP each rank's interleaved share of the global batches one
        process would train at ``batch_size x world_size`` (:class:`~drive.data.sampling.EpochShards`)."""
        train = self.datasets["train"] if "train" in self.datasets else None
        if train is not None and self.balance > 0:
            sampler: EpochSampler = BalancedSampler(
                rarity_weights(train.mean_abs_curvature(), self.balance), self.seed
            )
        else:
            sampler = EpochSampler(len(train) if train is not None else 0, self.seed)
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1:
            shards = EpochShards(sampler, self.batch_size, trainer.world_size, trainer.global_rank)
            return self._loader("train", self.batch_size, sampler=shards)
        return self._loader("train", self.batch_size, sampler=sampler)

    def _eval_loader(self, split: str) -> DataLoader:
        """Every recording of ``split`` in time order; under DDP each rank gets whole streams, and a
        rank left without one evaluates a window that counts nothing
        (:class:`~drive.data.sampling.RecordingShards`)."""
        trainer = self.trainer
        if trainer is not None and trainer.world_size > 1 and split in self.datasets:
            windows = self.datasets[split].windows
            shards = RecordingShards(
                [w.recording for w in windows],
                trainer.world_size,
                trainer.global_rank,
                [w.reset for w in windows],
            )
            dataset = (
                _Uncounted(self.datasets[split]) if any(isinstance(i, Padding) for i in shards) else None
            )
            return self._loader(split, self.eval_batch_size, sampler=shards, dataset=dataset)
        return self._loader(split, self.eval_batch_size)

    def val_dataloader(self) -> Any:
        return self._eval_loader("val") if "val" in self.datasets else []

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._eval_loader("predict")
