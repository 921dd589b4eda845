"""`drive demo` end to end: the budget is optimizer steps (same settings, same weights), and a reduced
demo runs every stage — closed-loop robustness and the exported file's drive included — so a crash in
any stage fails the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drive.cli.fit import lightning_main
from drive.demo.report import STAGES
from drive.demo.settings import DEFAULT_CONFIG
from drive.sim.record import simulate


@pytest.fixture(scope="module")
def tiny_logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo_logs")
    simulate(root / "train", minutes=0.5, seed=4, fps=10.0, recording_minutes=0.25, noise_std=0.015)
    simulate(root / "val", minutes=0.25, seed=5, fps=10.0, recording_minutes=0.25)
    return root


def _fit(logs: Path, root: Path, workers: int) -> dict:
    """The shipped profile ``demo``, 6 optimizer steps on tiny logs; returns the final weights."""
    argv = [
        "fit",
        "--config",
        str(DEFAULT_CONFIG),
        "--seed_everything",
        "3",
        "--data.train",
        json.dumps(sorted(str(p) for p in (logs / "train").iterdir())),
        "--data.val",
        json.dumps(sorted(str(p) for p in (logs / "val").iterdir())),
        "--data.cache_dir",
        str(root / "cache"),
        "--data.num_workers",
        str(workers),
        "--trainer.default_root_dir",
        str(root),
        "--trainer.max_steps",
        "6",
        "--trainer.val_check_interval",
        "6",
        "--trainer.enable_progress_bar",
        "false",
    ]
    assert lightning_main(argv) == 0
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 6
    return ckpt["state_dict"]


@pytest.mark.slow
def test_demo_profile_budget_is_steps_and_two_runs_give_identical_weights(
    tiny_logs: Path, tmp_path: Path
) -> None:
    """Two runs of the same settings on the same machine end with bitwise the same weights (another
    CPU may sum float32 in another order: the same steps there give other last bits)."""
    config = DEFAULT_CONFIG.read_text()
    assert "max_time" not in config and "max_steps:" in config
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # what drive demo pins: the same reduction order on every machine
    try:
        first = _fit(tiny_logs, tmp_path / "a", workers=1)
        second = _fit(tiny_logs, tmp_path / "b", workers=0)  # workers change speed, never the batches
    finally:
        torch.set_num_threads(threads)
    assert first.keys() == second.keys()
    changed = [k for k in first if not torch.equal(first[k], second[k])]
    assert not changed, f"weights differ between identical runs: {changed[:5]}"


@pytest.mark.slow
def test_reduced_demo_runs_every_stage_and_names_the_failed_criteria(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    cmd = [
        sys.executable,
        "-m",
        "drive.cli",
        "demo",
        "--out",
        str(out),
        "--train-minutes",
        "0.5",
        "--val-minutes",
        "0.25",
        "--recording-minutes",
        "0.25",
        "--max-steps",
        "4",
        "--onpolicy-steps",
        "2",
        "--baseline-steps",
        "2",
        "--km",
        "0.3",
        "--hard-km",
        "0.1",
        "--test-seeds",
        "5,6",
        "--robustness-km",
        "0.05",
        "--robustness-frames",
        "40",
        "--saliency-frames",
        "8",
        "--closed-form-km",
        "0.05",
        "--speed-rounds",
        "1",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # four optimizer steps cannot keep a lane: the demo runs to the end and says exactly what failed
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAILED acceptance: drove 0.30 km < 6 km" in done.stdout
    for name in STAGES:
        assert (out / "stages" / f"{name}.json").is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["training"]["steps"] == 4
    assert set(summary["stage_seconds"]) == set(STAGES)
    assert not summary["acceptance"]["passed"] and len(summary["acceptance"]["failed"]) >= 1
    drive = json.loads((out / "drive" / "ncp_ltc" / "metrics.json").read_text())
    assert drive["seed"] == [5, 6] and {s["seed"] for s in drive["per_segment"]} == {5}
    report = (out / "REPORT.md").read_text()
    assert "4 optimizer steps" in report and "test seeds 5,6" in report and "| **total** |" in report
    assert "per km (exact 95 % interval)" in report and "told apart at this distance?" in report
    stamps = {n: json.loads((out / "stages" / f"{n}.json").read_text())["result"] for n in STAGES}
    assert stamps["export"]["closed_loop"]["km"] == pytest.approx(0.3, abs=0.01)
    # the demo's policy is trained in the loop: the behaviour-cloning run branched at step 2, a round
    # of rollouts landed and changed its batches; every later stage takes it
    arm = stamps["onpolicy"]
    assert arm["branch_step"] == 2 and arm["steps"] == 4 and arm["rounds"] == 1 and arm["visited_steps"] > 0
    main, other = (
        torch.load(p, weights_only=True)["state_dict"]
        for p in (stamps["train"]["checkpoint"], arm["checkpoint"])
    )
    assert any(not torch.allclose(main[k], other[k], rtol=1e-5, atol=1e-6) for k in main)  # told apart
    # no round was started that could only land after the last step (training would wait for it)
    state = torch.load(arm["checkpoint"], weights_only=True)["callbacks"]["OnPolicyData"]
    assert state["pending"] is None and len(state["rounds"]) == 1
    assert (out / "drive" / "ncp_ltc_bc" / "metrics.json").is_file()
    assert "## Training in the loop (both arms)" in report and "NCP-LTC, behaviour cloning only" in report
    assert arm["noise_std"] > 0 and f"DART noise of {arm['noise_std']:g} 1/m" in report
    # trained on mixed roads (every other recording hard), and driven on held-out hard roads too
    assert [Path(p).name.split("-")[3] == "hard" for p in stamps["simulate"]["train"]] == [False, True]
    assert "## Closed loop on held-out hard roads" in report
    assert summary["closed_loop_hard"]["ncp_ltc"]["km"] == pytest.approx(0.1, abs=0.01)
    assert f"`{Path(arm['checkpoint']).relative_to(out)}`" in report.split("## Training\n")[1]
    policy = Path(arm["checkpoint"]).resolve()
    assert (out / "robustness" / "models" / "ncp_ltc.ckpt").resolve() == policy
    _the_branch_is_one_fit_with_the_schedule_in_the_profile(out, stamps["simulate"], other)
    assert any(r.get("interventions_per_km") is not None for r in stamps["robustness"]["rows"])
    # a second run finds every stage done and redoes nothing
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.stdout.count("skipped") == len(STAGES), again.stdout[-2000:]


def _the_branch_is_one_fit_with_the_schedule_in_the_profile(out: Path, data: dict, branch: dict) -> None:
    """The demo trains its policy as a branch of the behaviour-cloning run (resumed at step 2 with a
    round every step); one uninterrupted ``drive fit`` with that schedule in the profile
    (``onpolicy.start_step``, as the shipped profile ``demo`` has it: from step 1,500 of 1,800) must
    end at the same weights: the same computation on this machine, so within float noise, while a
    round started at another step or a lost buffer moves them far more."""
    argv = ["fit", "--config", str(DEFAULT_CONFIG), "--seed_everything", "0"]
    argv += ["--data.train", json.dumps(data["train"]), "--data.val", json.dumps(data["val"])]
    argv += ["--data.cache_dir", str(out / "cache"), "--trainer.default_root_dir", str(out / "one_fit")]
    argv += ["--trainer.max_steps", "4", "--trainer.enable_progress_bar", "false"]
    argv += ["--onpolicy.start_step", "2", "--onpolicy.every_n_steps", "1"]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # drive demo's --threads
    try:
        assert lightning_main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    single = torch.load(out / "one_fit" / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    for key, value in single.items():
        torch.testing.assert_close(branch[key], value, rtol=1e-5, atol=1e-6, msg=key)
