"""Model families: the named policies ``drive fit`` trains (the NCP paper's networks;
docs/references.md), built from their options.

=========== ================== ================================================ ========================
family      head               recurrent compartment                            options
=========== ================== ================================================ ========================
``ncp_ltc`` NCP conv head (32) LTC on the 19-neuron lane-keeping NCP (1 motor)  ``ltc.NCPLTCOptions``
``cfc``     NCP conv head (32) CfC (default / no_gate / pure, mixed memory),    ``cfc.CfCOptions``
                               dense ``units`` + readout, or NCP-wired
``lstm``    NCP conv head (32) LSTM, ``units`` (64) + linear readout            ``baselines.RNNOptions``
``ctrnn``   NCP conv head (32) CT-RNN ``units`` (64), 6 Euler unfolds + readout ``baselines.RNNOptions``
``cnn``     PilotNet CNN       none (single frames; hidden ``[B, 0]``)          none
=========== ================== ================================================ ========================

A family is declared once, where its recurrent class registers
(``@register("ltc", family=Family("ncp_ltc", NCPLTCOptions))``, :mod:`drive.nn.registry`): its
options are a frozen dataclass beside the class, whose ``from_options(features, options)`` builds
the compartment. :func:`build_policy` takes the family's name and either an options object or its
fields as keywords (``build_policy("cfc", units=16, wired=True)``). ``drive fit`` takes one options
group per family (``--model.cfc.mode no_gate``, YAML ``model: {cfc: {mode: no_gate}}``;
:func:`drive.train.hparams.option_groups`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Type

from drive.nn.heads import NCPConvHead, build_head
from drive.nn.policy import Policy
from drive.nn.registry import Family, families

__all__ = ["build_policy", "family_options", "upgrade_flat_options", "DEFAULT_INPUT_HW", "FLAT_OPTIONS"]

DEFAULT_INPUT_HW: Tuple[int, int] = (78, 200)  # the paper's network input (H, W)

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


def _family(name: str) -> Family:
    known = families()
    if name not in known:
        raise ValueError(f"unknown family {name!r}; choose one of {sorted(known)}")
    return known[name]


def family_options(family: str, options: Any = None, **fields: Any) -> Any:
    """``family``'s options object: ``options`` (its dataclass, a dict of its fields, or None for the
    defaults) with ``fields`` replacing single fields. A field the family does not have is an error."""
    kind = _family(family).options
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
            if dataclasses.is_dataclass(group) and not isinstance(group, type):
                group = dataclasses.asdict(group)
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

    ``options``: the family's options (a dataclass or a dict of its fields, None = the defaults);
    ``fields``: single options of the family, e.g. ``units=16`` or ``mode="pure"``.
    ``feature_norm``: the NCP conv head's ``norm`` (None = the head's default, the paper's ``none``).
    """
    spec = _family(family)
    opts = family_options(family, options, **fields)
    if spec.head == "ncp_conv" and feature_norm is not None:
        head = NCPConvHead(input_hw, norm=feature_norm)
    else:
        head = build_head(spec.head, input_hw=input_hw)
    rnn = spec.cell.from_options(int(head.output_size), opts)  # type: ignore[union-attr]
    return Policy(head, rnn, frame_period_s=frame_period_s, head_name=spec.head)
