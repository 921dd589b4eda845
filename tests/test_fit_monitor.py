"""`drive fit` says when it is not learning (issue 25): best-constant baseline beside val/mse_km,
one clear warning per problem (no better than a constant, dead features, saturated cell inputs)."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning.pytorch as pl
import pytest

from drive.data.datamodule import DriveDataModule
from drive.sim.synthetic import LaneScene, write_synthetic_lanes
from drive.train.module import PolicyModule
from drive.train.monitor import NotLearningWarning

SCENE = LaneScene(width=100, height=40)


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("monitor")
    write_synthetic_lanes(root / "train", SCENE, 160, 1)
    write_synthetic_lanes(root / "val", SCENE, 64, 2)
    return root


def _fit(logs: Path, tmp: Path, lr: float, steps: int, check: int) -> tuple:
    pl.seed_everything(0)
    dm = DriveDataModule(
        train=[str(logs / "train")],
        val=[str(logs / "val")],
        image_size=[40, 100],
        seq_len=16,
        stride=8,
        batch_size=4,
        num_workers=0,
        cache_dir=str(tmp / "cache"),
        curve_factor=0.0,
    )
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100), lr=lr, check_after_steps=check)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        val_check_interval=check,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=dm)
    return module, trainer, [str(w.message) for w in caught if issubclass(w.category, NotLearningWarning)]


def test_a_model_that_does_not_learn_is_reported_once_with_the_baseline(logs: Path, tmp_path: Path) -> None:
    module, trainer, messages = _fit(logs, tmp_path, lr=1e-9, steps=16, check=8)  # lr ~0: it cannot learn
    metrics = trainer.callback_metrics
    const = module.monitor.baseline["val"]
    assert float(metrics["val/best_constant_mse_km"]) == pytest.approx(const, rel=1e-5)
    assert float(metrics["val/mse_vs_constant"]) == pytest.approx(
        float(metrics["val/mse_km"]) / const, rel=1e-4
    )
    assert "train/dead_features" in metrics and "train/input_saturation" in metrics
    train = [m for m in messages if "training MSE" in m]
    val = [m for m in messages if "validation MSE" in m]
    assert len(train) == 1 and len(val) == 1, messages  # once each, though validation ran twice
    assert "no better than the best constant predictor" in val[0] and f"{const:.4g}" in val[0]


def test_a_healthy_run_gives_no_warning(logs: Path, tmp_path: Path) -> None:
    module, trainer, messages = _fit(logs, tmp_path, lr=3e-3, steps=60, check=50)
    assert messages == [], messages
    assert float(trainer.callback_metrics["val/mse_vs_constant"]) < 1.0


def test_dead_features_and_saturated_inputs_are_named() -> None:
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100))
    module.monitor.health = {"dead": 0.66, "feature_max": 114.0, "saturated": 0.9}
    with pytest.warns(NotLearningWarning) as record:
        module.monitor.check(step=0)
        module.monitor.check(step=0)  # once per problem
    text = [str(r.message) for r in record]
    assert len(text) == 2
    assert "66% of the head's features are exactly 0" in text[0] and "largest feature 114" in text[0]
    assert "90% of the LTC's sensory sigmoids are saturated" in text[1]


def test_one_validation_above_the_bar_is_not_enough() -> None:
    """The demo profile's first validation on mixed roads is sometimes above the best constant in runs
    that learn (docs/training.md): the warning needs two validations in a row above it."""
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100))
    monitor = module.monitor
    monitor.baseline["val"] = 114.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotLearningWarning)
        monitor.check(300, val_mse=116.0)  # above, once
        monitor.check(600, val_mse=50.0)  # learning
        monitor.check(900, val_mse=130.0)  # above once more, not twice in a row
    with pytest.warns(NotLearningWarning) as record:
        monitor.check(1200, val_mse=120.0)
    assert len(record) == 1
    text = str(record[0].message)
    assert "validation MSE 120 (1/km)^2 after 1200 steps, and 130 at the validation before" in text
