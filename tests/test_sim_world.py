"""The built-in world: roads, seeds, camera geometry, rendering, vehicle."""

import dataclasses
import math

import numpy as np
import pytest

from drive.sim.appearance import CONDITION_AXES, parse_conditions, sample_appearance
from drive.sim.camera import Camera
from drive.sim.render import Renderer, render_view
from drive.sim.road import MAX_CURVATURE_PER_M, TEST_SEED_OFFSET, generate_road, uniform_road, world_seed
from drive.sim.vehicle import Vehicle, VehicleLimits, VehicleState


def _plain(season="summer", light="overcast", markings="marked"):
    """A fixed appearance without shadows or paint wear, for geometric checks."""
    app = sample_appearance(0, "train", 0, {"season": season, "light": light, "markings": markings})
    return dataclasses.replace(app, marking_wear=0.0, shadow_strength=0.0, visibility_m=1e6)


def test_train_and_test_seed_ranges_are_disjoint():
    train = {world_seed(s, "train") for s in (0, 1, 7, TEST_SEED_OFFSET - 1)}
    test = {world_seed(s, "test") for s in (0, 1, 7, TEST_SEED_OFFSET - 1)}
    assert max(train) < min(test)
    assert not np.allclose(
        generate_road(7, 300, "train").curvature_per_m, generate_road(7, 300, "test").curvature_per_m
    )
    for bad in (-1, TEST_SEED_OFFSET):
        with pytest.raises(ValueError, match="seed must be in"):
            world_seed(bad, "train")
    with pytest.raises(ValueError, match="split must be one of"):
        world_seed(0, "validation")


def test_roads_are_deterministic_and_within_curvature_limits():
    a, b = generate_road(3, 3000, "test"), generate_road(3, 3000, "test")
    assert np.array_equal(a.x_m, b.x_m) and len(a.objects) == len(b.objects)
    assert a.length_m >= 3000
    assert np.abs(a.curvature_per_m).max() <= MAX_CURVATURE_PER_M + 1e-12
    assert np.abs(a.curvature_per_m).max() > 0.5 * MAX_CURVATURE_PER_M  # real curves, not all straights
    assert (np.abs(a.curvature_per_m) < 1e-9).mean() > 0.1  # and straights
    # clothoids: curvature changes continuously (bounded dk/ds), never jumps
    assert np.abs(np.diff(a.curvature_per_m)).max() / a.ds_m <= 0.003 + 1e-9
    assert 3.1 <= a.lane_width_m.min() and a.lane_width_m.max() <= 3.9


def test_lane_errors_follow_the_sign_conventions():
    road = uniform_road(200, curvature_per_m=0.02)
    x, y, yaw = road.lane_pose(80.0, lateral_m=0.4, yaw_rad=0.1)
    s, lateral, heading = road.lane_errors(x, y, yaw, 78.0)
    assert s == pytest.approx(80.0, abs=0.05)
    assert lateral == pytest.approx(0.4, abs=1e-3)  # positive = left of the lane centre
    assert heading == pytest.approx(0.1, abs=1e-6)  # positive = pointing left


def test_conditions_parse_by_axis_and_reject_unknown_names():
    assert parse_conditions("summer, winter,noon") == {"season": ["summer", "winter"], "light": ["noon"]}
    with pytest.raises(ValueError, match="unknown condition 'spring'.*summer"):
        parse_conditions(["spring"])
    app = sample_appearance(4, "test", 2, {"season": "winter"})
    assert app.season == "winter" and app.light in CONDITION_AXES["light"]
    assert app.to_dict()["season"] == "winter"


def _paint_centres(row: np.ndarray, lo: int, hi: int) -> float:
    """Intensity-weighted column of paint (much brighter than asphalt or gravel) in row[lo:hi]."""
    lum = row.astype(float).mean(axis=1)
    weight = np.clip(lum[lo:hi] - np.median(lum) - 70.0, 0.0, None)
    assert weight.sum() > 0, "no paint found"
    return lo + float((weight * np.arange(hi - lo)).sum() / weight.sum())


def _row_at(cam: Camera, forward_m: float) -> int:
    """Image row seeing the ground ``forward_m`` ahead (pinhole projection)."""
    return int(round(float(cam.project_ground(forward_m, 0.0)[1])))


@pytest.mark.parametrize("lateral_m", [0.0, 0.4])
def test_edge_line_projects_where_pinhole_math_says(lateral_m):
    cam = Camera.default()
    road = uniform_road(400, lane_width_m=3.5)
    img = render_view(road, _plain(), 50.0, lateral_m=lateral_m, camera=cam)
    c, s = math.cos(cam.pitch_rad), math.sin(cam.pitch_rad)
    y_line = -3.5 / 2 + 0.095 - lateral_m  # right edge line centre, left of the camera (m)
    rows = np.arange(int(cam.horizon_row) + 8, cam.height)
    measured, predicted = [], []
    for v in rows:
        yc = (v - cam.cy) / cam.fy
        forward = cam.height_m * (c - yc * s) / (s + yc * c)
        u = cam.cx - cam.fx * y_line / (forward * c + cam.height_m * s)
        if u > cam.width - 4 or forward > 20.0:  # paint at least ~1 px wide
            continue
        measured.append(_paint_centres(img[v], int(cam.cx), cam.width))
        predicted.append(u)
    assert len(measured) > 20
    assert np.abs(np.array(measured) - np.array(predicted)).max() < 0.5  # pixels
    # the bottom row: where the edge line meets the image bottom
    assert measured[-1] == pytest.approx(predicted[-1], abs=0.5)
    # parallel ground lines meet at the principal column on the horizon row
    fit = np.polyfit(rows[-len(measured) :], measured, 1)
    assert np.polyval(fit, cam.horizon_row) == pytest.approx(cam.cx, abs=1.0)


def test_yawed_camera_moves_the_vanishing_point():
    cam = Camera.default()
    road = uniform_road(400)
    yaw = 0.05
    img = render_view(road, _plain(), 50.0, yaw_rad=yaw, camera=cam)
    rows = np.arange(_row_at(cam, 12.0), cam.height)  # near rows: only the right edge line right of cx
    cols = [_paint_centres(img[v], int(cam.cx), cam.width) for v in rows]
    fit = np.polyfit(rows, cols, 1)
    expected = cam.cx + cam.fx * math.tan(yaw) / math.cos(cam.pitch_rad)
    assert np.polyval(fit, cam.horizon_row) == pytest.approx(expected, abs=1.5)


def test_sky_above_and_road_below_the_horizon():
    cam = Camera.default()
    app = _plain(markings="unmarked")
    img = render_view(uniform_road(400), app, 50.0, camera=cam).astype(float)
    top = img[: int(cam.horizon_row) - 6].reshape(-1, 3).mean(0)
    sky = np.asarray(app.sky_top_rgb) * 255 * app.brightness * np.asarray(app.tint)
    assert np.abs(top - sky).max() < 40
    asphalt = np.asarray(app.asphalt_rgb) * 255 * app.brightness * np.asarray(app.tint)
    assert np.abs(img[-1, int(cam.cx)] - asphalt).max() < 30  # straight ahead at the bottom: asphalt


def test_left_curve_bends_the_road_to_the_left_of_the_image():
    cam = Camera.default()
    app = _plain(markings="unmarked")
    asphalt = np.asarray(app.asphalt_rgb) * 255 * app.brightness * np.asarray(app.tint)

    def road_centre_col(curvature):
        img = render_view(uniform_road(300, curvature_per_m=curvature), app, 20.0, camera=cam).astype(float)
        row = img[_row_at(cam, 15.0)]
        is_road = np.abs(row - asphalt).max(axis=1) < 25
        return np.nonzero(is_road)[0].mean()

    assert road_centre_col(0.03) < road_centre_col(0.0) - 10 < road_centre_col(-0.03) - 20


def test_every_condition_renders_a_plausible_frame():
    cam = Camera.default()
    road = generate_road(1, 500, "train")
    renderer = Renderer(cam)
    means = {}
    for season in CONDITION_AXES["season"]:
        for light in CONDITION_AXES["light"]:
            app = sample_appearance(1, "train", 0, {"season": season, "light": light})
            img = renderer.render_at(road, app, 100.0)
            assert img.shape == (78, 200, 3) and img.dtype == np.uint8
            assert 10 < img.std() and 40 < img.mean() < 230
            means[(season, light)] = img.reshape(-1, 3).mean(0)
    # winter verges (snow) are brighter than summer grass under the same light
    assert means[("winter", "noon")].mean() > means[("summer", "noon")].mean() + 20


def test_camera_rejects_tiny_images():
    with pytest.raises(ValueError, match="at least 16x8"):
        Camera.default(8, 4)


def test_vehicle_follows_circles_and_respects_steering_limits():
    limits = VehicleLimits(max_curvature_per_m=0.05, max_curvature_rate=0.15)
    car = Vehicle(VehicleState(0.0, 0.0, 0.0, 10.0, curvature_per_m=0.02), limits)
    for _ in range(300):  # 30 s at 10 m/s on a 50 m radius: the car stays on the circle
        st = car.step(0.02, 0.1)
    assert math.hypot(st.x_m, st.y_m - 50.0) == pytest.approx(50.0, abs=1e-6)
    car = Vehicle(VehicleState(0.0, 0.0, 0.0, 10.0), limits)
    assert car.step(1.0, 0.1).curvature_per_m == pytest.approx(0.015)  # rate limited
    for _ in range(20):
        car.step(1.0, 0.1)
    assert car.state.curvature_per_m == pytest.approx(0.05)  # clipped
    with pytest.raises(ValueError, match="finite"):
        car.step(float("nan"), 0.1)
