"""The robustness report: every model x level measured and written; a blind model is perfectly stable."""
import csv

import numpy as np
import pytest
import torch

from drive.evaluate.robustness import RobustnessConfig, robustness_report, sensitivity_profile
from drive.nn import LTC, lane_keeping_ncp
from drive.nn.heads import NCPConvHead
from drive.nn.policy import Policy
from drive.policy_io import policy_meta, save_policy
from drive.preprocess import Preprocessing
from drive.recording import CameraCalibration, RecordingMeta, RecordingWriter


def _recording(path, n=40, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:78, 0:200]
    meta = RecordingMeta(fps=30.0, width=200, height=78, source="test",
                         camera=CameraCalibration(fx=100, fy=100, cx=100, cy=20))
    with RecordingWriter(path, meta) as w:
        for i in range(n):
            bar = (np.abs(xx - (60 + 2 * i)) < 8) * 120
            img = np.stack([xx * 0.6 + bar, yy * 2.0 + bar, 90 + 0 * xx], -1)
            img = np.clip(img + rng.normal(0, 3, img.shape), 0, 255).astype(np.uint8)
            w.append(img, timestamp_s=i / 30.0, curvature=0.01 * np.sin(i / 6), speed_mps=8.0)
    return path


def _save(path, policy, family):
    return save_policy(path, policy, policy_meta(policy, Preprocessing(), 30.0, family))


def _blind_policy():
    torch.manual_seed(0)
    policy = Policy(NCPConvHead(), None, frame_period_s=1 / 30)
    with torch.no_grad():
        for p in policy.head.parameters():
            p.zero_()
        policy.readout.linear.bias.fill_(3.0)
    return policy


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust")
    recs = [_recording(root / "recs" / "a"), _recording(root / "recs" / "b", seed=1)]
    torch.manual_seed(1)
    seeing = _save(root / "seeing.ckpt", Policy(NCPConvHead(), LTC(lane_keeping_ncp()), frame_period_s=1 / 30),
                   "ncp_ltc")
    blind = _save(root / "blind.ckpt", _blind_policy(), "blind")
    config = RobustnessConfig(noise_levels=(0.0, 0.2), other={"blur": (2.0,)}, seed=3, saliency_frames=8)
    out = robustness_report([seeing, blind], [root / "recs"], root / "report", config, workers=1)
    return root, out, recs, config, (seeing, blind)


def test_every_model_and_level_is_in_the_csv_and_report(study):
    root, out, *_ = study
    rows = list(csv.DictReader(open(out["csv"])))
    assert {(r["model"], r["kind"], float(r["level"])) for r in rows} == {
        (m, k, lvl) for m in ("seeing", "blind") for k, lvl in (("gaussian", 0.0), ("gaussian", 0.2), ("blur", 2.0))}
    report = out["report"].read_text()
    assert "| seeing |" in report and "| blind |" in report and "gaussian 0.2" in report and "blur 2" in report
    assert (root / "report" / "mse.png").stat().st_size > 1000


def test_a_model_that_ignores_its_input_has_ssim_one_and_constant_error(study):
    _, out, *_ = study
    blind = [r for r in out["rows"] if r["model"] == "blind"]
    assert all(r["ssim_mean"] == pytest.approx(1.0) for r in blind)
    assert len({round(r["mse"], 9) for r in blind}) == 1


def test_a_seeing_model_loses_saliency_similarity_under_noise(study):
    _, out, *_ = study
    seeing = {(r["kind"], r["level"]): r for r in out["rows"] if r["model"] == "seeing"}
    assert seeing[("gaussian", 0.0)]["ssim_mean"] == pytest.approx(1.0)
    assert seeing[("gaussian", 0.2)]["ssim_mean"] < 0.95
    assert seeing[("gaussian", 0.2)]["mse"] != seeing[("gaussian", 0.0)]["mse"]


def test_same_seed_gives_the_same_report(study):
    root, out, recs, config, models = study
    again = robustness_report(list(models), recs, root / "again", config, workers=1)
    assert again["csv"].read_text() == out["csv"].read_text()


def test_sensitivity_profile_covers_every_neuron_sorted(study):
    _, out, *_ = study
    rows = [r for r in out["rows"] if r["model"] == "seeing"]
    assert all(r["lipschitz_max"] > 0 for r in rows)
    policy = Policy(NCPConvHead(), LTC(lane_keeping_ncp()), frame_period_s=1 / 30)
    profile = sensitivity_profile(policy, np.random.default_rng(0).random((20, 32)).astype(np.float32))
    assert profile.shape == (19,) and np.all(np.diff(profile) <= 0) and profile[0] > 0


def test_sensitivity_profile_is_empty_without_memory():
    policy = _blind_policy()
    assert sensitivity_profile(policy, np.random.rand(10, 32).astype(np.float32)).size == 0
