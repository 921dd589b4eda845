"""The hyperparameters a checkpoint carries (``hyper_parameters``): written as weights_only-safe
plain types (:func:`plain`), read back in today's argument names (:func:`checkpoint_hparams`).

``drive fit | validate | test | predict --ckpt_path FILE`` re-applies the checkpoint's model
hyperparameters to the command line's (Lightning's ``LightningCLI``); a checkpoint written before
the per-family options groups (flat ``units``, ``cfc_mode``, ``ode_unfolds``, ...) is read through
:func:`drive.nn.families.upgrade_flat_options`, so it resumes and evaluates as it did.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Mapping, Union

import torch

from drive.checkpoint import checked_load
from drive.nn.families import upgrade_flat_options

__all__ = ["plain", "checkpoint_hparams", "upgrade_hparams"]


def plain(value: Any) -> Any:
    """Hyperparameters as weights_only-safe plain types (tuples -> lists, dataclasses -> dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def upgrade_hparams(hparams: Mapping[str, Any]) -> Dict[str, Any]:
    """A :class:`~drive.train.module.PolicyModule`'s hyperparameters from any drive version in
    today's names (Lightning's ``_instantiator`` key dropped)."""
    out = upgrade_flat_options(hparams)
    out.pop("_instantiator", None)
    return out


def checkpoint_hparams(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """The model hyperparameters of the checkpoint ``path`` in today's names ({} when it has none);
    a damaged or foreign file is a one-line ``ValueError`` naming it."""
    ckpt = checked_load(path, lambda: torch.load(str(path), weights_only=True, map_location="cpu"))
    hparams = ckpt.get("hyper_parameters", {}) if isinstance(ckpt, dict) else {}
    return upgrade_hparams(hparams) if hparams else {}
