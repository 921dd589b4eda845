"""The learning-rate schedule of ``drive fit``, as a factor of ``lr`` per optimizer step."""

from __future__ import annotations

import math

__all__ = ["lr_factor"]


def lr_factor(
    step: int,
    schedule: str,
    total_steps: int,
    steps_per_epoch: int,
    warmup_steps: int = 0,
    min_ratio: float = 0.1,
    gamma: float = 0.5,
    step_epochs: int = 10,
) -> float:
    """``lr`` x this at optimizer step ``step``: a linear warm-up over ``warmup_steps``, then ``cosine``
    (down to ``min_ratio`` at ``total_steps``), ``step`` (x ``gamma`` every ``step_epochs`` epochs)
    or ``constant``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "cosine":
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    if schedule == "step":
        return gamma ** (step // (steps_per_epoch * step_epochs))
    return 1.0
