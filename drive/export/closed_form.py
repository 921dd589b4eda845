"""A trained LTC policy's checkpoint converted to its closed form (no ODE solver), as a checkpoint.

:func:`write_closed_form` loads the policy, converts it with :func:`drive.nn.closed_form.convert`
(the one conversion) and writes the converted checkpoint, which loads with
:func:`drive.checkpoint.load_policy` and drives, explains and exports like any other. Its fidelity
against the ODE LTC (open loop, closed loop, speed) is measured by
:func:`drive.evaluate.closed_form_fidelity.closed_form_report` (``drive closed-form``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Tuple, Union

from drive.checkpoint import load_policy, save_policy
from drive.nn.closed_form import METHODS, convert
from drive.nn.policy import Policy

__all__ = ["write_closed_form", "METHODS"]

PathLike = Union[str, os.PathLike]


def write_closed_form(
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
    converted = convert(policy, method, substeps)
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
