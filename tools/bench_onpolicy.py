"""Does on-policy data from log replay make policies keep their lane? Three arms at equal optimizer
steps and seeds, on little and on full data, driven in the true closed loop and in log replay.

    python tools/bench_onpolicy.py --demo runs/demo --out runs/bench_onpolicy      # after `make demo`

Arms (the demo profile, ``--config demo``, or ``--profile``'s, each for ``--steps`` steps (0: the
profile's own budget), training seed 0):

- ``bc``:       behaviour cloning with viewpoint augmentation (the demo's other arm; on-policy rounds
  off), labels at the look-ahead fitted on the training logs (``lookahead_s: fit``,
  :mod:`drive.replay.lookahead_fit`);
- ``bc_noview``: behaviour cloning on the logs' DART recoveries only (no viewpoint augmentation);
- ``both``:     behaviour cloning with viewpoint augmentation and on-policy data from log replay
  (``--onpolicy.*``: a round of 16 episodes of 20 s every 100 steps from step 100, share 0.25, the
  default of the profiles ``demo`` and ``ncp_ltc``) with DART noise (0.015 1/m, the default) on the
  commands the car executes in the rounds;
- ``tail300``, ``tail600``: behaviour cloning, then the same rounds every 100 steps for the last 300
  or 600 of 1,800 steps (from step 1,500 or 1,200): what ``drive demo``, which trains a
  behaviour-cloning arm beside its policy, can afford (its policy is ``tail300``);
- ``both_quiet``: the same with rounds without noise (``--onpolicy.noise_std 0``, the rounds before
  2026-11-28); the ``onpolicy``, ``both_2s``, ``both_envelope_2s`` and ``both_la*`` arms below are
  quiet too;
- ``onpolicy``: on-policy data without viewpoint augmentation;
- ``*_seed1``: the same with training seed 1 (the run-to-run variance of an arm);
- ``*_2s``:     the same with the labels' look-ahead at 2 s, the default before it was fitted
  (``both_envelope_2s``: on-policy windows only within 0.6 m and 4 deg of the recorded frame's camera);
- ``*_la09``:   the same at the recording expert's own look-ahead (0.9 s, at least 6 m);
- ``bc_la07``:  at 0.71 s, the look-ahead the fit chose on the demo's 30 minutes and the one logs
  without recoveries get (``clean``'s ``bc`` is this run); ``*_la10``: at 1 s.

Data: ``small`` = 5 minutes of built-in logs (``drive simulate --minutes 5 --seed 0 --fps 10
--noise-std 0.015``) with the demo's validation logs; ``clean`` = the same without DART noise (an
autopilot logged without recoveries: the labels' look-ahead cannot be fitted and is 0.71 s,
``UNIDENTIFIED_S``); ``camera`` = 5 minutes made differently (a low, wide camera at 12 m/s, with
DART noise) and ``camera_clean`` the same without recoveries, the nearest stand-in here for another
simulator's autopilot logs;
``full`` = the demo's 30 minutes (with ``--steps`` the demo's, its ``bc`` arm is the demo's
behaviour-cloning run and its ``tail300`` arm the demo's policy, measured, not trained again).
Measured: interventions per km with the exact 95 % interval in the built-in world's closed loop on
``--km`` of held-out roads over the test seeds ``--seeds``, and in log replay on held-out noise-free
expert logs (``tools/bench_replay.py``'s, or recorded here). Results are cached per arm under
``--out`` (an arm measured before is not trained again). ``--throughput N`` instead times N training
steps with and without on-policy rounds, one after the other on this machine: the rollouts' cost to
training speed (run it with nothing else running).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from drive.io.recording import Recording
from drive.policy_drivers import load_driver
from drive.replay import replay_recording
from drive.sim.camera import Camera
from drive.sim.closed_loop import evaluate, summarize
from drive.sim.poisson import format_rate, rates_differ_p
from drive.sim.record import record_logs, simulate
from drive.sim.world import DEFAULT_SPEED_MPS

ROOT = Path(__file__).resolve().parents[1]
BC = ["--onpolicy.every_n_steps", "0"]  # the profiles demo and ncp_ltc train in the loop by default
ONPOLICY = ["--onpolicy.every_n_steps", "100", "--onpolicy.start_step", "0"]  # rounds from step 100
ONPOLICY += ["--onpolicy.episodes", "16", "--onpolicy.episode_s", "20"]
TAIL = ["--onpolicy.every_n_steps", "100", "--onpolicy.start_step"]  # + the first round's step
QUIET = [*ONPOLICY, "--onpolicy.noise_std", "0"]  # rounds without DART noise (before 2026-11-28)
LABELS_2S = ["--data.augment.lookahead_s", "2.0"]  # the label look-ahead before it was fitted
EXPERT_LA = ["--data.augment.lookahead_s", "0.9", "--data.augment.min_lookahead_m", "6"]  # the recorder's
ENVELOPE = ["--onpolicy.max_offset_m", "0.6", "--onpolicy.max_yaw_deg", "4"]
ARMS: Dict[str, List[str]] = {
    "bc": BC,
    "bc_noview": [*BC, "--data.augment.viewpoint_p", "0"],  # DART recoveries only: the onpolicy arm's base
    "both": ONPOLICY,
    "tail300": [*TAIL, "1500"],
    "tail600": [*TAIL, "1200"],
    "both_quiet": QUIET,
    "onpolicy": [*QUIET, "--data.augment.viewpoint_p", "0"],
    "bc_2s": [*BC, *LABELS_2S],
    "onpolicy_2s": [*QUIET, "--data.augment.viewpoint_p", "0", *LABELS_2S],
    "both_2s": [*QUIET, *LABELS_2S],
    "both_envelope_2s": [*QUIET, *ENVELOPE, *LABELS_2S],
    "bc_la09": [*BC, *EXPERT_LA],
    "bc_la07": [*BC, "--data.augment.lookahead_s", "0.71"],  # what the fit chose on the demo's 30 minutes
    "bc_la10": [*BC, "--data.augment.lookahead_s", "1.0"],
    "both_la10": [*QUIET, "--data.augment.lookahead_s", "1.0"],
    "both_la09": [*QUIET, *EXPERT_LA],
    "bc_seed1": [*BC, "--seed_everything", "1"],  # another training seed: run-to-run variance
    "both_seed1": [*ONPOLICY, "--seed_everything", "1"],
    "tail300_seed1": [*TAIL, "1500", "--seed_everything", "1"],
    "tail600_seed1": [*TAIL, "1200", "--seed_everything", "1"],
}

# the demo's own runs of these arms on the full data (drive demo: train = behaviour cloning, train_onpolicy =
# its branch trained in the loop, the demo's policy)
DEMO_RUNS = {"bc": "train", "tail300": "train_onpolicy"}


# the second, differently made dataset: a low, wide camera (1.0 m, 110 deg, pitch 0.05 rad, 160x60;
# bench_learn's world_low_wide) at 12 m/s instead of the demo's 1.5 m, 80 deg, 200x78 at 30 km/h
SECOND_CAMERA = dict(width=160, height=60, hfov_deg=110.0, height_m=1.0, pitch_rad=0.05)
SECOND_SPEED_MPS = 12.0


def _recorded(folder: Path, minutes: float, seed: int, **kw: Any) -> List[str]:
    """Recordings under ``folder``, written once (a stamp marks a finished set)."""
    if not (folder / ".done").exists():
        simulate(folder, minutes, seed=seed, fps=10.0, overwrite=True, **kw)
        (folder / ".done").write_text("")
    return sorted(str(p) for p in folder.iterdir() if p.is_dir())


def dataset(name: str, demo: Path, out: Path) -> Dict[str, Any]:
    """{"train", "val": recording folders; "camera", "speed_mps": the world's for the closed loop
    (None: the defaults); "replay": held-out logs (None: ``--replay-logs``)} of data ``name``,
    recorded on first use."""
    full = json.loads((demo / "stages" / "simulate.json").read_text())["result"]
    same = {"val": full["val"], "camera": None, "speed_mps": None, "replay": None}
    if name == "full":
        return {"train": full["train"], **same}
    if name in ("small", "clean"):  # clean: an autopilot logged without recoveries (no DART noise)
        noise = 0.015 if name == "small" else 0.0
        train = _recorded(out / "data" / name, 5.0, 0, noise_std=noise, recording_minutes=0.5)
        return {"train": train, **same}
    if name not in ("camera", "camera_clean"):
        raise ValueError(
            f"--data: unknown dataset {name!r}; choose from small, clean, full, camera, camera_clean"
        )
    root = out / "data" / "camera"
    other = dict(camera=Camera.default(**SECOND_CAMERA), speed_mps=SECOND_SPEED_MPS)
    noise, train = (0.015, "train") if name == "camera" else (0.0, "train_clean")
    return {
        "train": _recorded(root / train, 5.0, 0, noise_std=noise, recording_minutes=0.5, **other),
        "val": _recorded(root / "val", 2.0, 404, split="test", noise_std=0.0, **other),
        "replay": _recorded(root / "heldout", 8.0, 505, split="test", noise_std=0.0, **other),
        **other,
    }


def _fit_argv(
    demo: Path, train_logs: List[str], root: Path, steps: int, extra: List[str], profile: str = "demo"
) -> List[str]:
    """``drive fit`` of ``profile`` (shipped profiles, comma-separated), training seed 0, on the demo's
    cache, for ``steps`` steps (0: the profile's own budget)."""
    argv = ["fit", *(a for name in profile.split(",") for a in ("--config", name))]
    argv += ["--seed_everything", "0", "--data.train", json.dumps(train_logs)]
    argv += ["--data.cache_dir", str(demo / "cache"), "--trainer.default_root_dir", str(root)]
    argv += ["--trainer.max_steps", str(steps)] if steps else []
    return argv + ["--trainer.enable_progress_bar", "false", *extra]


def _fitted(ckpt: Path) -> bool:
    """A checkpoint trained with the label look-ahead fitted on its logs (today's demo)."""
    return ckpt.exists() and "label_lookahead_s" in torch.load(ckpt, weights_only=True)["drive"]


def train(
    out: Path, demo: Path, data: Dict[str, Any], name: str, extra: List[str], steps: int, profile: str
) -> Path:
    """One arm through ``drive fit`` (cached); returns its final checkpoint."""
    from drive.train.launch import launch  # here: Lightning's import only where something trains

    root = out / "runs" / name
    last = root / "checkpoints" / "last.ckpt"
    done = (root / "train_seconds.txt").exists()  # written when the fit returned
    if last.exists() and done and int(torch.load(last, weights_only=True)["global_step"]) >= steps:
        return last
    argv = _fit_argv(demo, data["train"], root, steps, extra, profile)
    argv += ["--data.val", json.dumps(data["val"])]
    if last.exists():  # an arm killed part-way resumes exactly where it stopped (a fresh run beside
        argv += ["--ckpt_path", str(last)]  # it would write last-v1.ckpt and leave this one stale)
    torch.set_num_threads(2)
    started = time.perf_counter()
    launch(argv)
    (root / "train_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    step = int(torch.load(last, weights_only=True)["global_step"])
    if step < steps:
        raise RuntimeError(f"{last}: step {step} after training to {steps}; not measuring a stale checkpoint")
    return last


def _slug(profile: str) -> str:
    """A profile list as a file-name prefix: ``ncp_ltc,trainer/cpu`` -> ``ncp_ltc+trainer_cpu``."""
    return profile.replace("/", "_").replace(",", "+")


def throughput(out: Path, demo: Path, data: Dict[str, List[str]], steps: int) -> str:
    """Training frames/s of ``drive fit`` with and without on-policy rounds (``bc`` vs ``onpolicy``
    arms' settings, viewpoint augmentation on in both), from :mod:`drive.train.throughput`, in turn
    on the same machine: the cost of the rollouts (their process shares the CPU with training)."""
    from drive.train.launch import launch

    rates = {}
    for arm, extra in (("bc", BC), ("onpolicy", ONPOLICY)):
        root = out / "throughput" / arm
        shutil.rmtree(root, ignore_errors=True)  # a fresh run each time
        argv = _fit_argv(demo, data["train"], root, steps, extra)
        argv += ["--data.val_split", "none", "--trainer.logger", "false"]
        argv += ["--throughput.skip_steps", "20", "--throughput.path", str(root / "throughput.json")]
        torch.set_num_threads(2)
        launch(argv)
        rates[arm] = json.loads((root / "throughput.json").read_text())["frames_per_s"]
    slower = 100 * (1 - rates["onpolicy"] / rates["bc"])
    return (
        f"training frames/s over steps 20-{steps}: bc {rates['bc']:.0f}, with on-policy rounds every "
        f"{ONPOLICY[1]} steps {rates['onpolicy']:.0f} ({slower:.0f} % slower)"
    )


def measure(
    ckpt: Path, seeds: List[int], km: float, logs: List[Path], cache: Path, data: Dict[str, Any]
) -> Dict[str, Any]:
    """World closed loop over the test seeds (with ``data``'s camera and speed) and log replay on the
    held-out logs, written to ``cache``."""
    torch.set_num_threads(1)
    driver = load_driver(ckpt)
    world = evaluate(
        driver,
        km=km,
        seed=seeds,
        split="test",
        fps=1.0 / driver.nominal_dt_s,
        camera=data["camera"],
        speed_mps=data["speed_mps"] or DEFAULT_SPEED_MPS,
    ).metrics
    replay = summarize(
        [s for log in logs for s in replay_recording(Recording.open(log), driver, 10.0).segments]
    )
    keys = ("km", "interventions", "interventions_per_km", "lateral_rms_m")
    seconds = (
        (ckpt.parent.parent / "train_seconds.txt").read_text()
        if (ckpt.parent.parent / "train_seconds.txt").exists()
        else "nan"
    )
    result = {
        "world": {k: world[k] for k in keys},
        "replay": {k: replay[k] for k in keys},
        "train_seconds": float(seconds),
        "steps": int(torch.load(ckpt, weights_only=True)["global_step"]),
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--demo", default=str(ROOT / "runs" / "demo"))
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_onpolicy"))
    p.add_argument(
        "--steps", type=int, default=1800, help="optimizer steps per arm (the demo's: 1800; 0: the profile's)"
    )
    p.add_argument(
        "--profile",
        default="demo",
        help="the arms' shipped training profiles, comma-separated (default: demo; e.g. ncp_ltc,trainer/cpu)",
    )
    p.add_argument("--data", default="small,full,camera")
    p.add_argument("--arms", default="bc,onpolicy,both")
    p.add_argument("--km", type=float, default=24.0, help="world closed-loop distance per arm")
    p.add_argument("--seeds", default="31,32,33,77,78,79", help="held-out test seeds of the world")
    p.add_argument("--replay-logs", default=str(ROOT / "runs" / "bench_replay" / "logs"))
    p.add_argument(
        "--throughput", type=int, default=0, help="only time N training steps with and without rounds"
    )
    p.add_argument("--table", action="store_true", help="only print the arms measured before; train nothing")
    args = p.parse_args()
    out, demo = Path(args.out), Path(args.demo)
    if args.throughput:
        print(throughput(out, demo, dataset("small", demo, out), args.throughput))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    # tools/bench_replay.py's held-out logs (the same seeds and distance), recorded here if missing
    logs = [Path(r["path"]) for r in record_logs(Path(args.replay_logs), [101, 202, 303], 6.0, 0.5)]
    data = {name: dataset(name, demo, out) for name in args.data.split(",")}
    rows = []
    for name in args.data.split(","):
        for arm in args.arms.split(","):
            tag = f"{name}-{arm}" if args.profile == "demo" else f"{_slug(args.profile)}-{name}-{arm}"
            cached = out / "results" / f"{tag}.json"
            if cached.exists():  # measured before: its table row, without training it again
                rows.append((name, arm, json.loads(cached.read_text())))
                continue
            if args.table:
                continue
            demo_ckpt = demo / DEMO_RUNS.get(arm, "") / "checkpoints" / "last.ckpt"
            reuse = name == "full" and arm in DEMO_RUNS and args.profile == "demo" and args.steps == 1800
            reuse = reuse and _fitted(demo_ckpt)
            ckpt = (
                demo_ckpt if reuse else train(out, demo, data[name], tag, ARMS[arm], args.steps, args.profile)
            )
            print(f"{tag}: measuring {ckpt}", flush=True)
            held_out = [Path(p) for p in data[name]["replay"]] if data[name]["replay"] else logs
            rows.append((name, arm, measure(ckpt, seeds, args.km, held_out, cached, data[name])))
    lines = [
        f"| data | arm | world /km, {args.km:g} km over seeds {args.seeds} | log replay /km | train s |",
        "|---|---|---|---|---|",
    ]
    for name, arm, r in rows:
        w, rp = r["world"], r["replay"]
        lines.append(
            f"| {name} | {arm} | {format_rate(w['interventions'], w['km'])} | "
            f"{format_rate(rp['interventions'], rp['km'])} | {r['train_seconds']:.0f} |"
        )
    by = {(n, a): r for n, a, r in rows}
    for name in args.data.split(","):
        for arm in [a for a in ARMS if a not in ("bc", "bc_seed1")]:
            bc = "bc_seed1" if arm.endswith("_seed1") else "bc"  # the same training seed
            base, other = by.get((name, bc)), by.get((name, arm))
            if base and other:
                pw = rates_differ_p(
                    base["world"]["interventions"],
                    base["world"]["km"],
                    other["world"]["interventions"],
                    other["world"]["km"],
                )
                lines.append(f"{name}: {arm} vs {bc} in the world: p = {pw:.2g} (exact test of two rates)")
    text = "\n".join(lines)
    print(text)
    (out / "summary.md").write_text(text + "\n")
    (out / "summary.json").write_text(
        json.dumps([{"data": n, "arm": a, **r} for n, a, r in rows], indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
