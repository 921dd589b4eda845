"""The hyperparameters of :class:`~drive.train.module.PolicyModule`: its per-family option groups
(:func:`option_groups`, derived from the registered families), and what a checkpoint carries
(``hyper_parameters``), written as weights_only-safe plain types (:func:`plain`) and read back in
today's argument names (:func:`checkpoint_hparams`).

``drive fit | validate | test | predict --ckpt_path FILE`` re-applies the checkpoint's model
hyperparameters to the command line's (Lightning's ``LightningCLI``); a checkpoint written before
the per-family options groups (flat ``units``, ``cfc_mode``, ``ode_unfolds``, ...) is read through
:func:`drive.nn.families.upgrade_flat_options`, so it resumes and evaluates as it did.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any, Dict, Mapping, Union

import torch

from drive.checkpoint import checked_load
from drive.nn.families import upgrade_flat_options
from drive.nn.registry import Family, families

__all__ = ["option_groups", "plain", "checkpoint_hparams", "upgrade_hparams"]

_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def _with_options() -> Dict[str, Family]:
    """The families that have options (a family whose options dataclass has no field has no group)."""
    return {name: family for name, family in families().items() if dataclasses.fields(family.options)}


def option_groups(**groups: Any) -> Dict[str, Any]:
    """Every family's options group: ``groups[name]`` (its dataclass or a dict of its fields) where
    given, its defaults otherwise; the flat names of earlier versions (``units``, ``cfc_mode``, ...,
    which old checkpoints carry) are read into their groups; any other name is a ``TypeError``.

    :class:`~drive.train.module.PolicyModule` passes its ``**options`` through here, as
    ``option_groups(**options)``: LightningCLI follows that call and reads this function's
    signature (set below from the registry: one keyword per family, typed by its options
    dataclass, defaulting to its defaults), so ``drive fit --help`` lists ``--model.cfc.mode`` and
    the groups of every registered family, plugins' included."""
    known = _with_options()
    groups = upgrade_flat_options(groups)
    unknown = sorted(set(groups) - set(known))
    if unknown:
        raise TypeError(
            f"PolicyModule got an unexpected keyword argument {unknown[0]!r} "
            f"(option groups: {', '.join(known)})"
        )
    return {name: groups.get(name, family.options()) for name, family in known.items()}


option_groups.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=family.options(), annotation=family.options
        )
        for name, family in _with_options().items()
    ]
)


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
