"""Benchmark the built-in world on ONE core: camera frames per second and closed-loop steps per second.

    python tools/bench_sim.py [--frames 600] [--km 2] [--width 200 --height 78]

Prints rendering fps at the camera size on easy and on hard roads (per wall second and per CPU
second of this process: on a shared machine the CPU-time figure is the one that measures the
renderer) with its ratio to the target (>= 500 fps, so that recording and closed-loop evaluation
never wait on rendering) and to real time (30 Hz), and the closed-loop steps per second of the
expert (no rendering) and of a driver that needs images.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import cv2

from drive.sim.appearance import CONDITION_AXES, sample_appearance
from drive.sim.camera import Camera
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver
from drive.sim.expert import PurePursuitExpert
from drive.sim.render import Renderer
from drive.sim.road import generate_road

TARGET_FPS = 500.0
REAL_TIME_HZ = 30.0


class _ImageDriver(ConstantDriver):
    """A driver that asks for camera frames (and steers like the expert, so no takeovers)."""

    needs_image = True

    def __init__(self) -> None:
        super().__init__(0.0)
        self.expert = PurePursuitExpert()

    def act(self, obs) -> float:
        return self.expert.act(obs)


def bench_render(frames: int, camera: Camera, roads: str = "easy") -> "tuple[float, float]":
    """(frames per wall second, frames per CPU second of this process) on a road of kind ``roads``."""
    road = generate_road(0, frames * 0.5 + 400.0, "test", roads=roads)
    apps = [sample_appearance(0, "test", i, {"season": s}) for i, s in enumerate(CONDITION_AXES["season"])]
    renderer = Renderer(camera)
    for i in range(20):  # warm-up
        renderer.render_at(road, apps[0], 10.0 + i)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(frames):
        renderer.render_at(road, apps[i % len(apps)], 10.0 + 0.28 * i, lateral_m=0.2 * ((i % 7) - 3) / 3)
    return frames / (time.perf_counter() - start), frames / (time.process_time() - cpu)


def bench_closed_loop(km: float, driver) -> float:
    start = time.perf_counter()
    m = evaluate(driver, km=km, seed=0).metrics
    return m["time_s"] * REAL_TIME_HZ / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=600, help="frames to render (default 600)")
    parser.add_argument(
        "--km", type=float, default=2.0, help="closed-loop distance for the expert (default 2)"
    )
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--height", type=int, default=78)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    camera = Camera.default(args.width, args.height)
    for roads in ("easy", "hard"):  # hard roads: every pixel from the road's nearest point
        fps, cpu_fps = bench_render(args.frames, camera, roads)
        print(
            f"render {camera.width}x{camera.height}, {roads} roads, 1 core: {fps:8.0f} frames/s wall, "
            f"{cpu_fps:6.0f} per CPU second   "
            f"{cpu_fps / TARGET_FPS:5.2f}x the {TARGET_FPS:.0f} fps target, "
            f"{cpu_fps / REAL_TIME_HZ:6.1f}x real time (30 Hz)"
        )
    steps = bench_closed_loop(args.km, PurePursuitExpert())
    print(f"closed loop, expert (no frames): {steps:8.0f} steps/s   {steps / REAL_TIME_HZ:8.1f}x real time")
    steps = bench_closed_loop(min(args.km, 0.5), _ImageDriver())
    print(f"closed loop, rendering frames:   {steps:8.0f} steps/s   {steps / REAL_TIME_HZ:8.1f}x real time")


if __name__ == "__main__":
    main()
