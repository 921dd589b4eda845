"""Training frames per second of a real ``drive fit`` (:class:`Throughput`, ``--throughput.*``).

Everything a step costs is in the figure: reading and slicing the cache in the DataLoader workers,
the host-to-device copy, augmentation where it runs, forward, backward, optimizer, weight
constraints, logging and checkpoints. Wall time is taken at the end of training steps without
synchronising the device in between (a synchronisation per step would itself slow the run); the
device is synchronised once after the ``skip_steps`` warm-up steps (worker start-up, cuDNN and
Triton autotuning) and once at the end, so the interval holds whole steps. Frames = windows x
frames per window of every training batch (padding included: the model computes it).

It logs ``perf/train_frames_per_s`` every ``log_every_n_steps`` and, with ``--throughput.path``,
writes ``{"frames_per_s", "steps", "frames", "seconds", "skip_steps"}`` there (atomically) when
training ends. ``tools/bench_train.py --fit`` compares it with the model-only step.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Optional

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from drive.io.atomic import write_text

__all__ = ["Throughput"]


def _sync(module: LightningModule) -> None:
    if module.device.type == "cuda":
        torch.cuda.synchronize(module.device)


class Throughput(Callback):
    """Measures training frames per second after ``skip_steps`` warm-up steps of this run."""

    def __init__(self, skip_steps: int = 20, path: Optional[str] = None):
        if skip_steps < 0:
            raise ValueError(f"--throughput.skip_steps must be >= 0, got {skip_steps}")
        self.skip_steps, self.path = skip_steps, path
        self._steps = self._frames = 0
        self._started: Optional[float] = None
        self._last: Optional[float] = None

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        frames = batch["frames"]
        if self._started is None:
            self._steps += 1
            if self._steps >= self.skip_steps:
                _sync(pl_module)
                self._started, self._steps = time.perf_counter(), 0
            return
        self._steps += 1
        self._frames += int(frames.shape[0]) * int(frames.shape[1])
        self._last = time.perf_counter()
        if trainer.global_step % max(1, trainer.log_every_n_steps) == 0:
            pl_module.log("perf/train_frames_per_s", self._frames / (self._last - self._started))

    def summary(self) -> Dict[str, float]:
        seconds = (self._last - self._started) if self._started is not None and self._last else 0.0
        return {
            "frames_per_s": self._frames / seconds if seconds > 0 else float("nan"),
            "steps": self._steps if self._last else 0,
            "frames": self._frames,
            "seconds": seconds,
            "skip_steps": self.skip_steps,
        }

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._last is not None:
            _sync(pl_module)
            self._last = time.perf_counter()
        if self.path and trainer.is_global_zero:
            write_text(self.path, json.dumps(self.summary(), indent=2) + "\n")
