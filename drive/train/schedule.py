"""The learning rates of ``drive fit``: the schedule, as a factor of ``lr`` per optimizer step, and the
recurrent cell's own rate (:func:`param_groups`)."""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Union

from torch import nn

__all__ = ["lr_factor", "param_groups"]


def param_groups(
    model: nn.Module, cell: nn.Module, lr: float, cell_lr_scale: float
) -> Union[Iterable[nn.Parameter], List[Dict[str, Any]]]:
    """What Adam optimises: ``model``'s parameters at ``lr``, those of its recurrent ``cell`` at ``lr x
    cell_lr_scale`` (the LTC paper trains its cells at 0.001-0.02, Hasani et al. 2021, Table 4). At a
    scale of 1, one group as always, so earlier runs resume with their optimizer state."""
    mine = {id(p) for p in cell.parameters()}
    if cell_lr_scale == 1.0 or not mine:  # a feed-forward model's cell holds nothing
        return model.parameters()
    rest = [p for p in model.parameters() if id(p) not in mine]
    return [{"params": rest, "lr": lr}, {"params": list(cell.parameters()), "lr": lr * cell_lr_scale}]


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
