"""Closed-loop evaluation of a drive policy in any Gymnasium driving environment (``drive evaluate --env``,
whose command-line part is :mod:`drive.cli.evaluate`).

The policy (a checkpoint, an exported file or ``constant:K``) sees the env's camera frames and
commands curvature (1/m); a small mapping (:class:`EnvMapping`, from YAML) says how a curvature
becomes the env's action and where ``info`` holds the lateral offset and heading error. The
metrics are those of :func:`drive.sim.closed_loop.evaluate` (interventions per km, autonomy,
lateral RMS/max, heading RMS, steering-rate RMS, overall and per condition when ``info`` names
conditions), computed by the same :func:`~drive.sim.closed_loop.summarize_with_conditions`.

Interventions: when the env flags its own takeover (``info.intervention`` key) drive counts it and
resets the policy's state, and the episode goes on. Otherwise drive plays the safety driver: when
``|lateral offset| > max_lateral_m`` or ``|heading error| > max_heading_rad``, or the env ends an
episode (``terminated``, e.g. off the road or a crash), it counts an intervention and resets the
env and the policy. Time-limit ends (``truncated``) just start the next episode. Driving stops
after ``km`` kilometres (``info.distance_m`` per episode when mapped, else speed x dt).

The mapping (:class:`~drive.sim.gym_mapping.EnvMapping`, its YAML and how an observation becomes a
frame) is :mod:`drive.sim.gym_mapping`, the one import path of its names.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import gymnasium
import numpy as np

from drive.sim.closed_loop import ClosedLoopResult, Segment, SegmentTrace, summarize_with_conditions
from drive.sim.driver import Observation
from drive.sim.gym_env import ENV_ID, register  # importing it registers drive/LaneKeeping-v0 with Gymnasium
from drive.sim.gym_mapping import EnvMapping, info_conditions, observation_frame

__all__ = ["evaluate_env", "make_env"]


def evaluate_env(
    env: Any,
    driver: Any,
    mapping: EnvMapping,
    km: float,
    seed: Optional[int] = None,
    perturb: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    max_steps: int = 2_000_000,
    progress: Optional[Callable[[Segment], None]] = None,
    episode_m: Optional[float] = None,
) -> ClosedLoopResult:
    """Drive ``km`` kilometres in ``env`` (a Gymnasium env) with ``driver`` (see module docstring).

    ``episode_m``: the env's nominal episode length, when known (drive's own env): an episode the
    env ends by truncation then counts as exactly that much of the ``km`` budget, so the drive
    splits into the same roads as :func:`~drive.sim.closed_loop.evaluate` with ``segment_km``.
    """
    if not km > 0:
        raise ValueError(f"km must be positive, got {km}")
    run = _EnvDrive(env, driver, mapping, _step_seconds(env, mapping), perturb, max_steps, km)
    segments: List[Segment] = []
    budget_m = 0.0
    obs, info = env.reset(seed=seed)
    while budget_m < run.goal_m:
        episode = run.episode(len(segments), obs, info, budget_m)
        segments.append(episode.segment)
        if progress is not None:
            progress(episode.segment)
        run.total_m += episode.metres
        by_time_limit = episode_m is not None and episode.truncated and not episode.terminated
        budget_m += episode_m if by_time_limit else episode.metres
        obs, info = episode.obs, episode.info
        if budget_m < run.goal_m:
            obs, info = env.reset()
    metrics: Dict[str, Any] = {
        "driver": str(getattr(driver, "name", type(driver).__name__)),
        "env": str(getattr(getattr(env, "spec", None), "id", type(env).__name__)),
        "seed": seed,
        "segments": len(segments),
        "dt_s": run.dt_s,
        "criteria": {
            **mapping.rule.to_dict(),
            "intervention": "env flag" if mapping.intervention else "drive's limits",
        },
        **summarize_with_conditions(segments, mapping.rule),
    }
    metrics["per_segment"] = [
        {"index": s.index, **s.conditions, "km": s.km, "interventions": len(s.intervention_xy)}
        for s in segments
    ]
    return ClosedLoopResult(metrics, segments)


def _step_seconds(env: Any, m: EnvMapping) -> float:
    """The time per env step: the mapping's ``dt_s``, else ``1 / render_fps`` of the env's metadata."""
    if m.dt_s is not None:
        return m.dt_s
    fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    if not fps:
        raise ValueError(f"{m.where}: the env's metadata has no render_fps; set dt_s in the mapping")
    return 1.0 / float(fps)


@dataclass
class _Reading:
    """What one step's ``info`` says through the mapping: the lane errors (so the safety driver's
    :meth:`~drive.sim.safety.InterventionRule.needs_takeover` reads it as it reads a world) and the speed."""

    lateral_offset_m: float
    heading_error_rad: float
    speed_mps: float


@dataclass
class _Episode:
    segment: Segment
    metres: float
    terminated: bool
    truncated: bool
    obs: Any
    info: Dict[str, Any]


@dataclass
class _EnvDrive:
    """One drive through ``env``: its episodes one at a time, the steps and metres so far."""

    env: Any
    driver: Any
    m: EnvMapping
    dt_s: float
    perturb: Optional[Callable[[np.ndarray], np.ndarray]]
    max_steps: int
    km: float
    steps: int = 0
    total_m: float = 0.0

    @property
    def goal_m(self) -> float:
        return 1000.0 * self.km

    def episode(self, index: int, obs: Any, info: Dict[str, Any], budget_m: float) -> _Episode:
        """Drive from ``obs`` until the episode ends (an intervention by drive's limits, the env's end)
        or the drive's ``goal_m`` is reached."""
        self.driver.reset()
        conditions = info_conditions(info, self.m)
        trace = SegmentTrace()
        metres, t_s, last_distance = 0.0, 0.0, self._distance(info) if self.m.distance else 0.0
        speed = self._speed(info)
        ended = terminated = truncated = False
        while not ended and budget_m + metres < self.goal_m:
            if self.steps >= self.max_steps:
                raise ValueError(
                    f"{self.m.where}: {self.max_steps} steps without driving {self.km} km "
                    f"({(self.total_m + metres) / 1000:.3f} km so far): is the vehicle moving?"
                )
            cmd = self._act(obs, speed, t_s)
            obs, _, terminated, truncated, info = self.env.step(self._action(cmd, speed))
            self.steps += 1
            t_s += self.dt_s
            now = self._read(info)
            speed = now.speed_mps
            if self.m.distance is not None:
                distance = self._distance(info)
                metres += max(0.0, distance - last_distance)
                last_distance = distance
            else:
                metres += abs(speed) * self.dt_s
            x_m, y_m = float(info.get("x_m", math.nan)), float(info.get("y_m", math.nan))
            trace.step(x_m, y_m, now.lateral_offset_m, now.heading_error_rad, cmd)
            ended = self._intervene(trace, info, now, terminated) or truncated
        segment = trace.segment(index, conditions, None, metres / 1000.0, self.dt_s)
        return _Episode(segment, metres, terminated, truncated, obs, info)

    def _act(self, obs: Any, speed: float, t_s: float) -> float:
        """The driver's curvature for the env's observation (a frame, perturbed when asked)."""
        image = observation_frame(obs, self.m)
        if self.perturb is not None:
            image = self.perturb(image)
        nan = math.nan
        view = Observation(
            image=image,
            dt_s=self.dt_s,
            speed_mps=speed,
            timestamp_s=t_s,
            road=None,
            s_m=nan,
            x_m=nan,
            y_m=nan,
            yaw_rad=nan,
            lateral_offset_m=nan,
            heading_error_rad=nan,
        )
        cmd = float(self.driver.act(view))
        if not math.isfinite(cmd):
            raise ValueError(f"driver returned a non-finite curvature {cmd} at step {self.steps}")
        return cmd

    def _action(self, cmd: float, speed: float) -> np.ndarray:
        try:
            return self.m.action.action(cmd, speed, self.env.action_space)
        except ValueError as e:
            raise ValueError(f"{self.m.where}: {e}") from None

    def _intervene(self, trace: SegmentTrace, info: Dict[str, Any], now: _Reading, terminated: bool) -> bool:
        """Count an intervention where one happened; True when the episode ends here."""
        m = self.m
        if m.intervention is not None:
            flagged = bool(m.intervention.raw(info, f"{m.where}: info.intervention"))
            if flagged:  # the env's safety driver took over; the episode goes on
                trace.takeover(reset=True)
                self.driver.reset()
            if terminated and not flagged:
                trace.takeover(reset=False)
            return terminated
        if terminated or m.rule.needs_takeover(now):
            trace.takeover(reset=False)  # drive's safety driver: stop, restart the env
            return True
        return False

    def _read(self, info: Dict[str, Any]) -> _Reading:
        m = self.m
        return _Reading(
            m.lateral_offset.get(info, f"{m.where}: info.lateral_offset_m"),
            m.heading_error.get(info, f"{m.where}: info.heading_error_rad"),
            self._speed(info),
        )

    def _speed(self, info: Dict[str, Any]) -> float:
        return self.m.speed.get(info, f"{self.m.where}: info.speed_mps") if self.m.speed else self.m.speed_mps

    def _distance(self, info: Dict[str, Any]) -> float:
        return self.m.distance.get(info, f"{self.m.where}: info.distance_m")


def make_env(env_id: str, mapping: EnvMapping, overrides: Optional[Dict[str, Any]] = None) -> Any:
    """``gymnasium.make(env_id, **env_kwargs)`` after importing the mapping's modules."""
    for module in mapping.imports:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"{mapping.where}: cannot import {module!r} ({e})") from None
    if env_id.split(":")[-1] == ENV_ID:
        register()  # idempotent; back if the registry was cleared since this module's import
    kwargs = {**mapping.env_kwargs, **(overrides or {})}
    try:
        return gymnasium.make(env_id, disable_env_checker=False, **kwargs)
    except gymnasium.error.Error as e:
        raise ValueError(f"--env {env_id}: {e}") from None
