"""Hard roads: junction turns, hairpins, S-bends and chicanes beside straights and long gentle curves.

The curvature profile is built element by element, each a few knots ``(s_m, curvature_per_m)`` of the
reference line (piecewise linear in ``s``: arcs joined by clothoid transitions), as the easy roads'
profile is (:mod:`drive.sim.road`). Radii are chosen for the **right lane's centre**, the path a car
drives (``kappa_lane = kappa / (1 + kappa w / 2)``):

=============  =========================================  ========================  ==========
element        lane radius (curvature)                    turn                      share
=============  =========================================  ========================  ==========
straight       --                                         15-100 m                  0.24
gentle curve   60-400 m                                   15-80 deg                 0.24
junction turn  right 5.2-6.5 m (up to 1/5.2 m); left      85-95 deg, 4-7 m          0.16
               8.7-10.7 m (the road's far edge >= 3.5 m)  clothoids, straights
                                                          before and after
hairpin        reference radius 10-15 m (lane 8.3-16.8)   160-185 deg               0.12
S-bend         reference radius 15-30 m, two opposite     40-80 deg each            0.14
chicane        reference radius 15-25 m, three            20-35 deg each            0.10
               alternating arcs
=============  =========================================  ========================  ==========

A road never crosses or grazes itself: each element is drawn again (up to ``_TRIES`` times) until its
centre line keeps ``CLEARANCE_M`` from every part of the road more than ``_NEIGHBOUR_M`` of arc length
behind it, and turns are steered back towards the road's overall direction once the heading has
turned more than 0.6 rad from it (never beyond 180 deg + 6 deg). :func:`clear_objects` drops
the trees that would stand on another part of the road.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

import numpy as np

__all__ = ["HARD_MAX_CURVATURE_PER_M", "CLEARANCE_M", "hard_knots", "clear_objects"]

_HALF_LANE_M = 1.75  # the nominal half width that converts a lane radius to a reference radius
HARD_MAX_CURVATURE_PER_M = 1.0 / (5.2 + _HALF_LANE_M)  # reference line; the right lane's is 1/5.2 m
CLEARANCE_M = 16.0  # two roads' width and a verge between any two parts of one road
_NEIGHBOUR_M = 60.0  # arc length within which parts of the road may come closer (a hairpin's legs)
_TRIES = 30
_MAX_HEADING_RAD = np.pi + 0.1

Knots = List[Tuple[float, float]]  # (arc length from the element's start, curvature) of the reference
Element = Callable[[np.random.Generator, float], Knots]  # (rng, heading sign to prefer) -> knots


def _ref(lane_curvature: float) -> float:
    """Reference-line curvature whose right lane curves by ``lane_curvature``."""
    return lane_curvature / (1.0 - _HALF_LANE_M * lane_curvature)


def _arc(kappa: float, turn_rad: float, entry_m: float, exit_m: float) -> Knots:
    """Clothoid in over ``entry_m``, an arc of curvature ``kappa``, clothoid out; ``turn_rad`` in all."""
    hold = max(turn_rad / abs(kappa) - 0.5 * (entry_m + exit_m), 0.0)
    return [(entry_m, kappa), (entry_m + hold, kappa), (entry_m + hold + exit_m, 0.0)]


def _then(first: Knots, second: Knots) -> Knots:
    end = first[-1][0] if first else 0.0
    return first + [(end + s, k) for s, k in second]


def _straight(rng: np.random.Generator, sign: float) -> Knots:
    return [(float(rng.uniform(15.0, 100.0)), 0.0)]


def _gentle(rng: np.random.Generator, sign: float) -> Knots:
    kappa = sign * _ref(1.0 / float(np.exp(rng.uniform(np.log(60.0), np.log(400.0)))))
    turn = float(np.radians(rng.uniform(15.0, 80.0)))
    ramp = max(abs(kappa) / float(rng.uniform(0.0008, 0.003)), 4.0)
    return _arc(kappa, turn, ramp, ramp)


def _junction(rng: np.random.Generator, sign: float) -> Knots:
    radius = rng.uniform(5.2, 6.5) if sign < 0 else rng.uniform(8.7, 10.7)
    turn = float(np.radians(rng.uniform(85.0, 95.0)))
    arc = _arc(_ref(sign / float(radius)), turn, float(rng.uniform(4.0, 7.0)), float(rng.uniform(4.0, 7.0)))
    return _then(_then([(float(rng.uniform(10.0, 25.0)), 0.0)], arc), [(float(rng.uniform(10.0, 25.0)), 0.0)])


def _hairpin(rng: np.random.Generator, sign: float) -> Knots:
    kappa = sign / float(rng.uniform(10.0, 15.0))
    ramp = float(rng.uniform(8.0, 14.0))
    return _arc(kappa, float(np.radians(rng.uniform(160.0, 185.0))), ramp, ramp)


def _s_bend(rng: np.random.Generator, sign: float) -> Knots:
    k1, k2 = sign / float(rng.uniform(15.0, 30.0)), -sign / float(rng.uniform(15.0, 30.0))
    t1, t2 = (float(np.radians(rng.uniform(40.0, 80.0))) for _ in range(2))
    ramp, switch = float(rng.uniform(6.0, 12.0)), float(rng.uniform(8.0, 14.0))
    first = _arc(k1, t1, ramp, 0.5 * switch)[:-1]  # straight into the second arc's clothoid
    return _then(first, _arc(k2, t2, 0.5 * switch, ramp))


def _chicane(rng: np.random.Generator, sign: float) -> Knots:
    knots: Knots = []
    for i in range(3):
        kappa = (sign if i % 2 == 0 else -sign) / float(rng.uniform(15.0, 25.0))
        turn = float(np.radians(rng.uniform(20.0, 35.0) * (0.5 if i != 1 else 1.0)))  # ends aligned
        knots = _then(knots, _arc(kappa, turn, float(rng.uniform(5.0, 9.0)), float(rng.uniform(5.0, 9.0))))
    return knots


_ELEMENTS: Tuple[Tuple[Element, float], ...] = (
    (_straight, 0.24),
    (_gentle, 0.24),
    (_junction, 0.16),
    (_hairpin, 0.12),
    (_s_bend, 0.14),
    (_chicane, 0.10),
)


def _trace(knots: Knots, start: Tuple[float, float, float], step_m: float = 1.0) -> np.ndarray:
    """Centre-line points [N, 2] every ``step_m`` along ``knots`` from ``start`` = (x, y, heading),
    and the heading at the end (the last row's third column)."""
    ks, kv = zip(*([(0.0, 0.0)] + knots))
    s = np.arange(0.0, ks[-1] + step_m, step_m)
    kappa = np.interp(s, ks, kv)
    heading = start[2] + np.concatenate([[0.0], np.cumsum(0.5 * (kappa[1:] + kappa[:-1]) * step_m)])
    mid = 0.5 * (heading[1:] + heading[:-1])
    x = start[0] + np.concatenate([[0.0], np.cumsum(np.cos(mid) * step_m)])
    y = start[1] + np.concatenate([[0.0], np.cumsum(np.sin(mid) * step_m)])
    return np.stack([x, y, heading], 1)


def _clear(points: np.ndarray, road: np.ndarray) -> bool:
    """Whether every new point (1 m apart, continuing ``road``'s 1 m points) keeps ``CLEARANCE_M`` from
    every point, old or new, more than ``_NEIGHBOUR_M`` of arc length behind it."""
    every = np.concatenate([road, points[1:]])
    new = np.arange(len(road), len(every))
    behind = new[:, None] - np.arange(len(every))[None, :] > _NEIGHBOUR_M
    if not behind.any():
        return True
    d2 = ((every[new, None, :2] - every[None, :, :2]) ** 2).sum(-1)
    return bool(d2[behind].min() >= CLEARANCE_M**2)


def _element(rng: np.random.Generator, heading: float) -> Knots:
    """One element, its turn steered back towards heading 0 once the road has turned away."""
    names, weights = zip(*_ELEMENTS)
    make = names[int(rng.choice(len(names), p=np.asarray(weights) / sum(weights)))]
    sign = float(rng.choice([-1.0, 1.0]))
    if abs(heading) > 0.6 and rng.random() < 0.85:
        sign = -float(np.sign(heading))
    return make(rng, sign)


def _fits(points: np.ndarray, road: np.ndarray) -> bool:
    heading = np.abs(points[:, 2])
    return bool(heading[-1] <= _MAX_HEADING_RAD and heading.max() <= _MAX_HEADING_RAD + 0.5) and _clear(
        points, road
    )


def hard_knots(rng: np.random.Generator, length_m: float) -> Knots:
    """Knots (s_m, curvature_per_m) of a hard road's reference line at least ``length_m`` long. Where no
    element fits after ``_TRIES`` draws, the last element is taken back and drawn anew."""
    knots: Knots = [(0.0, 0.0), (float(rng.uniform(30.0, 60.0)), 0.0)]
    road = _trace(knots[1:], (0.0, 0.0, 0.0))
    added: List[Tuple[int, int]] = []  # (knots, points) each element added
    while knots[-1][0] < length_m:
        s0, state = knots[-1][0], tuple(road[-1])
        for _ in range(_TRIES):
            element = _element(rng, state[2])
            points = _trace(element, state)
            if _fits(points, road):
                knots += [(s0 + s, k) for s, k in element]
                road = np.concatenate([road, points[1:]])
                added.append((len(element), len(points) - 1))
                break
        else:  # boxed in: take the last element back
            n_knots, n_points = added.pop() if added else (0, 0)
            knots, road = knots[: len(knots) - n_knots], road[: len(road) - n_points]
    return knots


def clear_objects(objects: list, x_m: np.ndarray, y_m: np.ndarray, width_m: np.ndarray) -> list:
    """The roadside objects that stand clear of every part of the road: their centre at least 2 m beyond
    its edge (``width_m`` is the lane width at each sample, the road two lanes wide)."""
    xy = np.stack([x_m, y_m], 1)
    reach = float(np.max(width_m)) + 2.0
    keep = []
    for o in objects:
        d2 = (xy[:, 0] - o.x_m) ** 2 + (xy[:, 1] - o.y_m) ** 2
        if float(d2.min()) >= reach**2:
            keep.append(o)
    return keep
