"""Does log replay predict driving? The measurement behind ``tools/bench_replay.py``,
``tools/replay_views.py`` and ``tests/test_replay_proof.py`` (experiment code, not the product: nothing
in ``drive/`` imports it).

Ground truth exists in the built-in world: its roads can be driven for real.
:func:`drive.sim.record.record_logs` records noise-free expert drives on held-out roads; :func:`measure`
drives one policy on each log's own road and appearance in the world's closed loop and on the log itself
in log replay (paths from the poses, and again from curvature and speed as a log without poses would
give them), and its open-loop error on the same logs; :func:`spearman` ranks them.

Policies that need no training, of clearly different quality: the expert made worse (a steering bias,
steering noise, a delay; privileged, so they test the kinematics) and :class:`PixelRidge`, a ridge
regression from a downsampled grey image to curvature, fitted in seconds on a few minutes of logs
(camera only, so it tests the re-rendered views; its resolution and regularisation set its quality).
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import cv2
import numpy as np

from drive.io.recording import Recording
from drive.replay import open_loop_errors, replay_recording
from drive.sim.appearance import Appearance, sample_appearance
from drive.sim.closed_loop import Segment, drive_segment, summarize
from drive.sim.expert import PurePursuitExpert, SteeringNoise
from drive.sim.record import LOG_FPS
from drive.sim.render import Renderer
from drive.sim.road import Road, generate_road
from drive.sim.safety import SAFETY_DRIVER
from drive.sim.world import DEFAULT_SPEED_MPS, World

__all__ = [
    "BiasedExpert",
    "NoisyExpert",
    "DelayedExpert",
    "PixelRidge",
    "world_drive",
    "measure",
    "spearman",
    "FPS",
]

FPS = LOG_FPS
_KEYS = ("km", "interventions", "interventions_per_km", "lateral_rms_m")


class BiasedExpert(PurePursuitExpert):
    """The expert with a constant steering bias (1/m)."""

    def __init__(self, bias_per_m: float) -> None:
        super().__init__()
        self.bias, self.name = bias_per_m, f"expert+bias {bias_per_m:g}"

    def act(self, obs: Any) -> float:
        return super().act(obs) + self.bias


class NoisyExpert(PurePursuitExpert):
    """The expert with Ornstein-Uhlenbeck steering noise (std in 1/m, 1 s), reseeded at every reset."""

    def __init__(self, std_per_m: float) -> None:
        super().__init__()
        self.std, self.name, self.episode = std_per_m, f"expert+noise {std_per_m:g}", 0
        self.noise = SteeringNoise(std_per_m, seed=0)

    def reset(self) -> None:
        self.noise = SteeringNoise(self.std, seed=self.episode)
        self.episode += 1

    def act(self, obs: Any) -> float:
        return super().act(obs) + self.noise(obs.dt_s)


class DelayedExpert(PurePursuitExpert):
    """The expert acting on what it saw ``steps`` periods ago."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps, self.name = steps, f"expert+delay {steps / FPS:g} s"
        self.queue: List[float] = []

    def reset(self) -> None:
        self.queue = []

    def act(self, obs: Any) -> float:
        self.queue.append(super().act(obs))
        return self.queue.pop(0) if len(self.queue) > self.steps else self.queue[0]


class PixelRidge:
    """Curvature as a ridge regression on the lower half of the grey image, downsampled to ``hw``.

    Fitted on every ``every``-th frame of ``recordings`` (features standardised, penalty
    ``alpha`` x frames). A camera-only policy with no state, fitted in seconds.
    """

    needs_image = True

    def __init__(self, recordings: Sequence[Recording], hw: Tuple[int, int], alpha: float, every: int = 2):
        self.hw, self.name = (int(hw[0]), int(hw[1])), f"ridge {hw[0]}x{hw[1]} alpha {alpha:g}"
        x = np.asarray([self.features(r.frame(i)) for r in recordings for i in range(0, len(r), every)])
        y = np.concatenate([np.asarray(r.log["curvature"])[::every] for r in recordings])
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        z = (x - self.mean) / self.std
        self.bias = float(y.mean())
        self.weights = np.linalg.solve(z.T @ z + alpha * len(z) * np.eye(z.shape[1]), z.T @ (y - self.bias))

    def features(self, image: np.ndarray) -> np.ndarray:
        grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
        lower = grey[grey.shape[0] // 2 :]
        return cv2.resize(lower, (self.hw[1], self.hw[0]), interpolation=cv2.INTER_AREA).ravel()

    def reset(self) -> None:
        pass

    def act(self, obs: Any) -> float:
        return float(((self.features(obs.image) - self.mean) / self.std) @ self.weights + self.bias)


def log_scene(log: Dict[str, Any]) -> Tuple[Road, Appearance]:
    """The road and appearance a log of :func:`drive.sim.record.record_logs` was recorded on."""
    n_frames = int(round(log["minutes"] * 60.0 * FPS))
    road = generate_road(log["seed"], n_frames / FPS * DEFAULT_SPEED_MPS + 300.0, "test", log["index"])
    return road, sample_appearance(log["seed"], "test", log["index"], log["conditions"])


def world_drive(driver: Any, log: Dict[str, Any], length_m: float, fps: float) -> Segment:
    """The true closed loop on a log's own road and appearance (record_drive's road and start)."""
    road, app = log_scene(log)
    world = World(road, app, Renderer(), fps=fps, start_s_m=5.0)
    return drive_segment(world, driver, length_m, None, SAFETY_DRIVER, None, log["index"], {})


def measure(driver: Any, logs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """World, log replay (path from poses, and from curvature) and open-loop MSE over ``logs``."""
    fps = 1.0 / getattr(driver, "nominal_dt_s", 1.0 / FPS)
    world: List[Segment] = []
    replay: List[Segment] = []
    integrated: List[Segment] = []
    errors = []
    for log in logs:
        rec = Recording.open(log["path"])
        replayed = replay_recording(rec, driver, fps)
        replay += replayed.segments
        integrated += replay_recording(rec, driver, fps, use_poses=False).segments
        world.append(world_drive(driver, log, sum(s.km for s in replayed.segments) * 1000.0, fps))
        errors.append(open_loop_errors(rec, driver))
    return {
        "world": {k: summarize(world)[k] for k in _KEYS},
        "replay": {k: summarize(replay)[k] for k in _KEYS},
        "replay_from_curvature": {k: summarize(integrated)[k] for k in _KEYS},
        "open_loop_mse_km2": float(np.mean((1000.0 * np.concatenate(errors)) ** 2)),
    }


def _ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    v = np.asarray(values, dtype=np.float64)
    r = np.empty(len(v))
    r[np.argsort(v, kind="stable")] = np.arange(1, len(v) + 1)
    for value in np.unique(v):
        r[v == value] = r[v == value].mean()
    return r


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's on average ranks)."""
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])
