"""``drive demo``: the whole pipeline on built-in data, one command, about 15 minutes on 2 CPU cores.

:func:`run_demo` runs it from :class:`DemoSettings` (:mod:`drive.demo.settings`); the command line
is :mod:`drive.cli.demo`; the training stages are :mod:`drive.demo.training`.

Stages (each prints its progress and skips itself when re-run with the same settings and its
outputs still exist; changing a setting re-runs that stage and everything downstream):

1. **simulate** -- the expert drives training and validation logs on TRAIN-split roads of the
   built-in world with DART steering noise (recoveries in the data), plus one short test-split
   recording for the open-loop analyses.
2. **train** -- ``drive fit`` (:func:`drive.train.launch.launch`) with the shipped profile ``demo``
   (NCP conv head + 19-neuron NCP LTC) by behaviour cloning: the other arm.
   **onpolicy** -- the demo's policy: the same run branched ``--onpolicy-steps`` steps before its end
   and trained to the same step in the loop, with on-policy data from log replay
   (:mod:`drive.train.onpolicy`) at the profile's rate (``--onpolicy-steps 0``: the
   behaviour-cloning run is the policy and there is no other arm).
   **baselines** -- the same data and profile for the LSTM and the feed-forward PilotNet CNN (at
   78x200, single frames), each capped at ``--baseline-minutes``, for the robustness comparison.
3. **drive** -- closed loop on held-out TEST-split roads: the NCP-LTC (both arms), the expert and a
   constant-steering (straight ahead) policy, ``--km`` each. Stages 4-7 take the demo's policy.
4. **saliency** -- VisualBackProp video of the policy on the test recording (drive.explain).
5. **robustness** -- open-loop error, closed-loop interventions and saliency stability under camera
   noise, NCP-LTC beside the baselines (drive.evaluate).
6. **closed_form** -- the LTC converted to its closed form, fidelity against the ODE.
7. **export** -- TorchScript for the vehicle, checked against the checkpoint frame by frame and
   driven closed loop on the same held-out roads.

Everything lands in ``--out`` (``runs/demo``) and is summarised in ``REPORT.md`` there.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch

from drive.checkpoint import load_policy
from drive.demo.report import BC_ARM, POLICY, STAGES, write_report
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
from drive.demo.stage import Made, Stages
from drive.demo.training import (
    BASELINE_OVERRIDES,
    branch_step,
    train_baselines,
    train_onpolicy_arm,
    train_policy,
)
from drive.evaluate.closed_form_fidelity import closed_form_report
from drive.evaluate.robustness import RobustnessConfig, robustness_report
from drive.explain.video import saliency_video
from drive.export import export_policy
from drive.io.recording import Recording
from drive.policy_drivers import load_driver
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver, Observation
from drive.sim.expert import PurePursuitExpert
from drive.sim.record import simulate
from drive.train.launch import check_config_files
from drive.train.profiles import resolve_config

__all__ = ["run_demo"]


def _simulate(s: DemoSettings, out: Path) -> Made:
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)

    def progress(i: int, n: int, path: Path) -> None:
        print(f"  recorded {i + 1}/{n}: {path.name}", flush=True)

    conditions = [c for c in s.conditions.split(",") if c] or None
    common = dict(
        fps=s.fps,
        noise_std=s.dart_noise,
        recording_minutes=s.recording_minutes,
        progress=progress,
        conditions=conditions,
        roads=s.roads,
    )
    train = simulate(data / "train", s.train_minutes, seed=s.seed, split="train", **common)
    val = simulate(data / "val", s.val_minutes, seed=s.seed + 1, split="train", **common)
    test = simulate(
        data / "test",
        1.0,
        seed=s.seeds[0] + 1,
        split="test",
        fps=s.fps,
        noise_std=0.0,
        recording_minutes=1.0,
        conditions=conditions,
    )
    result = Simulated([str(p) for p in train], [str(p) for p in val], [str(p) for p in test])
    return Made(result, [*train, *val, *test])


def _drive(s: DemoSettings, out: Path, arms: Dict[str, str]) -> Made:
    """Closed loop on the held-out roads, easy (``--km``) and hard (``--hard-km``): the trained arms
    (name -> checkpoint), the expert and constant steering."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-1 steps: one thread is fastest and leaves a core to the renderer
    results: Dict[str, Drove] = {}
    drivers = {
        **{name: load_driver(path) for name, path in arms.items()},
        "expert": PurePursuitExpert(),
        "constant": ConstantDriver(0.0),
    }
    for name, driver in drivers.items():
        folder = out / "drive" / name

        def progress(seg: Any, name: str = name) -> None:
            print(f"  {name}: road {seg.index + 1}, {len(seg.intervention_xy)} intervention(s)", flush=True)

        video = folder / "drive.mp4" if name == POLICY else None
        folder.mkdir(parents=True, exist_ok=True)
        common = dict(seed=s.seeds, split="test", fps=s.fps, progress=progress, segment_km=0.5)
        common["conditions"] = [c for c in s.conditions.split(",") if c] or None
        result = evaluate(driver, s.km, video_path=video, **common)
        paths = result.save(folder)
        results[name] = Drove(result.metrics, str(paths.get("plot", "")), str(video or ""))
        if s.hard_km > 0:
            hard = evaluate(driver, s.hard_km, roads="hard", **common)
            plot = hard.save(folder / "hard").get("plot", "")
            results[name].hard = HardDrove(hard.metrics, str(plot))
    torch.set_num_threads(threads)
    return Made(Drives(results), [out / "drive" / n / "metrics.json" for n in drivers])


def _saliency(out: Path, ckpt: str, test: List[str], frames: int) -> Made:
    policy, meta = load_policy(ckpt)
    info = saliency_video(
        policy,
        meta,
        test[0],
        out / "saliency" / "saliency.mp4",
        side_by_side=True,
        noise=0.2,
        max_frames=frames,
    )
    result = Saliency(
        frames=info["frames"],
        fps=info["fps"],
        size=info["size"],
        video=str(info["video"]),
        contact_sheet=str(info["contact_sheet"]),
        method=info["method"],
        noise=info["noise"],
        rows=info["rows"],
    )
    return Made(result, [info["video"]])


def _robustness(s: DemoSettings, out: Path, ckpt: str, baselines: Dict[str, str], test: List[str]) -> Made:
    config = RobustnessConfig(
        noise_levels=(0.0, 0.1, 0.2, 0.3),
        saliency_frames=24,
        max_frames=s.robustness_frames,
        other={"blur": (2.0,), "brightness": (-0.3,)},
        closed_loop_km=s.robustness_km,
        closed_loop_seed=s.seeds[0],
    )
    named = out / "robustness" / "models"
    named.mkdir(parents=True, exist_ok=True)
    models = []
    for name, path in {POLICY: ckpt, **baselines}.items():  # report rows are named after the file
        link = named / f"{name}.ckpt"
        link.unlink(missing_ok=True)
        link.symlink_to(Path(path).resolve())
        models.append(str(link))
    info = robustness_report(models, test, out / "robustness", config=config, workers=min(2, len(models)))
    plots = [str(p) for p in info.get("plots", [])]
    return Made(Robustness(str(info["report"]), plots, info["rows"]), [info["report"]])


def _closed_form(out: Path, ckpt: str, test: List[str], s: DemoSettings) -> Made:
    path = out / "closed_form" / f"{POLICY}_closed_form.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    report = closed_form_report(
        ckpt, "exact", path, recordings=test, km=s.closed_form_km, seed=s.seeds[0], rounds=s.speed_rounds
    )
    return Made(ClosedForm(str(path), report), [path])


def _export(s: DemoSettings, out: Path, ckpt: str, test: List[str]) -> Made:
    rec = Recording.open(test[0])
    path = export_policy(
        ckpt, out / "export" / "policy.ts", format="torchscript", frame_size=(rec.meta.height, rec.meta.width)
    )
    exported, reference = load_driver(path), load_driver(ckpt)
    dt = 1.0 / rec.meta.fps
    diffs = []
    for i, frame in enumerate(rec.frames()):
        if i == 100:
            break
        obs = Observation(
            image=frame,
            dt_s=dt,
            speed_mps=8.3,
            timestamp_s=i * dt,
            road=None,
            s_m=0.0,
            x_m=0.0,
            y_m=0.0,
            yaw_rad=0.0,
            lateral_offset_m=0.0,
            heading_error_rad=0.0,
        )
        diffs.append(abs(exported.act(obs) - reference.act(obs)))
    drive = evaluate(
        load_driver(path),
        s.km,
        seed=s.seeds,
        split="test",
        fps=s.fps,
        segment_km=0.5,
        conditions=[c for c in s.conditions.split(",") if c] or None,
    )
    result = Export(
        file=str(path),
        bytes=Path(path).stat().st_size,
        frames_compared=len(diffs),
        max_abs_diff_per_km=float(np.max(diffs)) * 1000.0,
        closed_loop=drive.metrics,
    )
    return Made(result, [path])


_SIM_KEYS = (
    "seed",
    "train_minutes",
    "val_minutes",
    "recording_minutes",
    "fps",
    "dart_noise",
    "test_seeds",
    "conditions",
    "roads",
)


def run_demo(s: DemoSettings) -> Dict[str, Any]:
    """Run every stage (skipping finished ones) and write ``<out>/REPORT.md``; returns the summary."""
    s = replace(s, config=resolve_config(s.config))  # a shipped profile's name -> its file
    check_config_files(["--config", s.config])  # UTF-8 YAML holding a mapping, named
    branch_step(s)  # a bad --onpolicy-steps is named before anything runs
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stage = Stages(out, total=len(STAGES) - (0 if s.onpolicy_steps else 1))  # the arm runs only if asked
    data = stage("simulate", {k: getattr(s, k) for k in _SIM_KEYS}, lambda: _simulate(s, out), Simulated)
    config_text = Path(s.config).read_text()
    trained = stage(
        "train",
        {"config": config_text, "max_steps": s.max_steps, "threads": s.threads, "branch": s.onpolicy_steps},
        lambda: train_policy(s, out, data),
        Trained,
    )
    onpolicy = (
        stage(
            "onpolicy",
            {"steps": s.onpolicy_steps},
            lambda: train_onpolicy_arm(s, out, data, trained),
            OnPolicyArm,
        )
        if s.onpolicy_steps
        else None
    )
    ckpt = (onpolicy or trained).checkpoint  # the demo's policy: trained in the loop, if it was
    baselines = stage(
        "baselines",
        {
            "families": s.baselines,
            "steps": s.baseline_steps,
            "threads": s.threads,
            "overrides": {f: BASELINE_OVERRIDES.get(f) for f in s.baselines.split(",") if f},
        },
        lambda: train_baselines(s, out, data),
        Baselines,
    )
    arms = {POLICY: ckpt, **({BC_ARM: trained.checkpoint} if onpolicy else {})}
    drive_keys = {"km": s.km, "hard_km": s.hard_km, "conditions": s.conditions}
    results = DemoResults(
        settings=s,
        simulate=data,
        train=trained,
        onpolicy=onpolicy,
        baselines=baselines,
        drive=stage("drive", drive_keys, lambda: _drive(s, out, arms), Drives),
    )
    results.saliency = stage(
        "saliency",
        {"frames": s.saliency_frames},
        lambda: _saliency(out, ckpt, data.test, s.saliency_frames),
        Saliency,
    )
    results.robustness = stage(
        "robustness",
        {"km": s.robustness_km, "frames": s.robustness_frames},
        lambda: _robustness(s, out, ckpt, baselines.checkpoints, data.test),
        Robustness,
    )
    results.closed_form = stage(
        "closed_form",
        {"km": s.closed_form_km, "rounds": s.speed_rounds},
        lambda: _closed_form(out, ckpt, data.test, s),
        ClosedForm,
    )
    results.export = stage("export", {"km": s.km}, lambda: _export(s, out, ckpt, data.test), Export)
    results.total_seconds = round(time.perf_counter() - started, 1)
    return write_report(out, results)
