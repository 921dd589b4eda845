"""``drive demo``: the whole pipeline on built-in data (simulate, train, drive, explain, robustness,
closed form, export), one command, about 15 minutes on 2 CPU cores::

    drive demo                                   # everything in runs/demo, REPORT.md there
    drive demo --out runs/demo_winter --conditions winter --km 10

Each option is a field of :class:`drive.demo.settings.DemoSettings`; the stages are
:func:`drive.demo.run.run_demo`. Exit status 0 when the acceptance criteria pass, 1 when not
(the failed ones are printed).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from drive.demo.settings import DemoSettings

COMMAND = "demo"
HELP = "the whole pipeline on built-in data: simulate, train, drive, explain, export"
__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = DemoSettings()
    parser.add_argument("--out", default=d.out, help="output folder (default: %(default)s)")
    parser.add_argument(
        "--config",
        default=d.config,
        help="drive fit config of the policy: a shipped profile's name or a YAML file (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=d.seed, help="world seed of the training roads and of training"
    )
    parser.add_argument(
        "--train-minutes", type=float, default=d.train_minutes, help="minutes of training logs"
    )
    parser.add_argument("--val-minutes", type=float, default=d.val_minutes, help="minutes of validation logs")
    parser.add_argument(
        "--recording-minutes", type=float, default=d.recording_minutes, help="minutes per recording"
    )
    parser.add_argument("--fps", type=float, default=d.fps, help="camera rate of logs and closed loop (Hz)")
    parser.add_argument(
        "--dart-noise", type=float, default=d.dart_noise, help="DART steering noise std (1/m)"
    )
    parser.add_argument(
        "--km",
        type=float,
        default=d.km,
        help="closed-loop kilometres per driver on held-out roads, spread over --test-seeds",
    )
    parser.add_argument(
        "--test-seeds",
        default=d.test_seeds,
        help="comma-separated world seeds of the held-out test roads (default: %(default)s)",
    )
    parser.add_argument(
        "--conditions",
        default=d.conditions,
        help="comma-separated condition names for training AND test roads, e.g. summer,noon "
        "(default: every season, light and marking at random)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=d.max_steps,
        help="override the config's optimizer-step budget (0: keep)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=d.threads,
        help="torch threads for training (default %(default)s: the result is the same on every "
        "machine with the same torch; 0: all cores, faster on big machines, other weights)",
    )
    parser.add_argument(
        "--baselines",
        default=d.baselines,
        help="families trained beside the NCP-LTC for the robustness comparison ('' for none)",
    )
    parser.add_argument(
        "--baseline-steps",
        type=int,
        default=d.baseline_steps,
        help="optimizer steps per baseline (default: %(default)s)",
    )
    parser.add_argument(
        "--robustness-km",
        type=float,
        default=d.robustness_km,
        help="closed-loop km per model and noise level in the robustness stage (0: open loop only)",
    )
    parser.add_argument(
        "--robustness-frames",
        type=int,
        default=d.robustness_frames,
        help="frames of the test recording in the open-loop robustness analysis (default: %(default)s)",
    )
    parser.add_argument(
        "--saliency-frames",
        type=int,
        default=d.saliency_frames,
        help="frames of the saliency video (default: %(default)s)",
    )
    parser.add_argument(
        "--closed-form-km",
        type=float,
        default=d.closed_form_km,
        help="closed-loop km comparing the closed-form LTC with the ODE LTC (default: %(default)s)",
    )
    parser.add_argument(
        "--speed-rounds",
        type=int,
        default=d.speed_rounds,
        help="timing rounds of the closed-form vs ODE speed comparison (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    from drive.demo.run import run_demo  # at run time: it imports Lightning (seconds), --help need not

    settings = DemoSettings(**{k: getattr(args, k) for k in asdict(DemoSettings())})
    report = run_demo(settings)
    acceptance = report["acceptance"]
    if acceptance["passed"]:
        print(f"\ndemo: PASSED acceptance; report: {report['report']}")
        return 0
    print(f"\ndemo: FAILED acceptance: {'; '.join(acceptance['failed'])}; report: {report['report']}")
    return 1
