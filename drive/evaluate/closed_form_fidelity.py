"""How faithful a closed-form conversion is to the ODE LTC it came from (``drive closed-form``).

:func:`closed_form_report` converts a checkpoint (:mod:`drive.export.closed_form`) and writes,
beside the converted file, ``<out>.fidelity.json`` / ``.md``: output MSE of the converted policy
against the ODE LTC (fused solver, its ``ode_unfolds``) on test recordings in (1/km)^2
(:func:`open_loop_fidelity`; the CfC paper reports 0.006 on driving data), closed-loop
interventions of both in the built-in world, and the speed ratio of the recurrent module
(:func:`rnn_speed`: 1 thread, interleaved timing). Without recordings a short drive on the
world's held-out test split is recorded to a temporary folder and used.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from drive.bench import interleaved_medians
from drive.data.preprocess import Preprocessing
from drive.export.closed_form import write_closed_form
from drive.io.atomic import write_text
from drive.io.recording import Recording
from drive.nn.policy import Policy
from drive.policy_drivers import PolicyDriver
from drive.sim.closed_loop import evaluate
from drive.sim.poisson import format_rate, rates_differ_p
from drive.sim.record import simulate

__all__ = ["closed_form_report", "open_loop_fidelity", "rnn_speed", "markdown_report"]

PathLike = Union[str, os.PathLike]


@torch.no_grad()
def open_loop_fidelity(
    reference: Policy,
    converted: Policy,
    preprocessing: Callable[[np.ndarray], Tensor],
    recordings: Sequence[PathLike],
    chunk: int = 256,
) -> Dict[str, Any]:
    """Both policies over every recording (one sequence each, hidden carried, timespans from the
    timestamps): MSE between their outputs and of each against the labels, all in (1/km)^2."""
    rows: List[Dict[str, Any]] = []
    diffs: List[np.ndarray] = []
    device = next(reference.parameters()).device
    for path in recordings:
        rec = Recording.open(path)
        t = np.asarray(rec.log["timestamp_s"], dtype=np.float64)
        dt_s = np.diff(t, prepend=t[0] - 1.0 / float(rec.meta.fps))
        outs: Dict[str, List[np.ndarray]] = {"ode": [], "closed_form": []}
        hidden: Dict[str, Optional[Tensor]] = {"ode": None, "closed_form": None}
        frames = rec.frames()
        for start in range(0, len(rec), chunk):
            batch = np.stack([next(frames) for _ in range(min(chunk, len(rec) - start))])
            x = preprocessing(batch).to(device).float().div(255.0).unsqueeze(0)
            features = reference.encode(x)
            span = torch.as_tensor(dt_s[start : start + x.shape[1]], dtype=torch.float32, device=device)[None]
            for name, policy in (("ode", reference), ("closed_form", converted)):
                y, hidden[name] = policy.decode(features, hidden[name], span)
                outs[name].append(y[0].cpu().numpy())
        y_ode, y_cf = np.concatenate(outs["ode"]), np.concatenate(outs["closed_form"])
        label = np.asarray(rec.log["curvature"], dtype=np.float64) * 1000.0
        diffs.append(y_cf - y_ode)
        rows.append(
            {
                "recording": str(path),
                "frames": len(rec),
                "mse_vs_ode": float(np.mean((y_cf - y_ode) ** 2)),
                "max_abs_diff_vs_ode": float(np.max(np.abs(y_cf - y_ode))),
                "mse_ode_vs_label": float(np.mean((y_ode - label) ** 2)),
                "mse_closed_form_vs_label": float(np.mean((y_cf - label) ** 2)),
            }
        )
    d = np.concatenate(diffs)
    return {
        "units": "(1/km)^2",
        "frames": int(d.size),
        "mse_vs_ode": float(np.mean(d**2)),
        "max_abs_diff_vs_ode": float(np.max(np.abs(d))),
        "recordings": rows,
    }


@torch.no_grad()
def rnn_speed(
    modules: Dict[str, torch.nn.Module], rounds: int = 15, batch: int = 16, length: int = 32, seed: int = 0
) -> Dict[str, Dict[str, float]]:
    """Milliseconds of ``forward`` at ``[batch, length]`` and of a batch-1 ``step`` per module."""
    first = next(iter(modules.values()))
    device = first.initial_state(1).device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, int(first.input_size), generator=g).to(device)
    x1, dt1 = x[:1, 0], torch.ones(1, device=device)
    hidden = {k: m.initial_state(1) for k, m in modules.items()}
    fwd = interleaved_medians({k: (lambda m=m: m(x)) for k, m in modules.items()}, rounds, 5, sync)
    step = interleaved_medians(
        {k: (lambda m=m, k=k: m.step(x1, hidden[k], dt1)) for k, m in modules.items()}, rounds, 100, sync
    )
    return {k: {"forward_ms": fwd[k], "step_ms": step[k]} for k in modules}


def _closed_loop(policy: Policy, meta: Dict[str, Any], km: float, seed: int) -> Dict[str, Any]:
    metrics = evaluate(PolicyDriver(policy, meta), km=km, seed=seed).metrics
    keys = (
        "interventions",
        "interventions_per_km",
        "interventions_per_km_ci95",
        "autonomy_pct",
        "lateral_rms_m",
        "steering_rate_rms",
        "km",
    )
    return {k: metrics[k] for k in keys if k in metrics}


def closed_form_report(
    ckpt: PathLike,
    method: str,
    out: PathLike,
    recordings: Optional[Sequence[PathLike]] = None,
    km: float = 1.0,
    seed: int = 0,
    substeps: int = 1,
    sim_minutes: float = 0.5,
    threads: int = 1,
    rounds: int = 15,
) -> Dict[str, Any]:
    """Convert the LTC policy in ``ckpt`` (``method`` "exact" / "approx"; :func:`write_closed_form`),
    write it to ``out`` and the fidelity report to ``<out>.fidelity.json`` / ``.md``; returns the report.

    ``recordings``: test recordings for the open-loop comparison (None: record ``sim_minutes`` on
    the world's test split); ``km`` > 0: drive both policies closed loop (world ``seed``);
    ``threads``: torch CPU threads while timing (0: leave as is; restored afterwards).
    """
    policy, converted, meta = write_closed_form(ckpt, method, out, substeps)
    out = Path(out)
    family = f"{meta['family']}+closed_form_{method}"
    report: Dict[str, Any] = {
        "source": str(ckpt),
        "converted": str(out),
        "method": method,
        "substeps": substeps,
        "ode_unfolds": int(policy.rnn.ode_unfolds),
        "family": family,
    }
    preprocessing = Preprocessing.from_dict(meta["preprocessing"])
    with tempfile.TemporaryDirectory() as tmp:
        if not recordings:
            recordings = simulate(
                Path(tmp) / "test",
                minutes=sim_minutes,
                seed=seed,
                split="test",
                recording_minutes=sim_minutes,
            )
            report["recordings_source"] = f"built-in world, test split, seed {seed}, {sim_minutes} min"
        report["open_loop"] = open_loop_fidelity(policy, converted, preprocessing, list(recordings))
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads if threads > 0 else previous_threads)
    try:
        speed = rnn_speed({"ode": policy.rnn, "closed_form": converted.rnn}, rounds=rounds)
        report["speed"] = {
            "threads": torch.get_num_threads(),
            **speed,
            "forward_speedup": speed["ode"]["forward_ms"] / speed["closed_form"]["forward_ms"],
            "step_speedup": speed["ode"]["step_ms"] / speed["closed_form"]["step_ms"],
        }
    finally:
        torch.set_num_threads(previous_threads)
    if km > 0:
        report["closed_loop"] = {
            "km": km,
            "seed": seed,
            "ode": _closed_loop(policy, meta, km, seed),
            "closed_form": _closed_loop(converted, meta, km, seed),
        }
    write_text(out.with_suffix(".fidelity.json"), json.dumps(report, indent=2))
    write_text(out.with_suffix(".fidelity.md"), markdown_report(report))
    return report


def markdown_report(report: Dict[str, Any]) -> str:
    """The fidelity report as a short markdown page."""
    ol, sp = report["open_loop"], report["speed"]
    source = f", {report['recordings_source']}" if "recordings_source" in report else ""
    lines = [
        f"# Closed-form conversion ({report['method']}) of {report['source']}",
        "",
        f"Converted checkpoint: `{report['converted']}` (family `{report['family']}`); "
        f"reference: the ODE LTC, fused solver with {report['ode_unfolds']} unfolds.",
        "",
        f"## Open loop ({ol['frames']} frames{source})",
        "",
        f"Output MSE vs the ODE LTC: **{ol['mse_vs_ode']:.4g} (1/km)^2** (max |diff| "
        f"{ol['max_abs_diff_vs_ode']:.3g} 1/km); the CfC paper reports 0.006 on driving data.",
        "",
        "| recording | frames | MSE vs ODE | max abs diff | MSE ODE vs label | MSE closed form vs label |",
        "|---|---|---|---|---|---|",
    ]
    for r in ol["recordings"]:
        lines.append(
            f"| {Path(r['recording']).name} | {r['frames']} | {r['mse_vs_ode']:.4g} | "
            f"{r['max_abs_diff_vs_ode']:.3g} | {r['mse_ode_vs_label']:.4g} | "
            f"{r['mse_closed_form_vs_label']:.4g} |"
        )
    lines += [
        "",
        f"## Speed of the recurrent module ({sp['threads']} thread(s), median of interleaved rounds)",
        "",
        "| module | forward B=16 L=32 (ms) | step B=1 (ms) |",
        "|---|---|---|",
        f"| ODE LTC | {sp['ode']['forward_ms']:.3f} | {sp['ode']['step_ms']:.4f} |",
        f"| closed form | {sp['closed_form']['forward_ms']:.3f} | {sp['closed_form']['step_ms']:.4f} |",
        f"| speed-up | {sp['forward_speedup']:.2f}x | {sp['step_speedup']:.2f}x |",
    ]
    if "closed_loop" in report:
        cl = report["closed_loop"]
        keys = [
            k
            for k in (
                "interventions",
                "interventions_per_km",
                "autonomy_pct",
                "lateral_rms_m",
                "steering_rate_rms",
            )
            if k in cl["ode"]
        ]
        lines += [
            "",
            f"## Closed loop ({cl['km']} km, world seed {cl['seed']}, test split)",
            "",
            "| policy | " + " | ".join(keys) + " |",
            "|---" * (len(keys) + 1) + "|",
        ]
        for name in ("ode", "closed_form"):
            cells = [
                format_rate(cl[name]["interventions"], cl[name]["km"])
                if k == "interventions_per_km"
                else f"{cl[name][k]:.4g}"
                for k in keys
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        p = rates_differ_p(
            cl["ode"]["interventions"],
            cl["ode"]["km"],
            cl["closed_form"]["interventions"],
            cl["closed_form"]["km"],
        )
        lines += [
            "",
            f"Exact test of equal intervention rates: p = {p:.2g}"
            + (" (too short a drive to tell them apart)." if p > 0.05 else "."),
        ]
    return "\n".join(lines) + "\n"
