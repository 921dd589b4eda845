"""``drive predict`` output: the stateful curvature for every frame of every recording, as one CSV.

:class:`PredictionCSV` is a Lightning prediction writer that ``drive predict`` adds by default
(``--predictions.path``, default ``<trainer.default_root_dir>/predictions.csv``). It puts the
streamed windows back in place per recording, drops the padding, and writes one row per frame::

    recording,frame,time_s,predicted_curvature_per_m,recorded_curvature_per_m
    drive_a.h5,0,0.000000,0.0012345678,0.0011

``recording`` is the source name (as in ``drive test``'s per-recording metrics), ``frame`` the frame
index in that recording, ``time_s`` its timestamp in the log, and ``recorded_curvature_per_m`` the
log's label (empty where the log has none). The file is written atomically (a killed run leaves
no half-written CSV). Under DDP each process writes its own recordings to
``predictions.rank<N>.csv`` beside the path.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import BasePredictionWriter

from drive.io.atomic import atomic_path

__all__ = ["PredictionCSV", "COLUMNS"]

COLUMNS = ("recording", "frame", "time_s", "predicted_curvature_per_m", "recorded_curvature_per_m")


class PredictionCSV(BasePredictionWriter):
    """Write ``drive predict``'s curvature per frame to a CSV (see the module docstring).

    Args:
        path: the CSV to write (None: ``<trainer.default_root_dir>/predictions.csv``).
    """

    def __init__(self, path: Optional[str] = None) -> None:
        super().__init__(write_interval="epoch")
        self.path = path

    def target(self, trainer: Trainer) -> Path:
        path = Path(self.path) if self.path else Path(trainer.default_root_dir) / "predictions.csv"
        if trainer.world_size > 1:
            path = path.with_name(f"{path.stem}.rank{trainer.global_rank}{path.suffix}")
        return path

    def write_on_epoch_end(
        self,
        trainer: Trainer,
        pl_module: LightningModule,
        predictions: Sequence[Any],
        batch_indices: Sequence[Any],
    ) -> None:
        batches: List[Dict[str, torch.Tensor]] = list(predictions)
        if batches and isinstance(batches[0], list):  # several predict dataloaders: one list each
            batches = [b for group in batches for b in group]
        recordings = trainer.datamodule.datasets["predict"].recordings
        index, frame, predicted, recorded = [], [], [], []
        for batch in batches:
            pred = batch["curvature_per_m"].double().numpy()
            length = pred.shape[1]
            keep = batch["mask"].numpy() if "mask" in batch else np.ones(pred.shape, dtype=bool)
            label = (
                batch["curvature"].double().numpy() if "curvature" in batch else np.full(pred.shape, np.nan)
            )
            index.append(np.broadcast_to(batch["recording"].numpy()[:, None], pred.shape)[keep])
            frame.append((batch["start"].numpy()[:, None] + np.arange(length))[keep])
            predicted.append(pred[keep])
            recorded.append(label[keep])

        def cat(parts: List[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype)

        index, frame = cat(index, np.int64), cat(frame, np.int64)
        predicted, recorded = cat(predicted, np.float64), cat(recorded, np.float64)
        order = np.lexsort((frame, index))
        out = self.target(trainer)
        with atomic_path(out) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(COLUMNS)
            for r in order.tolist():
                rec, k = recordings[int(index[r])], int(frame[r])
                label = recorded[r]
                writer.writerow(
                    [
                        rec.name,
                        k,
                        f"{float(rec.timestamp_s[k]):.6f}",
                        f"{predicted[r]:.9g}",
                        "" if np.isnan(label) else f"{label:.9g}",
                    ]
                )
        print(f"drive predict: wrote {len(order)} frames of {len(np.unique(index))} recording(s) to {out}")
