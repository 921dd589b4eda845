"""Write a robustness study: ``REPORT.md`` (tables model x level), ``results.csv`` and PNG plots.

An output folder holds one run: the files a previous run wrote there are removed first, and the
report links only the plots this run drew, so a reused folder never shows a stale result.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from drive.data.perturb import KINDS
from drive.io.atomic import atomic_path, save_figure, write_text
from drive.sim.poisson import rate_interval, rates_differ_p

__all__ = ["write_report", "METRICS", "COLUMNS", "OUTPUTS"]

# column -> (title, better)
METRICS: Dict[str, tuple] = {
    "mse": ("open-loop steering MSE (1/km^2)", "lower"),
    "mae": ("open-loop steering MAE (1/km)", "lower"),
    "ssim_mean": ("saliency SSIM clean vs perturbed (mean over frames)", "higher"),
    "interventions_per_km": ("closed-loop interventions per km", "lower"),
    "lateral_rms_m": ("closed-loop lateral RMS (m)", "lower"),
    "lipschitz_max": (
        "recurrent sensitivity on the perturbed drive, max over neurons of max |dh|/|dx|",
        "lower",
    ),
}
COLUMNS = [
    "model",
    "family",
    "kind",
    "level",
    "mse",
    "mae",
    "ssim_mean",
    "ssim_std",
    "interventions_per_km",
    "interventions",
    "closed_loop_km",
    "interventions_ci95_lo",
    "interventions_ci95_hi",
    "lateral_rms_m",
    "lipschitz_max",
    "lipschitz_median",
]
PROFILE_PLOT = "sensitivity_profile.png"
# x axis of each perturbation kind's plot (drive.data.perturb says what a level is)
LEVEL_AXIS: Dict[str, str] = {
    "salt_pepper": "salt-and-pepper: fraction of pixels",
    "blur": "Gaussian blur sigma (pixels of the network's view)",
    "brightness": "brightness shift on [0, 1] pixels",
    "occlusion": "occluded fraction of the image",
}
# every file write_report may write; nothing else in the folder is touched (e.g. the demo's models/)
OUTPUTS = (
    "REPORT.md",
    "results.csv",
    "results.json",
    PROFILE_PLOT,
    *(f"{m}.png" for m in METRICS),
    *(f"{m}_{k}.png" for m in METRICS for k in KINDS if k != "gaussian"),
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def _table(rows: Sequence[Mapping[str, Any]], metric: str, kinds: Sequence[str]) -> List[str]:
    models = list(dict.fromkeys(r["model"] for r in rows))
    columns = list(dict.fromkeys((r["kind"], r["level"]) for r in rows if r["kind"] in kinds))
    head = "| model | " + " | ".join(f"{k} {lvl:g}" for k, lvl in columns) + " |"
    lines = [head, "|---" * (len(columns) + 1) + "|"]
    for m in models:
        cells = []
        for k, lvl in columns:
            match = [r for r in rows if r["model"] == m and r["kind"] == k and r["level"] == lvl]
            value = match[0].get(metric, float("nan")) if match else float("nan")
            if metric == "ssim_mean" and match:
                value = f"{_fmt(value)} ± {_fmt(match[0].get('ssim_std', float('nan')))}"
            if metric == "interventions_per_km" and match and "interventions_ci95_hi" in match[0]:
                lo, hi = match[0]["interventions_ci95_lo"], match[0]["interventions_ci95_hi"]
                value = f"{_fmt(value)} ({lo:.2f}-{hi:.2f})"
            cells.append(_fmt(value))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def _distance_note(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """How far each level drove, what that can tell apart, and the levels no different from clean."""
    driven = [r for r in rows if "closed_loop_km" in r]
    if not driven:
        return []
    km = min(r["closed_loop_km"] for r in driven)
    same = []
    for r in driven:
        clean = [
            c for c in driven if c["model"] == r["model"] and c["level"] == 0 and c["kind"] == "gaussian"
        ]
        if clean and r is not clean[0]:
            c = clean[0]
            p = rates_differ_p(
                r["interventions"], r["closed_loop_km"], c["interventions"], c["closed_loop_km"]
            )
            if p > 0.05:
                same.append(f"{r['model']} {r['kind']} {r['level']:g}")
    lines = [
        f"In brackets: the exact 95 % interval. Each level drove {km:.2f} km: a level with no "
        f"intervention reads 0-{rate_interval(0, km)[1]:.2f}/km, so rates inside each other's "
        "intervals are not evidence of a difference."
    ]
    if same:
        lines.append(
            "Too short to tell apart from the clean drive (exact test of two rates, p > 0.05): "
            + ", ".join(same)
            + "."
        )
    return lines + [""]


def _noise_unit(config: Mapping[str, Any]) -> str:
    """What a Gaussian level is: the run's ``variance`` flag decides."""
    return "variance sigma^2" if config.get("variance") else "standard deviation"


def _plot(
    rows: Sequence[Mapping[str, Any]], metric: str, kind: str, title: str, xlabel: str, path: Path
) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=110)
    for model in dict.fromkeys(r["model"] for r in rows):
        pts = sorted((r["level"], r[metric]) for r in rows if r["model"] == model and r["kind"] == kind)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=model)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def _plot_profiles(results: Sequence[Mapping[str, Any]], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=110)
    for res in results:
        if res["profile"]:
            ax.plot(range(1, len(res["profile"]) + 1), res["profile"], marker=".", label=res["name"])
    ax.set_xlabel("neuron (sorted; output state h only)")
    ax.set_ylabel("max |dh| / |dx|")
    ax.set_yscale("log")
    ax.set_title("sensitivity profile of the recurrent neurons (clean drive)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def _profile_section(results: Sequence[Mapping[str, Any]], plotted: bool) -> List[str]:
    """The sensitivity profile's text: what was measured, and which models have none and why."""
    md = [
        "## Sensitivity profile",
        "",
        "Per neuron, max over a clean drive (the first test recording; the state reset and pairs "
        "skipped at time gaps) of |h(t+1) - h(t)| / ||x(t+1) - x(t)|| (x = conv-head features), sorted. "
        "h is the neurons' output state only: an LSTM's or mixed-memory CfC's cell state c is not a "
        "neuron's response and is left out. Lower and flatter = smoother response to input changes.",
        "",
    ]
    for res in results:
        if not res["profile"]:
            md.append(f"- {res['name']}: no profile, the policy has no recurrent state (feed-forward).")
        elif len(res["profile"]) < res["state_size"]:
            md.append(
                f"- {res['name']}: {len(res['profile'])} neurons (h) of its {res['state_size']} "
                "state entries."
            )
    if plotted:
        md += ["", f"![sensitivity]({PROFILE_PLOT})"]
    return md + [""]


def write_report(
    results: Sequence[Mapping[str, Any]], out_dir: Path, config: Mapping[str, Any], recordings: Sequence[str]
) -> Dict[str, Any]:
    """Write REPORT.md, results.csv, results.json and plots under ``out_dir``; return their paths and rows.

    Outputs of an earlier run in ``out_dir`` (:data:`OUTPUTS`) are removed first.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        (out_dir / name).unlink(missing_ok=True)
    rows = [r for res in results for r in res["rows"]]
    with atomic_path(out_dir / "results.csv") as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({c: r.get(c, float("nan")) for c in COLUMNS})
    write_text(
        out_dir / "results.json",
        json.dumps(
            {"config": config, "recordings": list(recordings), "results": list(results)},
            indent=1,
            default=float,
        ),
    )
    study = _Study(rows, config)
    plots = _draw(study, results, out_dir)
    md = [
        "# Robustness report",
        "",
        f"Models: {', '.join(res['name'] for res in results)}. Test recordings: {len(recordings)}. "
        f"Gaussian levels are the noise {study.noise_unit} on [0, 1] pixels (clipped), "
        f"seed {config.get('seed')}.",
        "",
    ]
    for metric in study.present:
        md += _metric_section(study, metric)
    md += _profile_section(results, any(res["profile"] for res in results))
    md += [
        "Raw numbers: `results.csv` (one row per model x perturbation), `results.json` (with profiles).",
        "",
    ]
    write_text(out_dir / "REPORT.md", "\n".join(md))
    return {"rows": rows, "report": out_dir / "REPORT.md", "csv": out_dir / "results.csv", "plots": plots}


class _Study:
    """What a study's rows measured: the metrics present, whether Gaussian noise was swept, the
    other kinds, and those measured at two levels or more (each of those gets its own curve)."""

    def __init__(self, rows: List[Mapping[str, Any]], config: Mapping[str, Any]) -> None:
        self.rows = rows
        self.noise_unit = _noise_unit(config)
        self.present = [m for m in METRICS if any(m in r and not _isnan(r[m]) for r in rows)]
        self.gaussian = any(r["kind"] == "gaussian" for r in rows)
        self.other_kinds = sorted({r["kind"] for r in rows} - {"gaussian"})
        self.curves = [k for k in LEVEL_AXIS if len({r["level"] for r in rows if r["kind"] == k}) >= 2]


def _draw(study: _Study, results: Sequence[Mapping[str, Any]], out_dir: Path) -> List[Path]:
    """Every plot of the study: per metric the Gaussian curve and one per other kind's curve, and the
    recurrent sensitivity profiles when measured."""
    plots = []
    for metric in study.present:
        if study.gaussian:
            plots.append(out_dir / f"{metric}.png")
            axis = f"Gaussian noise {study.noise_unit} on [0, 1] pixels"
            _plot(study.rows, metric, "gaussian", METRICS[metric][0], axis, plots[-1])
        for kind in study.curves:
            plots.append(out_dir / f"{metric}_{kind}.png")
            _plot(study.rows, metric, kind, METRICS[metric][0], LEVEL_AXIS[kind], plots[-1])
    if any(res["profile"] for res in results):
        _plot_profiles(results, out_dir / PROFILE_PLOT)
        plots.append(out_dir / PROFILE_PLOT)
    return plots


def _metric_section(study: _Study, metric: str) -> List[str]:
    """One metric's tables (Gaussian levels, other perturbations), notes and plots."""
    rows, gaussian, curves = study.rows, study.gaussian, study.curves
    title, better = METRICS[metric]
    md = [f"## {title} ({better} is better)", ""]
    if gaussian:
        md += [*_table(rows, metric, ["gaussian"]), ""]
    if metric == "interventions_per_km":
        md += _distance_note(rows)
    if study.other_kinds:
        md += ["Other perturbations:", "", *_table(rows, metric, study.other_kinds), ""]
    if gaussian:
        md += [f"![{metric}]({metric}.png)", ""]
    return md + [f"![{metric}, {kind}]({metric}_{kind}.png)" for kind in curves] + ([""] if curves else [])


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)
