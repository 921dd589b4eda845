"""``runs/demo/REPORT.md`` from a demo run's results (drive.demo.report), without running the demo:
every section from results written here, the acceptance verdict, and summary.json."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict

import pytest

from drive.demo.report import write_report
from drive.demo.results import (
    Baselines,
    ClosedForm,
    DemoResults,
    Drives,
    Drove,
    Export,
    HardDrove,
    OnPolicyArm,
    Robustness,
    Saliency,
    Simulated,
    Trained,
)
from drive.demo.settings import DemoSettings


def _metrics(km: float, interventions: int) -> Dict[str, Any]:
    return {
        "km": km,
        "interventions": interventions,
        "interventions_per_km": interventions / km,
        "autonomy_pct": 99.0 - interventions,
        "lateral_rms_m": 0.1 + 0.01 * interventions,
        "heading_rms_rad": 0.02,
        "steering_rate_rms": 0.003,
    }


def results(out: Path, policy_interventions: int = 1, export_interventions: int = 1) -> DemoResults:
    """What run_demo hands write_report: one entry per stage, paths inside ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    csv = out / "metrics.csv"
    rows = ["step,train/loss_step,val/mse_km,val/mae_km"]
    rows += [f"{s},{1.0 / (s + 1):.4f},," for s in range(0, 50, 5)]
    rows += ["49,,12.5,2.5"]
    csv.write_text("\n".join(rows) + "\n")
    return DemoResults(
        settings=DemoSettings(out=str(out)),
        simulate=Simulated(train=[], val=[], test=[], seconds=30.0),
        train=Trained(
            seconds=300.0,
            steps=50,
            metrics_csv=str(csv),
            checkpoint=str(out / "models" / "ncp_ltc.ckpt"),
            best_checkpoint=str(out / "models" / "best.ckpt"),
            branch_checkpoint="",
            label_lookahead_s=None,
        ),
        baselines=Baselines(checkpoints={}, seconds=60.0),
        drive=Drives(
            seconds=120.0,
            drivers={
                "ncp_ltc": Drove(
                    metrics=_metrics(6.0, policy_interventions),
                    plot=str(out / "drive" / "ncp.png"),
                    video=str(out / "drive" / "ncp.mp4"),
                ),
                "expert": Drove(metrics=_metrics(6.0, 0), plot=str(out / "drive" / "expert.png")),
                "constant": Drove(metrics=_metrics(6.0, 40)),
            },
        ),
        saliency=Saliency(
            seconds=20.0,
            noise=0.1,
            frames=150,
            fps=10.0,
            size=[200, 66],
            method="bojarski",
            rows=["clean", "noisy"],
            video=str(out / "saliency.mp4"),
            contact_sheet=str(out / "saliency.png"),
        ),
        robustness=Robustness(
            seconds=90.0,
            report=str(out / "robustness" / "REPORT.md"),
            rows=[
                {"model": "ncp_ltc", "kind": "gaussian", "level": 0.1, "mse": 20.0, "ssim_mean": 0.9},
                {
                    "model": "lstm",
                    "kind": "gaussian",
                    "level": 0.1,
                    "mse": 30.0,
                    "ssim_mean": 0.8,
                    "interventions": 2,
                    "closed_loop_km": 0.3,
                    "interventions_per_km": 2 / 0.3,
                },
            ],
            plots=[str(out / "robustness" / f"{n}.png") for n in ("mse", "ssim_mean", "other")],
        ),
        closed_form=ClosedForm(
            seconds=40.0,
            converted=str(out / "models" / "closed_form.ckpt"),
            fidelity={
                "method": "exact",
                "open_loop": {"mse_vs_ode": 0.004},
                "speed": {
                    "ode": {"forward_ms": 9.0, "step_ms": 0.2},
                    "closed_form": {"forward_ms": 3.0, "step_ms": 0.1},
                    "forward_speedup": 3.0,
                    "step_speedup": 2.0,
                },
                "closed_loop": {
                    "km": 1.0,
                    "ode": {"interventions": 0, "km": 1.0},
                    "closed_form": {"interventions": 1, "km": 1.0},
                },
            },
        ),
        export=Export(
            seconds=25.0,
            file=str(out / "models" / "ncp_ltc.ts"),
            bytes=2_500_000,
            frames_compared=300,
            max_abs_diff_per_km=1.5e-5,
            closed_loop=_metrics(6.0, export_interventions),
        ),
    )


def test_every_section_and_the_verdict(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    summary = write_report(out, results(out))
    text = (out / "REPORT.md").read_text()
    sections = [line for line in text.splitlines() if line.startswith("#")]
    assert sections == [
        "# drive demo",
        "## Acceptance",
        "## Closed loop on held-out roads",
        "## Training",
        "## Saliency (VisualBackProp)",
        "## Robustness to camera noise",
        "## Closed-form LTC",
        "## Export",
        "## Time per stage",
    ]
    assert summary["acceptance"]["passed"] and "verdict: **PASSED**" in text
    assert "| NCP-LTC (learned, camera only) | 6.00 | 1 |" in text
    assert "![training curve](training_curve.png)" in text and (out / "training_curve.png").is_file()
    assert "MSE 12.5 (1/km)^2, MAE 2.50 1/km" in text
    assert "`models/ncp_ltc.ckpt`" in text and "(`models/best.ckpt`)." in text
    assert "| model | kind | level | mse | ssim_mean |" in text  # the keys the first row has
    assert "![robustness](robustness/mse.png)" in text and "robustness/other.png" not in text
    assert "Details: [models/closed_form.fidelity.md](models/closed_form.fidelity.md)" in text
    assert "TorchScript `models/ncp_ltc.ts` (2.50 MB, preprocessing inside)" in text
    assert "| **total** | **685** |" in text
    saved = json.loads((out / "summary.json").read_text())
    assert saved["stage_seconds"]["train"] == 300.0 and saved["training"]["steps"] == 50
    assert set(saved["closed_loop"]) == {"ncp_ltc", "expert", "constant"}


@pytest.mark.parametrize(
    ("policy", "exported", "failed"),
    [(4, 1, ["NCP-LTC 0.67 interventions/km > 0.5"]), (1, 5, ["exported file 0.83 interventions/km > 0.5"])],
)
def test_a_failed_criterion_is_named(tmp_path: Path, policy: int, exported: int, failed: list) -> None:
    out = tmp_path / "demo"
    summary = write_report(out, results(out, policy, exported))
    assert summary["acceptance"]["failed"] == failed
    assert f"verdict: **FAILED: {failed[0]}**" in (out / "REPORT.md").read_text()


def test_optional_stages_left_out_leave_their_sections_out(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    full = replace(results(out), saliency=None, robustness=None, closed_form=None, export=None)
    write_report(out, full)
    text = (out / "REPORT.md").read_text()
    assert "## Saliency" not in text and "## Export" not in text and "## Time per stage" in text


def test_the_policy_trained_in_the_loop_is_reported_beside_the_behaviour_cloning_arm(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    full = results(out, policy_interventions=0)
    loop_csv = out / "loop_metrics.csv"
    loop_csv.write_text("step,train/loss_step,val/mse_km,val/mae_km\n45,0.02,,\n49,,9.5,2.1\n")
    full.onpolicy = OnPolicyArm(
        seconds=80.0,
        checkpoint=str(out / "train_onpolicy" / "last.ckpt"),
        metrics_csv=str(loop_csv),
        steps=50,
        branch_step=40,
        every_n_steps=3,
        noise_std=0.015,
        share=0.25,
        episodes=16,
        episode_s=20.0,
        rounds=3,
        visited_steps=9600,
    )
    full.drive.drivers["ncp_ltc_bc"] = Drove(metrics=_metrics(6.0, 3), plot="")
    summary = write_report(out, full)
    text = (out / "REPORT.md").read_text()
    assert "## Training in the loop (both arms)" in text
    assert "| NCP-LTC, behaviour cloning only (the other arm) | 6.00 | 3 |" in text
    assert "behaviour cloning to step 40, then in the loop to step 50: every 3 steps" in text
    assert "16 episodes of 20 s with DART noise of 0.015 1/m" in text and "replaced 25% of" in text
    # the policy's checkpoint and last validation are the loop's; the run it branched from is kept
    training = text.split("## Training\n")[1].split("##")[0]
    assert "`train_onpolicy/last.ckpt`" in training and "`models/ncp_ltc.ckpt`" in training
    assert "MSE 9.5 (1/km)^2, MAE 2.10 1/km" in training
    assert "in the loop (the policy): 0.00/km (95% 0.00-0.61)" in text
    assert set(summary["closed_loop"]) == {"ncp_ltc", "ncp_ltc_bc", "expert", "constant"}


def test_held_out_hard_roads_are_reported_beside_the_easy_ones(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    full = results(out, policy_interventions=0)
    write_report(out, full)
    assert "## Closed loop on held-out hard roads" not in (out / "REPORT.md").read_text()
    for name, count in (("ncp_ltc", 2), ("expert", 0), ("constant", 90)):
        full.drive.drivers[name].hard = HardDrove(
            metrics=_metrics(3.0, count), plot=str(out / "drive" / "hard.png")
        )
    summary = write_report(out, full)
    text = (out / "REPORT.md").read_text()
    hard = text.split("## Closed loop on held-out hard roads")[1]
    assert "| NCP-LTC (learned, camera only) | 3.00 | 2 | 0.67/km" in hard
    assert "| constant steering (straight ahead) | 3.00 | 90 |" in hard and "](drive/hard.png)" in hard
    assert summary["closed_loop_hard"]["ncp_ltc"]["interventions"] == 2
    assert summary["acceptance"]["passed"]  # judged on the easy roads; hard roads are reported


def test_validation_by_driving_is_drawn_beside_the_mse(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    full = results(out, policy_interventions=0)
    csv = Path(full.train.metrics_csv)
    csv.write_text(
        "step,train/loss_step,val/mse_km,val/mae_km,val/replay/interventions_per_km\n"
        "10,0.5,,,\n19,,30.0,4.0,3.2\n39,,12.5,2.5,0.8\n"
    )
    summary = write_report(out, full)
    assert summary["training"]["replay_points"] == 2 and summary["training"]["val_replay_per_km"] == 0.8
    assert "driven in log replay 0.80 interventions/km" in (out / "REPORT.md").read_text()
