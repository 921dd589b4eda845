"""What the readers find in a set of logs: recordings, frames, timing, gaps, labels, every problem.

:func:`inspect_logs` reads with ``on_error="skip"`` so that it can list every problem (file and
row) instead of stopping at the first, and by default decodes every frame to find unreadable or
mis-sized images and truncated videos. :func:`convert_logs` writes canonical recordings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from drive.data.cache import display_name, iter_decoded
from drive.data.errors import DataError, Problems
from drive.data.readers import discover, no_log_message, read_logs
from drive.data.readers.rosbag_io import list_topics
from drive.io.atomic import save_figure
from drive.io.recording import POSE_COLUMNS, Recording, RecordingMeta, RecordingWriter

__all__ = [
    "inspect_logs",
    "format_report",
    "convert_logs",
    "plot_recordings",
    "label_statistics",
    "sharp_places",
    "spike_frames",
]

SPIKE_MADS = 8.0  # a single-frame jump this many robust deviations of the label's steps (see below)
SPIKE_MIN_PER_M = 2e-3  # ... and at least this large (2 1/km), so quantisation noise is no spike
LIMIT_MIN_FRAMES = 3  # the extreme value held by at least this many frames (and 0.5 %) = a steering limit
SHARP_PER_M = (1 / 20, 1 / 10, 1 / 7)  # curvatures whose places sharp_places counts


def _decode_all(rec: Recording, problems: Problems) -> int:
    """Decode every frame, reporting bad ones; returns the number of good frames."""
    return sum(frame is not None for _, frame in iter_decoded(rec, problems))


def spike_frames(k: np.ndarray) -> List[int]:
    """Indices of single-frame label spikes in ``k`` (1/m, time order); see :func:`label_statistics`."""
    k = np.asarray(k, dtype=np.float64)
    if k.size < 3:
        return []
    steps = np.diff(k)
    mad = float(np.median(np.abs(steps - np.median(steps)))) * 1.4826
    thresh = max(SPIKE_MADS * mad, SPIKE_MIN_PER_M)
    left, right = k[1:-1] - k[:-2], k[1:-1] - k[2:]
    glitch = (
        (np.abs(left) > thresh)
        & (np.abs(right) > thresh)
        & (np.sign(left) == np.sign(right))
        & (np.abs(k[:-2] - k[2:]) < thresh / 2)
    )
    return [int(i) + 1 for i in np.flatnonzero(glitch)]


def label_statistics(k: np.ndarray) -> Dict[str, Any]:
    """Label statistics of one recording's curvature ``k`` (1/m), in time order.

    ``min``/``max``/``mean``/``std``/``p1``/``p99``; ``spikes``: frames whose label jumps away from
    both neighbours by more than ``max(SPIKE_MADS x 1.4826 x MAD of the label's frame-to-frame steps,
    SPIKE_MIN_PER_M)`` in the same direction while the neighbours agree with each other within half
    that (a one-frame glitch, not a steering motion); ``at_limit``: frames exactly at the
    smallest / largest value when at least ``LIMIT_MIN_FRAMES`` frames (and 0.5 %) sit there (labels
    clipped at a steering limit, or a saturated sensor).
    """
    k = np.asarray(k, dtype=np.float64)
    out: Dict[str, Any] = {"frames": int(k.size)}
    if k.size == 0:
        return out
    out.update(
        min=float(k.min()),
        max=float(k.max()),
        mean=float(k.mean()),
        std=float(k.std()),
        p1=float(np.percentile(k, 1)),
        p99=float(np.percentile(k, 99)),
        mean_abs=float(np.abs(k).mean()),
    )
    spikes = spike_frames(k)
    out["spikes"] = {"count": len(spikes), "frames": spikes[:20]}
    need = max(LIMIT_MIN_FRAMES, int(np.ceil(0.005 * k.size)))
    tol = 1e-9 * max(1.0, float(np.abs(k).max()))
    limits = {}
    for side, value in (("min", k.min()), ("max", k.max())):
        n = int(np.count_nonzero(np.abs(k - value) <= tol))
        if n >= need and value != 0.0:
            limits[side] = {"value": float(value), "frames": n}
    out["at_limit"] = limits
    return out


def sharp_places(curvatures: Sequence[np.ndarray]) -> List[Dict[str, Any]]:
    """For each curvature of :data:`SHARP_PER_M`: the places where the labels curve beyond it to the
    left (+) and to the right (-), each a run of at least two consecutive frames of one recording
    (a single-frame spike is no place), and the share of all frames beyond it. A policy learns a kind
    of place from how many of them the logs hold, not from how many frames they fill: one junction
    turn recorded slowly is still one."""
    ks = [np.asarray(k, dtype=np.float64) for k in curvatures]
    frames = max(sum(k.size for k in ks), 1)
    out = []
    for limit in SHARP_PER_M:
        row: Dict[str, Any] = {"beyond_per_m": round(limit, 6), "left": 0, "right": 0, "share": 0.0}
        for k in ks:
            for side, beyond in (("left", k > limit), ("right", k < -limit)):
                edges = np.diff(np.concatenate([[0], beyond.astype(np.int8), [0]]))
                runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
                row[side] += int(np.count_nonzero(runs >= 2))
                row["share"] += float(beyond.sum()) / frames
        out.append(row)
    return out


def _label_line(stats: Dict[str, Any], indent: str = "    ") -> List[str]:
    """Text lines of :func:`label_statistics` (curvature also in 1/km, as training logs it)."""
    if not stats.get("frames"):
        return []
    lines = [
        f"{indent}labels: {stats['min']:+.4f}..{stats['max']:+.4f} 1/m (p1 {stats['p1']:+.4f}, p99 "
        f"{stats['p99']:+.4f}), std {stats['std'] * 1000:.1f} 1/km, "
        f"{stats['spikes']['count']} single-frame spike(s)"
    ]
    if stats["spikes"]["count"]:
        lines[-1] += " at frame(s) " + ", ".join(str(f) for f in stats["spikes"]["frames"][:8])
    for side, lim in stats["at_limit"].items():
        lines.append(
            f"{indent}labels at a steering limit: {lim['frames']} frame(s) at the {side}imum "
            f"{lim['value']:+.4f} 1/m (clipped labels?)"
        )
    return lines


def _summary(rec: Recording, gap_factor: float) -> Dict[str, Any]:
    t, k, v = rec.log["timestamp_s"], rec.log["curvature"], rec.log["speed_mps"]
    dt = np.diff(t)
    med = float(np.median(dt)) if len(dt) else 0.0
    gaps = np.flatnonzero(dt > gap_factor * med) if len(dt) else np.array([], dtype=int)
    return {
        "name": display_name(rec),
        "source": rec.meta.source,
        "path": str(rec.path),
        "frames": len(rec),
        "size": [rec.meta.width, rec.meta.height],
        "duration_s": float(t[-1] - t[0]) if len(t) else 0.0,
        "fps": float(1.0 / med) if med > 0 else rec.meta.fps,
        "dt_s": {
            "median": med,
            "min": float(dt.min()) if len(dt) else 0.0,
            "max": float(dt.max()) if len(dt) else 0.0,
        },
        "gaps": [{"after_frame": int(i), "dt_s": float(dt[i])} for i in gaps],
        "curvature_per_m": {
            "min": float(k.min()),
            "max": float(k.max()),
            "mean_abs": float(np.abs(k).mean()),
        },
        "labels": label_statistics(k),
        "speed_mps": {"min": float(v.min()), "max": float(v.max())},
        "camera": rec.meta.camera.to_dict() if rec.meta.camera else None,
        "poses": _poses(rec),
    }


def _poses(rec: Recording) -> Any:
    """Whether the log has the car's pose (log replay's path then comes from it, not from
    integrating curvature): where it came from and the length of the path, or None."""
    if not all(c in rec.log for c in POSE_COLUMNS):
        return None
    step = np.hypot(np.diff(rec.log["x_m"]), np.diff(rec.log["y_m"]))
    return {"from": rec.meta.extra.get("poses", "x_m, y_m, yaw_rad"), "path_m": float(step.sum())}


def plot_recordings(recs: Sequence[Recording], out: str, gap_factor: float = 3.0, limit: int = 8) -> None:
    """Curvature (1/km) and speed over time for up to ``limit`` recordings, time gaps shaded."""
    # matplotlib loads only when a plot is asked for (start-up time: ~1 s for every importer)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after the backend is chosen; start-up time as above

    shown = list(recs)[:limit]
    fig, axes = plt.subplots(len(shown), 1, figsize=(10, 2.2 * len(shown)), squeeze=False)
    for ax, rec in zip(axes[:, 0], shown):
        t = rec.log["timestamp_s"] - rec.log["timestamp_s"][0]
        dt = np.diff(t)
        gaps = np.flatnonzero(dt > gap_factor * np.median(dt)) if len(dt) else np.array([], dtype=int)
        # NaN after each gap so the lines break there
        tt, k, v = (
            np.insert(a.astype(float), gaps + 1, np.nan)
            for a in (t, rec.log["curvature"] * 1000.0, rec.log["speed_mps"])
        )
        ax.plot(tt, k, lw=0.8, color="tab:blue")
        ax.set_ylabel("curvature [1/km]", color="tab:blue")
        twin = ax.twinx()
        twin.plot(tt, v, lw=0.8, color="tab:gray")
        twin.set_ylabel("speed [m/s]", color="tab:gray")
        for i in gaps:
            ax.axvspan(t[i], t[i + 1], color="tab:red", alpha=0.25, lw=0)
        ax.set_title(f"{display_name(rec)}: {len(rec)} frames, {len(gaps)} gap(s) shaded", fontsize=9)
    axes[-1, 0].set_xlabel("time [s]")
    fig.tight_layout()
    save_figure(fig, out, dpi=110)


def inspect_logs(
    paths: Sequence[str],
    format: Optional[str] = None,
    options: Optional[Dict[str, Any]] = None,
    decode: bool = True,
    gap_factor: float = 3.0,
    plot: Optional[str] = None,
) -> Dict[str, Any]:
    """JSON-able report: ``logs`` (path, format), ``recordings`` (summaries), ``problems``;
    ``plot`` writes a picture of the labels over time (:func:`plot_recordings`).

    Raises:
        DataError (``no_logs``): a path (file, folder or glob) holds no driving log at all (a text
            file, an empty folder, a recording's meta.json); the message lists the layouts.
    """
    problems = Problems("skip")
    logs = []
    for path in paths:
        found = discover(path, format)
        if not found:
            raise DataError(str(path), None, "no_logs", no_log_message(path))
        logs += [(str(p), f) for p, f in found]
    recs = read_logs(list(paths), format, options, problems)
    summaries = []
    for rec in recs:
        s = _summary(rec, gap_factor)
        if decode:
            s["decodable_frames"] = _decode_all(rec, problems)
        summaries.append(s)
    if plot and recs:
        plot_recordings(recs, plot, gap_factor)
    all_k = np.concatenate([r.log["curvature"] for r in recs]) if recs else np.zeros(0)
    overall = {
        key: value for key, value in label_statistics(all_k).items() if key not in ("spikes", "at_limit")
    }
    overall["spikes"] = int(sum(s["labels"]["spikes"]["count"] for s in summaries if "spikes" in s["labels"]))
    overall["at_limit"] = int(
        sum(v["frames"] for s in summaries for v in s["labels"].get("at_limit", {}).values())
    )
    overall["sharp_places"] = sharp_places([r.log["curvature"] for r in recs])
    return {
        "logs": [_log_entry(p, f) for p, f in logs],
        "recordings": summaries,
        "labels": overall,
        "totals": {
            "recordings": len(recs),
            "frames": int(sum(len(r) for r in recs)),
            "duration_s": float(sum(s["duration_s"] for s in summaries)),
        },
        "problems": [
            {"file": p.file, "row": p.row, "kind": p.kind, "message": p.message} for p in problems.items
        ],
        "problem_counts": problems.counts(),
    }


def _log_entry(path: str, format: str) -> Dict[str, Any]:
    """A log's path and format; a ROS bag's topics too (type, count, the roles drive can give them)."""
    entry: Dict[str, Any] = {"path": path, "format": format}
    if format == "rosbag":
        try:
            entry["topics"] = list_topics(Path(path))
        # a damaged bag fails to open with any error type (see rosbag_io.open_or_report); the read
        # itself reports it as a problem, the listing only notes why it has no topics
        except Exception as e:  # noqa: BLE001
            entry["topics_error"] = f"{type(e).__name__}: {e}"
    return entry


def format_report(report: Dict[str, Any]) -> str:
    """Human-readable text of :func:`inspect_logs`'s report."""
    lines = [
        f"{len(report['logs'])} log(s): "
        + ", ".join(f"{entry['path']} [{entry['format']}]" for entry in report["logs"])
    ]
    for log in report["logs"]:
        if log.get("topics"):
            lines.append(f"  topics of {log['path']}:")
            for t in log["topics"]:
                role = f"  <- {'/'.join(t['roles'])}" if t["roles"] else ""
                lines.append(f"    {t['topic']}  {t['type']}  {t['messages']} msgs{role}")
    for s in report["recordings"]:
        k = s["curvature_per_m"]
        lines.append(
            f"- {s['name']} ({s['source']}): {s['frames']} frames {s['size'][0]}x{s['size'][1]}, "
            f"{s['duration_s']:.1f} s at {s['fps']:.2f} fps "
            f"(dt {s['dt_s']['min']:.3f}..{s['dt_s']['max']:.3f} s), "
            f"{len(s['gaps'])} gap(s), curvature {k['min']:+.4f}..{k['max']:+.4f} 1/m, "
            f"speed {s['speed_mps']['min']:.1f}..{s['speed_mps']['max']:.1f} m/s"
            + ("" if s["camera"] else ", no camera calibration")
            + (f", poses ({s['poses']['path_m']:.0f} m)" if s.get("poses") else ", no poses")
            + (f", {s['decodable_frames']} decodable" if "decodable_frames" in s else "")
        )
        for g in s["gaps"][:5]:
            lines.append(f"    gap after frame {g['after_frame']}: {g['dt_s']:.3f} s")
        lines += _label_line(s.get("labels", {}))
    tot = report["totals"]
    lines.append(
        f"total: {tot['recordings']} recording(s), {tot['frames']} frames, {tot['duration_s']:.1f} s"
    )
    lab = report.get("labels", {})
    if lab.get("frames"):
        lines.append(
            f"labels: {lab['min']:+.4f}..{lab['max']:+.4f} 1/m (p1 {lab['p1']:+.4f}, p99 {lab['p99']:+.4f}), "
            f"std {lab['std'] * 1000:.1f} 1/km; best constant predictor MSE {lab['std'] ** 2 * 1e6:.1f} "
            f"(1/km)^2; {lab['spikes']} single-frame spike(s), {lab['at_limit']} frame(s) at a steering limit"
        )
        places = "; ".join(
            f"1/{1 / p['beyond_per_m']:.0f} m: {p['left']} left, {p['right']} right "
            f"({100 * p['share']:.1f} %)"
            for p in lab["sharp_places"]
        )
        lines.append(f"sharp places (2+ frames beyond; % of frames): {places}")
    if report["problems"]:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(report["problem_counts"].items()))
        lines.append(f"{len(report['problems'])} problem(s): {counts}")
        for p in report["problems"]:
            where = p["file"] if p["row"] is None else f"{p['file']}, row {p['row']}"
            lines.append(f"  {where}: {p['message']} [{p['kind']}]")
    else:
        lines.append("no problems found")
    return "\n".join(lines)


def _name(rec: Recording, taken: set) -> str:
    name = display_name(rec)  # a folder + CSV log is named after its folder, not its CSV
    stem, k = name, 1
    while name in taken:
        k += 1
        name = f"{stem}-{k}"
    taken.add(name)
    return name


def convert_logs(
    paths: Sequence[str],
    out: str,
    format: Optional[str] = None,
    options: Optional[Dict[str, Any]] = None,
    on_error: str = "raise",
    storage: str = "frames",
    overwrite: bool = False,
) -> List[Path]:
    """Write every recording found at ``paths`` as a canonical recording under ``out``.

    Frames that cannot be decoded or have the wrong size raise, or are dropped with ``on_error="skip"``
    (the converted log then has a time gap there). Returns the written directories.
    """
    problems = Problems(on_error)
    recs = read_logs(list(paths), format, options, problems)
    written, taken = [], set()
    for rec in recs:
        m = rec.meta
        meta = RecordingMeta(
            fps=m.fps,
            width=m.width,
            height=m.height,
            camera=m.camera,
            source=m.source,
            conditions=m.conditions,
            seed=m.seed,
            storage=storage,
            extra=m.extra,
        )
        target = Path(out) / _name(rec, taken)
        with RecordingWriter(target, meta, overwrite=overwrite) as writer:
            for i, frame in iter_decoded(rec, problems):
                if frame is None:
                    continue
                extra = {
                    c: float(v[i])
                    for c, v in rec.log.items()
                    if c not in ("frame", "timestamp_s", "curvature", "speed_mps")
                }
                writer.append(
                    frame,
                    timestamp_s=float(rec.log["timestamp_s"][i]),
                    curvature=float(rec.log["curvature"][i]),
                    speed_mps=float(rec.log["speed_mps"][i]),
                    **extra,
                )
        written.append(target)
    if len(problems):
        print(problems.summary())
    return written
