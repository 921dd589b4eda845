"""The renderer is total: every reachable pose renders, in every condition, without an exception.

The float -> texture-index arithmetic once wrapped the float before flooring it; on float32
``np.mod(-1e-9, 256) == 256.0``, one past the end of the texture, and a single such pixel killed
closed-loop runs. These tests render the seams on purpose.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from drive.sim.appearance import CONDITION_AXES, sample_appearance
from drive.sim.camera import Camera
from drive.sim.render import _TEX, Renderer, _cell
from drive.sim.road import generate_road, uniform_road
from drive.sim.road_nearest import clamped_cell

_TINY = (0.0, -0.0, 1e-9, -1e-9, 1e-6, -1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_texture_cell_of_values_just_below_a_seam_is_the_last_cell_not_one_past_it(dtype) -> None:
    seams = np.array([0.0, 256.0, -256.0, 512.0, 1.0, -1.0], dtype)
    for eps in _TINY:
        idx = _cell(seams + dtype(eps))
        assert idx.min() >= 0 and idx.max() < _TEX
    below = _cell(np.array([-1e-9, -1e-6, 255.999], dtype))
    assert below.tolist() == [255, 255, 255]
    assert _cell(np.array([0.0, -0.0, 1e-9, 256.0], dtype)).tolist() == [0, 0, 0, 0]


def test_texture_cell_is_in_range_for_huge_and_non_finite_values() -> None:
    x = np.array([1e12, -1e12, np.inf, -np.inf, np.nan], np.float32)
    idx = _cell(x)
    assert idx.min() >= 0 and idx.max() < _TEX
    c = clamped_cell(x, 10)
    assert c.min() >= 0 and c.max() < 10
    assert clamped_cell(np.array([-0.5, 0.5, 9.99, 10.0, 1e30]), 10).tolist() == [0, 0, 9, 9, 9]


def _poses(length_m: float):
    """Arc lengths at the road's ends and at texture (12 and 2 cells per metre) and dash (12 m) seams,
    each nudged by +-0, 1e-9, 1e-6; lateral offsets the same around 0 and far off the lane; large yaws."""
    seams = [0.0, 256.0 / 12.0, 128.0, 12.0 * 5, 12.0 * 5 + 4.0, length_m - 1.0, length_m]
    s_values = sorted({min(max(s + e, 0.0), length_m) for s in seams for e in _TINY})
    lateral = [0.0, -0.0, 1e-9, -1e-9, 1e-6, -1e-6, 1.75, -1.75, 4.0, -4.0]
    yaws = [0.0, 1e-9, -1e-9, np.radians(60.0), -np.radians(60.0)]
    return s_values, lateral, yaws


def test_every_edge_pose_renders_in_every_condition() -> None:
    road = generate_road(7, 300.0, split="test", index=2)
    renderer = Renderer(Camera.default())
    s_values, lateral, yaws = _poses(road.length_m)
    combos = [dict(zip(CONDITION_AXES, values)) for values in itertools.product(*CONDITION_AXES.values())]
    rendered = 0
    for i, fixed in enumerate(combos):
        app = sample_appearance(11, "test", i, fixed=fixed)
        # every condition sees every s seam and every offset; yaws rotate through the grid
        for j, (s, d) in enumerate(itertools.product(s_values, lateral)):
            yaw = yaws[(i + j) % len(yaws)]
            img = renderer.render_at(road, app, s, d, yaw)
            assert img.shape == (78, 200, 3) and img.dtype == np.uint8
            rendered += 1
    assert rendered == len(combos) * len(s_values) * len(lateral)


@pytest.mark.parametrize(
    "camera", [Camera.default(), Camera.default(320, 120, hfov_deg=100.0, height_m=2.5, pitch_rad=0.05)]
)
def test_random_poses_of_random_roads_render(camera: Camera) -> None:
    rng = np.random.default_rng(20)
    renderer = Renderer(camera)
    for k in range(40):
        road = generate_road(
            int(rng.integers(0, 1000)),
            float(rng.uniform(60.0, 400.0)),
            split="test",
            index=int(rng.integers(0, 50)),
        )
        app = sample_appearance(int(rng.integers(0, 1000)), "test", k)
        for _ in range(10):
            s = float(rng.uniform(-5.0, road.length_m + 5.0))
            img = renderer.render_at(
                road, app, s, float(rng.uniform(-4.5, 4.5)), float(rng.uniform(-np.pi / 3, np.pi / 3))
            )
            assert img.shape == (camera.height, camera.width, 3)


def test_straight_road_seam_pixels_match_their_neighbours() -> None:
    """At a texture seam the image is continuous: rendering 1e-9 m either side of it gives the same frame."""
    road = uniform_road(200.0)
    renderer = Renderer(Camera.default())
    app = sample_appearance(3, "test", 0, fixed={"season": "summer", "light": "noon", "markings": "marked"})
    a = renderer.render_at(road, app, 256.0 / 12.0 * 2, 0.0)
    b = renderer.render_at(road, app, 256.0 / 12.0 * 2 - 1e-9, -1e-9)
    assert np.abs(a.astype(int) - b.astype(int)).max() <= 1


@pytest.mark.parametrize("width", [199, 200, 201])
def test_camera_column_on_the_centre_line_renders(width: int) -> None:
    """An odd-width camera has a pixel column exactly straight ahead; on the road's centre line (1.75 m left
    of the right-lane centre) its lateral coordinate is +-1e-16 m: the case that crashed ``make demo``."""
    renderer = Renderer(Camera.default(width=width))
    app = sample_appearance(3, "test", 0)
    road = uniform_road(200.0)
    for s in (10.0, 50.0, 100.0, 128.0):
        for eps in (0.0, 1e-15, -1e-15, 1e-12, -1e-12, 1e-9, -1e-9):
            img = renderer.render_at(road, app, s, 1.75 + eps, 0.0)
            assert img.shape == (78, width, 3)
