"""Hard roads: junction turns, hairpins, S-bends and chicanes at a speed that follows the road; easy
roads (the default) exactly as before kinds existed."""

import json
import math

import numpy as np
import pytest

from drive.io.recording import Recording
from drive.sim.appearance import sample_appearance
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver
from drive.sim.expert import PurePursuitExpert
from drive.sim.gym_env import LaneKeepingEnv
from drive.sim.record import record_drive, simulate
from drive.sim.road import generate_road, road_kind, uniform_road
from drive.sim.road_hard import CLEARANCE_M
from drive.sim.speed import SpeedRules, lane_curvature, speed_profile
from drive.sim.vehicle import HARD_ROAD_LIMITS, VehicleLimits
from drive.sim.world import World


def _hard(seed: int, index: int = 1, length_m: float = 1300.0):
    return generate_road(seed, length_m, "test", index=index, roads="hard")


def test_easy_roads_are_todays_roads_and_mixed_keeps_them_on_even_indices() -> None:
    # values of generate_road(3, 500, "test", index=2) before road kinds existed (tolerance: the sums of
    # cosines may differ in the last bits between CPUs)
    road = generate_road(3, 500.0, "test", index=2)
    assert road.kind == "easy" and len(road.objects) == 139
    got = [road.x_m[-1], road.y_m[-1], road.heading_rad[-1], road.lane_width_m[333]]
    want = [360.928776430443, -89.47152591992354, -1.8091944048375503, 3.5734037677850092]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    for index in (0, 2):
        mixed = generate_road(3, 500.0, "test", index=index, roads="mixed")
        easy = generate_road(3, 500.0, "test", index=index)
        assert mixed.kind == "easy"
        np.testing.assert_array_equal(mixed.curvature_per_m, easy.curvature_per_m)
        assert mixed.objects == easy.objects
    assert generate_road(3, 500.0, "test", index=1, roads="mixed").kind == "hard"
    assert [road_kind("mixed", i) for i in range(4)] == ["easy", "hard", "easy", "hard"]
    with pytest.raises(ValueError, match="roads must be one of easy, hard, mixed"):
        road_kind("steep", 0)


def test_hard_roads_hold_tight_turns_beside_gentle_ones_and_never_meet_themselves() -> None:
    lane = []
    for seed in range(4):
        road = _hard(seed)
        k = np.abs(lane_curvature(road))
        lane.append(k)
        assert k.max() <= 1 / 5.0  # the right lane's tightest: a junction turn of 5.2 m (width varies)
        xy = np.stack([road.x_m, road.y_m], 1)[::4]
        s = road.s_m[::4]
        d = np.sqrt(((xy[:, None] - xy[None]) ** 2).sum(-1))
        assert d[np.abs(s[:, None] - s[None]) > 60.0].min() >= CLEARANCE_M - 0.5
        for tree in road.objects:  # no tree on any part of the road
            assert np.hypot(road.x_m - tree.x_m, road.y_m - tree.y_m).min() >= road.lane_width_m.max() + 2.0
        assert road.objects  # but trees beside it
    k = np.concatenate(lane)
    assert k.max() > 1 / 6.5  # junction turns
    assert 0.02 < np.mean(k > 1 / 20) < 0.25  # tight parts are a minority of the road
    assert np.mean(k < 1 / 100) > 0.4  # straights and gentle curves are most of it
    # a hairpin: some 80 m of road turning by more than 150 degrees
    turns = [np.abs(_hard(s).heading_rad[160:] - _hard(s).heading_rad[:-160]).max() for s in range(4)]
    assert max(turns) > math.radians(150)


def test_the_speed_follows_the_road_within_the_cars_limits() -> None:
    road = _hard(2)
    v = speed_profile(road, 30 / 3.6, HARD_ROAD_LIMITS)
    rules = SpeedRules()
    k = np.abs(lane_curvature(road))
    assert v.max() <= 30 / 3.6 + 1e-9 and v.min() >= rules.min_speed_mps - 1e-9
    lateral = v**2 * k
    assert lateral.max() <= rules.lateral_accel_mps2 + 1e-6 or v[lateral.argmax()] <= rules.min_speed_mps
    dv2 = np.diff(v**2) / (2 * road.ds_m)  # reachable: no harder braking or accelerating than stated
    assert dv2.min() >= -rules.decel_mps2 - 1e-6 and dv2.max() <= rules.accel_mps2 + 1e-6
    assert v[k > 1 / 12].max() < 0.7 * v[k < 1 / 200].max()  # slow in tight turns


def test_the_expert_keeps_the_lane_of_hard_roads_at_their_speed() -> None:
    result = evaluate(PurePursuitExpert(), km=3.0, seed=[5, 6, 7], roads="hard")
    m = result.metrics
    assert m["roads"] == "hard" and m["interventions"] == 0, m
    assert m["lateral_max_abs_m"] < 0.8
    assert set(m["per_condition"]) >= {"hard"}
    # steering straight leaves every hard road, many times
    straight = evaluate(ConstantDriver(0.0), km=1.0, seed=5, roads="hard").metrics
    assert straight["interventions_per_km"] > 10


def test_a_car_on_a_hard_road_slows_for_the_turn_and_is_put_back_at_the_roads_speed() -> None:
    road = _hard(3)
    world = World(road, sample_appearance(3, "test", 1), start_s_m=5.0)
    assert world.limits == HARD_ROAD_LIMITS and world.speed is not None
    expert, speeds, tight = PurePursuitExpert(), [], []
    while world.s_m < 900.0:
        obs = world.observe(with_image=False)
        world.step(expert.act(obs))
        speeds.append(world.vehicle.state.speed_mps)
        tight.append(abs(lane_curvature(road)[road.index_at(world.s_m)]))
    speeds, tight = np.asarray(speeds), np.asarray(tight)
    assert speeds[tight > 1 / 12].mean() < 0.75 * speeds[tight < 1 / 200].mean()
    world.place_on_lane(300.0)
    assert world.vehicle.state.speed_mps == pytest.approx(world.speed.target(300.0))
    easy = World(generate_road(3, 400.0, "test"), sample_appearance(3, "test", 0), start_s_m=5.0)
    assert easy.speed is None and easy.limits == VehicleLimits()


def test_recordings_of_mixed_roads_log_the_speed_and_say_which_road(tmp_path) -> None:
    paths = simulate(tmp_path, minutes=0.4, seed=1, recording_minutes=0.2, roads="mixed", fps=10.0)
    assert [p.name.split("-")[3] for p in paths] == [paths[0].name.split("-")[3], "hard"]
    easy, hard = (Recording.open(p) for p in paths)
    assert np.ptp(easy.log["speed_mps"]) == 0.0
    assert np.ptp(hard.log["speed_mps"]) > 0.5  # the speed changes with the road
    meta = json.loads((paths[1] / "meta.json").read_text())
    assert (
        meta["extra"]["road_kind"] == "hard"
        and "road_kind" not in json.loads((paths[0] / "meta.json").read_text())["extra"]
    )
    with pytest.raises(ValueError, match="roads must be one of"):
        simulate(tmp_path / "x", minutes=0.1, seed=1, roads="steep")
    record_drive(tmp_path / "one", 2, index=0, minutes=0.05, roads="hard", fps=10.0)
    assert Recording.open(tmp_path / "one").meta.extra["road_kind"] == "hard"


def test_named_conditions_cross_the_road_kinds_of_a_mixed_set(tmp_path) -> None:
    """Two named seasons on mixed roads: each kind meets both (cycled on the road's index alone, every
    easy road was summer and every hard one winter), in recordings, evaluation and the env alike."""
    seasons = ["summer", "winter"]
    paths = simulate(
        tmp_path, 0.2, seed=1, conditions=seasons, recording_minutes=0.05, roads="mixed", fps=10.0
    )
    recorded = [
        (road_kind("mixed", i), Recording.open(p).meta.conditions["season"]) for i, p in enumerate(paths)
    ]
    assert recorded == [("easy", "summer"), ("hard", "summer"), ("easy", "winter"), ("hard", "winter")]
    # evaluation lays its segments out as the recordings, and the env's episodes are its segments
    env = LaneKeepingEnv(seed=3, conditions=seasons, roads="mixed", episode_km=0.01, width=64, height=32)
    one = evaluate(ConstantDriver(0.0), km=0.04, segment_km=0.01, seed=3, conditions=seasons, roads="mixed")
    for i, segment in enumerate(one.metrics["per_segment"]):
        env.reset(options={"road_index": i})
        assert env.appearance.names()["season"] == segment["season"] == recorded[i][1]
    # one kind of road: the conditions cycle on the index as they always did
    easy = evaluate(ConstantDriver(0.0), km=0.02, segment_km=0.01, seed=3, conditions=seasons)
    assert [s["season"] for s in easy.metrics["per_segment"]] == seasons


def test_the_gymnasium_env_drives_hard_roads_with_the_low_speed_cars_steering() -> None:
    env = LaneKeepingEnv(seed=4, roads="hard", episode_km=0.05, width=64, height=32)
    assert env.action_space.high[0] == pytest.approx(HARD_ROAD_LIMITS.max_curvature_per_m)
    env.reset()
    assert env.world.road.kind == "hard"
    _, _, _, _, info = env.step(np.array([0.0], np.float32))
    assert info["speed_mps"] > 0
    with pytest.raises(ValueError, match="roads must be one of"):
        LaneKeepingEnv(roads="steep")


def test_uniform_roads_may_curve_as_tightly_as_hard_roads_only_when_hard() -> None:
    assert uniform_road(100.0, curvature_per_m=0.14, kind="hard").kind == "hard"
    with pytest.raises(ValueError, match="easy roads"):
        uniform_road(100.0, curvature_per_m=0.14)


def _drawn_right(road, app, s_m: float, near_m: float = 40.0) -> float:
    """Share of the clearly-road and clearly-verge ground within ``near_m`` ahead of the lane centre at
    ``s_m`` whose rendered colour is nearer the asphalt's or the verge's as the truth says: the distance
    of each pixel's ground point to the nearest sample of the road's centre line, with 0.4 m of margin
    around the asphalt's edge and the gravel's."""
    from drive.sim.render import Renderer

    renderer = Renderer()
    x, y, yaw = road.lane_pose(s_m)
    image = renderer.render(road, app, x, y, yaw, s_m)[renderer._first_ground :].astype(float)
    gx_v = np.broadcast_to(renderer._X, renderer._Y.shape)
    gx = x + gx_v * math.cos(yaw) - renderer._Y * math.sin(yaw)
    gy = y + gx_v * math.sin(yaw) + renderer._Y * math.cos(yaw)
    i0, i1 = road.index_at(s_m - 2 * near_m), road.index_at(s_m + 3 * near_m)
    rx, ry = road.x_m[i0:i1], road.y_m[i0:i1]
    dist = np.sqrt(((gx[..., None] - rx) ** 2 + (gy[..., None] - ry) ** 2).min(axis=-1))
    width = float(road.lane_width_m[i0:i1].mean())
    asphalt, verge = dist < width + 0.3 - 0.4, dist > width + 0.9 + 0.4
    clear = (asphalt | verge) & (gx_v < near_m)
    gain = app.brightness * np.asarray(app.tint) * 255.0
    to_asphalt = np.linalg.norm(image - np.asarray(app.asphalt_rgb) * gain, axis=-1)
    to_verge = np.linalg.norm(image - np.asarray(app.ground_rgb) * gain, axis=-1)
    return float(np.mean((to_asphalt < to_verge)[clear] == asphalt[clear]))


def test_the_road_beyond_a_junction_turn_is_drawn_where_it_runs_across_the_view() -> None:
    """One road crossing per image row cannot draw the road after a junction turn, which runs across the
    view: the far rows were painted from the last point that still moved away (asphalt on the verge).
    Each ground pixel now takes the nearest point of the road."""
    road = _hard(31, index=0)
    plain = {"season": "summer", "light": "overcast", "markings": "unmarked"}  # no shadows, no paint
    app = sample_appearance(31, "test", 0, fixed=plain)
    k = lane_curvature(road)
    for sign in (-1.0, 1.0):  # the first right junction turn, and the first left turn as sharp
        entry = float(road.s_m[np.nonzero(sign * k > (0.15 if sign < 0 else 0.09))[0][0]])
        for ahead in (8.0, 0.0):  # the row model drew 2-5 % of this ground wrong
            assert _drawn_right(road, app, entry - ahead) > 0.99, (sign, ahead)


def test_a_hard_roads_pixels_are_as_far_from_the_road_as_its_nearest_point() -> None:
    """The renderer's |d| on a hard road is the distance to the nearest point of the centre line (any
    part of it), within 1 cm for ground within 5 m of the road: brute force over every segment."""
    from drive.sim.render import Renderer

    road = _hard(31, index=0)
    renderer = Renderer()
    ax, ay = road.x_m[:-1], road.y_m[:-1]
    bx, by = np.diff(road.x_m), np.diff(road.y_m)
    checked = 0
    for s_m in (150.0, 420.0, 805.0):  # a hairpin's legs and a junction turn within view
        x, y, yaw = road.lane_pose(s_m, 0.4, 0.05)
        _, d, *_ = renderer._frenet(road, x, y, yaw, s_m)
        X = np.broadcast_to(renderer._X, d.shape)
        near = X < 60.0
        px = (x + X * math.cos(yaw) - renderer._Y * math.sin(yaw))[near][:, None]
        py = (y + X * math.sin(yaw) + renderer._Y * math.cos(yaw))[near][:, None]
        t = np.clip(((px - ax) * bx + (py - ay) * by) / (bx * bx + by * by), 0.0, 1.0)
        truth = np.sqrt(((px - ax - t * bx) ** 2 + (py - ay - t * by) ** 2).min(axis=1))
        close = truth < 5.0
        checked += int(close.sum())
        np.testing.assert_allclose(np.abs(d[near][close]), truth[close], atol=0.01)
    assert checked > 5000
