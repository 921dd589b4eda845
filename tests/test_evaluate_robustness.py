"""The robustness report: every model x level measured and written; a blind model is perfectly stable."""

import csv
import json
import re
import shutil
import types

import numpy as np
import pytest
import torch

from drive.checkpoint import load_policy, policy_meta, save_policy
from drive.cli import main as drive_main
from drive.data.perturb import KINDS, Perturbation
from drive.data.preprocess import Preprocessing
from drive.evaluate.report import COLUMNS, LEVEL_AXIS
from drive.evaluate.robustness import RobustnessConfig, evaluate_model, robustness_report, sensitivity_profile
from drive.io.recording import CameraCalibration, Recording, RecordingMeta, RecordingWriter
from drive.nn import LSTM, LTC, lane_keeping_ncp
from drive.nn.heads import NCPConvHead
from drive.nn.policy import Policy
from drive.policy_drivers import PolicyDriver

FPS = 30.0


def _recording(path, n=40, seed=0):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:78, 0:200]
    meta = RecordingMeta(
        fps=FPS, width=200, height=78, source="test", camera=CameraCalibration(fx=100, fy=100, cx=100, cy=20)
    )
    with RecordingWriter(path, meta) as w:
        for i in range(n):
            bar = (np.abs(xx - (60 + 2 * i)) < 8) * 120
            img = np.stack([xx * 0.6 + bar, yy * 2.0 + bar, 90 + 0 * xx], -1)
            img = np.clip(img + rng.normal(0, 3, img.shape), 0, 255).astype(np.uint8)
            w.append(img, timestamp_s=i / FPS, curvature=0.01 * np.sin(i / 6), speed_mps=8.0)
    return path


def _save(path, policy, family):
    return save_policy(path, policy, policy_meta(policy, Preprocessing(), FPS, family))


def _seeing_policy():
    """An untrained LTC made to react to what it sees: a stronger input mapping, and steering scaled
    to the labels' range (tens of 1/km), so noise moves its errors well above rounding."""
    torch.manual_seed(1)
    policy = Policy(NCPConvHead(), LTC(lane_keeping_ncp()), frame_period_s=1 / FPS)
    with torch.no_grad():
        policy.rnn.input_w.mul_(10.0)
        policy.readout.scale_km.fill_(100.0)
    return policy


def _blind_policy():
    torch.manual_seed(0)
    policy = Policy(NCPConvHead(), None, frame_period_s=1 / FPS)
    with torch.no_grad():
        for p in policy.head.parameters():
            p.zero_()
        policy.readout.linear.bias.fill_(3.0)
    return policy


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust")
    recs = [_recording(root / "recs" / "a"), _recording(root / "recs" / "b", seed=1)]
    seeing = _save(root / "seeing.ckpt", _seeing_policy(), "ncp_ltc")
    blind = _save(root / "blind.ckpt", _blind_policy(), "blind")
    config = RobustnessConfig(noise_levels=(0.0, 0.2), other={"blur": (2.0,)}, seed=3, saliency_frames=8)
    out = robustness_report([seeing, blind], [root / "recs"], root / "report", config, workers=1)
    return root, out, recs, config, (seeing, blind)


def _rows(out, model):
    return {(r["kind"], r["level"]): r for r in out["rows"] if r["model"] == model}


def _profiles(report_dir):
    return {
        res["name"]: res["profile"]
        for res in json.loads((report_dir / "results.json").read_text())["results"]
    }


def test_every_model_and_level_is_in_the_csv_and_report(study):
    root, out, *_ = study
    rows = list(csv.DictReader(open(out["csv"])))
    assert {(r["model"], r["kind"], float(r["level"])) for r in rows} == {
        (m, k, lvl)
        for m in ("seeing", "blind")
        for k, lvl in (("gaussian", 0.0), ("gaussian", 0.2), ("blur", 2.0))
    }
    report = out["report"].read_text()
    assert (
        "| seeing |" in report and "| blind |" in report and "gaussian 0.2" in report and "blur 2" in report
    )
    assert (root / "report" / "mse.png").stat().st_size > 1000


def test_a_model_that_ignores_its_input_has_ssim_one_and_constant_error(study):
    _, out, *_ = study
    blind = [r for r in out["rows"] if r["model"] == "blind"]
    assert all(r["ssim_mean"] == pytest.approx(1.0) for r in blind)
    assert len({round(r["mse"], 9) for r in blind}) == 1


def test_a_seeing_model_loses_saliency_similarity_under_noise(study):
    _, out, *_ = study
    seeing = _rows(out, "seeing")
    assert seeing[("gaussian", 0.0)]["ssim_mean"] == pytest.approx(1.0)
    assert seeing[("gaussian", 0.2)]["ssim_mean"] < 0.95


def _driver_mse(ckpt, recordings, level, seed):
    """The open-loop MSE as the car's driver would see it: PolicyDriver steps frame by frame, noise on
    its view, the state and the noise sequence restarting with each recording."""
    policy, meta = load_policy(ckpt)
    errors = []
    for path in recordings:
        rec = Recording.open(path)
        driver = PolicyDriver(policy, meta, perturb=Perturbation("gaussian", level, seed=seed))
        for i in range(len(rec)):
            command = driver.act(types.SimpleNamespace(image=rec.frame(i), dt_s=1 / FPS))
            errors.append(1000.0 * (command - rec.curvature[i]))
    return float(np.mean(np.square(errors)))


def test_open_loop_mse_under_noise_is_what_the_cars_driver_would_score(study, one_thread):
    _, out, recs, config, (seeing, _) = study
    noisy, clean = _driver_mse(seeing, recs, 0.2, config.seed), _driver_mse(seeing, recs, 0.0, config.seed)
    assert abs(noisy - clean) > 1e-4 * clean  # the noise matters far beyond the tolerance below
    rows = _rows(out, "seeing")
    assert rows[("gaussian", 0.2)]["mse"] == pytest.approx(noisy, rel=1e-6)
    assert rows[("gaussian", 0.0)]["mse"] == pytest.approx(clean, rel=1e-6)


def test_same_seed_gives_the_same_report(study):
    root, out, recs, config, models = study
    again = robustness_report(list(models), recs, root / "again", config, workers=1)
    assert again["csv"].read_text() == out["csv"].read_text()


def test_the_clean_profile_is_reported_even_without_a_zero_noise_level(study, tmp_path):
    root, out, recs, config, (seeing, _) = study
    noisy_only = RobustnessConfig(noise_levels=(0.2,), other={}, seed=config.seed, saliency_frames=2)
    robustness_report([seeing], recs, tmp_path, noisy_only, workers=1)
    profile = _profiles(tmp_path)["seeing"]
    assert len(profile) == 19 and profile == _profiles(root / "report")["seeing"]
    assert max(profile) == pytest.approx(_rows(out, "seeing")[("gaussian", 0.0)]["lipschitz_max"])
    assert "![sensitivity](sensitivity_profile.png)" in (tmp_path / "REPORT.md").read_text()


def test_a_reused_folder_shows_only_what_this_run_produced(study, tmp_path):
    root, _, recs, config, (_, blind) = study
    folder = tmp_path / "report"
    shutil.copytree(root / "report", folder)
    (folder / "models").mkdir()  # not a report output (the demo keeps its checkpoint links here)
    robustness_report(
        [blind], recs, folder, RobustnessConfig(noise_levels=(0.0,), other={}, saliency_frames=2), workers=1
    )
    assert sorted(p.name for p in folder.glob("*.png")) == ["mae.png", "mse.png", "ssim_mean.png"]
    report = (folder / "REPORT.md").read_text()
    assert "sensitivity_profile.png" not in report and "lipschitz" not in report
    assert "- blind: no profile, the policy has no recurrent state (feed-forward)." in report
    assert (folder / "models").is_dir()


def test_another_perturbation_measured_at_several_levels_gets_its_own_curves(study, tmp_path):
    """Blur at three levels and no Gaussian level: one curve per metric over blur sigma, linked in
    the report; a later run in the same folder without them removes those plots."""
    root, _, recs, config, (seeing, _) = study
    assert set(LEVEL_AXIS) == set(KINDS) - {"gaussian"}  # every kind has an axis label
    blur = RobustnessConfig(
        noise_levels=(),
        other={"blur": (0.5, 2.0, 4.0), "occlusion": (0.1,)},
        seed=config.seed,
        saliency_frames=2,
    )
    out = robustness_report([seeing], recs, tmp_path, blur, workers=1)
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert names == [
        "lipschitz_max_blur.png",
        "mae_blur.png",
        "mse_blur.png",
        "sensitivity_profile.png",
        "ssim_mean_blur.png",
    ]
    assert all(p.stat().st_size > 1000 for p in tmp_path.glob("*.png"))
    report = (tmp_path / "REPORT.md").read_text()
    assert "![mse, blur](mse_blur.png)" in report and "](mse.png)" not in report
    assert "| gaussian" not in report and "blur 4" in report and "occlusion 0.1" in report
    mse = {r["level"]: r["mse"] for r in out["rows"] if r["kind"] == "blur"}
    assert len(set(mse.values())) == 3  # three different points on the curve
    robustness_report(
        [seeing],
        recs,
        tmp_path,
        RobustnessConfig(noise_levels=(0.0,), other={}, saliency_frames=2),
        workers=1,
    )
    assert not list(tmp_path.glob("*_blur.png")) and (tmp_path / "mse.png").exists()


def test_evaluating_in_process_leaves_the_callers_thread_count_alone(study):
    _, _, recs, _, (_, blind) = study
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        evaluate_model(
            blind, recs, RobustnessConfig(noise_levels=(0.0,), other={}, saliency_frames=2), log=False
        )
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _reference_profile(policy, features, units):
    """max over steps of |h(t+1) - h(t)| / ||x(t+1) - x(t)|| per neuron, written out: one frame period per
    step, h = the first ``units`` entries of the hidden state."""
    hidden, states = policy.initial_state(1), []
    with torch.no_grad():
        for x in torch.from_numpy(features):
            _, hidden = policy.rnn.step(x[None], hidden, torch.ones(1))
            states.append(hidden[0, :units])
    h, x = torch.stack(states), torch.from_numpy(features)
    ratio = (h[1:] - h[:-1]).abs() / (x[1:] - x[:-1]).norm(dim=1, keepdim=True)
    return np.sort(ratio.amax(dim=0).numpy())[::-1]


def test_sensitivity_profile_covers_every_neuron_sorted(study):
    _, out, *_ = study
    assert all(r["lipschitz_max"] > 0 for r in _rows(out, "seeing").values())
    policy = Policy(NCPConvHead(), LTC(lane_keeping_ncp()), frame_period_s=1 / FPS)
    features = np.random.default_rng(0).random((20, 32)).astype(np.float32)
    profile = sensitivity_profile(policy, features)
    assert profile.shape == (19,) and np.all(np.diff(profile) <= 0) and profile[0] > 0
    np.testing.assert_allclose(profile, _reference_profile(policy, features, 19), rtol=1e-5)


def test_lstm_profile_counts_the_output_state_h_not_the_cell_state_c():
    torch.manual_seed(0)
    policy = Policy(NCPConvHead(), LSTM(32, units=8), frame_period_s=1 / FPS)
    features = np.random.default_rng(1).random((20, 32)).astype(np.float32)
    profile = sensitivity_profile(policy, features)
    assert policy.state_size == 16 and profile.shape == (8,)
    np.testing.assert_allclose(profile, _reference_profile(policy, features, 8), rtol=1e-5)


def test_sensitivity_profile_restarts_at_a_time_gap_and_skips_the_step_across_it():
    """The same drive twice, 1 s apart: with the state reset at the gap and the jump across it
    skipped, the second half repeats the first exactly, so the profile is that of one half."""
    policy = Policy(NCPConvHead(), LTC(lane_keeping_ncp()), frame_period_s=1 / FPS)
    half = np.random.default_rng(2).random((15, 32)).astype(np.float32)
    t = np.arange(15) / FPS
    profile = sensitivity_profile(policy, np.concatenate([half, half]), np.concatenate([t, t + t[-1] + 1.0]))
    np.testing.assert_allclose(profile, sensitivity_profile(policy, half, t), rtol=1e-6)


def test_sensitivity_profile_is_empty_without_memory():
    policy = _blind_policy()
    assert sensitivity_profile(policy, np.random.rand(10, 32).astype(np.float32)).size == 0


def _cli(ckpts, recordings, out, *extra):
    return drive_main(
        ["robustness", "--ckpt", *map(str, ckpts), "--recordings", str(recordings), "--out", str(out), *extra]
    )


@pytest.mark.slow
def test_cli_parallel_closed_loop_run_in_variance_units_equals_a_one_worker_run(study, tmp_path):
    """Two worker processes give the CSV of one, byte for byte, on the same machine: every process
    measures with one torch thread, so the kernels and their summation order are the same."""
    root, out, _, config, models = study
    args = [
        "--noise",
        "0",
        "0.04",
        "--variance",
        "--other",
        "blur=2",
        "--closed-loop",
        "--km",
        "0.02",
        "--saliency-frames",
        "8",
        "--seed",
        str(config.seed),
    ]
    assert _cli(models, root / "recs", tmp_path / "two", *args, "--workers", "2") == 0
    assert _cli(models, root / "recs", tmp_path / "one", *args, "--workers", "1") == 0
    text = (tmp_path / "two" / "results.csv").read_text()
    assert text == (tmp_path / "one" / "results.csv").read_text()
    rows = list(csv.DictReader(text.splitlines()))
    assert list(rows[0]) == COLUMNS
    assert [(r["model"], r["kind"], float(r["level"])) for r in rows] == [
        (m, k, lvl)
        for m in ("seeing", "blind")
        for k, lvl in (("gaussian", 0.0), ("gaussian", 0.04), ("blur", 2.0))
    ]
    assert all(float(r["lateral_rms_m"]) > 0 and float(r["interventions_per_km"]) >= 0 for r in rows)
    # variance 0.04 is sigma 0.2: the same noise as the study's std 0.2 at the same seed
    variance_row = next(r for r in rows if r["model"] == "seeing" and float(r["level"]) == 0.04)
    assert float(variance_row["mse"]) == pytest.approx(
        _rows(out, "seeing")[("gaussian", 0.2)]["mse"], rel=1e-12
    )
    assert "Gaussian levels are the noise variance sigma^2" in (tmp_path / "two" / "REPORT.md").read_text()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--other", "fog=0.1"], "--other 'fog=0.1': expected KIND=L1,L2"),
        (["--other", "blur"], "--other 'blur': expected KIND=L1,L2"),
        (["--other", "blur=1,x"], "--other 'blur=1,x': levels must be numbers"),
        (["--other", "salt_pepper=2"], "--other 'salt_pepper=2': salt_pepper level is a fraction"),
        (["--other", "blur=1", "blur=2"], "--other 'blur=2': blur is given twice"),
        (["--noise", "0", "-0.1"], r"--noise must be in \[0, 1\], got -0.1"),
        (["--km", "0.5"], "--km applies to the closed loop only"),
        (["--closed-loop", "--km", "0"], r"--km must be in \(0, 10000\], got 0"),
        (["--workers", "0"], r"--workers must be in \[1, 1024\], got 0"),
    ],
    ids=[
        "unknown-kind",
        "no-levels",
        "not-a-number",
        "out-of-range",
        "twice",
        "negative-noise",
        "km-alone",
        "zero-km",
        "zero-workers",
    ],
)
def test_cli_bad_arguments_are_named_before_anything_runs(study, tmp_path, extra, message, capsys):
    root, *_, models = study
    assert _cli(models, root / "recs", tmp_path / "out", *extra) == 2  # one line on stderr, exit 2
    assert re.match(f"^drive robustness: error: {message}", capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_closed_loop_rates_carry_their_interval_and_short_drives_are_called_out(tmp_path):
    """5 interventions in 0.3 km reads 16.67/km with its exact interval 5.41-38.89; a noise level with
    4 in 0.3 km cannot be told apart from it, one with 40 can."""
    from drive.evaluate.report import write_report

    def row(level, n):
        return {
            "model": "m",
            "family": "ncp_ltc",
            "kind": "gaussian",
            "level": level,
            "mse": 1.0,
            "interventions": n,
            "closed_loop_km": 0.3,
            "interventions_per_km": n / 0.3,
            "interventions_ci95_lo": 0.0,
            "interventions_ci95_hi": 0.0,
            "lateral_rms_m": 0.1,
        }

    from drive.sim.poisson import rate_interval

    rows = [row(0.0, 5), row(0.1, 4), row(0.3, 40)]
    for r in rows:
        r["interventions_ci95_lo"], r["interventions_ci95_hi"] = rate_interval(r["interventions"], 0.3)
    results = [{"name": "m", "rows": rows, "profile": [], "state_size": 19}]
    write_report(results, tmp_path, config={"seed": 0}, recordings=["r"])
    text = (tmp_path / "REPORT.md").read_text()
    assert "16.667 (5.41-38.89)" in text
    assert "a level with no intervention reads 0-12.30/km" in text
    assert (
        "Too short to tell apart from the clean drive (exact test of two rates, p > 0.05): m gaussian 0.1."
        in text
    )
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert {"interventions", "closed_loop_km", "interventions_ci95_lo", "interventions_ci95_hi"} <= set(
        header
    )
