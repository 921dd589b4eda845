"""``drive demo``'s options come from :class:`DemoSettings`' fields (drive.cli.demo): each flag's
spelling, type, default and help are those the hand-written parser had (the table below is what it
produced, plus the options added since), and the parsed defaults are the settings' defaults."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import asdict

import pytest

from drive.cli import demo
from drive.demo.settings import DemoSettings

# (flag, dest, type, default, help) of every option, as the parser written by hand had them (and
# --roads and --hard-km, added with hard roads)
BEFORE = [
    ("--out", "out", None, "runs/demo", "output folder (default: %(default)s)"),
    (
        "--config",
        "config",
        None,
        "demo",
        "drive fit config of the policy: a shipped profile's name or a YAML file (default: %(default)s)",
    ),
    ("--seed", "seed", int, 0, "world seed of the training roads and of training"),
    ("--train-minutes", "train_minutes", float, 30.0, "minutes of training logs"),
    ("--val-minutes", "val_minutes", float, 2.0, "minutes of validation logs"),
    ("--recording-minutes", "recording_minutes", float, 0.5, "minutes per recording"),
    ("--fps", "fps", float, 10.0, "camera rate of logs and closed loop (Hz)"),
    ("--dart-noise", "dart_noise", float, 0.015, "DART steering noise std (1/m)"),
    (
        "--roads",
        "roads",
        None,
        "mixed",
        "roads of the training and validation logs: easy, hard (junction turns, hairpins, S-bends, "
        "chicanes at a speed that follows the road) or mixed, half of each (default: %(default)s)",
    ),
    (
        "--km",
        "km",
        float,
        6.0,
        "closed-loop kilometres per driver on held-out roads, spread over --test-seeds",
    ),
    (
        "--hard-km",
        "hard_km",
        float,
        3.0,
        "closed-loop kilometres per driver on held-out hard roads, reported beside --km (0: none)",
    ),
    (
        "--test-seeds",
        "test_seeds",
        None,
        "0,1,2",
        "comma-separated world seeds of the held-out test roads (default: %(default)s)",
    ),
    (
        "--conditions",
        "conditions",
        None,
        "",
        "comma-separated condition names for training AND test roads, e.g. summer,noon "
        "(default: every season, light and marking at random)",
    ),
    ("--max-steps", "max_steps", int, 1800, "optimizer steps of the demo's policy (0: the config's budget)"),
    (
        "--threads",
        "threads",
        int,
        2,
        "torch threads for training (default %(default)s: the result is the same on every machine "
        "with the same torch; 0: all cores, faster on big machines, other weights)",
    ),
    (
        "--onpolicy-steps",
        "onpolicy_steps",
        int,
        300,
        "training in the loop: the NCP-LTC's last N optimizer steps train with on-policy data from "
        "log replay on the training logs (the demo's policy); the behaviour-cloning run they branch "
        "from is the other arm, driven beside it on the same roads (default: %(default)s; 0: "
        "behaviour cloning only, no other arm)",
    ),
    (
        "--baselines",
        "baselines",
        None,
        "lstm,cnn",
        "families trained beside the NCP-LTC for the robustness comparison ('' for none)",
    ),
    ("--baseline-steps", "baseline_steps", int, 300, "optimizer steps per baseline (default: %(default)s)"),
    (
        "--robustness-km",
        "robustness_km",
        float,
        0.3,
        "closed-loop km per model and noise level in the robustness stage (0: open loop only)",
    ),
    (
        "--robustness-frames",
        "robustness_frames",
        int,
        300,
        "frames of the test recording in the open-loop robustness analysis (default: %(default)s)",
    ),
    ("--saliency-frames", "saliency_frames", int, 150, "frames of the saliency video (default: %(default)s)"),
    (
        "--closed-form-km",
        "closed_form_km",
        float,
        1.0,
        "closed-loop km comparing the closed-form LTC with the ODE LTC (default: %(default)s)",
    ),
    (
        "--speed-rounds",
        "speed_rounds",
        int,
        15,
        "timing rounds of the closed-form vs ODE speed comparison (default: %(default)s)",
    ),
]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="drive demo")
    demo.add_arguments(parser)
    return parser


def test_the_options_are_those_written_by_hand() -> None:
    actions = [a for a in _parser()._actions if a.dest != "help"]
    got = [(a.option_strings[0], a.dest, a.type, a.default, a.help) for a in actions]
    assert got == BEFORE
    assert all(len(a.option_strings) == 1 and a.nargs is None for a in actions)


def test_parsed_defaults_are_the_settings_and_flags_set_fields() -> None:
    assert vars(_parser().parse_args([])) == asdict(DemoSettings())
    args = _parser().parse_args(["--train-minutes", "2.5", "--seed", "7", "--baselines", ""])
    assert (args.train_minutes, args.seed, args.baselines) == (2.5, 7, "")
    with pytest.raises(SystemExit):
        _parser().parse_args(["--seed", "1.5"])  # an int field takes an int


def test_help_shows_every_option_without_importing_lightning() -> None:
    code = (
        "import sys\nfrom drive.cli import main\n"
        "try:\n    main(['demo', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted({'torch', 'lightning'} & set(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for flag, *_ in BEFORE:
        assert flag in done.stdout
    assert "(default: runs/demo)" in done.stdout and "(default 2: the result" in done.stdout
    assert done.stdout.strip().endswith("[]")
