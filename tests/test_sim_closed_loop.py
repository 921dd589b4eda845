"""Closed-loop evaluation: expert, baselines, interventions, metrics, hooks, CLI."""

import argparse
import json
import math

import numpy as np
import pytest
import torch

from drive.cli import evaluate as evaluate_cli
from drive.cli import main
from drive.policy_drivers import make_driver
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver
from drive.sim.expert import PurePursuitExpert


def test_expert_drives_5_km_of_test_roads_without_interventions():
    result = evaluate(PurePursuitExpert(), km=5.0, seed=0, split="test")
    m = result.metrics
    assert m["km"] == pytest.approx(5.0, abs=0.01)
    assert m["interventions"] == 0 and m["autonomy_pct"] == 100.0
    assert m["lateral_max_abs_m"] < 0.3 and m["lateral_rms_m"] < 0.08
    assert m["time_s"] == pytest.approx(5000 / (30 / 3.6), rel=0.01)  # 30 km/h
    json.dumps(m)  # JSON-able


def test_constant_curvature_policy_racks_up_interventions():
    m = evaluate(ConstantDriver(0.0), km=1.0, seed=0).metrics
    assert m["interventions_per_km"] >= 10
    assert m["autonomy_pct"] < 50.0
    assert m["lateral_max_abs_m"] <= 1.3  # the safety driver takes over just past 1 m
    m_left = evaluate(ConstantDriver(0.05), km=0.3, seed=0).metrics
    assert m_left["interventions"] >= 10


class _CountingDriver:
    """Steers straight, records resets and the images it sees."""

    def __init__(self):
        self.resets, self.images = 0, []

    def reset(self):
        self.resets += 1

    def act(self, obs):
        self.images.append(obs.image)
        return 0.0


def test_each_intervention_resets_the_driver_and_recentres_the_car():
    driver = _CountingDriver()
    driver.needs_image = False
    result = evaluate(driver, km=0.4, seed=1, segment_km=0.2)
    n = result.metrics["interventions"]
    assert n > 0
    assert driver.resets == n + 2  # one per segment start, one per takeover
    for seg in result.segments:
        for step in seg.reset_steps:  # right after a takeover the car is back near the centre
            if step < len(seg.lateral_offset_m):
                assert abs(seg.lateral_offset_m[step]) < 0.1


def test_perturbation_is_applied_to_every_frame_the_driver_sees():
    calls = []

    def perturb(image):
        calls.append(1)
        return np.zeros_like(image)

    driver = _CountingDriver()
    evaluate(driver, km=0.05, seed=0, perturb=perturb)
    assert len(calls) == len(driver.images) > 100
    assert all(img is not None and img.shape == (78, 200, 3) and img.max() == 0 for img in driver.images)


def test_drivers_that_need_no_images_get_none():
    seen = []

    class Blind(PurePursuitExpert):
        def act(self, obs):
            seen.append(obs.image)
            return super().act(obs)

    evaluate(Blind(), km=0.05, seed=0)
    assert seen and all(img is None for img in seen)


def test_metrics_per_condition_and_outputs(tmp_path):
    result = evaluate(
        PurePursuitExpert(),
        km=0.2,
        seed=2,
        conditions=["summer", "winter"],
        segment_km=0.1,
        video_path=tmp_path / "drive.mp4",
    )
    per = result.metrics["per_condition"]
    assert per["summer"]["km"] == pytest.approx(0.1, abs=0.01) and per["winter"]["km"] == pytest.approx(
        0.1, abs=0.01
    )
    paths = result.save(tmp_path)
    assert json.loads(paths["metrics"].read_text())["interventions"] == 0
    assert paths["plot"].stat().st_size > 10_000
    assert (tmp_path / "drive.mp4").stat().st_size > 10_000


def test_bad_arguments_give_clear_errors():
    with pytest.raises(ValueError, match="positive"):
        evaluate(PurePursuitExpert(), km=0.0, seed=0)
    with pytest.raises(ValueError, match="unknown condition"):
        evaluate(PurePursuitExpert(), km=0.1, seed=0, conditions=["spring"])
    with pytest.raises(ValueError, match="non-finite"):
        evaluate(_NaNDriver(), km=0.1, seed=0)


class _NaNDriver:
    needs_image = False

    def reset(self):
        pass

    def act(self, obs):
        return math.nan


def test_evaluate_cli_runs_expert_and_reports_bad_policy(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    evaluate_cli.add_arguments(parser)
    args = parser.parse_args(["--policy", "expert", "--km", "0.2", "--out", str(tmp_path / "ev")])
    assert evaluate_cli.run(args) == 0
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["policy"] == "expert"
    for bad in (
        ["--policy", "missing.ckpt"],
        ["--policy", "constant:abc"],
        ["--policy", "expert", "--km", "-1"],
    ):  # errors of input are answered by the dispatcher, for every command alike
        assert main(["evaluate", *bad, "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "missing.ckpt" in err and "constant:K" in err and "--km must be in (0, " in err


def test_evaluate_drives_a_saved_policy_checkpoint(tmp_path):
    from drive.checkpoint import policy_meta, save_policy
    from drive.data.preprocess import Preprocessing
    from drive.nn.heads import NCPConvHead
    from drive.nn.policy import Policy

    policy = Policy(NCPConvHead())
    path = save_policy(
        tmp_path / "p.pt", policy, policy_meta(policy, Preprocessing(size=(78, 200)), 30.0, "cnn")
    )
    driver = make_driver(str(path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-1 steps: extra threads only fight over the shared cores
    try:
        result = evaluate(driver, km=0.03, seed=0)
    finally:
        torch.set_num_threads(threads)
    assert result.metrics["km"] == pytest.approx(0.03, abs=0.005)
    assert np.isfinite(result.segments[0].curvature_cmd_per_m).all()


def test_metrics_follow_their_formulas_on_hand_made_segments():
    from drive.sim.closed_loop import Segment, summarize
    from drive.sim.road import generate_road

    def seg(lat, cmd, interventions, resets, km, time_s):
        z = np.zeros(len(lat))
        return Segment(
            0,
            {},
            generate_road(0, length_m=50.0),
            z,
            z,
            np.asarray(lat, float),
            np.asarray(lat, float) / 10,
            np.asarray(cmd, float),
            [[0.0, 0.0]] * interventions,
            km,
            time_s,
            0.1,
            resets,
        )

    a = seg(
        [0.0, 0.3, -0.4], [0.0, 0.01, 0.03], 1, [2], 0.5, 60.0
    )  # the takeover at step 2: its rate is left out
    b = seg([1.2], [0.02], 0, [], 0.25, 30.0)
    m = summarize([a, b])
    assert m["interventions"] == 1 and m["km"] == 0.75 and m["time_s"] == 90.0
    assert m["interventions_per_km"] == pytest.approx(1 / 0.75)
    assert m["autonomy_pct"] == pytest.approx((1 - 6.0 / 90.0) * 100)
    assert m["lateral_mean_abs_m"] == pytest.approx(1.9 / 4)
    assert m["lateral_rms_m"] == pytest.approx(math.sqrt((0.09 + 0.16 + 1.44) / 4))
    assert m["lateral_max_abs_m"] == pytest.approx(1.2)
    assert m["heading_rms_rad"] == pytest.approx(math.sqrt((0.09 + 0.16 + 1.44) / 4) / 10)
    assert m["steering_rate_rms"] == pytest.approx(0.1)  # only (0.01 - 0) / 0.1 s
    assert summarize([seg([0.0], [0.0], 20, [], 0.1, 60.0)])["autonomy_pct"] == 0.0  # floored
