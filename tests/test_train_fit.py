"""Training end to end: learning works (closed loop beats constant steering), resume, checkpoints,
and `drive test` / `drive predict` on a checkpoint."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path
from typing import List, Tuple

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from drive.checkpoint import load_policy, read_checkpoint
from drive.cli import main
from drive.data.augment import AugmentConfig
from drive.data.cache import display_name
from drive.data.datamodule import DriveDataModule
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs
from drive.policy_drivers import PolicyDriver
from drive.replay.lookahead_fit import CANDIDATES_S
from drive.sim.camera import Camera
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver
from drive.sim.record import simulate
from drive.train.module import PolicyModule
from drive.train.predictions import COLUMNS
from drive.train.throughput import Throughput

FPS = 10.0
SMALL = Camera.default(width=100, height=40)  # a quarter of the pixels keeps CI training short
CONDITIONS = ["summer", "noon", "marked"]  # one look, many roads: 3 minutes of logs generalise to new roads


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    simulate(
        root / "train",
        minutes=3.0,
        seed=3,
        fps=FPS,
        camera=SMALL,
        recording_minutes=0.5,
        noise_std=0.015,
        conditions=CONDITIONS,
    )
    simulate(
        root / "val", minutes=0.5, seed=9, fps=FPS, camera=SMALL, recording_minutes=0.5, conditions=CONDITIONS
    )
    return root


def _datamodule(logs: Path, cache: Path, **kw) -> DriveDataModule:
    opts = dict(
        train=[str(logs / "train")],
        val=[str(logs / "val")],
        image_size=[40, 100],
        seq_len=16,
        stride=4,
        batch_size=16,
        eval_batch_size=8,
        num_workers=0,
        cache_dir=str(cache),
        curve_factor=0.0,
    )
    opts.update(kw)
    return DriveDataModule(**opts)


def _trainer(root: Path, callbacks: List[pl.Callback] = (), **kw) -> pl.Trainer:
    """The checkpointing `drive fit` sets up: best by val/loss, and last.ckpt every N steps."""
    best = pl.callbacks.ModelCheckpoint(dirpath=root / "checkpoints", monitor="val/loss", filename="best")
    last = pl.callbacks.ModelCheckpoint(
        dirpath=root / "checkpoints",
        monitor=None,
        save_top_k=0,
        save_last=True,
        every_n_train_steps=kw.pop("every_n_train_steps", None),
    )
    opts = dict(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        gradient_clip_val=10.0,
        callbacks=[best, last, *callbacks],
        enable_model_summary=False,
    )
    opts.update(kw)
    return pl.Trainer(**opts)


@pytest.mark.slow
def test_trained_policy_drives_far_better_than_constant_steering(logs: Path, tmp_path: Path) -> None:
    pl.seed_everything(0)
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100), lr=3e-3, lr_schedule="cosine")
    trainer = _trainer(tmp_path, max_epochs=6)
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
        self.batches: List[List[int]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.steps.append(trainer.global_step)
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])
        self.batches.append((batch["recording"] * 100000 + batch["start"]).tolist())


@pytest.mark.slow
def test_resume_after_kill_continues_exactly_where_the_run_stopped(logs: Path, tmp_path: Path) -> None:
    """Killed mid-epoch in the second epoch and resumed from last.ckpt, the run ends with the
    weights of the run that was never interrupted, on the same machine: same step, LR schedule,
    batches and augmentation (2 persistent workers, the label look-ahead fitted on the logs in each
    run), and Lightning sees a resumable loader."""

    def dm() -> DriveDataModule:
        return _datamodule(
            logs,
            tmp_path / "cache",
            batch_size=16,
            stride=16,
            num_workers=2,
            augment=AugmentConfig(viewpoint_p=0.5, max_shift_m=0.3, lookahead_s="fit"),
        )

    def module() -> PolicyModule:
        return PolicyModule(input_hw=(40, 100), family="ncp_ltc")

    # 108 windows -> 7 batches an epoch; last.ckpt every 3 steps; killed at step 10, saved at 9
    common = dict(max_steps=11, limit_val_batches=0, every_n_train_steps=3)
    pl.seed_everything(0)
    full = _Steps()
    uninterrupted = module()
    _trainer(tmp_path / "full", [full], **common).fit(uninterrupted, datamodule=dm())

    pl.seed_everything(0)
    killed = _trainer(tmp_path / "run", [_Crash(at=10)], **common)
    with pytest.raises(_Killed):
        killed.fit(module(), datamodule=dm())
    saved = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert saved["global_step"] == 9
    assert saved["drive"]["label_lookahead_s"] in CANDIDATES_S  # fitted on the DART logs, both runs
    assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"epoch": 1, "batches": 2}]

    resumed = _Steps()
    pl.seed_everything(0)
    trainer = _trainer(tmp_path / "run", [resumed], **common)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*dataloader is not resumable.*")
        trained = module()
        trainer.fit(trained, datamodule=dm(), ckpt_path="last")
    assert resumed.steps == [9, 10] and trainer.global_step == 11
    assert resumed.lrs == pytest.approx(full.lrs[9:])  # the LR schedule continues too
    assert resumed.batches == full.batches[9:]  # the same windows, in the same order
    for name, value in uninterrupted.state_dict().items():
        torch.testing.assert_close(trained.state_dict()[name], value, msg=name)


def test_epoch_order_and_augmentation_follow_seed_epoch_and_window(logs: Path, tmp_path: Path) -> None:
    """Persistent workers draw fresh augmentation for every window every epoch, the same draw for the
    same (seed, epoch, window) wherever it is loaded."""
    dm = _datamodule(
        logs,
        tmp_path / "cache",
        batch_size=16,
        stride=16,
        num_workers=2,
        augment=AugmentConfig(viewpoint_p=0.0, photometric_p=1.0),
    )
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    epochs = []
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        epochs.append(
            {(int(r), int(s)): f for b in loader for r, s, f in zip(b["recording"], b["start"], b["frames"])}
        )
    assert epochs[0].keys() == epochs[1].keys() and len(epochs[0]) == len(dm.datasets["train"])
    assert all(not torch.equal(epochs[0][k], epochs[1][k]) for k in epochs[0])
    ds = dm.datasets["train"]
    window = ds.windows[5]
    assert torch.equal(
        ds[(5, 1)]["frames"], epochs[1][(window.recording, window.start)]
    )  # main process == worker


def test_checkpoint_carries_everything_to_rebuild_and_loads_weights_only(logs: Path, tmp_path: Path) -> None:
    pl.seed_everything(0)
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100))
    assert not module.policy.rnn.softplus  # the paper's family clips
    with torch.no_grad():  # violate the constraints, so only the after-step projection can restore them
        module.policy.rnn.w[:, ::2] = -0.5
        module.policy.rnn.cm[::2] = -0.5
    _trainer(tmp_path, max_steps=2, limit_val_batches=2).fit(
        module, datamodule=_datamodule(logs, tmp_path / "c")
    )
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    meta = ckpt["drive"]
    assert meta["family"] == "ncp_ltc" and meta["label_units"] == {
        "network": "1/km",
        "policy": "1/m",
        "label": "curvature",
    }
    assert meta["policy_config"]["rnn"]["kwargs"]["wiring"]["units"] == 19
    assert meta["frame_size"] == [40, 100]  # the logs' camera size, so export builds the module for it
    policy, _ = load_policy(tmp_path / "checkpoints" / "last.ckpt")
    torch.testing.assert_close(policy.state_dict()["rnn.w"], module.policy.state_dict()["rnn.w"])
    # weight constraints (positivity="clip") hold after training steps
    assert float(policy.rnn.w.detach().min()) >= 0.0 and float(policy.rnn.cm.detach().min()) >= 0.0


@pytest.fixture(scope="module")
def checkpoint(logs: Path, tmp_path_factory) -> Path:
    """last.ckpt after one training step: what `drive test|predict --ckpt_path` loads."""
    root = tmp_path_factory.mktemp("one-step")
    pl.seed_everything(0)
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100))
    _trainer(root, max_steps=1, limit_val_batches=0).fit(module, datamodule=_datamodule(logs, root / "cache"))
    return root / "checkpoints" / "last.ckpt"


def _lightning_args(command: str, ckpt: Path, logs: Path, root: Path, *extra: str) -> List[str]:
    """`drive test|predict` on ``logs`` with a checkpoint; the model comes from the checkpoint's
    hyperparameters."""
    return [
        command,
        "--ckpt_path",
        str(ckpt),
        f"--data.{command}",
        f"[{logs}]",
        "--data.image_size",
        "[40, 100]",
        "--data.eval_batch_size",
        "4",
        "--data.num_workers",
        "0",
        "--data.cache_dir",
        str(root / "cache"),
        "--trainer.accelerator",
        "cpu",
        "--trainer.default_root_dir",
        str(root),
        "--trainer.enable_progress_bar",
        "false",
        *extra,
    ]


def _one_pass_km(ckpt: Path, logs: Path) -> List[Tuple[str, np.ndarray, np.ndarray]]:
    """Per recording of ``logs``: (name, the checkpoint's curvature over it in one pass, label), 1/km."""
    policy, meta = load_policy(ckpt)
    pre = Preprocessing.from_dict(meta["preprocessing"])
    out = []
    for rec in read_logs(str(logs)):
        frames = pre(np.stack(list(rec.frames()))).float().div(255.0)
        dt = np.diff(rec.timestamps_s, prepend=rec.timestamps_s[0] - 1.0 / meta["fps"])
        with torch.no_grad():
            y, _ = policy(frames[None], None, torch.from_numpy(dt).float()[None])
        out.append((display_name(rec), 1000.0 * y[0].double().numpy(), 1000.0 * rec.curvature))
    return out


def test_drive_test_logs_the_stateful_error_of_the_checkpoint_over_whole_recordings(
    logs: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`drive test` streams each recording window after window (hidden state carried): its MSE equals
    the checkpoint run over the whole recording in one pass, overall and per recording."""
    assert main(_lightning_args("test", checkpoint, logs / "train", tmp_path)) == 0
    assert "test/mse_km" in capsys.readouterr().out  # Lightning's results table
    (metrics_csv,) = (tmp_path / "csv").rglob("metrics.csv")
    with open(metrics_csv, newline="") as f:
        logged = {k: float(v) for row in csv.DictReader(f) for k, v in row.items() if v}
    reference = _one_pass_km(checkpoint, logs / "train")
    assert len(reference) == 6
    for name, pred, label in reference:
        assert logged[f"test_recording/{name}/mse_km"] == pytest.approx(
            np.mean((pred - label) ** 2), rel=1e-4
        )
        assert logged[f"test_recording/{name}/mae_km"] == pytest.approx(
            np.mean(np.abs(pred - label)), rel=1e-4
        )
    errors = np.concatenate([pred - label for _, pred, label in reference])
    assert logged["test/mse_km"] == pytest.approx(np.mean(errors**2), rel=1e-4)


def test_drive_predict_writes_the_checkpoints_curvature_for_every_frame_of_every_recording(
    logs: Path, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`drive predict` writes <root>/predictions.csv: one row per frame (padding dropped), in recording
    and frame order, whose curvature is the checkpoint's one-pass curvature (1/m) and whose label and
    timestamps are the log's."""
    assert main(_lightning_args("predict", checkpoint, logs / "train", tmp_path)) == 0
    path = tmp_path / "predictions.csv"
    assert f"to {path}" in capsys.readouterr().out
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        rows = list(reader)
    assert not list(tmp_path.glob(".predictions*"))  # no temporary left behind
    reference = _one_pass_km(checkpoint, logs / "train")
    logs_by_name = {display_name(rec): rec for rec in read_logs(str(logs / "train"))}
    assert len(rows) == sum(len(pred) for _, pred, _ in reference)
    offset = 0
    for name, pred_km, label_km in reference:  # recordings in the split's order, frames in time order
        mine = rows[offset : offset + len(pred_km)]
        offset += len(pred_km)
        assert {r["recording"] for r in mine} == {name}
        assert [int(r["frame"]) for r in mine] == list(range(len(pred_km)))
        np.testing.assert_allclose(
            [1000.0 * float(r["predicted_curvature_per_m"]) for r in mine], pred_km, atol=1e-3, err_msg=name
        )
        np.testing.assert_allclose(
            [1000.0 * float(r["recorded_curvature_per_m"]) for r in mine], label_km, atol=1e-3, err_msg=name
        )
        np.testing.assert_allclose(
            [float(r["time_s"]) for r in mine], logs_by_name[name].timestamps_s, atol=1e-6
        )


def test_drive_predict_path_option(logs: Path, checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere" / "curvature.csv"
    assert (
        main(
            _lightning_args(
                "predict", checkpoint, logs / "val", tmp_path / "run", "--predictions.path", str(out)
            )
        )
        == 0
    )
    assert out.is_file() and not (tmp_path / "run" / "predictions.csv").exists()


@pytest.mark.parametrize("command", ["test", "predict"])
def test_missing_checkpoint_is_named_on_stderr_before_any_work(
    command: str, logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    missing = tmp_path / "no-such-run" / "last.ckpt"
    assert main(_lightning_args(command, missing, logs / "val", tmp_path / "run")) == 2
    captured = capsys.readouterr()
    assert f"drive {command}: error: --ckpt_path {missing}: no such checkpoint file" in captured.err
    assert str(missing) not in captured.out
    assert not (tmp_path / "run").exists()  # no cache, no logs: refused before anything was built


def test_throughput_counts_the_frames_of_the_steps_after_the_warm_up(logs: Path, tmp_path: Path) -> None:
    """`drive fit --throughput.path`: frames/s over the steps after ``skip_steps``, every frame of
    every window (batch x seq_len) counted, written atomically when training ends."""
    pl.seed_everything(0)
    meter = Throughput(skip_steps=2, path=str(tmp_path / "throughput.json"))
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100))
    _trainer(tmp_path, [meter], max_steps=5, limit_val_batches=0).fit(
        module, datamodule=_datamodule(logs, tmp_path / "c", batch_size=4)
    )
    got = json.loads((tmp_path / "throughput.json").read_text())
    assert got["steps"] == 3 and got["frames"] == 3 * 4 * 16 and got["skip_steps"] == 2
    assert got["seconds"] > 0 and got["frames_per_s"] == pytest.approx(got["frames"] / got["seconds"])
    assert not list(tmp_path.glob(".*tmp*"))
    with pytest.raises(ValueError, match="skip_steps"):
        Throughput(skip_steps=-1)
