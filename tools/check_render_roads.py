"""Does the renderer paint the road where the road is? For poses on the lane centre along test roads,
every ground pixel within ``--near`` metres ahead is classed as road (within the lane width + 0.3 m
of asphalt of the reference line) twice: by the renderer's Frenet coordinates (on easy roads one road
point per image row, to second order; on hard roads each pixel's nearest road point: docs/world.md,
"Camera and renderer") and by the distance to the nearest point of the road's sampled reference
line, any part of the road (the truth). Printed: the mean share of those
pixels the two disagree on, the share of frames where they disagree on more than 5 %, and the worst
frames, for easy and hard roads in the same run.

    python tools/check_render_roads.py                     # easy and hard, seeds 31,32, every 5 m
    python tools/check_render_roads.py --roads hard --seeds 31,32,33,77,78,79
    python tools/check_render_roads.py --roads hard --rows     # hard roads drawn as easy ones are

The row model cannot draw a road that runs across the view: beyond a junction turn or a hairpin the
rows are painted from the last point where the road still moved away. Hard roads, where that happens,
are drawn from each pixel's nearest road point instead; ``--rows`` measures the row model there.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import List, Tuple

import numpy as np

from drive.sim.camera import Camera
from drive.sim.render import Renderer
from drive.sim.road import Road, generate_road

ROAD_EDGE_M = 0.3  # asphalt beyond the edge line, as the renderer paints it


def disagreement(renderer: Renderer, road: Road, s_m: float, near_m: float) -> float:
    """Share of ground pixels within ``near_m`` ahead classed road by one and verge by the other."""
    x, y, yaw = road.lane_pose(s_m)
    # the renderer's per-pixel Frenet coordinates and ground points (vehicle frame)
    _, d, width, *_ = renderer._frenet(road, x, y, yaw, s_m)
    gx_v, gy_v = np.broadcast_to(renderer._X, d.shape), np.broadcast_to(renderer._Y, d.shape)
    near = gx_v < near_m
    gx = x + gx_v[near] * np.cos(yaw) - gy_v[near] * np.sin(yaw)
    gy = y + gx_v[near] * np.sin(yaw) + gy_v[near] * np.cos(yaw)
    # every part of the road that can come within reach of these pixels, however far along the road
    close = (road.x_m - x) ** 2 + (road.y_m - y) ** 2 < (1.5 * near_m + 10.0) ** 2
    rx, ry = road.x_m[close], road.y_m[close]
    dist = np.sqrt(((gx[:, None] - rx[None]) ** 2 + (gy[:, None] - ry[None]) ** 2).min(axis=1))
    edge = np.broadcast_to(width, d.shape)[near] + ROAD_EDGE_M
    return float(np.mean((dist < edge) != (np.abs(d[near]) < edge)))


def check(roads: str, seeds: List[int], every_m: float, near_m: float, length_m: float, rows: bool) -> str:
    renderer = Renderer(Camera.default())
    shares: List[Tuple[float, int, float]] = []
    for seed in seeds:
        road = generate_road(seed, length_m, split="test", index=0, roads=roads)
        if rows:  # the renderer draws a road of kind easy with the row model
            road = dataclasses.replace(road, kind="easy")
        for s in np.arange(20.0, length_m - 3.0 * near_m, every_m):
            shares.append((disagreement(renderer, road, float(s), near_m), seed, float(s)))
    values = np.array([v for v, *_ in shares])
    worst = ", ".join(f"{v:.1%} (seed {sd}, s {s:.0f} m)" for v, sd, s in sorted(shares, reverse=True)[:3])
    return (
        f"{roads}{' (row model)' if rows else ''}: {len(values)} frames, "
        f"mean {values.mean():.2%} of the ground within {near_m:g} m drawn "
        f"wrong, {np.mean(values > 0.05):.1%} of frames over 5 %; worst {worst}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--roads", default="easy,hard")
    p.add_argument("--seeds", default="31,32")
    p.add_argument("--every", type=float, default=5.0, help="metres between checked poses")
    p.add_argument("--near", type=float, default=40.0, help="metres ahead of the car checked")
    p.add_argument("--length", type=float, default=1000.0, help="metres of each test road")
    p.add_argument("--rows", action="store_true", help="draw every road with the row model")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    for roads in args.roads.split(","):
        print(check(roads, seeds, args.every, args.near, args.length, args.rows), flush=True)


if __name__ == "__main__":
    main()
