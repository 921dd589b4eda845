"""Does every family learn on data unlike the built-in world's default? (issue 25)

Datasets whose image statistics and label distributions differ from the demo's, made from the
built-in world with another camera and look, and from plainly synthetic lane scenes
(:mod:`drive.sim.synthetic`); each model is trained for a fixed number of optimizer steps and
scored by its stateful validation MSE against the best constant predictor (the validation labels'
variance: the constant chosen in hindsight). ``tools/bench_learn.py`` runs the whole matrix;
``tests/test_learnability.py`` a small one.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import lightning.pytorch as pl
import numpy as np

from drive.data.datamodule import DriveDataModule
from drive.sim.camera import Camera
from drive.sim.record import simulate
from drive.sim.synthetic import LaneScene, write_synthetic_lanes
from drive.train.module import PolicyModule
from drive.train.monitor import NotLearningWarning

__all__ = ["DATASETS", "DatasetSpec", "make_dataset", "fit_and_score"]


@dataclass(frozen=True)
class DatasetSpec:
    """One benchmark dataset: how its train and val recordings are made, and what differs."""

    name: str
    what: str
    make: Callable[[Path, int, int, int], None]  # (dir, frames_train, frames_val, seed)
    model_hw: Tuple[int, int] = (40, 100)


def _world(
    camera_kw: Dict[str, Any],
    conditions: List[str],
    noise_std: float = 0.02,
    speed_mps: Optional[float] = None,
) -> Callable[[Path, int, int, int], None]:
    def make(root: Path, n_train: int, n_val: int, seed: int) -> None:
        camera = Camera.default(**camera_kw)
        kw: Dict[str, Any] = {"fps": 10.0, "camera": camera, "conditions": conditions}
        if speed_mps is not None:
            kw["speed_mps"] = speed_mps
        simulate(
            root / "train",
            minutes=n_train / 600.0,
            seed=seed,
            recording_minutes=max(n_train, 1) / 1200.0,
            noise_std=noise_std,
            **kw,
        )
        simulate(
            root / "val",
            minutes=n_val / 600.0,
            seed=seed + 1000,
            split="test",
            recording_minutes=n_val / 600.0,
            **kw,
        )

    return make


def _synthetic(val_spikes: bool = False, **scene_kw: Any) -> Callable[[Path, int, int, int], None]:
    def make(root: Path, n_train: int, n_val: int, seed: int) -> None:
        scene = LaneScene(**scene_kw)
        write_synthetic_lanes(root / "train", scene, n_train // 2, seed, recordings=2)
        val_scene = scene if val_spikes else LaneScene(**{**scene_kw, "spike_p": 0.0})
        write_synthetic_lanes(root / "val", val_scene, n_val, seed + 1000)

    return make


DATASETS: Dict[str, DatasetSpec] = {
    s.name: s
    for s in [
        DatasetSpec(
            "world_high_narrow",
            "built-in world, camera 2.4 m high, 55 deg FOV, pitched down 0.25 rad, "
            "128x64, winter/overcast, DART noise 0.02",
            _world(
                dict(width=128, height=64, hfov_deg=55.0, height_m=2.4, pitch_rad=0.25),
                ["winter", "overcast"],
            ),
        ),
        DatasetSpec(
            "world_low_wide",
            "built-in world, camera 1.0 m high, 110 deg FOV, pitch 0.05 rad, 160x60, "
            "autumn/evening/unmarked roads, 12 m/s",
            _world(
                dict(width=160, height=60, hfov_deg=110.0, height_m=1.0, pitch_rad=0.05),
                ["autumn", "evening", "unmarked"],
                speed_mps=12.0,
            ),
        ),
        DatasetSpec(
            "synthetic_dark_sharp_spikes",
            "flat-colour lanes, dark (exposure 0.45) and orange, camera 2.6 m, "
            "50 deg FOV, curves to 1/12 m, 1 % single-frame label spikes (1.5x the curvature limit) "
            "in training",
            _synthetic(
                width=120,
                height=60,
                hfov_deg=50.0,
                camera_height_m=2.6,
                pitch_rad=0.3,
                exposure=0.45,
                ground_rgb=(0.55, 0.35, 0.15),
                road_rgb=(0.25, 0.2, 0.15),
                sky_rgb=(0.95, 0.6, 0.3),
                max_curvature_per_m=1 / 12.0,
                spike_p=0.01,
                spike_scale=1.5,
            ),
        ),
        DatasetSpec(
            "synthetic_low_wide_green",
            "flat-colour lanes, camera 1.0 m high, 100 deg FOV, pitch 0.08 rad, "
            "140x56, green tint, exposure 0.8, curves to 1/15 m, 2 % label spikes (1.2x the limit) "
            "in training",
            _synthetic(
                width=140,
                height=56,
                hfov_deg=100.0,
                camera_height_m=1.0,
                pitch_rad=0.08,
                exposure=0.8,
                ground_rgb=(0.2, 0.55, 0.25),
                road_rgb=(0.3, 0.4, 0.3),
                sky_rgb=(0.6, 0.9, 0.6),
                line_rgb=(0.95, 0.95, 0.8),
                max_curvature_per_m=1 / 15.0,
                spike_p=0.02,
                spike_scale=1.2,
            ),
        ),
        DatasetSpec(
            "synthetic_bright_blue",
            "flat-colour lanes, over-exposed (1.5) and blue-grey, white lines, camera "
            "1.3 m, 75 deg FOV, 20 Hz, noisy pixels",
            _synthetic(
                width=100,
                height=50,
                hfov_deg=75.0,
                camera_height_m=1.3,
                pitch_rad=0.12,
                exposure=1.5,
                ground_rgb=(0.4, 0.5, 0.6),
                road_rgb=(0.45, 0.47, 0.5),
                sky_rgb=(0.7, 0.75, 0.8),
                line_rgb=(0.95, 0.95, 0.95),
                fps=20.0,
                pixel_noise=0.05,
                max_curvature_per_m=1 / 30.0,
            ),
        ),
    ]
}


def make_dataset(name: str, root: Path, n_train: int = 1200, n_val: int = 300, seed: int = 7) -> Path:
    """Write dataset ``name`` under ``root/name`` (train/ and val/) unless it is there; returns the folder."""
    spec = DATASETS[name]
    out = Path(root) / name
    if not ((out / "train").is_dir() and (out / "val").is_dir()):
        spec.make(out, n_train, n_val, seed)
    return out


@dataclass
class Score:
    family: str
    dataset: str
    steps: int
    val_mse: float
    best_constant: float
    ratio: float = field(init=False)
    warnings: List[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ratio = self.val_mse / max(self.best_constant, 1e-12)


def fit_and_score(
    family: str,
    data: Path,
    steps: int,
    model_hw: Sequence[int] = (40, 100),
    batch_size: int = 8,
    seq_len: int = 16,
    lr: float = 2e-3,
    seed: int = 0,
    cache_dir: Optional[Path] = None,
    **model_kw: Any,
) -> Score:
    """Train ``family`` for ``steps`` optimizer steps on ``data/train`` with the demo's recipe (Adam,
    cosine decay with warm-up, grad clip 10, plain MSE) and score it on ``data/val``."""
    pl.seed_everything(seed, verbose=False)
    hw = list(model_hw)
    dm = DriveDataModule(
        train=[str(data / "train")],
        val=[str(data / "val")],
        image_size=hw,
        seq_len=seq_len,
        stride=seq_len // 2,
        batch_size=batch_size,
        eval_batch_size=batch_size,
        num_workers=0,
        pin_memory=False,
        cache_dir=str(cache_dir or data / "cache"),
        curve_factor=0.0,
    )
    module = PolicyModule(
        family=family,
        input_hw=tuple(hw),
        lr=lr,
        lr_schedule="cosine",
        lr_min_ratio=0.05,
        warmup_steps=min(20, steps // 10),
        **model_kw,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        gradient_clip_val=10.0,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NotLearningWarning)
        warnings.filterwarnings("ignore", module=r"lightning.*")
        trainer.fit(module, datamodule=dm)
    val_trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metrics = val_trainer.validate(module, datamodule=dm, verbose=False)[0]
    labels = np.concatenate([r.curvature for r in dm.datasets["val"].recordings]) * 1000.0
    return Score(
        family,
        data.name,
        steps,
        float(metrics["val/mse_km"]),
        float(np.var(labels)),
        warnings=[str(w.message) for w in caught if issubclass(w.category, NotLearningWarning)],
    )
