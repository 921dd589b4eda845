"""Gymnasium: the built-in world as `drive/LaneKeeping-v0` (Gymnasium's own checker, the same drive as
`evaluate`), and `drive evaluate --env` driving a trained policy in an environment drive did not
write (a toy lane-keeping env below, with its own action convention, info keys and image layout)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Optional

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from drive.cli import main

# --------------------------------------------------------------------------------------------------
# drive's own env


def test_lane_keeping_env_passes_gymnasiums_checker_and_reports_lane_errors():
    import drive.gym  # noqa: F401  registers the id

    env = gymnasium.make(
        "drive/LaneKeeping-v0",
        seed=2,
        conditions="winter,evening",
        fps=10,
        speed_kmh=40,
        episode_km=0.05,
        render_mode="rgb_array",
    )
    check_env(env.unwrapped, skip_render_check=False)
    obs, info = env.reset(seed=5)
    assert obs.dtype == np.uint8 and obs.shape == (78, 200, 3) and env.observation_space.contains(obs)
    assert env.action_space.shape == (1,) and env.action_space.high[0] == pytest.approx(0.05)
    assert info["conditions"]["season"] == "winter" and info["conditions"]["light"] == "evening"
    assert info["speed_mps"] == pytest.approx(40 / 3.6) and info["dt_s"] == pytest.approx(0.1)
    np.testing.assert_array_equal(env.render(), obs)
    # hard left on a road that does not turn that hard: lane errors grow, the safety driver takes over
    steps, flagged = 0, []
    while True:
        obs, reward, terminated, truncated, info = env.step(np.array([0.05], np.float32))
        steps += 1
        flagged.append(info["intervention"])
        if info["intervention"]:
            assert abs(info["lateral_offset_m"]) > 1.0 or abs(info["heading_error_rad"]) > math.pi / 10
            assert reward == -1.0
        assert not terminated
        if truncated:
            break
    assert info["distance_m"] >= 50.0 and steps == pytest.approx(50 / (40 / 3.6) / 0.1, abs=2)
    assert sum(flagged) >= 1 and info["interventions"] == sum(flagged)
    # terminate mode ends the episode at the first intervention instead
    env2 = gymnasium.make("drive/LaneKeeping-v0", fps=10, on_intervention="terminate")
    env2.reset(seed=0)
    for _ in range(500):
        _, _, terminated, truncated, info = env2.step(np.array([0.05], np.float32))
        if terminated:
            break
    assert terminated and info["intervention"]
    with pytest.raises(ValueError, match="finite curvature"):
        env2.step(np.array([np.nan], np.float32))
    with pytest.raises(ValueError, match="fps must be a positive number"):
        gymnasium.make("drive/LaneKeeping-v0", fps=0)


def test_module_colon_id_imports_drive_for_the_user_and_episodes_walk_the_roads():
    env = gymnasium.make(
        "drive.gym:drive/LaneKeeping-v0", fps=15, width=120, height=48, conditions="summer,winter"
    )
    obs, info = env.reset(seed=0)
    assert obs.shape == (48, 120, 3) and env.unwrapped.metadata["render_fps"] == 15
    seasons = [info["conditions"]["season"]]
    for expected_index in (1, 2):
        obs2, info = env.reset()
        assert info["road_index"] == expected_index
        seasons.append(info["conditions"]["season"])
    assert seasons == ["summer", "winter", "summer"]  # the condition grid cycles, as in evaluate()
    again, info = env.reset(options={"road_index": 0})
    np.testing.assert_array_equal(again, obs)  # road 0 again: the same first frame
    assert info["road_index"] == 0
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"road": 1})


def test_evaluate_through_the_gym_env_matches_the_built_in_closed_loop(tmp_path, capsys):
    common = ["--policy", "constant:0.01", "--km", "0.4", "--segment-km", "0.2", "--fps", "10", "--seed", "4"]
    assert main(["evaluate", *common, "--out", str(tmp_path / "world")]) == 0
    assert main(["evaluate", "--env", "drive/LaneKeeping-v0", *common, "--out", str(tmp_path / "gym")]) == 0
    world = json.loads((tmp_path / "world" / "metrics.json").read_text())
    gym = json.loads((tmp_path / "gym" / "metrics.json").read_text())
    assert gym["interventions"] == world["interventions"] > 5
    # the same roads, conditions and steps; the env's float32 action space rounds 0.01 (1e-10 relative)
    for key in ("km", "lateral_rms_m", "lateral_max_abs_m", "heading_rms_rad", "autonomy_pct", "time_s"):
        assert gym[key] == pytest.approx(world[key], rel=1e-6, abs=1e-9), key
    assert gym["per_condition"].keys() == world["per_condition"].keys()
    assert [s["interventions"] for s in gym["per_segment"]] == [
        s["interventions"] for s in world["per_segment"]
    ]


# --------------------------------------------------------------------------------------------------
# an environment drive did not write


class ToyLaneEnv(gymnasium.Env):
    """A lane on a winding road, written for this test in the style of third-party driving envs.

    action: Box(-1, 1, (2,)) = [steering, throttle]; steering is the normalized road-wheel angle
    (x 0.5 rad), POSITIVE = RIGHT; throttle is ignored (constant speed).
    observation: Dict(camera = uint8 BGR [48, 96, 3], speed = float32 [1]).
    info: lane.offset_cm (positive = RIGHT of the centre), lane.yaw_deg (positive = pointing
    right), kmh, odometer_m. The episode terminates off the road (|offset| > 2.5 m).
    """

    metadata = {"render_modes": [], "render_fps": 10}
    WHEELBASE, MAX_STEER, SPEED, DT = 2.5, 0.5, 10.0, 0.1
    H, W, HORIZON, F, CAM_H = 48, 96, 14, 70.0, 1.3

    def __init__(self, episode_m: float = 400.0):
        self.observation_space = spaces.Dict(
            {
                "camera": spaces.Box(0, 255, (self.H, self.W, 3), np.uint8),
                "speed": spaces.Box(0, 100, (1,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.episode_m = episode_m
        rows = np.arange(self.H)
        with np.errstate(divide="ignore"):
            self._dist = np.where(
                rows > self.HORIZON, self.F * self.CAM_H / np.maximum(rows - self.HORIZON, 1e-9), np.inf
            )

    def road_curvature(self, s: np.ndarray) -> np.ndarray:
        return 0.025 * np.sin(2 * np.pi * s / 180.0 + self.phase)

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None):
        super().reset(seed=seed)
        self.phase = float(self.np_random.uniform(0, 2 * np.pi))
        self.y, self.psi, self.s = 0.0, 0.0, 0.0
        return self._obs(), self._info()

    def lane_centre(self, d: np.ndarray) -> np.ndarray:
        """Lateral position (left +) of the lane centre at distance d ahead, in the car's frame."""
        k = self.road_curvature(self.s + d)
        return -self.y - self.psi * d + 0.5 * k * d**2

    def step(self, action):
        a = np.asarray(action, dtype=np.float64)
        assert self.action_space.contains(np.asarray(action, np.float32)), action
        delta = -a[0] * self.MAX_STEER  # positive action steers right
        kappa = math.tan(delta) / self.WHEELBASE
        for _ in range(4):  # integrate in 4 sub-steps
            h = self.DT / 4
            kr = float(self.road_curvature(np.array(self.s)))
            s_dot = self.SPEED * math.cos(self.psi) / (1.0 - self.y * kr)
            self.y += self.SPEED * math.sin(self.psi) * h
            self.psi += (self.SPEED * kappa - kr * s_dot) * h
            self.s += s_dot * h
        terminated = abs(self.y) > 2.5
        truncated = self.s >= self.episode_m
        return self._obs(), 1.0, terminated, truncated, self._info()

    def _info(self):
        return {
            "lane": {"offset_cm": -self.y * 100.0, "yaw_deg": -math.degrees(self.psi)},
            "kmh": self.SPEED * 3.6,
            "odometer_m": self.s,
        }

    def _obs(self):
        img = np.empty((self.H, self.W, 3), np.uint8)
        img[:] = (200, 150, 90)  # sky (BGR)
        cols = np.arange(self.W)[None, :]
        ground = self._dist < np.inf
        d = self._dist[ground][:, None]
        centre = self.W / 2 - self.F * self.lane_centre(d) / d  # image column of the lane centre
        half = self.F * 1.75 / d
        line = self.F * 0.15 / d + 0.6
        g = np.broadcast_to(np.array([40, 140, 40], np.uint8), (d.shape[0], self.W, 3)).copy()  # grass
        road = np.abs(cols - centre) < half
        g[road] = (90, 90, 90)
        g[np.abs(cols - (centre - half)) < line] = (0, 220, 255)  # yellow left line (BGR)
        g[np.abs(cols - (centre + half)) < line] = (255, 255, 255)
        img[ground] = g
        return {"camera": img, "speed": np.array([self.SPEED], np.float32)}


TOY_ID = "toy/Lane-v0"
TOY_YAML = """\
dt_s: 0.1
observation: {key: camera, order: bgr}
action:
  type: wheel_angle
  wheelbase_m: 2.5
  max: 0.5
  sign: -1
  index: 0
  fill: [0.0, 0.4]
info:
  lateral_offset_m: {key: lane.offset_cm, scale: -0.01}
  heading_error_rad: {key: lane.yaw_deg, scale: -0.017453292519943295}
  speed_mps: {key: kmh, scale: 0.2777777777777778}
  distance_m: odometer_m
"""


def _register_toy():
    if TOY_ID not in gymnasium.registry:
        gymnasium.register(id=TOY_ID, entry_point=ToyLaneEnv)


def _record_toy_drives(root: Path, drives: int, seconds: float):
    """Expert drives in the toy env with DART-style steering noise; labels = the expert's command."""
    from drive.io.recording import RecordingMeta, RecordingWriter

    env = ToyLaneEnv(episode_m=1e9)
    for k in range(drives):
        rng = np.random.default_rng(100 + k)
        obs, _ = env.reset(seed=100 + k)
        meta = RecordingMeta(fps=10.0, width=env.W, height=env.H, source="toy")
        noise = 0.0
        with RecordingWriter(root / f"drive{k}", meta) as w:
            for i in range(int(seconds * 10)):
                lookahead = 8.0
                target = float(env.lane_centre(np.array(lookahead)))
                label = 2.0 * target / lookahead**2  # pure pursuit curvature (1/m)
                w.append(
                    obs["camera"][:, :, ::-1].copy(), timestamp_s=i * 0.1, curvature=label, speed_mps=10.0
                )
                noise = 0.9 * noise + rng.normal(0, 0.006)
                executed = label + noise
                action = np.array([-math.atan(executed * env.WHEELBASE) / env.MAX_STEER, 0.4], np.float32)
                obs, _, terminated, _, _ = env.step(np.clip(action, -1, 1))
                assert not terminated


@pytest.mark.slow
def test_a_trained_policy_drives_an_env_drive_did_not_write(tmp_path, capsys):
    import lightning.pytorch as pl
    import torch

    from drive.data.datamodule import DriveDataModule
    from drive.train.module import PolicyModule

    _register_toy()
    check_env(ToyLaneEnv())  # the toy is a proper Gymnasium env too
    _record_toy_drives(tmp_path / "logs", drives=3, seconds=50)
    pl.seed_everything(0)
    torch.set_num_threads(1)
    dm = DriveDataModule(
        train=[str(tmp_path / "logs")],
        val=[],
        image_size=[40, 100],
        seq_len=16,
        stride=4,
        batch_size=8,
        eval_batch_size=8,
        num_workers=0,
        cache_dir=str(tmp_path / "cache"),
        curve_factor=0.0,
    )
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100), lr=5e-3, lr_schedule="constant")
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_steps=200,
        gradient_clip_val=10.0,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=dm)
    ckpt = tmp_path / "toy.ckpt"
    trainer.save_checkpoint(ckpt)
    config = tmp_path / "toy.yaml"
    config.write_text(TOY_YAML)
    # and the exported file a car would run (TorchScript, preprocessing and safety inside)
    exported = tmp_path / "toy.ts"
    assert main(["export", "--ckpt", str(ckpt), "--out", str(exported), "--frame-size", "48x96"]) == 0
    results = {}
    for name, policy in (("learned", str(ckpt)), ("exported", str(exported)), ("constant", "constant:0")):
        out = tmp_path / name
        assert main(
            [
                "evaluate",
                "--env",
                TOY_ID,
                "--env-config",
                str(config),
                "--policy",
                policy,
                "--km",
                "0.8",
                "--seed",
                "7",
                "--out",
                str(out),
            ]
        ) in (0, 1)
        results[name] = json.loads((out / "metrics.json").read_text())
    learned, constant = results["learned"], results["constant"]
    print(
        {k: (learned[k], constant[k]) for k in ("interventions_per_km", "lateral_rms_m", "steering_rate_rms")}
    )
    assert learned["km"] == pytest.approx(0.8, abs=0.002) and learned["env"] == TOY_ID
    assert learned["criteria"]["intervention"] == "drive's limits"
    assert constant["interventions_per_km"] >= 5
    assert learned["interventions_per_km"] <= 0.25 * constant["interventions_per_km"]
    # no takeover where constant steering needs 58; the lane is held to 0.30 m RMS after 200 steps
    assert learned["lateral_rms_m"] < 0.65 * constant["lateral_rms_m"]
    exp = results["exported"]
    assert exp["interventions_per_km"] <= 0.25 * constant["interventions_per_km"]
    assert exp["lateral_rms_m"] == pytest.approx(learned["lateral_rms_m"], rel=0.05)


def test_env_mapping_errors_are_one_line_and_name_the_yaml(tmp_path, capsys):
    _register_toy()
    base = [
        "evaluate",
        "--env",
        TOY_ID,
        "--policy",
        "constant:0",
        "--km",
        "0.05",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(base) == 2
    assert "give --env-config YAML" in capsys.readouterr().err
    cases = {
        "info:\n  lateral_offset_m: lane.offset_cm\n": "info.heading_error_rad is required",
        TOY_YAML.replace(
            "lane.offset_cm", "lane.offset_m"
        ): "the env's info has no 'lane.offset_m' (at 'offset_m'; keys: ['offset_cm', 'yaw_deg'])",
        TOY_YAML.replace(
            "fill: [0.0, 0.4]", "fill: [0.0]"
        ): "action.fill has 1 values, the env's action has 2",
        TOY_YAML.replace(
            "type: wheel_angle", "type: angle"
        ): "action.type must be curvature, wheel_angle or yaw_rate",
        TOY_YAML.replace("key: camera", "key: cam"): "observation has no key 'cam'",
        TOY_YAML + "throttle: 1\n": "unknown key(s) ['throttle']",
        "a: [": "not valid YAML",
    }
    for i, (text, expect) in enumerate(cases.items()):
        config = tmp_path / f"bad{i}.yaml"
        config.write_text(text)
        assert main([*base, "--env-config", str(config)]) == 2, text
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("drive evaluate: error: ") and expect in err, err
        assert str(config) in err or "YAML" in err
    assert (
        main(
            [
                "evaluate",
                "--env",
                TOY_ID,
                "--env-config",
                str(tmp_path / "bad0.yaml"),
                "--policy",
                "expert",
                "--km",
                "0.1",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    assert "needs the built-in world's road" in capsys.readouterr().err
    (tmp_path / "t.yaml").write_text(TOY_YAML)
    for extra, expect in (
        (["--fps", "20"], "--fps set(s) up drive's own world"),
        (["--video"], "--video is not available with --env"),
    ):
        assert main([*base, "--env-config", str(tmp_path / "t.yaml"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expect in err, err
    assert (
        main(
            [
                "evaluate",
                "--env",
                "nope/Nothing-v0",
                "--env-config",
                str(tmp_path / "t.yaml"),
                "--policy",
                "constant:0",
                "--km",
                "0.1",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--env nope/Nothing-v0:" in err


def test_action_and_observation_conventions_of_the_mapping():
    from drive.sim.gym_mapping import ActionMap, EnvMapping, observation_frame

    box = spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 1.0], np.float32))
    k = 0.02
    a = ActionMap(type="yaw_rate", index=0, fill=[0.0, 0.7]).action(k, 10.0, box)
    np.testing.assert_allclose(a, [0.2, 0.7], rtol=1e-6)  # yaw rate = kappa x speed
    assert a.dtype == np.float32
    a = ActionMap(type="wheel_angle", wheelbase_m=2.5, max=0.5, sign=-1, fill=[0.0, 0.3]).action(k, 10.0, box)
    np.testing.assert_allclose(a, [-math.atan(k * 2.5) / 0.5, 0.3], rtol=1e-6)
    a = ActionMap(type="curvature", max=0.01).action(k, 10.0, spaces.Box(-1, 1, (1,), np.float32))
    np.testing.assert_allclose(a, [1.0])  # 2.0 clipped to the Box
    with pytest.raises(ValueError, match="wheelbase_m"):
        ActionMap(type="wheel_angle")
    m = EnvMapping.from_dict(
        {"info": {"lateral_offset_m": "y", "heading_error_rad": "h"}, "observation": {"layout": "chw"}}
    )
    chw = np.zeros((3, 4, 5), np.float32)
    chw[0] = 1.0  # red, float in [0, 1]
    out = observation_frame(chw, m)
    assert out.shape == (4, 5, 3) and out.dtype == np.uint8 and tuple(out[0, 0]) == (255, 0, 0)
    hwc = EnvMapping.from_dict({"info": {"lateral_offset_m": "y", "heading_error_rad": "h"}})
    gray = np.full((4, 5), 77, np.uint8)
    assert tuple(observation_frame(gray, hwc)[1, 1]) == (77, 77, 77)
    stack = np.zeros((4, 5, 3, 3), np.float32)
    stack[..., -1] = 0.5  # MetaDrive-style frame stack: the newest frame is the last
    assert tuple(observation_frame(stack, hwc)[0, 0]) == (128, 128, 128)
