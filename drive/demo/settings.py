"""``drive demo``'s settings: every field of :class:`DemoSettings` is a ``drive demo`` option, written
once here with its help (:func:`option`; :mod:`drive.cli.demo` builds the parser from the fields);
:data:`DEFAULT_CONFIG` is the training profile it starts from (the shipped
profile ``demo``, package data: ``drive demo`` runs from any folder, from a checkout or a wheel)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from drive.io.checks import number
from drive.sim.record import MAX_FPS, MAX_NOISE_STD
from drive.train.profiles import profile_path

__all__ = ["DemoSettings", "DEFAULT_CONFIG", "option"]

DEFAULT_CONFIG: Path = profile_path("demo")


def option(default: Any, help: str) -> Any:
    """A field that is a ``drive demo`` option: its default and its line in ``drive demo --help``
    (``%(default)s`` is the default); the flag is the field's name with dashes, its type the field's."""
    return field(default=default, metadata={"help": help})


_WHOLE = dict(integer=True, high=1e9)
_RANGES: Dict[str, Dict[str, Any]] = {
    "seed": dict(low=0, **_WHOLE),
    "train_minutes": dict(low=0.0, high=1e4, low_open=True),
    "val_minutes": dict(low=0.0, high=1e4, low_open=True),
    "recording_minutes": dict(low=0.0, high=1e4, low_open=True),
    "fps": dict(low=0.0, high=MAX_FPS, low_open=True),
    "dart_noise": dict(low=0.0, high=MAX_NOISE_STD),
    "km": dict(low=0.0, high=1e4, low_open=True),
    "hard_km": dict(low=0.0, high=1e4),
    "max_steps": dict(low=0, **_WHOLE),
    "threads": dict(low=0, high=4096, integer=True),
    "baseline_steps": dict(low=1, **_WHOLE),
    "robustness_km": dict(low=0.0, high=1e4),
    "robustness_frames": dict(low=1, **_WHOLE),
    "saliency_frames": dict(low=1, **_WHOLE),
    "closed_form_km": dict(low=0.0, high=1e4),
    "speed_rounds": dict(low=1, high=1e6, integer=True),
}


@dataclass
class DemoSettings:
    """What the demo does; every field is a ``drive demo`` option (:mod:`drive.cli.demo` builds the
    parser from these fields: name, type, default and ``metadata["help"]``)."""

    out: str = option("runs/demo", "output folder (default: %(default)s)")
    config: str = option(
        "demo",
        "drive fit config of the policy: a shipped profile's name or a YAML file (default: %(default)s)",
    )
    seed: int = option(0, "world seed of the training roads and of training")
    train_minutes: float = option(30.0, "minutes of training logs")
    val_minutes: float = option(2.0, "minutes of validation logs")
    recording_minutes: float = option(0.5, "minutes per recording")
    fps: float = option(10.0, "camera rate of logs and closed loop (Hz)")
    dart_noise: float = option(0.015, "DART steering noise std (1/m)")
    roads: str = option(
        "mixed",
        "roads of the training and validation logs: easy, hard (junction turns, hairpins, S-bends, "
        "chicanes at a speed that follows the road) or mixed, half of each (default: %(default)s)",
    )
    km: float = option(6.0, "closed-loop kilometres per driver on held-out roads, spread over --test-seeds")
    hard_km: float = option(
        3.0, "closed-loop kilometres per driver on held-out hard roads, reported beside --km (0: none)"
    )
    test_seeds: str = option(
        "0,1,2", "comma-separated world seeds of the held-out test roads (default: %(default)s)"
    )
    conditions: str = option(
        "",
        "comma-separated condition names for training AND test roads, e.g. summer,noon "
        "(default: every season, light and marking at random)",
    )
    max_steps: int = option(1800, "optimizer steps of the demo's policy (0: the config's budget)")
    threads: int = option(
        2,
        "torch threads for training (default %(default)s: the result is the same on every "
        "machine with the same torch; 0: all cores, faster on big machines, other weights)",
    )
    onpolicy_steps: int = option(
        300,
        "training in the loop: the NCP-LTC's last N optimizer steps train with on-policy data from "
        "log replay on the training logs (the demo's policy); the behaviour-cloning run they branch "
        "from is the other arm, driven beside it on the same roads (default: %(default)s; 0: "
        "behaviour cloning only, no other arm)",
    )
    baselines: str = option(
        "lstm,cnn", "families trained beside the NCP-LTC for the robustness comparison ('' for none)"
    )
    baseline_steps: int = option(300, "optimizer steps per baseline (default: %(default)s)")
    robustness_km: float = option(
        0.3, "closed-loop km per model and noise level in the robustness stage (0: open loop only)"
    )
    robustness_frames: int = option(
        300, "frames of the test recording in the open-loop robustness analysis (default: %(default)s)"
    )
    saliency_frames: int = option(150, "frames of the saliency video (default: %(default)s)")
    closed_form_km: float = option(
        1.0, "closed-loop km comparing the closed-form LTC with the ODE LTC (default: %(default)s)"
    )
    speed_rounds: int = option(
        15, "timing rounds of the closed-form vs ODE speed comparison (default: %(default)s)"
    )

    def __post_init__(self) -> None:
        """Every number finite and in its range, the test seeds readable: a ``ValueError`` naming
        the option (``--km``) before anything runs (a negative --km drove until a worker died)."""
        for name, limits in _RANGES.items():
            number(getattr(self, name), "--" + name.replace("_", "-"), **limits)
        _ = self.seeds  # readable, at least one: else a ValueError naming --test-seeds

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
