"""How drive drives a Gymnasium env it does not know (``drive evaluate --env``): the mapping from a
curvature command to the env's action, from the env's ``info`` to the lane errors, speed,
distance, interventions and conditions drive measures, and from its observation to a uint8 RGB
frame. :func:`drive.sim.gym_eval.evaluate_env` drives with it; drive's own env needs none
(:data:`DRIVE_MAPPING`).

Mapping YAML (every key optional except the two lane errors; values shown are examples)::

    env_kwargs: {map: 3}          # passed to gymnasium.make(ID, **env_kwargs)
    import: my_package.envs       # module to import first (registers the id), if any
    dt_s: 0.1                     # step period (default 1 / env.metadata["render_fps"])
    observation:
      key: image                  # for Dict observations
      order: rgb                  # or bgr
      layout: hwc                 # or chw; a stack [H, W, C, K] gives its last (newest) frame
    action:
      type: wheel_angle           # curvature (1/m) | wheel_angle (rad, tan(delta) = kappa L)
                                  #   | yaw_rate (rad/s)
      wheelbase_m: 2.5            # wheel_angle
      max: 0.6                    # the value that maps to action 1 (normalised actions)
      sign: 1                     # -1 when positive actions steer right
      index: 0                    # where the steering goes in a vector action
      fill: [0.0, 0.3]            # the whole action vector template (e.g. constant throttle)
    info:
      lateral_offset_m: lane.offset            # dotted path into info; positive = left of the lane centre
      heading_error_rad: {key: lane.heading_deg, scale: 0.0174533}
      speed_mps: {key: speed_kmh, scale: 0.2777778}   # else speed_mps below
      distance_m: route_completion_m         # cumulative per episode
      intervention: takeover                 # the env's own safety-driver flag
      conditions: weather                    # a dict (or a name) for per-condition metrics
    speed_mps: 8.33
    max_lateral_m: 1.0
    max_heading_rad: 0.314159
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import yaml

from drive.sim.gym_env import ENV_ID
from drive.sim.safety import SAFETY_DRIVER, InterventionRule

__all__ = [
    "EnvMapping",
    "ActionMap",
    "InfoKey",
    "load_mapping",
    "DRIVE_MAPPING",
    "observation_frame",
    "info_conditions",
]


@dataclass
class InfoKey:
    """A value in ``info``: a key or dotted path, times ``scale``."""

    key: str
    scale: float = 1.0

    @classmethod
    def parse(cls, value: Any, where: str) -> Optional["InfoKey"]:
        if value is None:
            return None
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, dict) and "key" in value and set(value) <= {"key", "scale"}:
            return cls(str(value["key"]), float(value.get("scale", 1.0)))
        raise ValueError(f"{where}: expected a key or {{key: ..., scale: ...}}, got {value!r}")

    def raw(self, info: Dict[str, Any], where: str) -> Any:
        node: Any = info
        for part in self.key.split("."):
            if not isinstance(node, dict) or part not in node:
                have = sorted(node) if isinstance(node, dict) else type(node).__name__
                raise ValueError(f"{where}: the env's info has no {self.key!r} (at {part!r}; keys: {have})")
            node = node[part]
        return node

    def get(self, info: Dict[str, Any], where: str) -> float:
        value = self.raw(info, where)
        try:
            return float(np.asarray(value, dtype=np.float64).reshape(-1)[0]) * self.scale
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"{where}: info[{self.key!r}] = {value!r} is not a number") from None


@dataclass
class ActionMap:
    """Curvature (1/m) -> the env's action (see module docstring)."""

    type: str = "curvature"
    wheelbase_m: Optional[float] = None
    max: Optional[float] = None
    sign: float = 1.0
    index: int = 0
    fill: Optional[List[float]] = None

    def __post_init__(self) -> None:
        if self.type not in ("curvature", "wheel_angle", "yaw_rate"):
            raise ValueError(f"action.type must be curvature, wheel_angle or yaw_rate, got {self.type!r}")
        if self.type == "wheel_angle" and not (self.wheelbase_m and self.wheelbase_m > 0):
            raise ValueError("action.type wheel_angle needs action.wheelbase_m > 0")
        if self.max is not None and not self.max > 0:
            raise ValueError(f"action.max must be positive, got {self.max!r}")
        if self.sign not in (1, -1, 1.0, -1.0):
            raise ValueError(f"action.sign must be 1 or -1, got {self.sign!r}")

    def value(self, curvature_per_m: float, speed_mps: float) -> float:
        """The steering component for a curvature command."""
        if self.type == "curvature":
            v = curvature_per_m
        elif self.type == "wheel_angle":
            v = math.atan(curvature_per_m * float(self.wheelbase_m))
        else:
            v = curvature_per_m * speed_mps
        v *= self.sign
        return v / self.max if self.max is not None else v

    def action(self, curvature_per_m: float, speed_mps: float, space: Any) -> np.ndarray:
        shape = tuple(getattr(space, "shape", ()) or (1,))
        dtype = getattr(space, "dtype", np.float32) or np.float32
        a = np.zeros(int(np.prod(shape)), dtype=np.float64)
        if self.fill is not None:
            if len(self.fill) != a.size:
                raise ValueError(f"action.fill has {len(self.fill)} values, the env's action has {a.size}")
            a[:] = self.fill
        if not 0 <= self.index < a.size:
            raise ValueError(f"action.index {self.index} is outside the env's action of size {a.size}")
        a[self.index] = self.value(curvature_per_m, speed_mps)
        a = a.reshape(shape)
        if hasattr(space, "low") and hasattr(space, "high"):
            a = np.clip(a, space.low, space.high)
        return a.astype(dtype)


@dataclass
class EnvMapping:
    """How drive drives an env: action, info keys, observation, step period, limits."""

    lateral_offset: InfoKey
    heading_error: InfoKey
    action: ActionMap = field(default_factory=ActionMap)
    speed: Optional[InfoKey] = None
    distance: Optional[InfoKey] = None
    intervention: Optional[InfoKey] = None
    conditions: Optional[InfoKey] = None
    observation_key: Optional[str] = None
    order: str = "rgb"
    layout: str = "hwc"
    dt_s: Optional[float] = None
    speed_mps: float = 30.0 / 3.6
    rule: InterventionRule = SAFETY_DRIVER  # the YAML's max_lateral_m, max_heading_rad
    env_kwargs: Dict[str, Any] = field(default_factory=dict)
    imports: List[str] = field(default_factory=list)
    where: str = "mapping"

    @classmethod
    def from_dict(cls, d: Dict[str, Any], where: str = "mapping") -> "EnvMapping":
        _check_keys(d, where)
        info, obs = d.get("info") or {}, d.get("observation") or {}
        action = d.get("action") or {}
        try:
            amap = ActionMap(**action)
        except TypeError as e:
            raise ValueError(f"{where}: action: {e}") from None
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        imports = d.get("import") or []
        m = cls(
            lateral_offset=InfoKey.parse(info["lateral_offset_m"], f"{where}: info.lateral_offset_m"),
            heading_error=InfoKey.parse(info["heading_error_rad"], f"{where}: info.heading_error_rad"),
            action=amap,
            speed=InfoKey.parse(info.get("speed_mps"), f"{where}: info.speed_mps"),
            distance=InfoKey.parse(info.get("distance_m"), f"{where}: info.distance_m"),
            intervention=InfoKey.parse(info.get("intervention"), f"{where}: info.intervention"),
            conditions=InfoKey.parse(info.get("conditions"), f"{where}: info.conditions"),
            observation_key=obs.get("key"),
            order=str(obs.get("order", "rgb")),
            layout=str(obs.get("layout", "hwc")),
            dt_s=float(d["dt_s"]) if d.get("dt_s") is not None else None,
            speed_mps=float(d.get("speed_mps", 30.0 / 3.6)),
            rule=_rule(d, where),
            env_kwargs=dict(d.get("env_kwargs") or {}),
            imports=[imports] if isinstance(imports, str) else list(imports),
            where=where,
        )
        m._check_values()
        return m

    def _check_values(self) -> None:
        where = self.where
        if self.order not in ("rgb", "bgr") or self.layout not in ("hwc", "chw"):
            raise ValueError(f"{where}: observation.order must be rgb|bgr and layout hwc|chw")
        if not self.speed_mps > 0:
            raise ValueError(f"{where}: speed_mps must be positive, got {self.speed_mps}")
        if self.dt_s is not None and not self.dt_s > 0:
            raise ValueError(f"{where}: dt_s must be positive, got {self.dt_s}")


def _rule(d: Dict[str, Any], where: str) -> InterventionRule:
    """The mapping's ``max_lateral_m`` and ``max_heading_rad`` over the safety driver's."""
    try:
        return replace(
            SAFETY_DRIVER,
            max_lateral_m=float(d.get("max_lateral_m", SAFETY_DRIVER.max_lateral_m)),
            max_heading_rad=float(d.get("max_heading_rad", SAFETY_DRIVER.max_heading_rad)),
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None


_KEYS = {
    "env_kwargs",
    "import",
    "dt_s",
    "observation",
    "action",
    "info",
    "speed_mps",
    "max_lateral_m",
    "max_heading_rad",
}
_INFO_KEYS = {
    "lateral_offset_m",
    "heading_error_rad",
    "speed_mps",
    "distance_m",
    "intervention",
    "conditions",
}
_OBSERVATION_KEYS = {"key", "order", "layout"}


def _check_keys(d: Any, where: str) -> None:
    """A mapping's keys, its ``info`` keys and its ``observation`` keys are known ones; the two lane
    errors' info keys are given."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(d).__name__}")
    unknown = set(d) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    info = d.get("info") or {}
    if set(info) - _INFO_KEYS:
        raise ValueError(
            f"{where}: unknown info key(s) {sorted(set(info) - _INFO_KEYS)}; known: {sorted(_INFO_KEYS)}"
        )
    for need in ("lateral_offset_m", "heading_error_rad"):
        if need not in info:
            raise ValueError(f"{where}: info.{need} is required (the env's info key for it)")
    obs = d.get("observation") or {}
    if set(obs) - _OBSERVATION_KEYS:
        raise ValueError(f"{where}: unknown observation key(s) {sorted(set(obs) - _OBSERVATION_KEYS)}")


# drive's own env reports everything under these names
DRIVE_MAPPING = {
    "info": {
        "lateral_offset_m": "lateral_offset_m",
        "heading_error_rad": "heading_error_rad",
        "speed_mps": "speed_mps",
        "distance_m": "distance_m",
        "intervention": "intervention",
        "conditions": "conditions",
    },
    "action": {"type": "curvature"},
}


def load_mapping(path: Optional[str], env_id: str) -> EnvMapping:
    """The mapping from a YAML file; for drive's own env, :data:`DRIVE_MAPPING` when none is given."""
    if path is None:
        if env_id.split(":")[-1] == ENV_ID:
            return EnvMapping.from_dict(DRIVE_MAPPING, "drive/LaneKeeping-v0 mapping")
        raise ValueError(
            f"--env {env_id}: give --env-config YAML mapping the env's action and info keys "
            f"(lateral_offset_m, heading_error_rad) to drive's; see docs/world.md"
        )
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--env-config {path}: no such file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None
    return EnvMapping.from_dict(data or {}, str(p))


def observation_frame(obs: Any, m: EnvMapping) -> np.ndarray:
    """The env's observation as uint8 RGB [H, W, 3]."""
    img = _observed_image(obs, m)
    if img.ndim == 4 and m.layout == "hwc":  # a frame stack [H, W, C, K] (MetaDrive): the newest frame
        img = img[..., -1]
    if m.layout == "chw" and img.ndim == 3:
        img = img.transpose(1, 2, 0)
    if img.ndim == 2:
        img = img[:, :, None]
    if img.ndim != 3 or img.shape[2] not in (1, 3, 4):
        raise ValueError(f"{m.where}: the observation is {img.dtype} {img.shape}, not an image [H, W, 1|3|4]")
    if img.dtype != np.uint8:
        if img.dtype.kind != "f":
            raise ValueError(f"{m.where}: image dtype {img.dtype} (expected uint8, or float in [0, 1])")
        img = np.clip(np.nan_to_num(img) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    img = img[:, :, :3]
    if m.order == "bgr":
        img = img[:, :, ::-1]
    return np.ascontiguousarray(img)


def _observed_image(obs: Any, m: EnvMapping) -> np.ndarray:
    """The array the mapping names, as the env gives it: ``obs[observation.key]`` of a dict
    observation, else ``obs``."""
    if m.observation_key is not None:
        if not isinstance(obs, dict) or m.observation_key not in obs:
            have = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            raise ValueError(f"{m.where}: observation has no key {m.observation_key!r} ({have})")
        obs = obs[m.observation_key]
    elif isinstance(obs, dict):
        raise ValueError(f"{m.where}: the observation is a dict ({sorted(obs)}); set observation.key")
    return np.asarray(obs)


def info_conditions(info: Dict[str, Any], m: EnvMapping) -> Dict[str, str]:
    """The conditions ``info`` names, for per-condition metrics: a dict as it is, else
    ``{"condition": value}``."""
    if m.conditions is None:
        return {}
    value = m.conditions.raw(info, f"{m.where}: info.conditions")
    return (
        {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {"condition": str(value)}
    )
