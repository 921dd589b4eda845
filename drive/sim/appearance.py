"""Named, randomized appearance of the world ("conditions").

Three condition axes, each value a name a user can select or hold out:

- season: ``summer`` (green verges, leafy trees), ``autumn`` (brown-orange verges and
  foliage), ``winter`` (snow-covered shoulders, bare trees, snow on conifers);
- light: ``noon`` (bright, high sun, hard shadows), ``evening`` (warm tint, low sun, long
  shadows across the road), ``overcast`` (grey sky, dim, no shadows, more haze);
- markings: ``marked`` (solid edge lines and a dashed centre line), ``worn`` (faded,
  patchy paint), ``unmarked`` (no paint, like the NCP paper's test road).

``--conditions summer,winter,noon`` means season in {summer, winter} and light = noon;
axes not named are drawn at random. Within a named condition the continuous parameters
(asphalt tone and texture, tint, haze distance, sky colours, sun direction, paint wear)
are randomized too, so two recordings never look exactly alike. ``Appearance.to_dict()``
is what recordings store in ``meta.json["conditions"]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from drive.sim.road import world_seed

__all__ = ["CONDITION_AXES", "Appearance", "parse_conditions", "condition_grid", "sample_appearance"]

CONDITION_AXES: Dict[str, Tuple[str, ...]] = {
    "season": ("summer", "autumn", "winter"),
    "light": ("noon", "evening", "overcast"),
    "markings": ("marked", "worn", "unmarked"),
}
_STREAM_APPEARANCE = 2

RGB = Tuple[float, float, float]


@dataclass(frozen=True)
class Appearance:
    """Everything the renderer needs besides geometry. Colours are sRGB in [0, 1]."""

    season: str
    light: str
    markings: str
    brightness: float
    tint: RGB
    asphalt_rgb: RGB
    asphalt_texture: float  # amplitude of the asphalt grain, fraction of brightness
    shoulder_rgb: RGB  # gravel strip between the edge line and the verge
    ground_rgb: RGB  # verge: grass, fallen leaves or snow
    ground_texture: float
    road_snow: float  # width (m) of snow creeping onto the asphalt edges, winter only
    marking_rgb: RGB
    marking_wear: float  # 0 fresh paint .. 1 gone
    sky_top_rgb: RGB
    sky_horizon_rgb: RGB
    treeline_rgb: RGB
    haze_rgb: RGB
    visibility_m: float  # distance at which haze covers 63 % of the scene
    shadow_strength: float  # 0 no shadows .. 1 black shadows
    sun_azimuth_rad: float  # sun direction relative to the road direction (0 = ahead)
    sun_elevation_rad: float
    canopy_rgb: RGB
    trunk_rgb: RGB

    def names(self) -> Dict[str, str]:
        return {"season": self.season, "light": self.light, "markings": self.markings}

    def to_dict(self) -> Dict[str, object]:
        """JSON-able description (names first), stored in recordings' meta.json."""
        d = asdict(self)
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


def parse_conditions(names: Optional[Sequence[str]]) -> Dict[str, List[str]]:
    """Map condition names to axes: ``["summer", "noon"]`` -> ``{"season": ["summer"], "light": ["noon"]}``.

    Accepts a list or a comma-separated string; unknown names raise a ValueError listing the valid ones.
    """
    if names is None:
        return {}
    if isinstance(names, str):
        names = [n for n in names.split(",")]
    selected: Dict[str, List[str]] = {}
    for raw in names:
        name = raw.strip().lower()
        if not name:
            continue
        axis = next((a for a, values in CONDITION_AXES.items() if name in values), None)
        if axis is None:
            valid = ", ".join(v for values in CONDITION_AXES.values() for v in values)
            raise ValueError(f"unknown condition {raw!r}; valid conditions: {valid}")
        if name not in selected.setdefault(axis, []):
            selected[axis].append(name)
    return selected


def condition_grid(selected: Dict[str, List[str]]) -> List[Dict[str, str]]:
    """All combinations of the named values (axes not named are left out, i.e. random)."""
    combos: List[Dict[str, str]] = [{}]
    for axis, values in selected.items():
        combos = [{**c, axis: v} for c in combos for v in values]
    return combos


def _jitter(rng: np.random.Generator, rgb: RGB, amount: float) -> RGB:
    return tuple(float(np.clip(c * (1.0 + rng.uniform(-amount, amount)), 0.0, 1.0)) for c in rgb)  # type: ignore


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return tuple(float((1 - t) * x + t * y) for x, y in zip(a, b))  # type: ignore


def sample_appearance(
    seed: int, split: str = "train", index: int = 0, fixed: Optional[Dict[str, str]] = None
) -> Appearance:
    """Draw an appearance for recording/segment ``index`` of world ``(seed, split)``.

    ``fixed`` pins axes by name (e.g. ``{"season": "winter"}``); the rest are random.
    """
    fixed = dict(fixed or {})
    for axis, value in fixed.items():
        if axis not in CONDITION_AXES or value not in CONDITION_AXES[axis]:
            raise ValueError(f"invalid condition {axis}={value!r}")
    rng = np.random.default_rng([world_seed(seed, split), _STREAM_APPEARANCE, int(index)])
    pick = {a: fixed.get(a) or str(rng.choice(values)) for a, values in CONDITION_AXES.items()}
    season, light, markings = pick["season"], pick["light"], pick["markings"]

    if light == "noon":
        brightness, tint = rng.uniform(0.95, 1.1), (1.0, 1.0, 1.0)
        sky_top, sky_hor = (0.30, 0.52, 0.88), (0.72, 0.82, 0.95)
        shadow, elev, visibility = rng.uniform(0.45, 0.65), rng.uniform(0.7, 1.2), rng.uniform(250, 600)
    elif light == "evening":
        brightness, tint = rng.uniform(0.7, 0.85), (1.08, 0.92, 0.75)
        sky_top, sky_hor = (0.32, 0.38, 0.62), (0.98, 0.70, 0.45)
        shadow, elev, visibility = rng.uniform(0.4, 0.6), rng.uniform(0.15, 0.35), rng.uniform(200, 450)
    else:  # overcast
        brightness, tint = rng.uniform(0.7, 0.85), (0.97, 0.99, 1.03)
        sky_top, sky_hor = (0.62, 0.64, 0.68), (0.80, 0.81, 0.83)
        shadow, elev, visibility = 0.0, 1.0, rng.uniform(90, 220)

    grey = rng.uniform(0.30, 0.45)
    asphalt = (grey, grey, grey * rng.uniform(1.0, 1.08))
    if season == "summer":
        ground, canopy = (0.25, 0.42, 0.16), (0.16, 0.34, 0.12)
        treeline, shoulder, road_snow = (0.17, 0.30, 0.15), (0.55, 0.52, 0.45), 0.0
    elif season == "autumn":
        ground, canopy = (0.45, 0.38, 0.18), (0.72, 0.36, 0.10)
        treeline, shoulder, road_snow = (0.40, 0.28, 0.14), (0.52, 0.46, 0.38), 0.0
    else:
        ground, canopy = (0.93, 0.94, 0.97), (0.30, 0.26, 0.22)
        treeline, shoulder, road_snow = (0.45, 0.45, 0.48), (0.88, 0.89, 0.92), rng.uniform(0.1, 0.6)
        asphalt = _mix(asphalt, (0.50, 0.50, 0.52), 0.35)  # salty, dusty winter asphalt
    wear = {"marked": rng.uniform(0.0, 0.15), "worn": rng.uniform(0.45, 0.75), "unmarked": 1.0}[markings]
    return Appearance(
        season=season,
        light=light,
        markings=markings,
        brightness=float(brightness),
        tint=tint,
        asphalt_rgb=_jitter(rng, asphalt, 0.05),
        asphalt_texture=float(rng.uniform(0.04, 0.12)),
        shoulder_rgb=_jitter(rng, shoulder, 0.06),
        ground_rgb=_jitter(rng, ground, 0.12 if season != "winter" else 0.02),
        ground_texture=float(rng.uniform(0.10, 0.22) if season != "winter" else rng.uniform(0.02, 0.05)),
        road_snow=float(road_snow),
        marking_rgb=(0.93, 0.93, 0.90),
        marking_wear=float(wear),
        sky_top_rgb=_jitter(rng, sky_top, 0.06),
        sky_horizon_rgb=_jitter(rng, sky_hor, 0.04),
        treeline_rgb=_jitter(rng, treeline, 0.1),
        haze_rgb=_mix(sky_hor, (0.8, 0.8, 0.8), 0.3),
        visibility_m=float(visibility),
        shadow_strength=float(shadow),
        sun_azimuth_rad=float(rng.uniform(-np.pi, np.pi)),
        sun_elevation_rad=float(elev),
        canopy_rgb=_jitter(rng, canopy, 0.15),
        trunk_rgb=(0.25, 0.18, 0.12),
    )
