"""``runs/demo/REPORT.md``: the numbers and pictures of a ``drive demo`` run, and its acceptance check.

Acceptance: the NCP-LTC drives at least 6 km of held-out roads (from several test seeds) with at most
0.5 interventions per km, and its exported TorchScript file drives them as well. The time each stage
took is reported beside the 15-minute target for a quiet 2-core machine, but it is not judged: what the
model learns never depends on the machine (training budgets are optimizer steps).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional

from drive.demo.report_sections import (
    BC_ARM,
    POLICY,
    STAGES,
    arms_section,
    closed_form_section,
    export_section,
    hard_roads_section,
    in_the_loop,
    rel,
    robustness_section,
    saliency_section,
    training_curve,
    training_section,
)
from drive.demo.results import DemoResults, Drives, Drove
from drive.io.atomic import write_text
from drive.sim.poisson import format_rate, rates_differ_p
from drive.sim.safety import SAFETY_DRIVER
from drive.train.profiles import configs_dir

__all__ = [
    "write_report",
    "ACCEPT_KM",
    "ACCEPT_INTERVENTIONS_PER_KM",
    "ACCEPT_MINUTES",
    "BC_ARM",
    "POLICY",
    "STAGES",
]

ACCEPT_KM = 6.0
ACCEPT_INTERVENTIONS_PER_KM = 0.5
ACCEPT_MINUTES = 15.0  # target on a quiet 2-core machine; reported, not judged
_DRIVERS = (
    (POLICY, "NCP-LTC (learned, camera only)"),
    (BC_ARM, "NCP-LTC, behaviour cloning only (the other arm)"),
    ("expert", "expert (pure pursuit, privileged)"),
    ("constant", "constant steering (straight ahead)"),
)


def _config_name(path: str) -> str:
    """``--config demo`` for a shipped profile, else ``--config <the path as given>``."""
    try:
        name = Path(path).resolve().relative_to(configs_dir().resolve()).with_suffix("").as_posix()
    except ValueError:
        name = path
    return f"--config {name}"


def write_report(out: Path, results: DemoResults) -> Dict[str, Any]:
    """Write ``out/REPORT.md`` and ``out/summary.json``; returns the summary with the acceptance verdict."""
    out = Path(out)
    drive = results.drive.drivers
    stages = {k: getattr(results, k) for k in STAGES}
    stage_seconds = {k: stage.seconds for k, stage in stages.items() if stage is not None}
    total_s = sum(stage_seconds.values())
    acceptance = _acceptance(drive[POLICY].metrics, results.export.closed_loop if results.export else None)
    acceptance["minutes"] = total_s / 60.0
    arm = results.onpolicy
    curve = training_curve(
        Path(results.train.metrics_csv),
        out / "training_curve.png",
        Path(arm.metrics_csv) if arm and arm.metrics_csv else None,
    )
    lines = _head(results, acceptance, total_s) + _closed_loop_section(out, results.drive)
    lines += hard_roads_section(out, results.drive, _DRIVERS)
    lines += training_section(out, results.train, curve, arm)
    lines += arms_section(arm, results.drive)
    lines += saliency_section(out, results.saliency)
    lines += robustness_section(out, results.robustness, results.settings)
    lines += closed_form_section(out, results.closed_form)
    lines += export_section(out, results.export, drive[POLICY].metrics)
    lines += ["", "## Time per stage", "", "| stage | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in stage_seconds.items()]
    lines += [f"| **total** | **{total_s:.0f}** |", ""]
    report = out / "REPORT.md"
    write_text(report, "\n".join(lines) + "\n")
    summary = {
        "report": str(report),
        "acceptance": acceptance,
        "settings": asdict(results.settings),
        "training": {**curve, "steps": results.train.steps},
        "stage_seconds": stage_seconds,
        "closed_loop": {k: drive[k].metrics for k, _ in _DRIVERS if k in drive},
        "closed_loop_hard": {k: drive[k].hard.metrics for k, _ in _DRIVERS if k in drive and drive[k].hard},
    }
    write_text(out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _head(results: DemoResults, acceptance: Dict[str, Any], total_s: float) -> List[str]:
    """The title, what was run, and the acceptance check."""
    s = results.settings
    return [
        "# drive demo",
        "",
        f"Built-in world: {s.train_minutes:g} min of expert logs with DART noise "
        f"({s.dart_noise:g} 1/m) on {s.roads} training roads (seed {s.seed}) at "
        f"{s.fps:g} Hz, "
        f"{s.val_minutes:g} min for validation; NCP-LTC trained with `{_config_name(s.config)}` "
        f"for {results.train.steps} optimizer steps{in_the_loop(results.onpolicy)} "
        f"(training seed {s.seed}, "
        f"{s.threads or 'all'} thread(s)); closed loop on held-out test roads of test seeds "
        f"{s.test_seeds} (never seen in training).",
        "",
        "## Acceptance",
        "",
        *(f"- {line}" for line in acceptance["checks"]),
        f"- demo time **{total_s / 60:.1f} min** summed over stages (target: <= {ACCEPT_MINUTES:g} min "
        "on a quiet 2-core machine; reported, not judged)",
        "- verdict: "
        f"**{'PASSED' if acceptance['passed'] else 'FAILED: ' + '; '.join(acceptance['failed'])}**",
    ]


def _closed_loop_section(out: Path, drives: Drives) -> List[str]:
    """The drivers' table on held-out roads, whether the distance tells them apart, plots, video."""
    drive = drives.drivers
    lines = [
        "",
        "## Closed loop on held-out roads",
        "",
        f"An intervention = {SAFETY_DRIVER.describe()}; the car is put back on the lane centre and the "
        f"policy's hidden state is reset. Autonomy = 1 - interventions x {SAFETY_DRIVER.takeover_s:g} s / "
        "time (PilotNet).",
        "",
        "| driver | km | interventions | per km (exact 95 % interval) | autonomy % | lateral RMS m "
        "| heading RMS rad | steering-rate RMS 1/m/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, label in _DRIVERS:
        if key not in drive:
            continue
        m = drive[key].metrics
        lines.append(
            f"| {label} | {m['km']:.2f} | {m['interventions']} | "
            f"{format_rate(m['interventions'], m['km'])} | "
            f"{m['autonomy_pct']:.1f} | {m['lateral_rms_m']:.3f} | {m['heading_rms_rad']:.3f} | "
            f"{m['steering_rate_rms']:.3f} |"
        )
    lines += ["", *_told_apart(drive), ""]
    lines += [
        f"![{key}]({rel(drive[key].plot, out)})" for key, _ in _DRIVERS if key in drive and drive[key].plot
    ]
    video = drive[POLICY].video
    if video:
        lines += ["", f"Camera view of the NCP-LTC's drive: [{rel(video, out)}]({rel(video, out)})"]
    return lines


def _told_apart(drive: Dict[str, Drove]) -> List[str]:
    """Whether the distance driven tells the NCP-LTC apart from each other driver (exact test of two
    Poisson rates); a "no" means the table's difference may be chance at this distance."""
    m = drive[POLICY].metrics
    lines = []
    for key, label in _DRIVERS[2:]:  # the other arm is compared in its own section
        o = drive[key].metrics
        p = rates_differ_p(m["interventions"], m["km"], o["interventions"], o["km"])
        verdict = "yes" if p <= 0.05 else "**no**: too short a distance to tell them apart"
        lines.append(
            f"- NCP-LTC vs {label.split(' (')[0]}: told apart at this distance? {verdict} (p = {p:.2g})"
        )
    return lines


def _acceptance(policy: Dict[str, Any], exported: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Each criterion as a line, the failed ones by name, and the verdict."""
    rate = policy["interventions_per_km"]
    criteria = [
        (
            f"NCP-LTC distance on held-out roads: **{policy['km']:.2f} km** (required: >= {ACCEPT_KM:g} km)",
            policy["km"] >= ACCEPT_KM - 1e-6,
            f"drove {policy['km']:.2f} km < {ACCEPT_KM:g} km",
        ),
        (
            f"NCP-LTC interventions: **{format_rate(policy['interventions'], policy['km'])}** "
            f"({policy['interventions']} in {policy['km']:.2f} km; required: <= "
            f"{ACCEPT_INTERVENTIONS_PER_KM:g}/km)",
            rate <= ACCEPT_INTERVENTIONS_PER_KM,
            f"NCP-LTC {rate:.2f} interventions/km > {ACCEPT_INTERVENTIONS_PER_KM:g}",
        ),
    ]
    if exported:
        ex_rate = exported["interventions_per_km"]
        criteria.append(
            (
                f"exported TorchScript file: **{ex_rate:.2f} interventions/km** on the same roads "
                f"(required: <= {ACCEPT_INTERVENTIONS_PER_KM:g}/km)",
                ex_rate <= ACCEPT_INTERVENTIONS_PER_KM,
                f"exported file {ex_rate:.2f} interventions/km > {ACCEPT_INTERVENTIONS_PER_KM:g}",
            )
        )
    failed = [why for _, ok, why in criteria if not ok]
    return {
        "km": policy["km"],
        "interventions_per_km": rate,
        "passed": not failed,
        "failed": failed,
        "checks": [f"{line}: {'ok' if ok else 'FAILED'}" for line, ok, _ in criteria],
    }
