"""Timing for benchmarks on noisy, shared machines: interleaved rounds of blocks of calls.

Used by the benchmarks in ``tools/`` and by the speed part of ``drive closed-form``'s fidelity
report (:mod:`drive.evaluate.closed_form_fidelity`)."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List

__all__ = ["interleaved_medians"]


def interleaved_medians(
    calls: Dict[str, Callable[[], object]],
    rounds: int,
    inner: int,
    sync: Callable[[], None] = lambda: None,
    statistic: str = "median",
) -> Dict[str, float]:
    """Median (or ``statistic="min"``: the least-disturbed round) milliseconds per call of each entry,
    timed in turn every round (so load hits all alike). Every entry is timed for about the same wall
    time per round (the slowest for ``inner`` calls, faster ones for proportionally more, at most
    100x): on a shared machine a short window is less likely to be preempted than a long one, which
    would otherwise favour the faster entry."""
    per_call: Dict[str, float] = {}
    for name, f in calls.items():
        f()
        sync()
        warm = []
        for _ in range(3):
            t0 = time.perf_counter()
            f()
            sync()
            warm.append(time.perf_counter() - t0)
        per_call[name] = max(min(warm), 1e-9)
    span = inner * max(per_call.values())
    reps = {k: min(100 * inner, max(inner, round(span / t))) for k, t in per_call.items()}
    times: Dict[str, List[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for name, f in calls.items():
            t0 = time.perf_counter()
            for _ in range(reps[name]):
                f()
            sync()
            times[name].append((time.perf_counter() - t0) / reps[name] * 1e3)
    pick = min if statistic == "min" else statistics.median
    return {k: pick(v) for k, v in times.items()}
