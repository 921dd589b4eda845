"""What ``drive demo``'s stages hand each other and the report: one dataclass per stage's result, so a
later stage reads attributes, not string keys, and a renamed field fails where it is read.

Each result is saved as JSON in ``<out>/stages/<name>.json`` (:mod:`drive.demo.stage`): its fields are
the keys there (:meth:`Result.to_json`), and a saved result is rebuilt with :meth:`Result.from_json`,
which raises ``TypeError`` when the saved keys no longer fit the fields (the stage then re-runs).
Closed-loop metrics, robustness rows and the closed form's fidelity report stay plain dicts: they are
the libraries' outputs, JSON by design. ``seconds`` is set by the stage runner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar

from drive.demo.settings import DemoSettings

__all__ = [
    "Result",
    "Simulated",
    "Trained",
    "OnPolicyArm",
    "Baselines",
    "HardDrove",
    "Drove",
    "Drives",
    "Saliency",
    "Robustness",
    "ClosedForm",
    "Export",
    "DemoResults",
]

R = TypeVar("R", bound="Result")


class Result:
    """A stage's result: a dataclass whose fields are the keys of its saved JSON."""

    seconds: float

    def to_json(self) -> Dict[str, Any]:
        """The result as its stage file keeps it."""
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls: Type[R], saved: Any) -> R:
        """The result rebuilt from :meth:`to_json`'s dict; ``TypeError`` when its keys do not fit."""
        if not isinstance(saved, dict):
            raise TypeError(f"{cls.__name__}: a saved result is a JSON object, got {type(saved).__name__}")
        return cls(**saved)


@dataclass
class Simulated(Result):
    """The expert's logs: training, validation and the test-split recording (folders)."""

    train: List[str]
    val: List[str]
    test: List[str]
    seconds: float = 0.0


@dataclass
class Trained(Result):
    """A behaviour-cloning run: its final, best-validation and branch checkpoints ("": none)."""

    checkpoint: str
    best_checkpoint: str
    branch_checkpoint: str
    metrics_csv: str
    steps: int
    label_lookahead_s: Optional[float]
    seconds: float = 0.0


@dataclass
class OnPolicyArm(Result):
    """The run branched at ``branch_step`` and trained in the loop to ``steps`` (the demo's policy)."""

    checkpoint: str
    metrics_csv: str
    steps: int
    branch_step: int
    every_n_steps: int
    noise_std: float
    share: float
    episodes: int
    episode_s: float
    rounds: int
    visited_steps: int
    seconds: float = 0.0


@dataclass
class Baselines(Result):
    """The baselines' final checkpoints by family."""

    checkpoints: Dict[str, str]
    seconds: float = 0.0


@dataclass
class HardDrove:
    """A driver on held-out hard roads: closed-loop metrics and the plot of its drive."""

    metrics: Dict[str, Any]
    plot: str = ""


@dataclass
class Drove:
    """A driver on held-out roads: closed-loop metrics, plot, camera video ("": none) and, when hard
    roads were driven, those."""

    metrics: Dict[str, Any]
    plot: str = ""
    video: str = ""
    hard: Optional[HardDrove] = None

    def to_json(self) -> Dict[str, Any]:
        saved = asdict(self)
        if self.hard is None:  # no hard roads driven: no key, as the stage file always had it
            del saved["hard"]
        return saved

    @classmethod
    def from_json(cls, saved: Any) -> "Drove":
        hard = saved.get("hard") if isinstance(saved, dict) else None
        return cls(**{**saved, "hard": HardDrove(**hard) if hard else None})


@dataclass
class Drives(Result):
    """The closed-loop stage: every driver by name (saved beside ``seconds``, one key per driver)."""

    drivers: Dict[str, Drove] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        return {**{name: drove.to_json() for name, drove in self.drivers.items()}, "seconds": self.seconds}

    @classmethod
    def from_json(cls, saved: Any) -> "Drives":
        if not isinstance(saved, dict):
            raise TypeError(f"Drives: a saved result is a JSON object, got {type(saved).__name__}")
        drivers = {name: Drove.from_json(v) for name, v in saved.items() if name != "seconds"}
        return cls(drivers, saved.get("seconds", 0.0))


@dataclass
class Saliency(Result):
    """The VisualBackProp video of the policy (:func:`drive.explain.video.saliency_video`'s fields)."""

    frames: int
    fps: float
    size: List[int]
    video: str
    contact_sheet: str
    method: str
    noise: Optional[float]
    rows: List[str]
    seconds: float = 0.0


@dataclass
class Robustness(Result):
    """The robustness report, its plots and its rows (:func:`drive.evaluate.robustness_report`)."""

    report: str
    plots: List[str]
    rows: List[Dict[str, Any]]
    seconds: float = 0.0


@dataclass
class ClosedForm(Result):
    """The converted closed-form LTC and its fidelity report against the ODE."""

    converted: str
    fidelity: Dict[str, Any]
    seconds: float = 0.0


@dataclass
class Export(Result):
    """The TorchScript file, its largest difference from the checkpoint and its closed loop."""

    file: str
    bytes: int
    frames_compared: int
    max_abs_diff_per_km: float
    closed_loop: Dict[str, Any]
    seconds: float = 0.0


@dataclass
class DemoResults:
    """Everything :func:`drive.demo.report.write_report` reads: the settings and each stage's result
    (None: the stage did not run)."""

    settings: DemoSettings
    simulate: Simulated
    train: Trained
    baselines: Baselines
    drive: Drives
    onpolicy: Optional[OnPolicyArm] = None
    saliency: Optional[Saliency] = None
    robustness: Optional[Robustness] = None
    closed_form: Optional[ClosedForm] = None
    export: Optional[Export] = None
    total_seconds: float = 0.0
