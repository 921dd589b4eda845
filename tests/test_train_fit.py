"""Training end to end: learning works (closed loop beats constant steering), resume, checkpoints."""
from __future__ import annotations

from pathlib import Path
from typing import List

import lightning.pytorch as pl
import pytest
import torch

from drive.data.datamodule import DriveDataModule
from drive.policy_io import PolicyDriver, load_policy, read_checkpoint
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver
from drive.sim.record import simulate
from drive.sim.render import Camera
from drive.train.module import PolicyModule

FPS = 10.0
SMALL = Camera.default(width=100, height=40)  # a quarter of the pixels keeps CI training short
CONDITIONS = ["summer", "noon", "marked"]  # one look, many roads: 3 minutes of logs generalise to new roads


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    simulate(root / "train", minutes=3.0, seed=3, fps=FPS, camera=SMALL, recording_minutes=0.5, noise_std=0.015,
             conditions=CONDITIONS)
    simulate(root / "val", minutes=0.5, seed=9, fps=FPS, camera=SMALL, recording_minutes=0.5, conditions=CONDITIONS)
    return root


def _datamodule(logs: Path, cache: Path, **kw) -> DriveDataModule:
    opts = dict(train=[str(logs / "train")], val=[str(logs / "val")], image_size=[40, 100], seq_len=16,
                stride=4, batch_size=16, eval_batch_size=8, num_workers=0, cache_dir=str(cache), curve_factor=0.0)
    opts.update(kw)
    return DriveDataModule(**opts)


def _trainer(root: Path, callbacks: List[pl.Callback] = (), **kw) -> pl.Trainer:
    """The checkpointing `drive fit` sets up: best by val/loss, and last.ckpt every N steps."""
    best = pl.callbacks.ModelCheckpoint(dirpath=root / "checkpoints", monitor="val/loss", filename="best")
    last = pl.callbacks.ModelCheckpoint(dirpath=root / "checkpoints", monitor=None, save_top_k=0, save_last=True,
                                        every_n_train_steps=kw.pop("every_n_train_steps", None))
    opts = dict(default_root_dir=root, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                gradient_clip_val=10.0, callbacks=[best, last, *callbacks], enable_model_summary=False)
    opts.update(kw)
    return pl.Trainer(**opts)


def test_trained_policy_drives_far_better_than_constant_steering(logs: Path, tmp_path: Path) -> None:
    pl.seed_everything(0)
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100), lr=3e-3, lr_schedule="cosine")
    trainer = _trainer(tmp_path, max_epochs=12)
    trainer.fit(module, datamodule=_datamodule(logs, tmp_path / "cache"))
    policy, meta = load_policy(tmp_path / "checkpoints" / "last.ckpt")
    assert meta["fps"] == pytest.approx(FPS) and meta["preprocessing"]["size"] == [40, 100]
    km = 0.5
    held_out = dict(seed=1, split="test", fps=FPS, camera=SMALL, conditions=CONDITIONS)
    learned = evaluate(PolicyDriver(policy, meta), km, **held_out).metrics
    constant = evaluate(ConstantDriver(0.0), km, **held_out).metrics
    print("learned", learned["interventions_per_km"], "constant", constant["interventions_per_km"])
    assert constant["interventions_per_km"] > 20
    assert learned["interventions_per_km"] <= 0.25 * constant["interventions_per_km"]
    assert learned["lateral_rms_m"] < constant["lateral_rms_m"]


class _Killed(Exception):
    pass


class _Crash(pl.Callback):
    """Simulates a kill: the run dies at the start of step ``at`` (after the step-4 checkpoint)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.global_step == self.at:
            raise _Killed()


class _Steps(pl.Callback):
    def __init__(self) -> None:
        self.steps: List[int] = []
        self.lrs: List[float] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.steps.append(trainer.global_step)
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_resume_after_kill_continues_from_saved_step(logs: Path, tmp_path: Path) -> None:
    dm = lambda: _datamodule(logs, tmp_path / "cache", batch_size=4)  # noqa: E731
    common = dict(max_steps=6, limit_val_batches=0, every_n_train_steps=2)
    pl.seed_everything(0)
    full = _Steps()
    _trainer(tmp_path / "full", [full], **common).fit(PolicyModule(input_hw=(40, 100), family="cfc"), datamodule=dm())

    pl.seed_everything(0)
    killed = _trainer(tmp_path / "run", [_Crash(at=5)], **common)
    with pytest.raises(_Killed):
        killed.fit(PolicyModule(input_hw=(40, 100), family="cfc"), datamodule=dm())
    assert killed.global_step == 5
    saved = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert saved["global_step"] == 4

    resumed = _Steps()
    trainer = _trainer(tmp_path / "run", [resumed], **common)
    trainer.fit(PolicyModule(input_hw=(40, 100), family="cfc"), datamodule=dm(), ckpt_path="last")
    assert resumed.steps == [4, 5]
    assert trainer.global_step == 6
    assert resumed.lrs == pytest.approx(full.lrs[4:])  # the LR schedule continues too


def test_checkpoint_carries_everything_to_rebuild_and_loads_weights_only(logs: Path, tmp_path: Path) -> None:
    pl.seed_everything(0)
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100))
    _trainer(tmp_path, max_steps=2, limit_val_batches=2).fit(module, datamodule=_datamodule(logs, tmp_path / "c"))
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    meta = ckpt["drive"]
    assert meta["family"] == "ncp_ltc" and meta["label_units"] == {"network": "1/km", "policy": "1/m",
                                                                     "label": "curvature"}
    assert meta["policy_config"]["rnn"]["kwargs"]["wiring"]["units"] == 19
    assert meta["frame_size"] == [40, 100]  # the logs' camera size, so export builds the module for it
    policy, _ = load_policy(tmp_path / "checkpoints" / "last.ckpt")
    torch.testing.assert_close(policy.state_dict()["rnn.w"], module.policy.state_dict()["rnn.w"])
    # weight constraints (positivity="clip") hold after training steps
    assert float(policy.rnn.w.min()) >= 0.0 and float(policy.rnn.cm.min()) >= 0.0
