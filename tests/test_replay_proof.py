"""Log replay ranks policies as the true closed loop does (tools/replay_proof.py; the full study with
trained networks is ``tools/bench_replay.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from drive.io.recording import Recording
from drive.sim.driver import ConstantDriver
from drive.sim.record import record_logs, simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))  # the experiment code lives there
from replay_proof import DelayedExpert, NoisyExpert, PixelRidge, measure, spearman


@pytest.mark.slow
def test_log_replay_ranks_policies_as_the_world_does(tmp_path, one_thread):
    """Six policies from near-perfect to hopeless: three camera-only pixel regressions (which see only
    re-rendered views in replay), the expert made noisy or late, constant steering. On 1.5 km of
    held-out roads the rank correlation of interventions/km must be >= 0.9, whether the path comes
    from the logs' poses or from their curvature and speed."""
    fit = simulate(tmp_path / "fit", minutes=3.0, seed=0, fps=10.0, recording_minutes=0.5, noise_std=0.015)
    recs = [Recording.open(p) for p in fit]
    logs = record_logs(tmp_path / "logs", seeds=[41, 42, 43], km=1.5, recording_km=0.5)
    policies = [
        PixelRidge(recs, (16, 40), 1e-4),
        PixelRidge(recs, (2, 5), 1e-3),
        PixelRidge(recs, (8, 20), 10.0),
        NoisyExpert(0.02),
        DelayedExpert(5),
        ConstantDriver(0.0),
    ]
    results = [measure(p, logs) for p in policies]
    world = [r["world"]["interventions_per_km"] for r in results]
    replay = [r["replay"]["interventions_per_km"] for r in results]
    integrated = [r["replay_from_curvature"]["interventions_per_km"] for r in results]
    table = "\n".join(
        f"{p.name:<24} world {w:6.2f}/km  replay {r:6.2f}/km  from curvature {c:6.2f}/km"
        for p, w, r, c in zip(policies, world, replay, integrated)
    )
    print(table)
    assert len(set(np.round(world, 3))) >= 5, table  # policies of clearly different quality
    assert spearman(replay, world) >= 0.9, table
    assert spearman(integrated, world) >= 0.9, table
    assert all(r["world"]["km"] > 1.3 for r in results)
