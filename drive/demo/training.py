"""``drive demo``'s training stages: the NCP-LTC and the baselines, each through ``drive fit``
(:func:`drive.train.launch.launch`) with the demo profile and a budget in optimizer steps.

:func:`train_policy` trains one model by behaviour cloning and returns its checkpoints;
:func:`train_onpolicy_arm` trains the NCP-LTC's last ``--onpolicy-steps`` steps again in the loop
(the demo's policy); :func:`train_baselines` trains every family of ``--baselines`` with the changes
:data:`BASELINE_OVERRIDES` makes to the profile.
"""

from __future__ import annotations

import csv
import json
import shutil
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from drive.demo.results import Baselines, OnPolicyArm, Simulated, Trained
from drive.demo.settings import DemoSettings
from drive.demo.stage import Made
from drive.train.launch import launch, parse

__all__ = [
    "BASELINE_OVERRIDES",
    "ONPOLICY_ROUNDS",
    "branch_step",
    "train_policy",
    "train_onpolicy_arm",
    "train_baselines",
]


# What a baseline changes in the demo profile (the shipped profile `demo`): PilotNet's VALID convolutions need
# the paper's 78x200 input and see single shuffled frames; the recurrent baselines learn at one rate (the
# profile's faster cell rate was measured for the NCP-LTC). Each baseline trains --baseline-steps steps
# and is validated once, at the end.
ONE_RATE = ["--model.cell_lr_scale", "1"]
BASELINE_OVERRIDES: Dict[str, List[str]] = {
    "lstm": ["--model.family", "lstm", *ONE_RATE],
    "ctrnn": ["--model.family", "ctrnn", *ONE_RATE],
    "cfc": ["--model.family", "cfc", *ONE_RATE],
    "cnn": [
        "--model.family",
        "cnn",
        "--model.input_hw",
        "[78, 200]",
        "--data.image_size",
        "[78, 200]",
        "--data.seq_len",
        "1",
        "--data.stride",
        "1",
        "--data.batch_size",
        "32",
    ],
}


# rounds of the on-policy arm over its --onpolicy-steps (300: a round every 100 steps, the profiles' rate)
ONPOLICY_ROUNDS = 3


def _accelerator() -> List[str]:
    """Trainer overrides that put training on a CUDA GPU when there is one (said once, here)."""
    if not torch.cuda.is_available():
        return []
    print(f"  training on the GPU: {torch.cuda.get_device_name(0)}", flush=True)
    return ["--trainer.accelerator", "gpu", "--trainer.devices", "1"]


def _fit_argv(
    s: DemoSettings, out: Path, data: Simulated, root: Path, steps: int, val_every: int
) -> List[str]:
    """``drive fit`` of ``s.config`` on the demo data into ``root``, by behaviour cloning (on-policy
    rounds off: :func:`train_onpolicy_arm` turns them on); ``steps`` > 0 overrides the budget,
    validating every ``val_every`` steps."""
    argv = [
        "fit",
        "--config",
        s.config,
        "--seed_everything",
        str(s.seed),
        "--data.train",
        json.dumps(data.train),
        "--data.val",
        json.dumps(data.val),
        "--data.cache_dir",
        str(out / "cache"),
        "--trainer.default_root_dir",
        str(root),
        "--onpolicy.every_n_steps",
        "0",
        *_accelerator(),
    ]
    if steps:
        argv += ["--trainer.max_steps", str(steps)]
        argv += ["--trainer.val_check_interval", str(val_every), "--trainer.check_val_every_n_epoch", "null"]
    return argv


def train_policy(s: DemoSettings, out: Path, data: Simulated, family: Optional[str] = None) -> Made:
    """``drive fit`` on the demo data by behaviour cloning: the NCP-LTC (``family=None``) or a baseline,
    each on a step budget. The NCP-LTC's run also keeps its checkpoint at the step where training in the
    loop branches from it (:func:`branch_step`)."""
    root = out / "train" if family is None else out / "baselines" / family
    shutil.rmtree(root, ignore_errors=True)
    steps = s.baseline_steps if family is not None else s.max_steps
    # a baseline is validated once, at the end; a shortened NCP run at least at its end
    argv = _fit_argv(s, out, data, root, steps, steps if family is not None else min(steps, _val_interval(s)))
    if family is not None:
        argv += BASELINE_OVERRIDES[family]
    branch = branch_step(s) if family is None else 0
    if branch:
        argv += _branch_checkpoint(root, branch)
    _launch(s, argv)  # an error of input (a bad config value, unreadable logs) propagates, naming it
    # the policy is the final weights (the end of the learning-rate decay); the best-validation
    # checkpoint stays beside it for comparison
    last = root / "checkpoints" / "last.ckpt"
    best = sorted((root / "checkpoints").glob("best*.ckpt"))
    branched = root / "branch" / f"step{branch}.ckpt"
    result = Trained(
        checkpoint=str(last),
        best_checkpoint=str(best[-1]) if best else "",
        branch_checkpoint=str(branched) if branch else "",
        metrics_csv=str(next((root / "csv").rglob("metrics.csv"))),
        steps=_global_step(last),
        label_lookahead_s=_label_lookahead(last),
    )
    return Made(result, [last, *([branched] if branch else [])])


def train_onpolicy_arm(s: DemoSettings, out: Path, data: Simulated, trained: Trained) -> Made:
    """Training in the loop, the demo's policy: the NCP-LTC's behaviour-cloning run resumed from its
    checkpoint at :func:`branch_step` and trained to the same final step with on-policy data from log
    replay on the training logs (``--onpolicy.*``, :mod:`drive.train.onpolicy`; the profile's settings,
    a round every ``--onpolicy-steps`` / :data:`ONPOLICY_ROUNDS` steps from the branch step on): the
    same seeds, data order, learning-rate schedule and step budget; only the last ``--onpolicy-steps``
    steps' batches differ. It is the run ``drive fit --config demo --onpolicy.start_step <branch>``
    makes; the profile itself trains in the loop from step 100, which the demo's 15 minutes cannot
    afford beside a behaviour-cloning run of the same length."""
    root = out / "train_onpolicy"
    shutil.rmtree(root, ignore_errors=True)
    branch = branch_step(s)
    every = max(1, s.onpolicy_steps // ONPOLICY_ROUNDS)
    argv = _fit_argv(s, out, data, root, s.max_steps, min(s.max_steps, _val_interval(s)))
    argv += _branch_checkpoint(root, branch)  # the callbacks of the run it resumes (none saves here)
    argv += ["--onpolicy.every_n_steps", str(every), "--onpolicy.start_step", str(branch)]
    argv += ["--ckpt_path", trained.branch_checkpoint]
    with warnings.catch_warnings():  # the resumed checkpoints' folders are new on purpose
        warnings.filterwarnings("ignore", message="The dirpath has changed")
        settings = _launch(s, argv).onpolicy
    last = root / "checkpoints" / "last.ckpt"
    metrics_csv = next((root / "csv").rglob("metrics.csv"))
    result = OnPolicyArm(
        checkpoint=str(last),
        metrics_csv=str(metrics_csv),
        steps=_global_step(last),
        branch_step=branch,
        every_n_steps=every,
        **{k: settings[k] for k in ("noise_std", "share", "episodes", "episode_s")},
        **_rounds_seen(metrics_csv),
    )
    return Made(result, [last])


def _rounds_seen(metrics_csv: Path) -> Dict[str, int]:
    """The rounds that joined the buffer and the steps they drove, as the run logged them at each
    landing (``onpolicy/takeovers_per_km``, ``onpolicy/visited_steps``)."""
    with open(metrics_csv, newline="") as f:
        visited = [
            float(r["onpolicy/visited_steps"]) for r in csv.DictReader(f) if r.get("onpolicy/visited_steps")
        ]
    return {"rounds": len(visited), "visited_steps": int(sum(visited))}


def branch_step(s: DemoSettings) -> int:
    """The step the on-policy arm branches from the NCP-LTC's run (0: no arm)."""
    if not s.onpolicy_steps:
        return 0
    total = s.max_steps or _config_steps(s)
    if not 0 < s.onpolicy_steps < total:
        raise ValueError(
            f"--onpolicy-steps must be 0 or within 1..{total - 1} (the run's steps), got {s.onpolicy_steps}"
        )
    return total - s.onpolicy_steps


def _branch_checkpoint(root: Path, step: int) -> List[str]:
    """A Lightning ``ModelCheckpoint`` keeping the run's checkpoint at ``step`` (``branch/step<N>.ckpt``)."""
    return [
        "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
        "--trainer.callbacks.dirpath",
        str(root / "branch"),
        "--trainer.callbacks.filename",
        "step{step}",
        "--trainer.callbacks.auto_insert_metric_name",
        "false",
        "--trainer.callbacks.every_n_train_steps",
        str(step),
        "--trainer.callbacks.save_top_k",
        "-1",
    ]


def _launch(s: DemoSettings, argv: List[str]) -> Any:
    """``drive fit`` of ``argv`` on ``s.threads`` threads; the configuration it ran with."""
    if s.threads:
        torch.set_num_threads(s.threads)
    return launch(argv)


def _global_step(ckpt: Path) -> int:
    """Optimizer steps a Lightning checkpoint had taken."""
    return int(torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"])


def _label_lookahead(ckpt: Path) -> Optional[float]:
    """The label look-ahead fitted on the training logs (``lookahead_s: fit``), None if pinned."""
    return torch.load(ckpt, map_location="cpu", weights_only=True).get("drive", {}).get("label_lookahead_s")


def _config(s: DemoSettings) -> Any:
    """The demo's training profile as ``drive fit`` parses it (:func:`drive.train.launch.parse`)."""
    return parse(["fit", "--config", s.config])


def _val_interval(s: DemoSettings) -> int:
    """The config's validation interval in optimizer steps (``trainer.val_check_interval``)."""
    interval = _config(s).trainer.val_check_interval
    return int(interval) if isinstance(interval, int) and interval > 0 else 1 << 30


def _config_steps(s: DemoSettings) -> int:
    """The config's step budget (``trainer.max_steps``)."""
    steps = _config(s).trainer.max_steps
    if not isinstance(steps, int) or steps <= 0:
        raise ValueError(
            f"{s.config}: trainer.max_steps is not a step budget; the on-policy arm needs one (--max-steps)"
        )
    return steps


def train_baselines(s: DemoSettings, out: Path, data: Simulated) -> Made:
    families = [f for f in s.baselines.split(",") if f]
    unknown = [f for f in families if f not in BASELINE_OVERRIDES]
    if unknown:
        raise ValueError(f"--baselines: unknown families {unknown}; choose from {sorted(BASELINE_OVERRIDES)}")
    trained: Dict[str, str] = {}
    for family in families:
        print(f"  training baseline {family} ({s.baseline_steps} steps)", flush=True)
        trained[family] = train_policy(s, out, data, family).result.checkpoint
    return Made(Baselines(trained), list(trained.values()))
