"""``--budget.*``: an optimizer-step budget that grows with the training logs (the ``demo`` profile's).

A fixed number of steps is a fixed number of passes over the windows only for logs of one length. The
demo's 1,800 steps are 80 passes over 5 minutes of logs and 13 over 30; on 16 and 30 minutes of mixed
roads the policies trained for 5,400 steps left held-out hard roads 3.5-10x less often than at 1,800,
and 10,800 steps were no better than 5,400; on 5 minutes 3,600 steps left them 0.73x as often as 1,800
(docs/benchmarks.md, "Hard roads: the recipe on mixed logs" and "Another simulator's shape"). So
where no budget is set (``trainer.max_steps`` and ``trainer.max_epochs`` both -1, as the profile leaves
them), :class:`StepBudget` sets ``steps_per_minute`` x the minutes of training logs, within
``[min_steps, max_steps]``, when the fit sets up, before the learning-rate schedule reads it. A budget
given on the command line (``--trainer.max_steps N`` or ``--trainer.max_epochs N``) wins. The budget
depends on the logs only, never on wall time: a resumed run gets the same one, every DDP rank too.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.utilities import rank_zero_info

from drive.data.sequences import median_dt
from drive.io.checks import number

__all__ = ["StepBudget", "check_budget"]


def _minutes(recordings: Any) -> float:
    """Minutes of recording in ``recordings`` (frames x their median period)."""
    return sum(len(r.timestamp_s) * median_dt(r.timestamp_s) for r in recordings if len(r.timestamp_s)) / 60.0


def check_budget(trainer: Any, steps_per_minute: float) -> None:
    """Refuses a fit that nothing ends in one line: the trainer's options (``max_steps``,
    ``max_epochs``, ``max_time``) set no budget (epochs -1: Lightning would train forever) and this
    callback is off. ``drive fit`` calls it when the command line is parsed, before any log is read."""
    given = trainer.max_steps not in (None, -1) or trainer.max_epochs != -1 or trainer.max_time is not None
    if not given and steps_per_minute == 0:
        raise ValueError(
            "no training budget: set --trainer.max_steps, --trainer.max_epochs or --budget.steps_per_minute"
        )


class StepBudget(pl.Callback):
    """Sets the run's step budget from the minutes of its training logs (module docstring).

    Args:
        steps_per_minute: optimizer steps per minute of training logs (0: off, the run needs a budget of
            its own).
        min_steps, max_steps: the budget's bounds.
    """

    def __init__(self, steps_per_minute: float = 0.0, min_steps: int = 1, max_steps: int = 1_000_000) -> None:
        self.steps_per_minute = number(steps_per_minute, "budget.steps_per_minute", low=0)
        self.min_steps = int(number(min_steps, "budget.min_steps", low=1, integer=True))
        self.max_steps = int(number(max_steps, "budget.max_steps", low=self.min_steps, integer=True))

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if trainer.max_steps != -1 or trainer.max_epochs != -1 or self.steps_per_minute == 0:
            return  # a budget given on the command line or in a config wins (none: check_budget)
        minutes = _minutes(trainer.datamodule.datasets["train"].recordings)
        steps = int(np.clip(round(self.steps_per_minute * minutes), self.min_steps, self.max_steps))
        trainer.fit_loop.epoch_loop.max_steps = steps
        rank_zero_info(
            f"step budget {steps}: {minutes:.1f} minutes of training logs x {self.steps_per_minute:g} steps "
            f"per minute, within {self.min_steps}..{self.max_steps} (--trainer.max_steps N sets your own)"
        )
