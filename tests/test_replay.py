"""Log replay (drive.replay): the recorded path, the re-rendered views against the world's own renderer,
the closed loop on a recording against the closed loop in the world it was recorded in."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from drive.data.viewpoint import road_region_error
from drive.io.recording import ArrayFrames, Recording, RecordingMeta
from drive.replay import LogWorld, ViewSynthesis, reference_paths, replay_recording
from drive.replay.path import MIN_SPEED_MPS
from drive.sim.appearance import Appearance
from drive.sim.camera import Camera
from drive.sim.closed_loop import evaluate, summarize
from drive.sim.driver import ConstantDriver
from drive.sim.expert import PurePursuitExpert
from drive.sim.record import simulate
from drive.sim.render import render_view
from drive.sim.road import generate_road

SEED, FPS = 5, 10.0


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Recording:
    """Half a minute of noise-free expert driving on test road 0 of seed 5, at 10 Hz."""
    root = tmp_path_factory.mktemp("replay-log")
    (path,) = simulate(root, minutes=0.5, seed=SEED, split="test", fps=FPS, noise_std=0.0)
    return Recording.open(path)


def _appearance(rec: Recording) -> Appearance:
    return Appearance(**{k: tuple(v) if isinstance(v, list) else v for k, v in rec.meta.conditions.items()})


def test_the_path_from_curvature_and_speed_is_the_path_the_poses_give(log):
    """drive's noise-free expert logs its executed curvature: integrating it must retrace the poses."""
    (poses,) = reference_paths(log)
    (integrated,) = reference_paths(log, use_poses=False)
    assert poses.source == "poses" and integrated.source == "curvature"
    x0, y0, yaw0 = poses.frame_pose[0]
    c, s = math.cos(yaw0), math.sin(yaw0)
    p = integrated.frame_pose
    aligned = np.stack([x0 + c * p[:, 0] - s * p[:, 1], y0 + s * p[:, 0] + c * p[:, 1]], axis=1)
    assert poses.length_m > 200
    assert np.abs(aligned - poses.frame_pose[:, :2]).max() < 0.05  # metres, over > 200 m
    assert integrated.length_m == pytest.approx(poses.length_m, rel=1e-3)


def _place(world: LogWorld, k: int, lateral: float, yaw: float, forward: float) -> None:
    x, y, heading = world.path.frame_pose[k]
    c, s = math.cos(heading), math.sin(heading)
    st = world.vehicle.state
    st.x_m, st.y_m, st.yaw_rad = x + c * forward - s * lateral, y + s * forward + c * lateral, heading + yaw
    world.s_m = float(world.path.frame_s_m[k])
    world._update_errors()


@pytest.mark.parametrize(
    "lateral,yaw_deg,forward",
    [(0.5, 0.0, 0.0), (0.0, 5.0, 0.0), (-0.8, -8.0, 0.0), (0.0, 0.0, 1.5), (0.3, 3.0, 0.4)],
)
def test_the_re_rendered_view_is_what_the_world_shows_at_that_pose(log, lateral, yaw_deg, forward):
    """The car moved off the recorded pose: its view, re-rendered from the recorded frame, against the
    built-in renderer at the car's true pose (ground below the horizon, borders left out)."""
    (path,) = reference_paths(log)
    world = LogWorld(path, log.source, log.meta.camera.to_dict(), FPS)
    road = generate_road(SEED, path.length_m + 400.0, split="test", index=0)
    app, cam = _appearance(log), Camera.default()
    mask = np.zeros((cam.height, cam.width), bool)
    mask[int(math.ceil(cam.horizon_row)) + 3 :, 10:-10] = True
    for k in (50, 150, 250):
        _place(world, k, lateral, math.radians(yaw_deg), forward)
        image, shown = world.render(), world.shown[-1]  # the frame shot nearest the car's progress
        true = true_view(world, road, app)
        recorded = log.source.read(shown)
        _place(world, shown - int(path.frames[0]), 0.0, 0.0, 0.0)  # the floor: JPEG, texture
        floor = road_region_error(recorded, true_view(world, road, app), mask)
        err, unwarped = road_region_error(image, true, mask), road_region_error(recorded, true, mask)
        assert abs(shown - (k + forward / 0.83)) <= 0.5  # frames are ~0.83 m apart at 30 km/h, 10 Hz
        assert err - floor < 0.3 * (unwarped - floor), (k, floor, err, unwarped)


def true_view(world: LogWorld, road, app) -> np.ndarray:
    st = world.vehicle.state
    s, lat, head = road.lane_errors(st.x_m, st.y_m, st.yaw_rad, world.s_m + 5.0)
    return render_view(road, app, s, lat, head)


def test_no_source_share_counts_the_pixels_a_move_leaves_without_recorded_content():
    cam = Camera.default()
    calib = dict(fx=cam.fx, fy=cam.fy, cx=cam.cx, cy=cam.cy, height_m=cam.height_m, pitch_rad=cam.pitch_rad)
    frame = np.full((cam.height, cam.width, 3), 128, np.uint8)
    view = ViewSynthesis(calib, (cam.height, cam.width))
    view(frame, 0.0, 0.0)
    assert view.no_source_share == 0.0
    view(frame, 0.0, math.radians(10))  # a 10 deg yaw of an 80 deg camera: about 1/8 of the columns
    assert 0.08 < view.no_source_share < 0.2
    view(frame, 0.5, 0.0)
    shifted = view.no_source_share
    assert 0.0 < shifted < 0.1  # a shift moves the near ground in from beside the frame
    top = ViewSynthesis(calib, (cam.height, cam.width), region=(0, int(cam.horizon_row) - 2, 0, cam.width))
    top(frame, 0.5, 0.0)
    assert top.no_source_share == 0.0  # above the horizon a shift changes nothing


def test_the_expert_keeps_to_the_recorded_path_without_interventions(log):
    result = replay_recording(log, PurePursuitExpert(), FPS)
    m = summarize(result.segments)
    assert m["km"] > 0.2 and m["interventions"] == 0 and m["lateral_rms_m"] < 0.1
    assert result.frames_shown == 0  # it needs no images: none are rendered


def test_constant_steering_fails_in_replay_about_as_often_as_in_the_world(log):
    """Same road, same car model, same rule: the counts agree within a factor of two."""
    replay = summarize(replay_recording(log, ConstantDriver(0.0), FPS).segments)
    world = evaluate(ConstantDriver(0.0), km=replay["km"], seed=SEED, fps=FPS, segment_km=1.0).metrics
    assert replay["interventions"] >= 5
    assert 0.5 < replay["interventions"] / world["interventions"] < 2.0
    assert replay["interventions_per_km_ci95"][0] < replay["interventions_per_km"]


def test_a_standing_car_and_a_time_gap_split_the_recording_into_segments():
    """Frames 0-39 driving, 40-59 standing, 60-99 driving, a 5 s gap, 100-139 driving."""
    n = 140
    t = np.arange(n) * 0.1
    t[100:] += 5.0
    speed = np.full(n, 8.0)
    speed[40:60] = 0.0
    log = {"frame": np.arange(n), "timestamp_s": t, "curvature": np.full(n, 0.01), "speed_mps": speed}
    rec = Recording(
        RecordingMeta(fps=10.0, width=16, height=8), log, ArrayFrames(np.zeros((n, 8, 16, 3), np.uint8))
    )
    paths = reference_paths(rec)
    assert [(int(p.frames[0]), int(p.frames[-1])) for p in paths] == [(0, 39), (60, 99), (100, 139)]
    assert all(p.speed_mps.min() >= MIN_SPEED_MPS for p in paths)
    # 39 steps of 0.8 m on a circle of radius 100 m: arc length and the end pose of the exact arc
    first = paths[0]
    assert first.length_m == pytest.approx(39 * 0.8)
    assert first.frame_pose[-1, 2] == pytest.approx(0.01 * 39 * 0.8)
    assert first.frame_pose[-1, 0] == pytest.approx(100 * math.sin(0.312), abs=1e-9)


def test_a_log_without_calibration_is_refused_naming_the_reader_option():
    n = 30
    log = {
        "frame": np.arange(n),
        "timestamp_s": np.arange(n) * 0.1,
        "curvature": np.zeros(n),
        "speed_mps": np.full(n, 8.0),
    }
    rec = Recording(
        RecordingMeta(fps=10.0, width=16, height=8),
        log,
        ArrayFrames(np.zeros((n, 8, 16, 3), np.uint8)),
        path=Path("my_drive"),
    )
    with pytest.raises(
        ValueError, match=r"my_drive: the log carries no camera calibration.*camera=approximate"
    ):
        replay_recording(rec, ConstantDriver(0.0), 10.0)
