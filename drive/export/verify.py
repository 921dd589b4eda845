"""An exported file checked against the eager policy it came from (``drive export`` runs it after
writing it)."""

from __future__ import annotations

from pathlib import Path

import torch

from drive.checkpoint import load_policy
from drive.export.formats import build_deployed
from drive.export.runtime import load_exported, read_metadata

__all__ = ["verify_export"]


def verify_export(ckpt: Path, out: Path, steps: int = 30, **build_kwargs) -> float:
    """Largest |difference| (command and hidden) between the file and the eager module over ``steps``
    random frames."""
    exported = load_exported(out, device=str(read_metadata(out)["device"]))
    policy, meta = load_policy(ckpt)
    eager = build_deployed(policy, meta, **build_kwargs).to(exported.device)
    h, w = exported.frame_size
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (steps, h, w, 3), dtype=torch.uint8, generator=gen)
    he, hx = eager.initial_state(1).to(exported.device), exported.initial_state(1)
    worst = 0.0
    with torch.no_grad():
        for frame in frames:
            ce, he, _ = eager.step_with_status(frame.to(exported.device), he)
            cx, hx, _ = exported.step(frame, hx)
            worst = max(
                worst, float((ce.cpu() - cx.cpu()).abs().max()), float((he.cpu() - hx.cpu()).abs().max())
            )
    return worst
