"""Closed-loop evaluation: a driver steers the car; a virtual safety driver takes over when needed.

The distance is driven as ``ceil(km / segment_km)`` segments, segment ``i`` on road ``i`` of
world ``(seed, split)`` (default the TEST split) from the set ``roads`` (``easy``, ``hard`` or
``mixed``: :mod:`drive.sim.road`) under appearance ``i`` (named conditions cycle, over each road kind
on its own, others random).
With several seeds the segments take turns: segment ``i`` is road ``i // len(seeds)`` of world
``seeds[i % len(seeds)]``. Every camera period the driver sees an :class:`Observation` (optionally
with ``perturb(image)`` applied) and returns a curvature command in 1/m. With ``roads`` other than
``easy`` each segment's conditions also name its road kind (``per_condition`` has ``easy`` and
``hard``).

Intervention: the safety driver's :class:`~drive.sim.safety.InterventionRule` (``rule``, default
:data:`~drive.sim.safety.SAFETY_DRIVER`: 1 m off the lane or pi/10 of heading); it is counted, the car
is put back on the lane centre at that point, aligned with the lane, and ``driver.reset()`` gives it a
fresh hidden state.

Metrics (``ClosedLoopResult.metrics``, JSON-able, overall and per condition name):
``interventions``, ``interventions_per_km``, ``autonomy_pct`` = (1 - interventions x the rule's
``takeover_s`` (6 s) / elapsed time) x 100 (PilotNet; floored at 0), ``lateral_mean_abs_m``,
``lateral_rms_m``,
``lateral_max_abs_m``, ``heading_rms_rad``, ``steering_rate_rms`` (RMS of the commanded
curvature's rate, 1/m per s; lower = smoother), ``km``, ``time_s``, and
``interventions_per_km_ci95``: the exact 95 % Poisson interval of the rate (:mod:`drive.sim.poisson`).

:func:`drive_segment` is the loop itself, for any world-like object: the built-in :class:`World`,
or a recorded drive (:class:`drive.replay.world.LogWorld`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from drive.io.atomic import write_text
from drive.sim.appearance import condition_grid, parse_conditions, sample_appearance
from drive.sim.camera import Camera
from drive.sim.driver import Driver, needs_image
from drive.sim.plot import DriveVideo, plot_drive
from drive.sim.poisson import rate_interval
from drive.sim.render import Renderer
from drive.sim.road import Road, generate_road, kind_position
from drive.sim.safety import SAFETY_DRIVER, InterventionRule
from drive.sim.world import DEFAULT_FPS, DEFAULT_SPEED_MPS, World

__all__ = [
    "Segment",
    "ClosedLoopResult",
    "evaluate",
    "summarize",
    "summarize_with_conditions",
    "drive_segment",
    "SegmentTrace",
]


@dataclass
class Segment:
    """One road driven: trajectory [T] arrays, commands, interventions (world x, y)."""

    index: int
    conditions: Dict[str, str]
    road: Optional[Road]  # None where no road is known (another Gymnasium env)
    x_m: np.ndarray
    y_m: np.ndarray
    lateral_offset_m: np.ndarray
    heading_error_rad: np.ndarray
    curvature_cmd_per_m: np.ndarray
    intervention_xy: List[List[float]]
    km: float
    time_s: float
    dt_s: float
    reset_steps: List[int] = field(default_factory=list)


def summarize(segments: Sequence[Segment], rule: InterventionRule = SAFETY_DRIVER) -> Dict[str, Any]:
    """Metrics over segments (see module docstring); ``rule`` states what a takeover costs."""
    lat = np.concatenate([s.lateral_offset_m for s in segments])
    head = np.concatenate([s.heading_error_rad for s in segments])
    rates = []
    for s in segments:
        r = np.diff(s.curvature_cmd_per_m) / s.dt_s
        keep = np.ones(len(r), bool)
        keep[[i - 1 for i in s.reset_steps if 0 < i <= len(r)]] = False  # no rate across a takeover
        rates.append(r[keep])
    rate = np.concatenate(rates) if rates else np.zeros(0)
    km = float(sum(s.km for s in segments))
    time_s = float(sum(s.time_s for s in segments))
    n = int(sum(len(s.intervention_xy) for s in segments))
    return {
        "km": km,
        "time_s": time_s,
        "interventions": n,
        "interventions_per_km": n / km if km > 0 else float("nan"),
        "interventions_per_km_ci95": list(rate_interval(n, km)),
        "autonomy_pct": max(0.0, (1.0 - n * rule.takeover_s / time_s) * 100.0)
        if time_s > 0
        else float("nan"),
        "lateral_mean_abs_m": float(np.mean(np.abs(lat))),
        "lateral_rms_m": float(np.sqrt(np.mean(lat**2))),
        "lateral_max_abs_m": float(np.max(np.abs(lat))),
        "heading_rms_rad": float(np.sqrt(np.mean(head**2))),
        "steering_rate_rms": float(np.sqrt(np.mean(rate**2))) if len(rate) else 0.0,
    }


def summarize_with_conditions(
    segments: Sequence[Segment], rule: InterventionRule = SAFETY_DRIVER
) -> Dict[str, Any]:
    """:func:`summarize` over all segments, and ``per_condition``: the same over the segments of each
    condition name their ``conditions`` carry."""
    names = sorted({v for s in segments for v in s.conditions.values()})
    return {
        **summarize(segments, rule),
        "per_condition": {
            n: summarize([s for s in segments if n in s.conditions.values()], rule) for n in names
        },
    }


@dataclass
class ClosedLoopResult:
    """``metrics`` (JSON-able) and the driven ``segments``; :meth:`save` writes JSON and a plot."""

    metrics: Dict[str, Any]
    segments: List[Segment]

    def save(self, out_dir: Union[str, Path], plot: bool = True) -> Dict[str, Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"metrics": out / "metrics.json"}
        write_text(paths["metrics"], json.dumps(self.metrics, indent=2) + "\n")
        if plot:
            paths["plot"] = plot_drive(
                self.segments, out / "drive.png", title=str(self.metrics.get("driver", ""))
            )
        return paths


@dataclass
class SegmentTrace:
    """A segment while it is driven: one row per step, the takeovers (at the last row's position) and
    the steps after which the driver was reset; :meth:`segment` makes the :class:`Segment`."""

    xs: List[float] = field(default_factory=list)
    ys: List[float] = field(default_factory=list)
    lats: List[float] = field(default_factory=list)
    heads: List[float] = field(default_factory=list)
    cmds: List[float] = field(default_factory=list)
    takeovers: List[List[float]] = field(default_factory=list)
    resets: List[int] = field(default_factory=list)

    def step(self, x_m: float, y_m: float, lateral_m: float, heading_rad: float, cmd: float) -> None:
        self.xs.append(x_m), self.ys.append(y_m), self.cmds.append(cmd)
        self.lats.append(lateral_m), self.heads.append(heading_rad)

    def takeover(self, reset: bool) -> None:
        """An intervention where the car is now; ``reset``: the drive goes on with a fresh driver state
        (no steering rate is measured across it)."""
        self.takeovers.append([self.xs[-1], self.ys[-1]])
        if reset:
            self.resets.append(len(self.cmds))

    def segment(
        self, index: int, conditions: Dict[str, str], road: Optional[Road], km: float, dt_s: float
    ) -> Segment:
        return Segment(
            index,
            conditions,
            road,
            np.asarray(self.xs),
            np.asarray(self.ys),
            np.asarray(self.lats),
            np.asarray(self.heads),
            np.asarray(self.cmds),
            self.takeovers,
            km,
            len(self.cmds) * dt_s,
            dt_s,
            self.resets,
        )


def drive_segment(
    world: Any,
    driver: Driver,
    length_m: float,
    perturb: Optional[Callable],
    rule: InterventionRule,
    video: Optional[Any],
    index: int,
    conditions: Dict[str, str],
) -> Segment:
    """Drive ``length_m`` metres of ``world`` (a :class:`~drive.sim.world.CarOnRoad`: the built-in
    :class:`World` or a replayed log) with
    ``driver``, with the safety driver of the module docstring; ``video(obs, interventions)`` sees
    every unperturbed observation."""
    render = needs_image(driver) or video is not None
    start_s = world.s_m
    driver.reset()
    trace = SegmentTrace()
    while world.s_m - start_s < length_m:
        obs = world.observe(with_image=render)
        if video is not None:
            video(obs, len(trace.takeovers))
        if perturb is not None and obs.image is not None:
            image = perturb(obs.image)
            if image.shape != obs.image.shape or image.dtype != np.uint8:
                raise ValueError(
                    f"perturb must return uint8 {obs.image.shape}, got {image.dtype} {image.shape}"
                )
            obs.image = image
        if not needs_image(driver):
            obs.image = None
        cmd = float(driver.act(obs))
        if not math.isfinite(cmd):
            raise ValueError(f"driver returned a non-finite curvature {cmd} at t={obs.timestamp_s:.2f} s")
        world.step(cmd)
        st = world.vehicle.state
        trace.step(st.x_m, st.y_m, world.lateral_offset_m, world.heading_error_rad, cmd)
        if rule.needs_takeover(world):
            trace.takeover(reset=True)
            world.place_on_lane(world.s_m)
            driver.reset()
    return trace.segment(index, conditions, world.road, (world.s_m - start_s) / 1000.0, world.dt_s)


def evaluate(
    driver: Driver,
    km: float,
    seed: Union[int, Sequence[int]],
    conditions: Optional[Sequence[str]] = None,
    perturb: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    split: str = "test",
    video_path: Optional[Union[str, Path]] = None,
    segment_km: float = 1.0,
    camera: Optional[Camera] = None,
    speed_mps: float = DEFAULT_SPEED_MPS,
    fps: float = DEFAULT_FPS,
    rule: InterventionRule = SAFETY_DRIVER,
    progress: Optional[Callable[[Segment], None]] = None,
    roads: str = "easy",
) -> ClosedLoopResult:
    """Drive ``km`` kilometres closed loop and measure lane keeping (see module docstring).

    ``perturb``: callable uint8 RGB [H, W, 3] -> same, applied to every frame the driver sees.
    ``video_path``: write an MP4 of the (unperturbed) camera view with an overlay.
    """
    if not km > 0 or not segment_km > 0:
        raise ValueError(f"km and segment_km must be positive, got {km}, {segment_km}")
    seeds = [int(seed)] if isinstance(seed, (int, np.integer)) else [int(s) for s in seed]
    if not seeds:
        raise ValueError("evaluate needs at least one seed")
    if not (hasattr(driver, "act") and hasattr(driver, "reset")):
        raise TypeError(f"driver must have act(obs) and reset(), got {type(driver).__name__}")
    grid = condition_grid(parse_conditions(conditions))
    renderer = Renderer(camera or Camera.default())
    count = int(math.ceil(km / segment_km - 1e-9))
    video = None
    if video_path is not None:
        video = DriveVideo(video_path, renderer.camera, fps)
    segments: List[Segment] = []
    done = False
    try:
        for i in range(count):
            length_m = 1000.0 * min(segment_km, km - i * segment_km)
            world_seed, index = seeds[i % len(seeds)], i // len(seeds)
            # the segment's place among those of its road kind: each kind cycles the conditions
            fixed = grid[(kind_position(roads, index) * len(seeds) + i % len(seeds)) % len(grid)]
            road = generate_road(world_seed, length_m + 300.0, split=split, index=index, roads=roads)
            appearance = sample_appearance(world_seed, split, index, fixed)
            world = World(road, appearance, renderer, speed_mps=speed_mps, fps=fps, start_s_m=5.0)
            conditions = {**appearance.names(), **({"road": road.kind} if roads != "easy" else {})}
            seg = drive_segment(world, driver, length_m, perturb, rule, video, i, conditions)
            segments.append(seg)
            if progress is not None:
                progress(seg)
        done = True
    finally:
        if video is not None:
            video.close(keep=done)  # a failed run leaves no video (and no temporary)
    metrics: Dict[str, Any] = {
        "driver": str(getattr(driver, "name", type(driver).__name__)),
        "seed": seeds[0] if len(seeds) == 1 else seeds,
        "split": split,
        "roads": roads,
        "segments": count,
        "criteria": rule.to_dict(),
        **summarize_with_conditions(segments, rule),
    }
    metrics["per_segment"] = [
        {
            "index": s.index,
            "seed": seeds[s.index % len(seeds)],
            "road": s.index // len(seeds),
            **s.conditions,
            "km": s.km,
            "interventions": len(s.intervention_xy),
        }
        for s in segments
    ]
    return ClosedLoopResult(metrics, segments)
