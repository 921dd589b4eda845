"""Procedural two-lane roads: straights, circular arcs and clothoid transitions from a seed.

A road is a reference line (the road's centre, between the two lanes) sampled every
``ds_m`` metres of arc length ``s``, with its curvature profile piecewise linear in ``s``:
constant zero on straights, constant on arcs, linear on clothoid transitions (curvature
linear in arc length is the definition of a clothoid). Vehicles drive on the right lane, whose
centre lies ``lane_width / 2`` to the right of the reference line.

Road kinds (``roads=``): ``easy`` roads (the default, and every road drive recorded before kinds
existed, unchanged) curve at most ``MAX_CURVATURE_PER_M`` (radius >= 25 m) and are driven at one
speed; ``hard`` roads (:mod:`drive.sim.road_hard`) add junction turns whose right lane curves by up to
1/5.2 m, hairpins, S-bends and chicanes beside straights and gentle curves, and are driven at a speed
that follows the road (:mod:`drive.sim.speed`); ``mixed`` alternates them, road ``i`` hard when ``i``
is odd, so its even roads are exactly the easy roads of the same index. Named conditions cycle over
the roads of each kind on their own (:func:`kind_position`): with ``summer,winter`` a mixed set has
summer and winter on easy roads and on hard ones, never one season per kind.

Frenet coordinates used everywhere in :mod:`drive.sim`: ``s`` (m, arc length of the
reference line) and ``d`` (m, signed lateral distance from the reference line, positive
LEFT, ISO 8855). The right lane centre is at ``d = -lane_width(s) / 2``.

Train and test roads come from disjoint seed ranges: :func:`world_seed` maps
``(seed, "train")`` to ``seed`` and ``(seed, "test")`` to ``TEST_SEED_OFFSET + seed`` with
``0 <= seed < TEST_SEED_OFFSET``, so no test road (nor its appearance) can ever equal a
training road.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

from drive.sim.road_hard import HARD_MAX_CURVATURE_PER_M, clear_objects, hard_knots

__all__ = [
    "MAX_CURVATURE_PER_M",
    "ROAD_KINDS",
    "road_kind",
    "kind_position",
    "TEST_SEED_OFFSET",
    "SPLITS",
    "Road",
    "RoadsideObject",
    "world_seed",
    "generate_road",
    "uniform_road",
]

MAX_CURVATURE_PER_M = 1.0 / 25.0
ROAD_KINDS = ("easy", "hard", "mixed")
TEST_SEED_OFFSET = 1_000_000_000
SPLITS = ("train", "test")
_STREAM_ROAD = 1  # rng stream ids derived from the world seed (appearance uses others)


def world_seed(seed: int, split: str) -> int:
    """Map a user seed and a split to the world's random seed; train and test ranges are disjoint."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not 0 <= int(seed) < TEST_SEED_OFFSET:
        raise ValueError(f"seed must be in [0, {TEST_SEED_OFFSET}), got {seed}")
    return int(seed) + (TEST_SEED_OFFSET if split == "test" else 0)


def road_kind(roads: str, index: int) -> str:
    """The kind (``easy`` or ``hard``) of road ``index`` of a set of ``roads`` (one of ``ROAD_KINDS``)."""
    if roads not in ROAD_KINDS:
        raise ValueError(f"roads must be one of {', '.join(ROAD_KINDS)}, got {roads!r}")
    if roads == "mixed":
        return "hard" if int(index) % 2 else "easy"
    return roads


def kind_position(roads: str, index: int) -> int:
    """Where road ``index`` of a set of ``roads`` stands among the roads of its own kind: ``index`` in a
    set of one kind, ``index // 2`` in a mixed set. Named conditions cycle on this position, so each
    kind meets every condition (cycled on ``index``, two conditions would split a mixed set into easy
    roads under one and hard roads under the other)."""
    road_kind(roads, index)  # refuses an unknown set
    return int(index) // 2 if roads == "mixed" else int(index)


@dataclass(frozen=True)
class RoadsideObject:
    """A tree beside the road: Frenet position (s_m, d_m), world position, size in metres."""

    s_m: float
    d_m: float
    x_m: float
    y_m: float
    height_m: float
    radius_m: float
    kind: int  # 0 broadleaf, 1 conifer


@dataclass
class Road:
    """A sampled road. Arrays have one entry per sample, ``s_m[i] = i * ds_m``.

    x_m, y_m: reference-line position (m, world frame); heading_rad: direction of travel;
    curvature_per_m: signed curvature (positive = turning left); lane_width_m: width of each lane;
    kind: ``easy`` or ``hard`` (module docstring).
    """

    seed: int
    split: str
    index: int
    ds_m: float
    s_m: np.ndarray
    x_m: np.ndarray
    y_m: np.ndarray
    heading_rad: np.ndarray
    curvature_per_m: np.ndarray
    lane_width_m: np.ndarray
    objects: List[RoadsideObject]
    kind: str = "easy"

    @property
    def length_m(self) -> float:
        return float(self.s_m[-1])

    def index_at(self, s_m: float) -> int:
        """Index of the sample at or just before arc length ``s_m`` (clamped to the road)."""
        return int(min(max(s_m / self.ds_m, 0.0), len(self.s_m) - 1))

    def sample(self, s_m: float) -> Tuple[float, float, float, float, float]:
        """Linear interpolation at ``s_m``: (x_m, y_m, heading_rad, curvature_per_m, lane_width_m)."""
        f = min(max(s_m / self.ds_m, 0.0), len(self.s_m) - 1.000001)
        i = int(f)
        t = f - i

        def lerp(a: np.ndarray) -> float:
            return float(a[i] + t * (a[i + 1] - a[i]))

        return (
            lerp(self.x_m),
            lerp(self.y_m),
            lerp(self.heading_rad),
            lerp(self.curvature_per_m),
            lerp(self.lane_width_m),
        )

    def lane_pose(
        self, s_m: float, lateral_m: float = 0.0, yaw_rad: float = 0.0
    ) -> Tuple[float, float, float]:
        """World pose (x_m, y_m, yaw_rad) of a car ``lateral_m`` left of the right-lane centre at
        ``s_m``, pointing ``yaw_rad`` left of the road direction."""
        x, y, h, _, w = self.sample(s_m)
        d = -0.5 * w + lateral_m
        return x - d * np.sin(h), y + d * np.cos(h), h + yaw_rad

    def project(self, x_m: float, y_m: float, s_hint_m: float, window_m: float = 15.0) -> Tuple[float, float]:
        """Frenet coordinates (s_m, d_m) of a world point, searching ``s_hint_m +- window_m``."""
        i0 = self.index_at(s_hint_m - window_m)
        i1 = min(self.index_at(s_hint_m + window_m) + 2, len(self.s_m))
        dx = x_m - self.x_m[i0:i1]
        dy = y_m - self.y_m[i0:i1]
        k = int(np.argmin(dx * dx + dy * dy))
        i = i0 + k
        # refine on the tangent of the nearest sample
        h = self.heading_rad[i]
        c, sn = np.cos(h), np.sin(h)
        along = dx[k] * c + dy[k] * sn
        across = -dx[k] * sn + dy[k] * c
        kappa = self.curvature_per_m[i]
        s = float(self.s_m[i] + along)
        d = float(across - 0.5 * kappa * along * along)
        return min(max(s, 0.0), self.length_m), d

    def lane_errors(
        self, x_m: float, y_m: float, yaw_rad: float, s_hint_m: float
    ) -> Tuple[float, float, float]:
        """(s_m, lateral_offset_m, heading_error_rad) of a car pose relative to the right-lane centre.

        lateral_offset_m > 0: car left of the lane centre; heading_error_rad > 0: pointing left
        of the lane direction (wrapped to (-pi, pi]).
        """
        s, d = self.project(x_m, y_m, s_hint_m)
        _, _, h, _, w = self.sample(s)
        err = (yaw_rad - h + np.pi) % (2.0 * np.pi) - np.pi
        return s, d + 0.5 * w, float(err)


def _curvature_knots(rng: np.random.Generator, length_m: float) -> List[Tuple[float, float]]:
    """Knots (s_m, curvature_per_m) of a piecewise-linear curvature profile."""
    knots: List[Tuple[float, float]] = [(0.0, 0.0), (float(rng.uniform(30.0, 60.0)), 0.0)]
    while knots[-1][0] < length_m:
        s, k = knots[-1]
        if k != 0.0 and rng.random() < 0.45:
            target = 0.0  # back to a straight
        else:
            radius = float(np.exp(rng.uniform(np.log(1.0 / MAX_CURVATURE_PER_M), np.log(400.0))))
            target = float(rng.choice([-1.0, 1.0])) / radius
        sharpness = float(rng.uniform(0.0008, 0.003))  # clothoid dk/ds, 1/m^2
        s += max(abs(target - k) / sharpness, 4.0)
        knots.append((s, target))
        if target == 0.0:
            hold = float(rng.uniform(15.0, 160.0))
        else:  # keep the turn below ~150 degrees so roads do not wind back on themselves
            hold = float(min(rng.uniform(10.0, 140.0), 2.6 / abs(target)))
        knots.append((s + hold, target))
    return knots


def _lane_width(rng: np.random.Generator, s: np.ndarray) -> np.ndarray:
    """Lane width about 3.5 m varying smoothly over hundreds of metres, within [3.1, 3.9] m."""
    base = rng.uniform(3.3, 3.7)
    wobble = np.zeros_like(s)
    for wavelength in (90.0, 210.0, 470.0):
        wobble += np.sin(2.0 * np.pi * s / (wavelength * rng.uniform(0.8, 1.25)) + rng.uniform(0, 2 * np.pi))
    return np.clip(base + 0.07 * wobble, 3.1, 3.9)


def _objects(rng: np.random.Generator, road: Road) -> List[RoadsideObject]:
    """Trees along both sides; density varies from open fields to woods."""
    objects: List[RoadsideObject] = []
    s = 0.0
    density = rng.uniform(0.0, 0.12)  # trees per metre per side
    while s < road.length_m:
        if rng.random() < 0.01:
            density = rng.uniform(0.0, 0.12)
        s += float(rng.exponential(1.0 / max(density * 2.0, 1e-3)))
        if s >= road.length_m:
            break
        side = float(rng.choice([-1.0, 1.0]))
        x, y, h, _, w = road.sample(s)
        d = side * (w + float(rng.uniform(2.5, 12.0)))
        objects.append(
            RoadsideObject(
                s_m=s,
                d_m=d,
                x_m=float(x - d * np.sin(h)),
                y_m=float(y + d * np.cos(h)),
                height_m=float(rng.uniform(5.0, 14.0)),
                radius_m=float(rng.uniform(1.5, 3.5)),
                kind=int(rng.random() < 0.35),
            )
        )
    return objects


def generate_road(
    seed: int, length_m: float, split: str = "train", index: int = 0, ds_m: float = 0.5, roads: str = "easy"
) -> Road:
    """Generate road ``index`` of world ``(seed, split)`` from the set ``roads`` (module docstring), at
    least ``length_m`` metres; deterministic."""
    if not length_m > 0:
        raise ValueError(f"length_m must be positive, got {length_m}")
    if index < 0:
        raise ValueError(f"road index must be >= 0, got {index}")
    kind = road_kind(roads, index)
    ws = world_seed(seed, split)
    rng = np.random.default_rng([ws, _STREAM_ROAD, int(index)])
    knots = _curvature_knots(rng, length_m) if kind == "easy" else hard_knots(rng, length_m)
    n = int(np.ceil(length_m / ds_m)) + 1
    s = np.arange(n) * ds_m
    ks, kv = zip(*knots)
    kappa = np.interp(s, ks, kv)
    # heading: exact integral of the piecewise-linear curvature (trapezoid rule)
    heading = np.concatenate([[0.0], np.cumsum(0.5 * (kappa[1:] + kappa[:-1]) * ds_m)])
    mid = 0.5 * (heading[1:] + heading[:-1])
    x = np.concatenate([[0.0], np.cumsum(np.cos(mid) * ds_m)])
    y = np.concatenate([[0.0], np.cumsum(np.sin(mid) * ds_m)])
    road = Road(
        seed=int(seed),
        split=split,
        index=int(index),
        ds_m=ds_m,
        s_m=s,
        x_m=x,
        y_m=y,
        heading_rad=heading,
        curvature_per_m=kappa,
        lane_width_m=_lane_width(rng, s),
        objects=[],
        kind=kind,
    )
    road.objects = _objects(rng, road)
    if kind == "hard":
        road.objects = clear_objects(road.objects, x, y, road.lane_width_m)
    return road


def uniform_road(
    length_m: float,
    lane_width_m: float = 3.5,
    curvature_per_m: float = 0.0,
    ds_m: float = 0.5,
    kind: str = "easy",
) -> Road:
    """A treeless road of constant curvature (0 = straight) and constant lane width, for checks; a
    ``hard`` one may curve as tightly as hard roads do."""
    top = MAX_CURVATURE_PER_M if road_kind(kind, 0) == "easy" else HARD_MAX_CURVATURE_PER_M
    if abs(curvature_per_m) > top:
        raise ValueError(f"|curvature| must be <= {top:.4g} on {kind} roads, got {curvature_per_m}")
    n = int(np.ceil(length_m / ds_m)) + 1
    s = np.arange(n) * ds_m
    heading = curvature_per_m * s
    if curvature_per_m == 0.0:
        x, y = s.copy(), np.zeros_like(s)
    else:
        x, y = np.sin(heading) / curvature_per_m, (1.0 - np.cos(heading)) / curvature_per_m
    return Road(
        seed=0,
        split="train",
        index=0,
        ds_m=ds_m,
        s_m=s,
        x_m=x,
        y_m=y,
        heading_rad=heading,
        curvature_per_m=np.full(n, float(curvature_per_m)),
        lane_width_m=np.full(n, float(lane_width_m)),
        objects=[],
        kind=kind,
    )
