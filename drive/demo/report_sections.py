"""The sections of ``runs/demo/REPORT.md`` that each stage's results fill (:mod:`drive.demo.report`
writes the report, its head, the closed-loop table and the acceptance check): training (the curve,
the policy's checkpoint and the two arms: behaviour cloning and training in the loop), saliency,
robustness, closed form and export."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from drive.demo.results import ClosedForm, Drives, Export, OnPolicyArm, Robustness, Saliency, Trained
from drive.demo.settings import DemoSettings
from drive.io.atomic import save_figure
from drive.sim.poisson import format_rate, rates_differ_p

__all__ = [
    "BC_ARM",
    "POLICY",
    "STAGES",
    "arms_section",
    "hard_roads_section",
    "closed_form_section",
    "export_section",
    "in_the_loop",
    "rel",
    "robustness_section",
    "saliency_section",
    "training_curve",
    "training_section",
]


# the demo's stages in the order they run: the runner counts them, the report times them
STAGES = (
    "simulate",
    "train",
    "onpolicy",  # only with --onpolicy-steps
    "baselines",
    "drive",
    "saliency",
    "robustness",
    "closed_form",
    "export",
)
POLICY = "ncp_ltc"  # the demo's policy: its drives, files and report rows
BC_ARM = "ncp_ltc_bc"  # the behaviour-cloning run it branched from, driven beside it


def _curve(metrics_csv: Path) -> tuple:
    """(training loss per step, validation (step, MSE, MAE) points) of Lightning's CSV log."""
    train, val, _ = _curves(metrics_csv)
    return train, val


def _curves(metrics_csv: Path) -> tuple:
    """:func:`_curve`'s points and validation by driving's (step, interventions per km) points."""
    with open(metrics_csv) as f:
        rows = list(csv.DictReader(f))
    train = [(int(r["step"]), float(r["train/loss_step"])) for r in rows if r.get("train/loss_step")]
    val = [
        (int(r["step"]), float(r["val/mse_km"]), float(r.get("val/mae_km") or "nan"))
        for r in rows
        if r.get("val/mse_km")
    ]
    key = "val/replay/interventions_per_km"
    replay = [(int(r["step"]), float(r[key])) for r in rows if r.get(key)]
    return train, val, replay


def training_curve(metrics_csv: Path, out_png: Path, loop_csv: Optional[Path] = None) -> Dict[str, Any]:
    """Plot training loss per step and validation MSE (1/km^2) from Lightning's CSV log, and of the
    run's branch trained in the loop (``loop_csv``) over it; the last validation is the policy's
    (the branch's, if there is one)."""
    import matplotlib  # here, not at the top: matplotlib's 0.35 s start-up only when a curve is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

    train, val, replay = _curves(metrics_csv)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bc = ", behaviour cloning" if loop_csv else ""
    if train:
        ax.plot(*zip(*train), lw=0.8, alpha=0.7, label=f"train loss (weighted MSE{bc})")
    if val:
        ax.plot([v[0] for v in val], [v[1] for v in val], "o-", label=f"validation MSE (stateful{bc})")
    if loop_csv:
        train, val = _curve(loop_csv)
        if train:
            ax.plot(*zip(*train), lw=0.8, alpha=0.8, label="train loss, in the loop")
        if val:
            ax.plot([v[0] for v in val], [v[1] for v in val], "s", label="validation MSE, in the loop")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("(1/km)$^2$")
    ax.set_yscale("log")
    ax.legend(loc="upper left", fontsize=8)
    if replay:  # validation by driving, beside the MSE (drive.train.replay_validation)
        drove = ax.twinx()
        drove.plot(*zip(*replay), "D--", color="tab:red", label="validation in log replay")
        drove.set_ylabel("interventions / km", color="tab:red")
        drove.set_ylim(bottom=0)
        drove.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out_png, dpi=110)
    last = val[-1] if val else (None, float("nan"), float("nan"))
    drove = {"val_replay_per_km": replay[-1][1], "replay_points": len(replay)} if replay else {}
    return {"val_mse_km": last[1], "val_mae_km": last[2], "val_points": len(val), **drove}


def rel(path: Any, out: Path) -> str:
    return os.path.relpath(str(path), str(out)) if path else ""


def fmt(x: Any, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else str(x)


def _robustness_cell(row: Dict[str, Any], key: str) -> str:
    """A robustness table cell; a closed-loop rate with its exact interval where the row has the count."""
    if key == "interventions_per_km" and "interventions" in row and "closed_loop_km" in row:
        return format_rate(int(row["interventions"]), float(row["closed_loop_km"]))
    return fmt(row.get(key), 3)


def in_the_loop(arm: Optional[OnPolicyArm]) -> str:
    """How many of the policy's steps were trained in the loop ("" without the arm)."""
    if arm is None:
        return ""
    return f", behaviour cloning to step {arm.branch_step} and in the loop after it"


def training_section(out: Path, t: Trained, curve: Dict[str, Any], arm: Optional[OnPolicyArm]) -> List[str]:
    """The steps, the policy's last validation, its checkpoint and the training curve (``t``: the
    behaviour-cloning run; ``arm``: its branch trained in the loop, the policy, if there is one)."""
    lookahead = t.label_lookahead_s
    labels = (
        f"Corrected labels at a look-ahead of {lookahead:g} s, fitted on the training logs (docs/data.md). "
        if lookahead
        else ""
    )
    best = f" (`{rel(t.best_checkpoint, out)}`)" if t.best_checkpoint else ""
    if arm is not None:
        policy = (
            f"Policy: the final weights of training in the loop (below), `{rel(arm.checkpoint, out)}` "
            "(loads alone: policy config with wiring, preprocessing, fps); the behaviour-cloning run's "
            f"final weights, `{rel(t.checkpoint, out)}`, and its best-validation checkpoint{best} "
            "are kept beside it."
        )
    else:
        policy = (
            f"Policy: the final weights, `{rel(t.checkpoint, out)}` (loads alone: policy config with "
            f"wiring, preprocessing, fps); the best-validation checkpoint is kept beside it{best}."
        )
    return [
        "",
        "## Training",
        "",
        f"{t.steps} optimizer steps; last validation (whole recordings, hidden state carried): "
        f"MSE {fmt(curve['val_mse_km'], 1)} (1/km)^2, MAE {fmt(curve['val_mae_km'])} 1/km"
        + (
            f"; driven in log replay {curve['val_replay_per_km']:.2f} interventions/km (red in the curve). "
            if "val_replay_per_km" in curve
            else ". "
        )
        + labels
        + policy,
        "",
        "![training curve](training_curve.png)",
    ]


def arms_section(arm: Optional[OnPolicyArm], drives: Drives) -> List[str]:
    """How the policy was trained in the loop, and how it drove beside the behaviour-cloning run it
    branched from (docs/training.md)."""
    drive = drives.drivers
    if arm is None or BC_ARM not in drive:
        return []
    a, b = drive[POLICY].metrics, drive[BC_ARM].metrics
    p = rates_differ_p(a["interventions"], a["km"], b["interventions"], b["km"])
    return [
        "",
        "## Training in the loop (both arms)",
        "",
        f"The NCP-LTC learned by behaviour cloning to step {arm.branch_step}, then in the loop to step "
        f"{arm.steps}: every {arm.every_n_steps} steps the current policy drove the training logs "
        f"in log replay, {arm.episodes} episodes of {arm.episode_s:g} s with DART noise of "
        f"{arm.noise_std:g} 1/m on its commands, and windows of the states it visited, with labels "
        f"corrected back to the recorded path, replaced {arm.share:.0%} of every batch "
        f"({arm.rounds} rounds, {arm.visited_steps} visited steps). The other arm is the same run "
        f"continued to step {arm.steps} by behaviour cloning alone: same seeds, data order, "
        "learning-rate schedule and step budget; only the last steps' batches differ (docs/training.md, "
        '"On-policy data from log replay").',
        "",
        f"- in the loop (the policy): {format_rate(a['interventions'], a['km'])}, lateral RMS "
        f"{a['lateral_rms_m']:.3f} m; behaviour cloning only: {format_rate(b['interventions'], b['km'])}, "
        f"lateral RMS {b['lateral_rms_m']:.3f} m (same {b['km']:.2f} km of held-out roads); told apart "
        "at this distance? " + ("yes" if p <= 0.05 else "**no**") + f" (p = {p:.2g})",
    ]


def hard_roads_section(out: Path, drives: Drives, labels: Sequence[Tuple[str, str]]) -> List[str]:
    """The drivers on held-out hard roads (junction turns, hairpins, S-bends, chicanes, a speed that
    follows the road; docs/world.md), if they were driven (``labels``: (driver, row label))."""
    drive = drives.drivers
    rows = [(key, label, drive[key].hard) for key, label in labels if key in drive and drive[key].hard]
    if not rows:
        return []
    lines = [
        "",
        "## Closed loop on held-out hard roads",
        "",
        "Junction turns (the lane curving by up to 1/5.2 m), hairpins, S-bends and chicanes beside "
        'straights and gentle curves, at a speed that follows the road (docs/world.md, "Hard roads"); '
        "the same test seeds, the same intervention rule.",
        "",
        "| driver | km | interventions | per km (exact 95 % interval) | lateral RMS m |",
        "|---|---|---|---|---|",
    ]
    for _, label, hard in rows:
        m = hard.metrics
        lines.append(
            f"| {label} | {m['km']:.2f} | {m['interventions']} | {format_rate(m['interventions'], m['km'])} "
            f"| {m['lateral_rms_m']:.3f} |"
        )
    policy, bc = drive.get(POLICY), drive.get(BC_ARM)
    if policy and policy.hard and bc and bc.hard:
        a, b = policy.hard.metrics, bc.hard.metrics
        p = rates_differ_p(a["interventions"], a["km"], b["interventions"], b["km"])
        lines += [
            "",
            "- in the loop vs behaviour cloning on hard roads: told apart? "
            + ("yes" if p <= 0.05 else "**no**")
            + f" (p = {p:.2g})",
        ]
    plot = policy.hard.plot if policy and policy.hard else ""
    return lines + (["", f"![NCP-LTC on hard roads]({rel(plot, out)})"] if plot else [])


def saliency_section(out: Path, sal: Optional[Saliency]) -> List[str]:
    if sal is None:
        return []
    lines = [
        "",
        "## Saliency (VisualBackProp)",
        "",
        f"Where the policy looks, clean (top) and with Gaussian noise std {sal.noise} (bottom), "
        f"{sal.frames} frames of a held-out recording: [{rel(sal.video, out)}]({rel(sal.video, out)})",
    ]
    if sal.contact_sheet:
        lines += ["", f"![saliency]({rel(sal.contact_sheet, out)})"]
    return lines


_ROBUSTNESS_KEYS = ("model", "kind", "level", "mse", "interventions_per_km", "ssim_mean", "lipschitz_max")
_ROBUSTNESS_PLOTS = ("mse", "interventions_per_km", "ssim_mean")


def robustness_section(out: Path, rob: Optional[Robustness], settings: DemoSettings) -> List[str]:
    if rob is None:
        return []
    lines = [
        "",
        "## Robustness to camera noise",
        "",
        "Per model and perturbation: open-loop MSE on a held-out recording ((1/km)^2, hidden state "
        "carried), closed-loop interventions per km on held-out roads with the camera perturbed, SSIM of "
        "clean vs perturbed saliency maps, largest per-neuron sensitivity of the recurrent state. "
        "Baselines are trained on the same data for "
        f"{settings.baseline_steps} optimizer steps each. Full report: "
        f"[{rel(rob.report, out)}]({rel(rob.report, out)})",
        "",
    ]
    rows = rob.rows
    if rows:
        keys = [k for k in _ROBUSTNESS_KEYS if k in rows[0]]
        lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        lines += ["| " + " | ".join(_robustness_cell(r, k) for k in keys) + " |" for r in rows]
    plots = [p for p in rob.plots if Path(p).stem in _ROBUSTNESS_PLOTS]
    return lines + [""] + [f"![robustness]({rel(p, out)})" for p in plots]


def closed_form_section(out: Path, cf: Optional[ClosedForm]) -> List[str]:
    if cf is None:
        return []
    fid = cf.fidelity
    ol, sp, cl = fid.get("open_loop", {}), fid.get("speed", {}), fid.get("closed_loop", {})
    lines = [
        "",
        "## Closed-form LTC",
        "",
        f"The trained LTC converted to its closed form (`{fid.get('method')}`, no ODE solver): "
        f"`{rel(cf.converted, out)}`.",
        "",
        "| | ODE LTC (6 unfolds) | closed form |",
        "|---|---|---|",
        f"| output MSE vs the ODE LTC, held-out recording ((1/km)^2) | 0 | {fmt(ol.get('mse_vs_ode'), 3)} |",
        f"| forward B=16 L=32 (ms, 1 thread) | {fmt(sp.get('ode', {}).get('forward_ms'), 3)} | "
        f"{fmt(sp.get('closed_form', {}).get('forward_ms'), 3)} ({fmt(sp.get('forward_speedup'))}x) |",
        f"| step B=1 (ms) | {fmt(sp.get('ode', {}).get('step_ms'), 4)} | "
        f"{fmt(sp.get('closed_form', {}).get('step_ms'), 4)} ({fmt(sp.get('step_speedup'))}x) |",
    ]
    if cl:
        lines.append(
            f"| closed loop, {fmt(cl.get('km'), 1)} km held-out: interventions/km | "
            f"{format_rate(cl['ode']['interventions'], cl['ode']['km'])} | "
            f"{format_rate(cl['closed_form']['interventions'], cl['closed_form']['km'])} |"
        )
    details = rel(cf.converted, out).rsplit(".", 1)[0] + ".fidelity.md"
    return lines + ["", f"Details: [{details}]({details})"]


def export_section(out: Path, ex: Optional[Export], checkpoint: Dict[str, Any]) -> List[str]:
    """The exported file, its difference from the checkpoint and, when it drove, its closed loop beside
    the checkpoint's (``checkpoint``: the NCP-LTC's closed-loop metrics)."""
    if ex is None:
        return []
    lines = [
        "",
        "## Export",
        "",
        f"TorchScript `{rel(ex.file, out)}` ({ex.bytes / 1e6:.2f} MB, "
        "preprocessing inside); largest difference from the checkpoint over "
        f"{ex.frames_compared} frames of a held-out recording: {ex.max_abs_diff_per_km:.2e} 1/km.",
    ]
    if ex.closed_loop:
        m, ref = ex.closed_loop, checkpoint
        lines += [
            "",
            f"The exported file drove the same {m['km']:.2f} km of held-out roads: "
            f"{m['interventions']} intervention(s), lateral RMS {m['lateral_rms_m']:.3f} m "
            f"(checkpoint: {ref['interventions']}, {ref['lateral_rms_m']:.3f} m).",
        ]
    return lines
