"""Model families: the named policies ``drive fit`` trains (the NCP paper's networks;
docs/references.md), their options and their defaults, stated here once.

=========== ================== ================================================ ======================
family      head               recurrent compartment                            options
=========== ================== ================================================ ======================
``ncp_ltc`` NCP conv head (32) LTC on the 19-neuron lane-keeping NCP (1 motor)  :class:`NCPLTCOptions`
``cfc``     NCP conv head (32) CfC (default / no_gate / pure, mixed memory),    :class:`CfCOptions`
                               dense ``units`` + readout, or NCP-wired
``lstm``    NCP conv head (32) LSTM, ``units`` (64) + linear readout            :class:`RNNOptions`
``ctrnn``   NCP conv head (32) CT-RNN ``units`` (64), 6 Euler unfolds + readout :class:`RNNOptions`
``cnn``     PilotNet CNN       none (single frames; hidden ``[B, 0]``)          none
=========== ================== ================================================ ======================

Each family's options are a frozen dataclass; :func:`build_policy` takes the family's name and
either an options object or its fields as keywords (``build_policy("cfc", units=16, wired=True)``).
:class:`drive.train.module.PolicyModule` takes one options group per family, so ``drive fit`` sets
them as ``--model.cfc.mode no_gate`` (YAML ``model: {cfc: {mode: no_gate}}``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, Type

from torch import nn

from drive.nn.baselines import CTRNN, LSTM
from drive.nn.cfc import CfC, WiredCfC
from drive.nn.heads import NCPConvHead, PilotNetCNN
from drive.nn.ltc import LTC
from drive.nn.policy import Policy
from drive.nn.wiring import lane_keeping_ncp

__all__ = [
    "FAMILIES",
    "Family",
    "NCPLTCOptions",
    "CfCOptions",
    "RNNOptions",
    "CNNOptions",
    "build_policy",
    "family_options",
    "upgrade_flat_options",
    "DEFAULT_INPUT_HW",
    "FLAT_OPTIONS",
]

DEFAULT_INPUT_HW: Tuple[int, int] = (78, 200)  # the paper's network input (H, W)


@dataclass(frozen=True)
class NCPLTCOptions:
    """``ncp_ltc``: an LTC on the 19-neuron lane-keeping NCP wiring.

    Args:
        ode_unfolds: fused-solver unfolds per step (paper: 6).
        positivity: LTC positivity of w, cm, gleak: ``clip`` (after each optimizer step) or ``softplus``.
        wiring_seed: seed of the NCP wiring's random synapses.
    """

    ode_unfolds: int = 6
    positivity: str = "clip"
    wiring_seed: int = 22222


@dataclass(frozen=True)
class CfCOptions:
    """``cfc``: a closed-form continuous-time network (Hasani et al. 2022).

    Args:
        units: hidden units of the dense CfC (paper: 64); unused when ``wired``.
        mode: CfC variant ``default`` | ``no_gate`` | ``pure`` (Cf-S).
        mixed_memory: CfC with an LSTM memory cell (CfC-mmRNN).
        wired: CfC on the lane-keeping NCP wiring instead of dense units.
        wiring_seed: seed of the NCP wiring's random synapses (``wired`` only).
    """

    units: int = 64
    mode: str = "default"
    mixed_memory: bool = False
    wired: bool = False
    wiring_seed: int = 22222


@dataclass(frozen=True)
class RNNOptions:
    """``lstm`` and ``ctrnn``: a dense recurrent baseline with a linear readout.

    Args:
        units: hidden units (paper: 64).
    """

    units: int = 64


@dataclass(frozen=True)
class CNNOptions:
    """``cnn``: the feed-forward PilotNet CNN has no options."""


def _ncp_ltc(features: int, o: NCPLTCOptions) -> nn.Module:
    return LTC(
        lane_keeping_ncp(seed=o.wiring_seed, input_dim=features),
        input_size=features,
        ode_unfolds=o.ode_unfolds,
        positivity=o.positivity,
    )


def _cfc(features: int, o: CfCOptions) -> nn.Module:
    if o.wired:
        wiring = lane_keeping_ncp(seed=o.wiring_seed, input_dim=features)
        return WiredCfC(wiring=wiring, input_size=features, mode=o.mode, mixed_memory=o.mixed_memory)
    return CfC(features, o.units, output_size=1, mode=o.mode, mixed_memory=o.mixed_memory)


def _lstm(features: int, o: RNNOptions) -> nn.Module:
    return LSTM(features, o.units)


def _ctrnn(features: int, o: RNNOptions) -> nn.Module:
    return CTRNN(features, o.units)


class Family(NamedTuple):
    """A family: its options type and ``build(features, options)`` of its recurrent part (None:
    feed-forward)."""

    options: Type[Any]
    build: Optional[Callable[[int, Any], nn.Module]]


FAMILIES: Dict[str, Family] = {
    "ncp_ltc": Family(NCPLTCOptions, _ncp_ltc),
    "cfc": Family(CfCOptions, _cfc),
    "lstm": Family(RNNOptions, _lstm),
    "ctrnn": Family(RNNOptions, _ctrnn),
    "cnn": Family(CNNOptions, None),
}

# The flat ``PolicyModule`` arguments of drive <= 0.x (checkpoints' ``hyper_parameters``) -> the
# (family, field) pairs they set today.
FLAT_OPTIONS: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "units": (("cfc", "units"), ("lstm", "units"), ("ctrnn", "units")),
    "cfc_mode": (("cfc", "mode"),),
    "cfc_mixed_memory": (("cfc", "mixed_memory"),),
    "cfc_wired": (("cfc", "wired"),),
    "ode_unfolds": (("ncp_ltc", "ode_unfolds"),),
    "positivity": (("ncp_ltc", "positivity"),),
    "wiring_seed": (("ncp_ltc", "wiring_seed"), ("cfc", "wiring_seed")),
}


def _check_family(family: str) -> Family:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILIES)}")
    return FAMILIES[family]


def family_options(family: str, options: Any = None, **fields: Any) -> Any:
    """``family``'s options object: ``options`` (its dataclass, a dict of its fields, or None for the
    defaults) with ``fields`` replacing single fields. A field the family does not have is an error."""
    kind = _check_family(family).options
    if options is None:
        options = kind()
    elif isinstance(options, Mapping):
        options = _from_fields(family, kind, kind(), dict(options))
    elif not isinstance(options, kind):
        raise TypeError(f"family {family!r} takes {kind.__name__} options, got {type(options).__name__}")
    return _from_fields(family, kind, options, fields) if fields else options


def _from_fields(family: str, kind: Type[Any], base: Any, fields: Dict[str, Any]) -> Any:
    names = [f.name for f in dataclasses.fields(kind)]
    unknown = sorted(set(fields) - set(names))
    if unknown:
        raise ValueError(
            f"family {family!r} has no option {', '.join(unknown)}; its options: {', '.join(names) or 'none'}"
        )
    return dataclasses.replace(base, **fields)


def upgrade_flat_options(hparams: Mapping[str, Any]) -> Dict[str, Any]:
    """Hyperparameters written with the flat option names (``units``, ``cfc_mode``, ``ode_unfolds``,
    ...: :data:`FLAT_OPTIONS`) in today's per-family groups (``cfc: {units, mode}``, ...); others
    pass through unchanged. Lets ``drive fit --ckpt_path`` read checkpoints of earlier versions."""
    out = {k: v for k, v in hparams.items() if k not in FLAT_OPTIONS}
    for name, targets in FLAT_OPTIONS.items():
        if name not in hparams:
            continue
        for family, field in targets:
            group = out.get(family)
            group = dict(group) if isinstance(group, Mapping) else {}
            group.setdefault(field, hparams[name])
            out[family] = group
    return out


def build_policy(
    family: str,
    input_hw: Sequence[int] = DEFAULT_INPUT_HW,
    frame_period_s: float = 1.0,
    options: Any = None,
    feature_norm: Optional[str] = None,
    **fields: Any,
) -> Policy:
    """An untrained policy of ``family`` for frames of size ``input_hw``.

    ``options``: the family's options (:data:`FAMILIES`; a dataclass or a dict of its fields, None =
    the defaults); ``fields``: single options of the family, e.g. ``units=16`` or ``mode="pure"``.
    ``feature_norm``: the NCP conv head's ``norm`` (None = the head's default, the paper's ``none``).
    """
    opts = family_options(family, options, **fields)
    if family == "cnn":
        return Policy(PilotNetCNN(input_hw), None, frame_period_s=frame_period_s, head_name="pilotnet")
    head = NCPConvHead(input_hw) if feature_norm is None else NCPConvHead(input_hw, norm=feature_norm)
    rnn = FAMILIES[family].build(head.output_size, opts)  # type: ignore[misc]
    return Policy(head, rnn, frame_period_s=frame_period_s, head_name="ncp_conv")
