"""Is it learning? The checks ``drive fit`` runs beside training (:class:`LearningMonitor`).

The best constant predictor (the labels' mean in hindsight; its MSE is the labels' variance) is
the bar: a model whose training or validation MSE does not beat it is not learning. The head's
health (:func:`drive.nn.init.feature_health`: dead features, saturated LTC sensory inputs) says
why, most often. Each problem is warned once per run, as a :class:`NotLearningWarning` naming
what to change (docs/training.md, "Feature scale").

The monitor belongs to the :class:`~drive.train.module.PolicyModule` (``module.monitor``) and is
fed from inside its training step, so it sees the features and predictions of the step before the
optimizer moves the weights; it holds no state a checkpoint needs (a resumed run is bitwise the
run that was never stopped, warnings aside).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from drive.nn.init import feature_health

__all__ = ["LearningMonitor", "NotLearningWarning", "HEALTH_EVERY", "RECENT_STEPS"]

HEALTH_EVERY = 25  # steps between measurements of the head's health
RECENT_STEPS = 50  # training steps whose MSE the check averages
_HINT = ' (docs/training.md, "Feature scale")'


class NotLearningWarning(UserWarning):
    """``drive fit``: the model does not beat the best constant predictor, or its head is unhealthy."""


class LearningMonitor:
    """Watches one training run; ``check_after_steps`` (> 0) is the step of the training check.

    ``baseline``: best-constant MSE (1/km)^2 of the ``train`` / ``val`` labels (:meth:`set_baseline`);
    ``health``: the latest :func:`~drive.nn.init.feature_health` of the head.
    """

    def __init__(self, check_after_steps: int) -> None:
        self.check_after_steps = int(check_after_steps)
        self.baseline: Dict[str, float] = {}
        self.health: Dict[str, float] = {}
        self.recent_sq: List[Tensor] = []  # unweighted training MSE of recent steps (0-d, on the device)
        self.warned: set = set()
        self.last_val: Optional[float] = None  # validation MSE at the previous check, if above the bar

    def set_baseline(self, datasets: Mapping[str, Any]) -> None:
        """The best constant's MSE on the ``train`` and ``val`` datasets' labels (``curvature`` 1/m)."""
        for split in ("train", "val"):
            if split in datasets and datasets[split].recordings:
                km = np.concatenate([r.curvature for r in datasets[split].recordings]) * 1000.0
                self.baseline[split] = float(np.var(km))  # the mean in hindsight: the best constant

    @torch.no_grad()
    def watch(self, module: Any, features: Tensor, pred: Tensor, target: Tensor, weight: Tensor) -> None:
        """One training step of ``module``: record its MSE and, every :data:`HEALTH_EVERY` steps, the head's
        health (logged as ``train/dead_features`` and ``train/input_saturation``); check once at
        ``check_after_steps``."""
        # kept on the device: reading it back every step would stall the GPU's queue each step
        valid = (weight > 0).to(pred.dtype)
        sq = ((pred - target) ** 2 * valid).sum() / valid.sum()  # nan when every frame is padding
        self.recent_sq.append(sq.detach())
        del self.recent_sq[:-RECENT_STEPS]
        step = int(module.global_step)
        if step % HEALTH_EVERY == 0 or step == self.check_after_steps:
            if module.policy.head_name == "ncp_conv":
                self.health = feature_health(module.policy, features)
                module.log("train/dead_features", self.health["dead"], batch_size=target.shape[0])
                if not math.isnan(self.health["saturated"]):
                    module.log("train/input_saturation", self.health["saturated"], batch_size=target.shape[0])
        if step == self.check_after_steps:
            self.check(step)

    def validated(self, module: Any, mse: float) -> None:
        """After a validation of ``module`` with MSE ``mse`` (1/km)^2: log it against the best constant
        (``val/best_constant_mse_km``, ``val/mse_vs_constant``) and, past the training check, check it."""
        if "val" not in self.baseline:
            return
        module.log("val/best_constant_mse_km", self.baseline["val"])
        module.log("val/mse_vs_constant", mse / max(self.baseline["val"], 1e-12), prog_bar=True)
        step = int(module.global_step)
        if 0 < self.check_after_steps <= step and not module.trainer.sanity_checking:
            self.check(step, val_mse=mse)

    def warn(self, key: str, message: str) -> None:
        if key in self.warned:
            return
        self.warned.add(key)
        rank_zero_warn(f"drive fit: {message}", category=NotLearningWarning)

    def check(self, step: int, val_mse: Optional[float] = None) -> None:
        """Warn (once each) when the model does not beat the best constant predictor or its head is unhealthy.

        Called at ``check_after_steps`` with the recent training MSE and after every later validation
        with ``val_mse``. Thresholds: MSE >= 0.9 x the best constant's (training) or >= 1.0 x at two
        validations in a row (one validation is a snapshot: on logs with junction turns the demo
        profile's first, at step 300, was above the bar in 9 of 31 runs, and 8 of them beat it by
        1.8-6x at the next); more than half of the head's features dead; more than half of the LTC's
        sensory sigmoids saturated (below 0.02 or above 0.98).
        """
        recent = [v for v in (float(t) for t in self.recent_sq) if not math.isnan(v)]
        if val_mse is None and recent and "train" in self.baseline:
            mse, const = float(np.mean(recent)), self.baseline["train"]
            if mse >= 0.9 * const:
                self.warn(
                    "train",
                    f"the model is not learning: training MSE {mse:.4g} (1/km)^2 over the "
                    f"last {len(recent)} steps (step {step}) is no better than the best constant "
                    f"predictor's {const:.4g}" + _HINT,
                )
        if val_mse is not None and "val" in self.baseline:
            above = val_mse >= self.baseline["val"]
            if above and self.last_val is not None:
                self.warn(
                    "val",
                    f"the model is not learning: validation MSE {val_mse:.4g} (1/km)^2 after "
                    f"{step} steps, and {self.last_val:.4g} at the validation before, is no better "
                    f"than the best constant predictor's {self.baseline['val']:.4g}" + _HINT,
                )
            self.last_val = val_mse if above else None
        health = self.health
        if health.get("dead", 0.0) > 0.5:
            self.warn(
                "dead",
                f"{health['dead']:.0%} of the head's features are exactly 0 on every frame "
                f"of a batch (dead ReLU units; largest feature {health['feature_max']:.3g}) at step "
                f"{step}: the cell sees almost nothing of the image; use model.feature_norm batch and "
                "model.init data" + _HINT,
            )
        if health.get("saturated", 0.0) > 0.5:
            self.warn(
                "saturated",
                f"{health['saturated']:.0%} of the LTC's sensory sigmoids are saturated "
                f"(< 0.02 or > 0.98) at step {step}, so its inputs carry no gradient; use "
                "model.feature_norm batch and model.init data" + _HINT,
            )
