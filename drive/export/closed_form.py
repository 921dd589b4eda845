"""A trained LTC policy converted to its closed form (no ODE solver), as a policy and as a checkpoint.

:func:`convert_policy` swaps a policy's LTC for :func:`drive.nn.closed_form.ltc.convert` of it
(head and readout copied); :func:`convert_policy_file` does it for a checkpoint and writes the
converted one, which loads with :func:`drive.checkpoint.load_policy` and drives, explains and
exports like any other. Its fidelity against the ODE LTC (open loop, closed loop, speed) is
measured by :func:`drive.evaluate.closed_form_fidelity.convert_checkpoint` (``drive closed-form``).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Dict, Tuple, Union

from drive.checkpoint import load_policy, save_policy
from drive.nn.closed_form.ltc import METHODS, convert
from drive.nn.ltc import LTC
from drive.nn.policy import Policy

__all__ = ["convert_policy", "convert_policy_file", "METHODS"]

PathLike = Union[str, os.PathLike]


def convert_policy(policy: Policy, method: str = "exact", substeps: int = 1) -> Policy:
    """A copy of ``policy`` whose LTC is replaced by its closed form (head and readout copied)."""
    if not isinstance(policy.rnn, LTC):
        raise ValueError(
            f"the policy's recurrent module is {type(policy.rnn).__name__}; only an LTC converts"
        )
    out = Policy(
        copy.deepcopy(policy.head),
        convert(policy.rnn, method, substeps),
        frame_period_s=policy.frame_period_s,
        head_name=policy.head_name,
        readout=policy.has_readout,
    )
    out.readout.load_state_dict(policy.readout.state_dict())
    return out.to(next(policy.parameters()).device).eval()


def convert_policy_file(
    ckpt: PathLike, method: str, out: PathLike, substeps: int = 1
) -> Tuple[Policy, Policy, Dict[str, Any]]:
    """Convert the LTC policy in ``ckpt`` (``method`` "exact" / "approx") and write it to ``out``.

    The converted checkpoint's family is ``<family>+closed_form_<method>`` and its metadata says
    how it was made (``closed_form``: method, substeps, source file and family). Returns the
    source policy, the converted one and the source's metadata.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    policy, meta = load_policy(ckpt)
    converted = convert_policy(policy, method, substeps)
    family = f"{meta['family']}+closed_form_{method}"
    save_policy(
        Path(out),
        converted,
        {
            **meta,
            "family": family,
            "closed_form": {
                "method": method,
                "substeps": substeps,
                "source": str(ckpt),
                "source_family": meta["family"],
            },
        },
    )
    return policy, converted, meta
