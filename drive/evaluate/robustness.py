"""Noise robustness of driving policies, measured the same way for every model (NCP paper §
"robustness", CfC paper Fig. 5): for every model and perturbation level

- **open loop**: steering MSE / MAE in 1/km on test recordings, hidden state carried across the
  whole recording and reset at time gaps (as on the car);
- **closed loop** (optional): interventions per km and lateral RMS in the built-in world on
  held-out roads, the policy's view perturbed frame by frame;
- **saliency stability**: SSIM (MATLAB defaults) between the VisualBackProp maps of clean and
  perturbed frames, mean and spread over frames;
- **sensitivity profile** of the recurrent compartment: per neuron
  ``max_t |h(t+1) - h(t)| / ||x(t+1) - x(t)||`` over a drive (h = the neurons' outputs, x = the
  head's features), sorted descending -- a faithful reconstruction of the NCP paper's Lipschitz
  analysis (Lechner et al. 2020). Stepped in time exactly as the open-loop drive is.

:func:`robustness_report` runs it all (in parallel over models when the CPU allows) and writes
``REPORT.md``, ``results.csv`` and plots through :mod:`drive.evaluate.report`.

The measurements themselves (one policy, one perturbation) are :mod:`drive.evaluate.measures`.

Perturbations act on the network's view (after the checkpoint's crop and resize), as in the papers,
so levels compare across cameras (:mod:`drive.data.perturb`).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from drive.checkpoint import load_policy
from drive.data.perturb import Perturbation
from drive.evaluate.measures import (
    drive_recording,
    neuron_count,
    open_loop_errors,
    saliency_stability,
    sensitivity_profile,
)
from drive.io.recording import Recording
from drive.io.workers import worker_pool
from drive.nn.policy import Policy
from drive.policy_drivers import PolicyDriver
from drive.sim.closed_loop import evaluate
from drive.sim.poisson import format_rate

__all__ = [
    "RobustnessConfig",
    "open_loop_errors",
    "saliency_stability",
    "sensitivity_profile",
    "neuron_count",
    "evaluate_model",
    "robustness_report",
    "find_recordings",
]


@dataclass
class RobustnessConfig:
    """What to measure. ``noise_levels`` are Gaussian std on [0, 1] pixels (variance if ``variance``)."""

    noise_levels: Sequence[float] = (0.0, 0.1, 0.2, 0.25, 0.3)
    variance: bool = False
    other: Mapping[str, Sequence[float]] = field(
        default_factory=lambda: {
            "salt_pepper": (0.05,),
            "blur": (2.0,),
            "brightness": (-0.3, 0.3),
            "occlusion": (0.1,),
        }
    )
    seed: int = 0
    closed_loop_km: float = 0.0
    closed_loop_seed: int = 0
    saliency_frames: int = 48
    max_frames: Optional[int] = None

    def perturbations(self) -> List[Perturbation]:
        out = [
            Perturbation("gaussian", lvl, seed=self.seed, variance=self.variance) for lvl in self.noise_levels
        ]
        for kind, levels in self.other.items():
            out += [Perturbation(kind, lvl, seed=self.seed) for lvl in levels]
        return out


def find_recordings(paths: Iterable[Union[str, os.PathLike]]) -> List[Path]:
    """Canonical recording directories: each path is a recording or a folder holding some."""
    found: List[Path] = []
    for p in map(Path, paths):
        if (p / "meta.json").is_file():
            found.append(p)
            continue
        if not p.is_dir():
            raise FileNotFoundError(f"{p}: no such recording or folder")
        inner = sorted(m.parent for m in p.rglob("meta.json"))
        if not inner:
            raise ValueError(f"{p}: holds no drive recordings (no meta.json below it)")
        found += inner
    return found


def _closed_loop(
    policy: Policy, meta: Mapping[str, Any], perturb: Perturbation, km: float, seed: int
) -> Dict[str, float]:
    perturb.reset()
    result = evaluate(PolicyDriver(policy, meta, perturb=perturb), km=km, seed=seed)
    m = result.metrics
    lo, hi = m["interventions_per_km_ci95"]
    return {
        "interventions": int(m["interventions"]),
        "closed_loop_km": float(m["km"]),
        "interventions_per_km": float(m["interventions_per_km"]),
        "interventions_ci95_lo": float(lo),
        "interventions_ci95_hi": float(hi),
        "lateral_rms_m": float(m["lateral_rms_m"]),
    }


ModelSpec = Union[str, os.PathLike, Tuple[str, Policy, Mapping[str, Any]]]


def _resolve(model: ModelSpec) -> Tuple[str, Policy, Dict[str, Any]]:
    if isinstance(model, tuple):
        name, policy, meta = model
        return name, policy.eval(), dict(meta)
    policy, meta = load_policy(model)
    return Path(model).stem, policy, meta


@contextmanager
def _one_thread() -> Iterator[None]:
    """One intra-op thread while a model is measured, the caller's setting restored afterwards.

    Batch-1 stepping gains nothing from more threads on a small machine, parallelism comes from
    processes over models, and the thread count can change floating-point reduction order: with
    one thread everywhere, a model's numbers do not depend on ``workers`` or on the caller.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _lipschitz(profile: np.ndarray) -> Dict[str, float]:
    """The profile's max and median for the CSV (NaN for a policy without memory)."""
    if not profile.size:
        return {"lipschitz_max": float("nan"), "lipschitz_median": float("nan")}
    return {"lipschitz_max": float(profile.max()), "lipschitz_median": float(np.median(profile))}


def evaluate_model(
    model: ModelSpec,
    recordings: Sequence[Union[str, os.PathLike]],
    config: RobustnessConfig,
    log: bool = True,
) -> Dict[str, Any]:
    """All measurements for one model: ``{"name", "family", "rows": [...], "profile": [...], "state_size"}``.

    ``profile`` is the sensitivity profile on the clean first recording, whatever the levels asked
    for (it is the report's reference curve); each row also carries the profile's max and median
    on that recording as perturbed.
    """
    with _one_thread():
        name, policy, meta = _resolve(model)
        recs = [Recording.open(r) for r in recordings]
        period = 1.0 / float(meta["fps"])
        clean = drive_recording(policy, meta, recs[0], None, config.max_frames)
        profile = sensitivity_profile(policy, clean.features, clean.timestamps_s, period)
        rows = []
        for perturb in config.perturbations():
            started = time.perf_counter()
            row: Dict[str, Any] = {
                "model": name,
                "family": meta.get("family", ""),
                "kind": perturb.kind,
                "level": perturb.level,
            }
            errors, first = open_loop_errors(policy, meta, recs, perturb, config.max_frames)
            row.update(errors)
            row.update(saliency_stability(policy, meta, recs, perturb, config.saliency_frames))
            row.update(_lipschitz(sensitivity_profile(policy, first.features, first.timestamps_s, period)))
            if config.closed_loop_km > 0:
                row.update(
                    _closed_loop(policy, meta, perturb, config.closed_loop_km, config.closed_loop_seed)
                )
            rows.append(row)
            if log:
                closed = (
                    f"  interventions {format_rate(row['interventions'], row['closed_loop_km'])}"
                    if config.closed_loop_km > 0
                    else ""
                )
                print(
                    f"  [{name}] {perturb.name:<18} mse {row['mse']:9.2f}  "
                    f"ssim {row['ssim_mean']:.3f}{closed}  ({time.perf_counter() - started:.1f}s)",
                    flush=True,
                )
    return {
        "name": name,
        "family": meta.get("family", ""),
        "rows": rows,
        "profile": profile.tolist(),
        "state_size": policy.state_size,
    }


def robustness_report(
    models: Sequence[ModelSpec],
    recordings: Sequence[Union[str, os.PathLike]],
    out_dir: Union[str, os.PathLike],
    config: Optional[RobustnessConfig] = None,
    workers: Optional[int] = None,
) -> Dict[str, Any]:
    """Measure every model at every level and write ``REPORT.md``, ``results.csv`` and plots.

    Args:
        models: checkpoint paths (or ``(name, policy, meta)`` tuples, evaluated in-process).
        recordings: canonical recording directories or folders of them (test drives).
        workers: processes to spread models over (default: min(models, CPUs)); 1 runs in-process.
            Every model runs on one thread either way, so the numbers do not depend on it.
    Returns:
        ``{"rows": [...], "report": path, "csv": path, "plots": [...]}``.
    """
    # imported here: the report's matplotlib costs start-up time in every worker process otherwise
    from drive.evaluate.report import write_report

    config = config or RobustnessConfig()
    if not models:
        raise ValueError("robustness: give at least one model")
    if workers is not None and workers < 1:
        raise ValueError(f"robustness: workers must be >= 1, got {workers}")
    rec_dirs = [str(p) for p in find_recordings(recordings)]
    workers = workers or min(len(models), os.cpu_count() or 1)
    in_process = workers == 1 or any(isinstance(m, tuple) for m in models)
    closed = f", closed loop {config.closed_loop_km:g} km" if config.closed_loop_km else ""
    print(
        f"robustness: {len(models)} model(s) x {len(config.perturbations())} perturbation(s) "
        f"on {len(rec_dirs)} recording(s){closed}",
        flush=True,
    )
    if in_process:
        results = [evaluate_model(m, rec_dirs, config) for m in models]
    else:
        with worker_pool(workers) as pool:
            jobs = [pool.submit(evaluate_model, str(m), rec_dirs, config) for m in models]
            results = [j.result() for j in jobs]
    return write_report(results, Path(out_dir), config=asdict(config), recordings=rec_dirs)
