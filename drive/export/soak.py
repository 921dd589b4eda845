"""Soak an exported policy: many consecutive steps, watching the hidden state and the process memory.

An hour of driving at 30 Hz is 108,000 steps (``tools/bench_deploy.py --soak``); CI runs a few
thousand. Frames cycle through a fixed set, and every ``black_every``-th frame is black so the
hold path is exercised too. The report says whether the recurrent state stayed bounded and
finite, how the resident memory moved after warm-up, and how latency drifted (first vs last
tenth of the run).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

import torch

from drive.export.runtime import ExportedPolicy

__all__ = ["SoakReport", "soak", "rss_mb"]


def rss_mb() -> float:
    """Resident set size of this process in MB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError):
        return 0.0


@dataclass
class SoakReport:
    steps: int
    warmup_steps: int
    rss_after_warmup_mb: float
    rss_end_mb: float
    rss_growth_mb: float  # end minus after warm-up
    rss_max_growth_mb: float  # largest growth seen at any checkpoint
    max_abs_state: float  # over the recurrent part of hidden, all steps
    all_finite: bool
    held_steps: int  # steps whose status had a hold bit (black / non-finite frame)
    other_status_steps: int  # steps with any other status bit set
    first_tenth_ms: float
    last_tenth_ms: float
    seconds: float

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@torch.inference_mode()
def soak(
    model: ExportedPolicy,
    steps: int,
    frames: torch.Tensor,
    warmup_steps: int = 200,
    black_every: Optional[int] = 1000,
    check_every: int = 500,
) -> SoakReport:
    """Step ``model`` ``steps`` times over ``frames`` (uint8 ``[K, H, W, 3]``, cycled).

    Memory is sampled every ``check_every`` steps after ``warmup_steps`` (allocator caches and
    TorchScript's profiling runs settle during warm-up).
    """
    s = int(model.meta["state_size"])
    black = torch.zeros_like(frames[0])
    hidden = model.initial_state()
    baseline = max_growth = 0.0
    max_abs = 0.0
    finite = True
    held = other = 0
    tenth = max(1, steps // 10)
    head_ms = tail_ms = 0.0
    start = time.perf_counter()
    for i in range(warmup_steps + steps):
        frame = black if black_every and i % black_every == black_every - 1 else frames[i % len(frames)]
        t0 = time.perf_counter()
        command, hidden, status = model.step(frame, hidden)
        float(command[0])
        ms = (time.perf_counter() - t0) * 1e3
        if i < warmup_steps:
            if i == warmup_steps - 1:
                baseline = rss_mb()
                start = time.perf_counter()
            continue
        k = i - warmup_steps
        head_ms += ms if k < tenth else 0.0
        tail_ms += ms if k >= steps - tenth else 0.0
        bits = int(status[0])
        held += bool(bits & 3)
        other += bool(bits & ~3)
        state = hidden[0, :s]
        if s:
            max_abs = max(max_abs, float(state.abs().max()))
        finite = finite and bool(torch.isfinite(hidden).all())
        if k % check_every == check_every - 1:
            max_growth = max(max_growth, rss_mb() - baseline)
    end = rss_mb()
    return SoakReport(
        steps=steps,
        warmup_steps=warmup_steps,
        rss_after_warmup_mb=baseline,
        rss_end_mb=end,
        rss_growth_mb=end - baseline,
        rss_max_growth_mb=max(max_growth, end - baseline),
        max_abs_state=max_abs,
        all_finite=finite,
        held_steps=held,
        other_status_steps=other,
        first_tenth_ms=head_ms / tenth,
        last_tenth_ms=tail_ms / tenth,
        seconds=time.perf_counter() - start,
    )
