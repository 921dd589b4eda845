"""What a resumed run must equal: every tensor of a checkpoint a training run's future depends on."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import torch


def checkpoint_state(path: Path) -> Dict[str, torch.Tensor]:
    """Every weight and buffer, every optimizer state tensor, the LR schedulers' positions and the
    step count of a checkpoint, flat by name."""
    ckpt = torch.load(path, weights_only=True, map_location="cpu")
    flat = {f"model.{k}": v for k, v in ckpt["state_dict"].items()}
    for i, opt in enumerate(ckpt["optimizer_states"]):
        for pid, st in opt["state"].items():
            flat.update({f"opt{i}.{pid}.{k}": torch.as_tensor(v) for k, v in st.items()})
    for i, sched in enumerate(ckpt.get("lr_schedulers", [])):
        flat[f"sched{i}.last_epoch"] = torch.tensor(sched["last_epoch"])
        flat.update({f"sched{i}.lr{j}": torch.tensor(lr) for j, lr in enumerate(sched["_last_lr"])})
    flat["global_step"] = torch.tensor(ckpt["global_step"])
    return flat
