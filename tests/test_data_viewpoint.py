"""Viewpoint synthesis against the built-in world's ground truth: images and corrected labels."""

import math

import numpy as np
import pytest
import torch

from drive.data.viewpoint import corrected_curvature, road_region_error, warp_frames, warp_grid
from drive.sim.appearance import sample_appearance
from drive.sim.camera import Camera
from drive.sim.driver import Observation
from drive.sim.expert import PurePursuitExpert
from drive.sim.render import render_view
from drive.sim.road import generate_road
from drive.train.profiles import profile_path

CAM = Camera.default()
CALIB = dict(fx=CAM.fx, fy=CAM.fy, cx=CAM.cx, cy=CAM.cy, height_m=CAM.height_m, pitch_rad=CAM.pitch_rad)
POSES = [(0.5, 0.0), (0.0, math.radians(5)), (0.5, math.radians(5)), (-0.5, -math.radians(5))]


@pytest.fixture(scope="module")
def world():
    return generate_road(3, 400.0), sample_appearance(3)


def _synth(src, shift, yaw):
    grid = warp_grid(CALIB, np.eye(3), (CAM.height, CAM.width), shift, yaw)
    x = torch.from_numpy(src).permute(2, 0, 1)[None].float()
    return warp_frames(x, grid)[0].permute(1, 2, 0).round().clamp(0, 255).byte().numpy()


@pytest.mark.parametrize("shift,yaw", POSES)
def test_synthesized_view_matches_rendered_view_on_the_road(world, shift, yaw):
    road, app = world
    src = render_view(road, app, 100.0)
    true = render_view(road, app, 100.0, shift, yaw)
    mask = np.zeros((CAM.height, CAM.width), bool)
    mask[int(math.ceil(CAM.horizon_row)) + 3 :, 10:-10] = True  # ground below the horizon, off the borders
    err = road_region_error(_synth(src, shift, yaw), true, mask)
    baseline = road_region_error(src, true, mask)
    print(
        f"shift {shift:+.1f} m yaw {math.degrees(yaw):+.0f} deg: mean |error| {err:.2f}/255 "
        f"(unwarped {baseline:.2f})"
    )
    assert err < 3.0 and err < 0.15 * baseline


def test_the_shipped_profile_fits_the_label_look_ahead_on_the_logs(tmp_path):
    """Profile `data`, parsed as `drive fit --config data` parses it, leaves the look-ahead to the fit
    on the training logs (drive.replay.lookahead_fit)."""
    from drive.data.datamodule import DriveDataModule
    from drive.train.launch import DriveCLI
    from drive.train.module import PolicyModule

    args = ["--config", str(profile_path("data")), "--seed_everything", "false", "--trainer.logger", "false"]
    args += ["--trainer.default_root_dir", str(tmp_path)]
    shipped = DriveCLI(PolicyModule, DriveDataModule, args=args, run=False).datamodule.augment
    assert shipped.lookahead_s == "fit" and shipped.viewpoint_p > 0


@pytest.mark.parametrize("lookahead", [(0.9, 6.0), (2.0, 5.0)], ids=["expert", "longest candidate"])
@pytest.mark.parametrize("shift,yaw", POSES)
def test_corrected_label_agrees_with_expert_at_the_shifted_pose(world, shift, yaw, lookahead):
    """At the recording expert's own look-ahead (0.9 s) and at the longest the fit chooses (2 s), the
    corrected label matches an expert with that look-ahead driving from the shifted pose."""
    road, _ = world
    expert = PurePursuitExpert(*lookahead)
    s, v = 100.0, 10.0

    def command(lat, psi):
        x, y, th = road.lane_pose(s, lat, psi)
        return expert.act(Observation(None, 0.1, v, 0.0, road, s, x, y, th, lat, psi))

    k0, k1 = command(0.0, 0.0), command(shift, yaw)
    kc = corrected_curvature(
        np.array([k0]),
        np.array([shift]),
        np.array([yaw]),
        np.array([v]),
        expert.lookahead_s,
        expert.min_lookahead_m,
    )[0]
    assert np.sign(kc - k0) == np.sign(k1 - k0)
    assert abs((kc - k0) - (k1 - k0)) < 0.1 * abs(k1 - k0)


def test_warp_of_cropped_resized_frames_uses_the_source_camera_geometry(world):
    """A 400x156 camera, cropped and resized to 78x200 like a cache: conjugating the homography with
    the crop/resize affine reproduces the preprocessed true view."""
    from drive.data.cache import source_to_model
    from drive.data.preprocess import Preprocessing

    road, app = world
    cam = Camera.default(width=400, height=156)
    calib = dict(fx=cam.fx, fy=cam.fy, cx=cam.cx, cy=cam.cy, height_m=cam.height_m, pitch_rad=cam.pitch_rad)
    pre = Preprocessing(size=(78, 200), crop=(30, 156, 0, 400))
    a, _ = source_to_model({"source_size": [156, 400], "preprocessing": pre.to_dict()})
    shift, yaw = 0.5, math.radians(5)
    cached = pre(render_view(road, app, 100.0, camera=cam)).float()
    true = pre(render_view(road, app, 100.0, shift, yaw, camera=cam))[0].permute(1, 2, 0).numpy()
    syn = warp_frames(cached, warp_grid(calib, a, (78, 200), shift, yaw))[0]
    syn = syn.permute(1, 2, 0).round().clamp(0, 255).byte().numpy()
    horizon = (cam.horizon_row - 30 + 0.5) * 78 / 126 - 0.5
    mask = np.zeros((78, 200), bool)
    mask[int(math.ceil(horizon)) + 3 :, 10:-10] = True
    err, baseline = (
        road_region_error(syn, true, mask),
        road_region_error(cached[0].permute(1, 2, 0).byte().numpy(), true, mask),
    )
    assert err < 3.0 and err < 0.15 * baseline


@pytest.mark.parametrize("forward,shift", [(1.0, 0.0), (4.0, 0.0), (2.0, 0.5)])
def test_a_camera_moved_forward_sees_what_the_world_shows_further_along(forward, shift):
    """Forward moves (log replay's frames are shot up to half a frame spacing from the car): the
    synthesized view against the view rendered that far along a straight marked road, compared
    blurred (the lane markings' places, not the asphalt grain) and against a warp without the move."""
    import cv2

    from drive.sim.road import uniform_road

    road, app = uniform_road(400.0), sample_appearance(3, "train", 0, {"markings": "marked"})
    src = render_view(road, app, 100.0)
    true = render_view(road, app, 100.0 + forward, shift, 0.0)

    def synth(forward_m: float) -> np.ndarray:
        grid = warp_grid(CALIB, np.eye(3), (CAM.height, CAM.width), shift, 0.0, forward_m=forward_m)
        x = torch.from_numpy(src).permute(2, 0, 1)[None].float()
        return warp_frames(x, grid)[0].permute(1, 2, 0).round().clamp(0, 255).byte().numpy()

    def blurred_error(image: np.ndarray) -> float:
        blur = lambda a: cv2.GaussianBlur(a, (0, 0), 2.0)  # noqa: E731
        return road_region_error(blur(image), blur(true), mask)

    mask = np.zeros((CAM.height, CAM.width), bool)
    mask[int(math.ceil(CAM.horizon_row)) + 3 : -8, 10:-10] = True
    moved, unmoved = blurred_error(synth(forward)), blurred_error(synth(0.0))
    assert moved < 0.55 * unmoved, (moved, unmoved)
