"""Callbacks a `drive fit` subprocess loads by class path (tests put this folder on PYTHONPATH)
to die the way a machine does: SIGKILL at an exact training step."""

import os
import signal

import lightning.pytorch as pl


class KillAt(pl.Callback):
    """SIGKILL this process (DataLoader workers are orphaned and exit) at the start of ``step``."""

    def __init__(self, step: int = -1) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class DieOnFileSizeLimit(pl.Callback):
    """Restore SIGXFSZ's default action (Python ignores it): a write past RLIMIT_FSIZE then kills
    the process in the middle of that write, as a power cut or ``kill -9`` during a save would."""

    def setup(self, trainer, module, stage) -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
