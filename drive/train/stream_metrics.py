"""Error sums of stateful evaluation, per recording, summed over DDP ranks (:class:`StreamMetrics`).

:class:`~drive.train.module.PolicyModule` streams whole recordings through the policy in
validation and test; every window's errors are added here under its recording's index, and at the
end of the epoch the sums give the overall and per-recording MSE / MAE (1/km) and the weighted
loss. Under DDP each rank evaluates whole recordings; the sums are padded to the longest rank's
and added across ranks (every rank joins, also one that got no windows).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import torch
from torch import Tensor

__all__ = ["StreamMetrics"]

KEYS = ("sq", "abs", "n", "wsq", "w")  # squared, absolute error; frames; weighted squared error; weights


class StreamMetrics:
    """Per-recording sums of one evaluation epoch; ``names[i]`` names recording ``i``."""

    def __init__(self) -> None:
        self.stats: Dict[str, Tensor] = {}
        self.names: List[str] = []

    def start(self, names: List[str]) -> None:
        self.stats, self.names = {}, list(names)

    def add(self, batch: Mapping[str, Tensor], pred: Tensor) -> None:
        """Add the errors of ``pred`` (1/km ``[B, L]``) against the batch's curvature, masked and weighted."""
        target = batch["curvature"].float() * 1000.0
        mask = batch["mask"].bool() if "mask" in batch else torch.ones_like(target, dtype=torch.bool)
        weight = batch["weight"].float() * mask if "weight" in batch else mask.float()
        err = (pred - target) * mask
        rec = (
            batch["recording"].long().view(-1, 1).expand_as(target)
            if "recording" in batch
            else torch.zeros_like(target, dtype=torch.long)
        )
        n_rec = max(len(self.names), int(rec.max()) + 1)
        values = {"sq": err**2, "abs": err.abs(), "n": mask.float(), "wsq": weight * err**2, "w": weight}
        for key, value in values.items():
            acc = self.stats.get(key)
            if acc is None or acc.numel() < n_rec:
                grown = torch.zeros(n_rec, device=value.device)
                if acc is not None:
                    grown[: acc.numel()] += acc
                acc = grown
            self.stats[key] = acc.index_add(0, rec.reshape(-1), value.reshape(-1).float())

    def totals(self, trainer: Any, device: torch.device) -> Optional[Dict[str, Tensor]]:
        """The sums over all ranks (``trainer.strategy.reduce``), or None when nothing was evaluated."""
        stats = self.stats
        if trainer.world_size > 1:  # every rank joins the reductions, also one that got no windows
            stats = {k: stats.get(k, torch.zeros(0, device=device)) for k in KEYS}
            size = torch.tensor(float(stats["n"].numel()), device=stats["n"].device)
            longest = int(trainer.strategy.reduce(size, reduce_op="max").item())
            stats = {
                k: trainer.strategy.reduce(
                    torch.nn.functional.pad(v, (0, longest - v.numel())), reduce_op="sum"
                )
                for k, v in stats.items()
            }
        if not stats or not stats["n"].numel():
            return None
        return stats
