"""The nearest point of a road's centre line for many points at once, as the renderer draws hard roads.

A map of the nearest centreline sample is built once per road: a distance transform with labels
(``cv2.distanceTransformWithLabels``, 5x5 mask) on a 0.5 m grid over the road and 60 m around it.
:meth:`NearestPoints.locate` looks each point up in it, projects the point exactly onto the
centreline segments either side of that sample, and walks along the centre line to the foot of the
perpendicular (the map's distance is approximate, so a few metres from the road its sample can be
several samples off). Within 5 m of the centre line the distance is exact to 1 cm; farther out,
where two parts of the road are about as near, the choice between them may be ~2 % of the distance
off. Points beyond the map clamp to its edge.
"""

from __future__ import annotations

from typing import Tuple

import cv2
import numpy as np

from drive.sim.road import Road

__all__ = ["NearestPoints", "clamped_cell"]

_RES = 0.5  # m per cell of the nearest-sample map
_MARGIN_M = 60.0  # the map reaches this far beyond the road
_REACH = 3  # centreline segments projected onto on each side of the mapped nearest sample
_WALKS = 2  # then steps along the centre line to the foot of the perpendicular
_WALK_MAX = 16  # segments per step at most


def clamped_cell(x: np.ndarray, n: int) -> np.ndarray:
    """Index of the unit cell holding ``x`` in a map of ``n`` cells, edge cells extended outwards (the
    float is clipped before the integer conversion, which would overflow far outside; NaN is cell 0)."""
    with np.errstate(invalid="ignore"):
        return np.floor(np.clip(np.nan_to_num(x, nan=0.0), 0.0, n - 1)).astype(np.intp)


class NearestPoints:
    """The nearest point of ``road``'s centre line (module docstring)."""

    def __init__(self, road: Road) -> None:
        self.x0, self.y0 = float(road.x_m.min()) - _MARGIN_M, float(road.y_m.min()) - _MARGIN_M
        cols = int((float(road.x_m.max()) + _MARGIN_M - self.x0) / _RES) + 1
        rows = int((float(road.y_m.max()) + _MARGIN_M - self.y0) / _RES) + 1
        i = ((road.y_m - self.y0) / _RES).astype(np.intp)
        j = ((road.x_m - self.x0) / _RES).astype(np.intp)
        src = np.ones((rows, cols), np.uint8)
        src[i, j] = 0
        owner = np.zeros((rows, cols), np.int32)
        owner[i, j] = np.arange(len(i), dtype=np.int32)  # a cell with two samples keeps the later
        _, labels = cv2.distanceTransformWithLabels(src, cv2.DIST_L2, 5, labelType=cv2.DIST_LABEL_PIXEL)
        seeds = src == 0
        sample_of_label = np.zeros(int(labels.max()) + 1, np.int32)
        sample_of_label[labels[seeds]] = owner[seeds]
        self.index = sample_of_label[labels]
        self.shape = (rows, cols)
        # the centreline's segments: start points, directions and squared lengths
        ex, ey = np.diff(road.x_m), np.diff(road.y_m)
        self.segments = (road.x_m[:-1], road.y_m[:-1], ex, ey, ex * ex + ey * ey)
        self.last_segment = len(ex) - 1

    def along(self, seg: np.ndarray, gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
        """Where along centreline segments ``seg`` (0 at the start, 1 at the end, unbounded) the points
        ``gx``, ``gy`` are nearest to the segments' lines."""
        sx, sy, ex, ey, length2 = self.segments
        return ((gx - sx.take(seg)) * ex.take(seg) + (gy - sy.take(seg)) * ey.take(seg)) / length2.take(seg)

    def project(self, seg: np.ndarray, gx: np.ndarray, gy: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """:meth:`along`, within the segments, and the squared distance to that point."""
        sx, sy, ex, ey, length2 = self.segments
        ax, ay, bx, by = sx.take(seg), sy.take(seg), ex.take(seg), ey.take(seg)
        t = np.clip(((gx - ax) * bx + (gy - ay) * by) / length2.take(seg), 0.0, 1.0)
        return t, (gx - ax - t * bx) ** 2 + (gy - ay - t * by) ** 2

    def lookup(self, gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
        """The mapped nearest sample of world points ``gx``, ``gy``."""
        i = clamped_cell((gy - self.y0) * (1.0 / _RES), self.shape[0])
        j = clamped_cell((gx - self.x0) * (1.0 / _RES), self.shape[1])
        return self.index.ravel().take(i * self.shape[1] + j)

    def locate(self, gx: np.ndarray, gy: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(segment, fraction along it, signed distance, left +) of the nearest centreline point of
        world points ``gx``, ``gy`` (float64 arrays of one shape)."""
        k = self.lookup(gx, gy)
        last = self.last_segment
        best = np.full(gx.shape, np.inf)
        pick = np.zeros(gx.shape, np.int8)
        for off in range(-_REACH, _REACH):
            _, dist = self.project(np.clip(k + off, 0, last), gx, gy)
            pick[dist < best] = off
            np.minimum(dist, best, out=best)
        seg = np.clip(k + pick, 0, last)
        for _ in range(_WALKS):  # far from the road the map is a few samples off: walk along it
            step = np.clip(np.floor(self.along(seg, gx, gy)), -_WALK_MAX, _WALK_MAX).astype(np.intp)
            j = np.clip(seg + step, 0, last)
            _, dist = self.project(j, gx, gy)
            seg = np.where(dist < best, j, seg)
            np.minimum(dist, best, out=best)
        along, _ = self.project(seg, gx, gy)
        sx, sy, ex, ey, _ = self.segments
        ax, ay, bx, by = sx.take(seg), sy.take(seg), ex.take(seg), ey.take(seg)
        left = bx * (gy - ay - along * by) - by * (gx - ax - along * bx) > 0.0
        return seg, along, np.where(left, 1.0, -1.0) * np.sqrt(best)
