"""``drive evaluate --logs``'s outputs: ``metrics.json``, ``REPORT.md`` and ``replay.png``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List

from drive.io.atomic import write_text
from drive.replay import NO_SOURCE_FLAG
from drive.sim.plot import plot_drive
from drive.sim.poisson import format_rate, rate_interval

__all__ = ["write_replay_report", "MAX_PLOTTED"]

MAX_PLOTTED = 12  # segments drawn in replay.png

_CAMERA_NOTE = {
    "log": "the logs' own calibration",
    "given": "the calibration given as the reader option `camera`",
    "approximate": (
        "**approximate**: no calibration was known, so the built-in world's camera was assumed "
        "(80 deg horizontal field of view, 1.5 m above the road, pitched 0.15 rad down). Re-rendered "
        "views, and so these numbers, are only as right as that guess"
    ),
}


def _row(r: Dict[str, Any]) -> str:
    share = r["no_source_share"]
    flag = " **flagged**" if r["no_source_flagged"] else ""
    return (
        f"| {Path(r['name']).name} | {r['km']:.2f} | {r['interventions']} | "
        f"{format_rate(r['interventions'], r['km'])} | {r['lateral_rms_m']:.3f} | "
        f"{100 * share['mean']:.1f} / {100 * share['p95']:.1f}{flag} | {_PATH[r['path_source']]} |"
    )


_PATH = {"poses": "log's poses", "curvature": "integrated", "none": "-"}


def _path_line(metrics: Dict[str, Any]) -> str:
    """Where the recorded paths came from: the logs' own poses, or integrated from the labels."""
    counts = metrics.get("path_sources") or {}
    off = " (`--no-poses`)" if not metrics.get("settings", {}).get("use_poses", True) else ""
    parts = []
    if counts.get("poses"):
        parts.append(f"from the log's own poses (x, y, yaw) in {counts['poses']} recording(s)")
    if counts.get("curvature"):
        parts.append(
            f"integrated from curvature and speed in {counts['curvature']} recording(s){off}, "
            "only as right as their labels and speeds"
        )
    return "- Recorded path: " + "; ".join(parts or ["none"]) + " (docs/replay.md)."


def _skipped(metrics: Dict[str, Any]) -> List[str]:
    """The recordings not driven, each with its reason (a report never drops one silently)."""
    skipped = metrics.get("skipped") or []
    if not skipped:
        return []
    return [
        f"Not driven ({len(skipped)}): " + "; ".join(f"{s['name']} ({s['reason']})" for s in skipped) + ".",
        "",
    ]


def _lines(metrics: Dict[str, Any], plotted: int, total: int) -> List[str]:
    m = metrics
    km, n = m["km"], m["interventions"]
    zero_hi = rate_interval(0, km)[1] if km > 0 else math.nan
    flagged = [Path(r["name"]).name for r in m["per_recording"] if r["no_source_flagged"]]
    rates = ", ".join(sorted({f"{r['fps']:g}" for r in m["per_recording"]}))
    lines = [
        f"# Log replay: {m['driver']}",
        "",
        f"`{m['driver']}` drove {m['recordings']} recording(s) closed loop by log replay: {km:.2f} km in "
        f"{m['segments']} segment(s), stepping at {rates} Hz "
        "(method, assumptions and limits: docs/replay.md).",
        "",
        f"- **Interventions: {n} in {km:.2f} km = {format_rate(n, km)}**; autonomy "
        f"{m['autonomy_pct']:.1f} %, lateral RMS {m['lateral_rms_m']:.3f} m "
        f"(max {m['lateral_max_abs_m']:.2f} m), "
        f"heading RMS {m['heading_rms_rad']:.3f} rad, steering-rate RMS {m['steering_rate_rms']:.4f} 1/m/s.",
        f"- At this distance a policy with no intervention would read 0-{zero_hi:.2f}/km: two policies whose "
        "intervals overlap this much cannot be told apart here; drive more km to separate them.",
        f"- Intervention rule: |lateral| > {m['criteria']['max_lateral_m']:g} m or |heading| > "
        f"{m['criteria']['max_heading_rad']:.3f} rad from the recorded path; the car is put back on the "
        "path and the policy's state reset, as in the built-in world.",
        "- Camera: " + "; ".join(_CAMERA_NOTE[c] for c in m["camera"]) + ".",
        _path_line(m),
        "- Re-rendered pixels with no recorded content (repeated border): "
        f"{100 * m['no_source_share_mean']:.1f} % "
        f"of what the policy saw on average; recordings above {100 * NO_SOURCE_FLAG:.0f} % are flagged"
        + (f": **{', '.join(flagged)}** (their numbers lean on invented pixels)." if flagged else " (none)."),
        "",
        *_skipped(m),
        "| recording | km | interventions | per km (95 % interval) | lateral RMS m "
        "| no-source % mean / p95 | path |",
        "|---|---|---|---|---|---|---|",
        *(_row(r) for r in m["per_recording"]),
        "",
    ]
    if m["per_condition"]:
        lines += [
            "| condition | km | interventions | per km (95 % interval) | lateral RMS m |",
            "|---|---|---|---|---|",
        ]
        for name, c in m["per_condition"].items():
            lines.append(
                f"| {name} | {c['km']:.2f} | {c['interventions']} | "
                f"{format_rate(c['interventions'], c['km'])} | {c['lateral_rms_m']:.3f} |"
            )
        lines.append("")
    shown = f" (the first {plotted} of {total} segments)" if plotted < total else ""
    lines += [f"![recorded (grey) and driven (blue) paths, interventions in red](replay.png){shown}", ""]
    return lines


def write_replay_report(result: Any, out: Path) -> Dict[str, Path]:
    """Write ``metrics.json``, ``replay.png`` and ``REPORT.md`` of a :class:`ReplayResult` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    segments = [s for r in result.recordings for s in r.segments]
    paths = {"metrics": out / "metrics.json", "plot": out / "replay.png", "report": out / "REPORT.md"}
    write_text(paths["metrics"], json.dumps(result.metrics, indent=2) + "\n")
    plot_drive(segments[:MAX_PLOTTED], paths["plot"], title=f"log replay: {result.metrics['driver']}")
    write_text(
        paths["report"], "\n".join(_lines(result.metrics, min(len(segments), MAX_PLOTTED), len(segments)))
    )
    return paths
