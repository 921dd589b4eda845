"""Callbacks a `drive fit` subprocess loads by class path (tests put this folder on PYTHONPATH) to say
what each DDP rank saw: one JSON line per training step and per validation, in ``<path>.rank<r>``."""

import hashlib
import json

import lightning.pytorch as pl
import numpy as np


class RankLog(pl.Callback):
    """Per rank: after every training step its step, the on-policy rounds in the buffer and a digest
    of the buffer; after every validation the ``val/replay/*`` values this rank logged."""

    def __init__(self, path: str = "") -> None:
        self.path = path

    def _write(self, trainer, row) -> None:
        with open(f"{self.path}.rank{trainer.global_rank}", "a") as f:
            f.write(json.dumps(row) + "\n")

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        (rounds,) = [c for c in trainer.callbacks if type(c).__name__ == "OnPolicyData"]
        digest = hashlib.sha256()
        for r in rounds.buffer.rounds:
            for value in r.to_dict().values():
                digest.update(np.ascontiguousarray(value).tobytes())
        step = trainer.global_step - 1  # the step this batch trained
        self._write(trainer, {"step": step, "rounds": len(rounds.buffer), "digest": digest.hexdigest()})

    def on_validation_end(self, trainer, module) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/replay/")}
        self._write(trainer, {"validated": trainer.global_step, **metrics})
