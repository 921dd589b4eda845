"""The closed form's conversion, in one place: :func:`convert` turns a trained LTC, or a policy whose
recurrent module is one, into its closed form (:class:`~drive.nn.closed_form.ltc.ClosedFormLTC`).

A converted checkpoint file is this conversion between a load and a save
(:mod:`drive.export.closed_form`); ``drive closed-form`` adds the fidelity report.
"""

from __future__ import annotations

import copy
from typing import Union, overload

import torch
from torch import nn

from drive.nn.closed_form.ltc import PARAMETER_NAMES, ClosedFormLTC
from drive.nn.ltc import LTC
from drive.nn.policy import Policy

__all__ = ["convert"]


@overload
def convert(model: Policy, method: str = ..., substeps: int = ...) -> Policy: ...


@overload
def convert(model: nn.Module, method: str = ..., substeps: int = ...) -> ClosedFormLTC: ...


def convert(model: nn.Module, method: str = "exact", substeps: int = 1) -> Union[Policy, ClosedFormLTC]:
    """The closed form (``method`` "exact" or "approx"; ``substeps`` for exact) of ``model``, which
    is left unchanged:

    - a :class:`~drive.nn.policy.Policy` whose recurrent module is an LTC: a copy of the policy (head
      and readout copied) with the closed-form module, on the policy's device, in eval mode;
    - an LTC (:class:`drive.nn.ltc.LTC`, or any module with its ``effective_parameters()`` and
      wiring): a :class:`ClosedFormLTC` with the same wiring and the LTC's effective parameter
      values, on its device and in its dtype.
    """
    if isinstance(model, Policy):
        return _convert_policy(model, method, substeps)
    return _convert_ltc(model, method, substeps)


def _convert_policy(policy: Policy, method: str, substeps: int) -> Policy:
    if not isinstance(policy.rnn, LTC):
        raise ValueError(
            f"the policy's recurrent module is {type(policy.rnn).__name__}; only an LTC converts"
        )
    out = Policy(
        copy.deepcopy(policy.head),
        _convert_ltc(policy.rnn, method, substeps),
        frame_period_s=policy.frame_period_s,
        head_name=policy.head_name,
        readout=policy.has_readout,
    )
    out.readout.load_state_dict(policy.readout.state_dict())
    return out.to(next(policy.parameters()).device).eval()


def _convert_ltc(ltc: nn.Module, method: str, substeps: int) -> ClosedFormLTC:
    wiring = getattr(ltc, "wiring", None)
    out = ClosedFormLTC(
        wiring if wiring is not None else ltc.config()["wiring"], method=method, substeps=substeps
    )
    values = ltc.effective_parameters()
    missing = [name for name in PARAMETER_NAMES if name not in values]
    if missing:
        raise ValueError(f"convert: the LTC's effective_parameters() lacks {missing}")
    ref = values["gleak"]
    out = out.to(device=ref.device, dtype=ref.dtype)
    with torch.no_grad():
        for name in PARAMETER_NAMES:
            dst = getattr(out, name)
            if values[name].shape != dst.shape:
                raise ValueError(
                    f"convert: {name} has shape {tuple(values[name].shape)}, the wiring expects "
                    f"{tuple(dst.shape)}"
                )
            dst.copy_(values[name].detach())
    return out
