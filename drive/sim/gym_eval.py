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
from typing import Any, Callable, Dict, List, Optional

import gymnasium
import numpy as np

from drive.sim.closed_loop import TAKEOVER_S, ClosedLoopResult, Segment, summarize_with_conditions
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
    m = mapping
    dt = m.dt_s
    if dt is None:
        fps = (getattr(env, "metadata", None) or {}).get("render_fps")
        if not fps:
            raise ValueError(f"{m.where}: the env's metadata has no render_fps; set dt_s in the mapping")
        dt = 1.0 / float(fps)
    segments: List[Segment] = []
    total_m, budget_m, steps, episode = 0.0, 0.0, 0, 0
    obs, info = env.reset(seed=seed)
    while budget_m < 1000.0 * km:
        driver.reset()
        conds = info_conditions(info, m)
        lats, heads, cmds, xs, ys, takeovers, resets = [], [], [], [], [], [], []
        ep_m, t_s, last_dist = (
            0.0,
            0.0,
            (m.distance.get(info, f"{m.where}: info.distance_m") if m.distance else 0.0),
        )
        speed = m.speed.get(info, f"{m.where}: info.speed_mps") if m.speed else m.speed_mps
        ended = False
        while not ended and budget_m + ep_m < 1000.0 * km:
            if steps >= max_steps:
                raise ValueError(
                    f"{m.where}: {max_steps} steps without driving {km} km "
                    f"({(total_m + ep_m) / 1000:.3f} km so far): is the vehicle moving?"
                )
            image = observation_frame(obs, m)
            if perturb is not None:
                image = perturb(image)
            view = Observation(
                image=image,
                dt_s=dt,
                speed_mps=speed,
                timestamp_s=t_s,
                road=None,
                s_m=math.nan,
                x_m=math.nan,
                y_m=math.nan,
                yaw_rad=math.nan,
                lateral_offset_m=math.nan,
                heading_error_rad=math.nan,
            )
            cmd = float(driver.act(view))
            if not math.isfinite(cmd):
                raise ValueError(f"driver returned a non-finite curvature {cmd} at step {steps}")
            try:
                action = m.action.action(cmd, speed, env.action_space)
            except ValueError as e:
                raise ValueError(f"{m.where}: {e}") from None
            obs, _, terminated, truncated, info = env.step(action)
            steps += 1
            t_s += dt
            lat = m.lateral_offset.get(info, f"{m.where}: info.lateral_offset_m")
            head = m.heading_error.get(info, f"{m.where}: info.heading_error_rad")
            speed = m.speed.get(info, f"{m.where}: info.speed_mps") if m.speed else m.speed_mps
            if m.distance is not None:
                d = m.distance.get(info, f"{m.where}: info.distance_m")
                ep_m += max(0.0, d - last_dist)
                last_dist = d
            else:
                ep_m += abs(speed) * dt
            lats.append(lat), heads.append(head), cmds.append(cmd)
            xs.append(float(info.get("x_m", math.nan))), ys.append(float(info.get("y_m", math.nan)))
            if m.intervention is not None:
                flagged = bool(m.intervention.raw(info, f"{m.where}: info.intervention"))
                if flagged:  # the env's safety driver took over; the episode goes on
                    takeovers.append([xs[-1], ys[-1]])
                    resets.append(len(cmds))
                    driver.reset()
                if terminated:
                    if not flagged:
                        takeovers.append([xs[-1], ys[-1]])
                    ended = True
            elif terminated or abs(lat) > m.max_lateral_m or abs(head) > m.max_heading_rad:
                takeovers.append([xs[-1], ys[-1]])  # drive's safety driver: stop, restart the env
                ended = True
            if truncated:
                ended = True
        seg = Segment(
            episode,
            conds,
            None,
            np.asarray(xs),
            np.asarray(ys),
            np.asarray(lats),
            np.asarray(heads),
            np.asarray(cmds),
            takeovers,
            ep_m / 1000.0,
            len(cmds) * dt,
            dt,
            resets,
        )
        segments.append(seg)
        if progress is not None:
            progress(seg)
        total_m += ep_m
        budget_m += episode_m if (episode_m is not None and truncated and not terminated) else ep_m
        episode += 1
        if budget_m < 1000.0 * km:
            obs, info = env.reset()
    metrics: Dict[str, Any] = {
        "driver": str(getattr(driver, "name", type(driver).__name__)),
        "env": str(getattr(getattr(env, "spec", None), "id", type(env).__name__)),
        "seed": seed,
        "segments": len(segments),
        "dt_s": dt,
        "criteria": {
            "max_lateral_m": m.max_lateral_m,
            "max_heading_rad": m.max_heading_rad,
            "takeover_s": TAKEOVER_S,
            "intervention": "env flag" if m.intervention else "drive's limits",
        },
        **summarize_with_conditions(segments),
    }
    metrics["per_segment"] = [
        {"index": s.index, **s.conditions, "km": s.km, "interventions": len(s.intervention_xy)}
        for s in segments
    ]
    return ClosedLoopResult(metrics, segments)


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
