"""``drive demo``'s training stages: the NCP-LTC and the baselines, each through ``drive fit``
(:func:`drive.train.launch.launch`) with the demo profile and a budget in optimizer steps.

:func:`train_policy` trains one model and returns its checkpoints; :func:`train_baselines` trains
every family of ``--baselines`` with the changes :data:`BASELINE_OVERRIDES` makes to the profile.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import yaml

from drive.demo.settings import DemoSettings
from drive.train.launch import launch

__all__ = ["BASELINE_OVERRIDES", "train_policy", "train_baselines"]


# What a baseline changes in the demo profile (the shipped profile `demo`): PilotNet's VALID convolutions need
# the paper's 78x200 input and see single shuffled frames. Each baseline trains --baseline-steps steps
# and is validated once, at the end.
BASELINE_OVERRIDES: Dict[str, List[str]] = {
    "lstm": ["--model.family", "lstm"],
    "ctrnn": ["--model.family", "ctrnn"],
    "cfc": ["--model.family", "cfc"],
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


def _accelerator() -> List[str]:
    """Trainer overrides that put training on a CUDA GPU when there is one (said once, here)."""
    if not torch.cuda.is_available():
        return []
    print(f"  training on the GPU: {torch.cuda.get_device_name(0)}", flush=True)
    return ["--trainer.accelerator", "gpu", "--trainer.devices", "1"]


def train_policy(
    s: DemoSettings, out: Path, data: Dict[str, Any], family: Optional[str] = None
) -> Dict[str, Any]:
    """``drive fit`` on the demo data: the NCP-LTC (``family=None``) or a baseline, each on a step budget."""
    root = out / "train" if family is None else out / "baselines" / family
    shutil.rmtree(root, ignore_errors=True)
    argv = [
        "fit",
        "--config",
        s.config,
        "--seed_everything",
        str(s.seed),
        "--data.train",
        json.dumps(data["train"]),
        "--data.val",
        json.dumps(data["val"]),
        "--data.cache_dir",
        str(out / "cache"),
        "--trainer.default_root_dir",
        str(root),
        *_accelerator(),
    ]
    steps = s.baseline_steps if family is not None else s.max_steps
    if family is not None:
        argv += BASELINE_OVERRIDES[family]
    if steps:
        argv += ["--trainer.max_steps", str(steps)]
        # a baseline is validated once, at the end; a shortened NCP run at least at its end
        interval = steps if family is not None else min(steps, _val_interval(s.config))
        argv += ["--trainer.val_check_interval", str(interval), "--trainer.check_val_every_n_epoch", "null"]
    if s.threads:
        torch.set_num_threads(s.threads)
    launch(argv)  # an error of input (a bad config value, unreadable logs) propagates, naming it
    # the policy is the final weights (the end of the learning-rate decay); the best-validation
    # checkpoint stays beside it for comparison
    last = root / "checkpoints" / "last.ckpt"
    best = sorted((root / "checkpoints").glob("best*.ckpt"))
    return {
        "checkpoint": str(last),
        "best_checkpoint": str(best[-1]) if best else "",
        "metrics_csv": str(next((root / "csv").rglob("metrics.csv"))),
        "steps": _global_step(last),
        "label_lookahead_s": _label_lookahead(last),
        "_outputs": [last],
    }


def _global_step(ckpt: Path) -> int:
    """Optimizer steps a Lightning checkpoint had taken."""
    return int(torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"])


def _label_lookahead(ckpt: Path) -> Optional[float]:
    """The label look-ahead fitted on the training logs (``lookahead_s: fit``), None if pinned."""
    return torch.load(ckpt, map_location="cpu", weights_only=True).get("drive", {}).get("label_lookahead_s")


def _val_interval(config: str) -> int:
    """The config's validation interval in optimizer steps (``trainer.val_check_interval``)."""
    trainer = (yaml.safe_load(Path(config).read_text()) or {}).get("trainer") or {}
    interval = trainer.get("val_check_interval")
    return int(interval) if isinstance(interval, int) and interval > 0 else 1 << 30


def train_baselines(s: DemoSettings, out: Path, data: Dict[str, Any]) -> Dict[str, Any]:
    families = [f for f in s.baselines.split(",") if f]
    unknown = [f for f in families if f not in BASELINE_OVERRIDES]
    if unknown:
        raise ValueError(f"--baselines: unknown families {unknown}; choose from {sorted(BASELINE_OVERRIDES)}")
    trained = {}
    for family in families:
        print(f"  training baseline {family} ({s.baseline_steps} steps)", flush=True)
        trained[family] = train_policy(s, out, data, family)["checkpoint"]
    return {"checkpoints": trained, "_outputs": list(trained.values())}
