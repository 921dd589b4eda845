"""``drive demo``'s settings: every field of :class:`DemoSettings` is a ``drive demo`` option
(:mod:`drive.cli.demo`); :data:`DEFAULT_CONFIG` is the training profile it starts from (the shipped
profile ``demo``, package data: ``drive demo`` runs from any folder, from a checkout or a wheel)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List

from drive.train.profiles import profile_path

__all__ = ["DemoSettings", "DEFAULT_CONFIG"]

DEFAULT_CONFIG: Path = profile_path("demo")


@dataclass
class DemoSettings:
    """What the demo does; every field is a ``drive demo`` option."""

    out: str = "runs/demo"
    config: str = "demo"  # a shipped profile's name or a YAML file
    seed: int = 0
    train_minutes: float = 30.0
    val_minutes: float = 2.0
    recording_minutes: float = 0.5
    fps: float = 10.0
    dart_noise: float = 0.015
    km: float = 6.0
    test_seeds: str = "0,1,2"
    conditions: str = ""
    max_steps: int = 0
    threads: int = 2
    baselines: str = "lstm,cnn"
    baseline_steps: int = 300
    robustness_km: float = 0.3
    robustness_frames: int = 300
    saliency_frames: int = 150
    closed_form_km: float = 1.0
    speed_rounds: int = 15

    @property
    def seeds(self) -> List[int]:
        """The held-out test seeds; the first one also gives the open-loop test recording."""
        try:
            seeds = [int(x) for x in self.test_seeds.split(",") if x.strip()]
        except ValueError:
            raise ValueError(
                f"--test-seeds must be comma-separated integers, got {self.test_seeds!r}"
            ) from None
        if not seeds:
            raise ValueError("--test-seeds names no seed")
        return seeds
