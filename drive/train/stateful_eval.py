"""Stateful evaluation of a steering policy in Lightning: validation, test and prediction stream
whole recordings, the hidden state carried from one window to the next (:class:`StatefulEvalModule`).

The datamodule streams every recording as consecutive windows in time order; a window continues
the stream when it follows the previous one in the same recording and does not ``reset`` (a new
recording or a time gap), else it starts from zeros -- the way the policy runs on the car. Metrics
are MSE / MAE in 1/km, overall and per recording (:mod:`drive.train.stream_metrics`).
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import lightning.pytorch as pl
import torch
from torch import Tensor

from drive.train.stream_metrics import StreamMetrics

__all__ = ["StatefulEvalModule"]


class StatefulEvalModule(pl.LightningModule):
    """The evaluation hooks of :class:`~drive.train.module.PolicyModule`, which provides ``policy``
    (a :class:`~drive.nn.policy.Policy`), ``_encode`` (uint8 frames ``[B, L, 3, H, W]`` -> fp32
    features ``[B, L, F]``) and ``monitor`` (:class:`~drive.train.monitor.LearningMonitor`)."""

    def __init__(self) -> None:
        super().__init__()
        self._stream_hidden: Optional[Tensor] = None
        self._stream_pos: Optional[Tuple[int, Optional[int]]] = None
        self._metrics = StreamMetrics()

    def _stream(self, batch: Mapping[str, Tensor]) -> Tensor:
        """Curvature (1/km) ``[B, L]`` for consecutive windows, the hidden state carried across them.

        The head runs on all ``B x L`` frames at once; the recurrent part runs window after window.
        A window continues the stream when it follows the previous one in the same recording
        (``start`` = previous start + L) and does not ``reset``; otherwise it starts from zeros.
        Correct for any eval batch size, and under DDP (each rank evaluates whole recordings, in order).
        """
        frames = batch["frames"]
        b, length = frames.shape[0], frames.shape[1]
        features = self._encode(frames)
        dt = batch.get("dt")
        reset = batch["reset"].bool().tolist() if "reset" in batch else [False] * b
        rec = batch["recording"].tolist() if "recording" in batch else [0] * b
        start = batch["start"].tolist() if "start" in batch else [None] * b
        outputs = []
        for i in range(b):
            follows = (
                self._stream_pos is not None
                and not reset[i]
                and (start[i] is None or self._stream_pos == (rec[i], start[i]))
            )
            hidden = self._stream_hidden if follows else None
            with torch.autocast(device_type=features.device.type, enabled=False):  # the cell stays fp32
                y, hidden = self.policy.decode(
                    features[i : i + 1], hidden, None if dt is None else dt[i : i + 1]
                )
            outputs.append(y)
            self._stream_hidden = hidden.detach()
            self._stream_pos = (rec[i], None if start[i] is None else start[i] + length)
        return torch.cat(outputs, 0)

    def _eval_step(self, batch: Mapping[str, Tensor]) -> None:
        self._metrics.add(batch, self._stream(batch))

    def _start_stream(self, split: str) -> None:
        self._stream_hidden, self._stream_pos = None, None
        datamodule = getattr(self.trainer, "datamodule", None)
        try:
            names = [str(n) for n in datamodule.recordings(split)]
        except (AttributeError, KeyError, ValueError):
            names = []
        self._metrics.start(names)

    def _end_stream(self, prefix: str) -> None:
        stats = self._metrics.totals(self.trainer, self.device)
        if stats is None:
            return
        total = stats["n"].sum().clamp_min(1.0)
        self.log(f"{prefix}/loss", stats["wsq"].sum() / stats["w"].sum().clamp_min(1e-12), prog_bar=True)
        self.log(f"{prefix}/mse_km", stats["sq"].sum() / total, prog_bar=True)
        self.log(f"{prefix}/mae_km", stats["abs"].sum() / total)
        if prefix == "val":
            self.monitor.validated(self, float(stats["sq"].sum() / total))
        names = self._metrics.names
        for i in range(stats["n"].numel()):
            if stats["n"][i] > 0:
                name = names[i] if i < len(names) else str(i)
                self.log(f"{prefix}_recording/{name}/mse_km", stats["sq"][i] / stats["n"][i])
                self.log(f"{prefix}_recording/{name}/mae_km", stats["abs"][i] / stats["n"][i])
        self._metrics.start([])
        self._stream_hidden, self._stream_pos = None, None

    def on_validation_epoch_start(self) -> None:
        self._start_stream("val")

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._end_stream("val")

    def on_test_epoch_start(self) -> None:
        self._start_stream("test")

    def test_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._end_stream("test")

    def on_predict_epoch_start(self) -> None:
        self._stream_hidden, self._stream_pos = None, None

    def predict_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Dict[str, Tensor]:
        """Stateful prediction over the streamed recordings: ``curvature_per_m [B, L]`` and the
        batch's ids."""
        out = {"curvature_per_m": (self._stream(batch) / 1000.0).cpu()}
        for key in ("recording", "start", "mask", "curvature"):
            if key in batch:
                out[key] = batch[key].cpu()
        return out
