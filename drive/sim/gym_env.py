"""The built-in world as a Gymnasium environment: ``gymnasium.make("drive/LaneKeeping-v0", ...)``.

Importing this module (or :mod:`drive.gym`) registers the id; without an import,
``gymnasium.make("drive.gym:drive/LaneKeeping-v0")`` imports it for you. (Gymnasium 1.x has no
plugin entry points, so a ``pyproject`` entry point cannot register it.)

- observation: the forward camera frame, uint8 RGB ``[height, width, 3]`` (200x78 by default);
- action: curvature command in 1/m (positive = left), ``Box(-0.05, 0.05, (1,), float32)`` (the
  vehicle's steering limit; the vehicle also limits the rate of change);
- one episode = one road of ``episode_km`` (default 1 km) from world ``(seed, split)``; episode
  ``i`` drives road ``i`` under the next condition of the grid for its road kind, exactly as
  :func:`drive.sim.closed_loop.evaluate` lays out its segments (so N episodes of the env are the
  same drive as ``evaluate(km=N x episode_km)``). ``reset(seed=s)`` restarts the sequence on world
  ``s``; ``reset(options={"road_index": i})`` picks road ``i``;
- interventions: when ``|lateral offset| > max_lateral_m`` or ``|heading error| > max_heading_rad``,
  ``on_intervention="takeover"`` (default) puts the car back on the lane centre like the
  closed-loop safety driver and the episode goes on; ``"terminate"`` ends the episode instead;
- reward: ``1 - (lateral offset / max_lateral_m)^2``, and -1 at an intervention (a shaping
  signal for RL users; drive's own metrics come from ``info``);
- ``info``: ``lateral_offset_m`` and ``heading_error_rad`` (after the step, before a takeover),
  ``intervention`` (bool, this step), ``interventions`` (this episode), ``speed_mps``, ``dt_s``,
  ``timestamp_s``, ``distance_m`` (along the road this episode), ``curvature_cmd_per_m`` (what
  the vehicle was asked for, after clipping), ``road_index``, ``conditions``, ``x_m``, ``y_m``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import gymnasium
import numpy as np
from gymnasium import spaces

from drive.sim.appearance import condition_grid, parse_conditions, sample_appearance
from drive.sim.camera import Camera
from drive.sim.render import Renderer
from drive.sim.road import SPLITS, generate_road, kind_position, road_kind
from drive.sim.safety import SAFETY_DRIVER
from drive.sim.vehicle import HARD_ROAD_LIMITS, VehicleLimits
from drive.sim.world import DEFAULT_FPS, World

__all__ = ["LaneKeepingEnv", "ENV_ID", "register"]

ENV_ID = "drive/LaneKeeping-v0"
START_S_M = 5.0  # as closed_loop.evaluate


class LaneKeepingEnv(gymnasium.Env):
    """Lane keeping in drive's procedural world (see module docstring).

    Args:
        seed: world seed (roads and appearances); ``reset(seed=...)`` replaces it.
        conditions: condition names (``summer,night,...``; a list or comma-separated string).
        fps: camera rate in Hz (the step period is 1 / fps).
        speed_kmh: vehicle speed (on hard roads the cruise speed, slowed where the road asks).
        split: road split (``test`` by default: roads never used for training).
        roads: ``easy`` (default), ``hard`` or ``mixed`` (:mod:`drive.sim.road`).
        episode_km: road length driven per episode.
        width, height: camera image size.
        max_lateral_m, max_heading_rad: the safety driver's limits (1 m, pi/10).
        on_intervention: ``takeover`` | ``terminate``.
        render_mode: None | ``rgb_array`` (``render()`` returns the current frame).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": DEFAULT_FPS}

    def __init__(
        self,
        seed: int = 0,
        conditions: Optional[Union[str, Sequence[str]]] = None,
        fps: float = DEFAULT_FPS,
        speed_kmh: float = 30.0,
        split: str = "test",
        episode_km: float = 1.0,
        width: int = 200,
        height: int = 78,
        max_lateral_m: float = SAFETY_DRIVER.max_lateral_m,
        max_heading_rad: float = SAFETY_DRIVER.max_heading_rad,
        on_intervention: str = "takeover",
        render_mode: Optional[str] = None,
        roads: str = "easy",
    ) -> None:
        for name, value in (
            ("fps", fps),
            ("speed_kmh", speed_kmh),
            ("episode_km", episode_km),
            ("max_lateral_m", max_lateral_m),
            ("max_heading_rad", max_heading_rad),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        road_kind(roads, 0)  # refuses an unknown set
        if on_intervention not in ("takeover", "terminate"):
            raise ValueError(f"on_intervention must be 'takeover' or 'terminate', got {on_intervention!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if isinstance(conditions, str):
            conditions = [c for c in conditions.split(",") if c.strip()]
        self.grid = condition_grid(parse_conditions(conditions))
        self.conditions = list(conditions) if conditions else None
        self.world_seed = int(seed)
        self.fps, self.speed_mps, self.split = float(fps), float(speed_kmh) / 3.6, split
        self.episode_m = 1000.0 * float(episode_km)
        self.rule = replace(
            SAFETY_DRIVER, max_lateral_m=float(max_lateral_m), max_heading_rad=float(max_heading_rad)
        )
        self.on_intervention, self.render_mode = on_intervention, render_mode
        self.metadata = {**self.metadata, "render_fps": self.fps}
        self.roads = roads
        self.limits = VehicleLimits() if roads == "easy" else HARD_ROAD_LIMITS  # the action space's
        self.renderer = Renderer(Camera.default(int(width), int(height)))
        self.observation_space = spaces.Box(0, 255, (int(height), int(width), 3), dtype=np.uint8)
        k = float(self.limits.max_curvature_per_m)
        self.action_space = spaces.Box(-k, k, (1,), dtype=np.float32)
        self.world: Optional[World] = None
        self._next_index = 0
        self._frame: Optional[np.ndarray] = None

    # -- Gymnasium API ---------------------------------------------------------------------------

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
    ) -> Tuple[np.ndarray, Dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.world_seed, self._next_index = int(seed), 0
        options = dict(options or {})
        unknown = set(options) - {"road_index"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; known: ['road_index']")
        index = int(options.get("road_index", self._next_index))
        if index < 0:
            raise ValueError(f"road_index must be >= 0, got {index}")
        self._next_index = index + 1
        self.road_index = index
        fixed = self.grid[kind_position(self.roads, index) % len(self.grid)]
        road = generate_road(
            self.world_seed, self.episode_m + 300.0, split=self.split, index=index, roads=self.roads
        )
        self.appearance = sample_appearance(self.world_seed, self.split, index, fixed)
        self.world = World(
            road, self.appearance, self.renderer, speed_mps=self.speed_mps, fps=self.fps, start_s_m=START_S_M
        )
        self.start_s_m = self.world.s_m
        self.interventions = 0
        self._frame = self.world.render()
        return self._frame, self._info(intervention=False, command=0.0)

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
        if self.world is None:
            raise RuntimeError("call reset() before step()")
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.size != 1 or not np.isfinite(a[0]):
            raise ValueError(f"action must be one finite curvature (1/m), got {action!r}")
        command = float(np.clip(a[0], self.action_space.low[0], self.action_space.high[0]))
        w = self.world
        w.step(command)
        lateral = w.lateral_offset_m
        violated = self.rule.needs_takeover(w)
        info = self._info(intervention=violated, command=command)
        terminated = False
        if violated:
            self.interventions += 1
            info["interventions"] = self.interventions
            if self.on_intervention == "takeover":
                w.place_on_lane(w.s_m)
            else:
                terminated = True
        truncated = (w.s_m - self.start_s_m) >= self.episode_m and not terminated
        reward = -1.0 if violated else max(-1.0, 1.0 - (lateral / self.rule.max_lateral_m) ** 2)
        self._frame = w.render()
        return self._frame, float(reward), terminated, truncated, info

    def render(self) -> Optional[np.ndarray]:
        if self.render_mode == "rgb_array":
            return None if self._frame is None else self._frame.copy()
        return None

    # -- helpers ---------------------------------------------------------------------------------

    def _info(self, intervention: bool, command: float) -> Dict[str, Any]:
        w = self.world
        assert w is not None
        st = w.vehicle.state
        return {
            "lateral_offset_m": float(w.lateral_offset_m),
            "heading_error_rad": float(w.heading_error_rad),
            "intervention": bool(intervention),
            "interventions": int(self.interventions),
            "speed_mps": float(st.speed_mps),
            "dt_s": float(w.dt_s),
            "timestamp_s": float(w.time_s),
            "distance_m": float(w.s_m - self.start_s_m),
            "curvature_cmd_per_m": float(command),
            "road_index": int(self.road_index),
            "conditions": dict(self.appearance.names()),
            "x_m": float(st.x_m),
            "y_m": float(st.y_m),
        }


def register() -> None:
    """Register :data:`ENV_ID` with Gymnasium (idempotent)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="drive.sim.gym_env:LaneKeepingEnv")


register()
