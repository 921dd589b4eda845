"""On-policy data from log replay (drive.replay.rollout, drive.train.onpolicy): rollouts, their labels,
the windows mixed into training batches, and the state a checkpoint keeps."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest
import torch

from drive.data.cache import CachedRecording, cache_recordings, model_camera, source_to_model
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs
from drive.replay.cached import cached_paths, cached_world
from drive.replay.rollout import rollout
from drive.sim.record import simulate
from drive.train.onpolicy import OnPolicyData
from drive.train.onpolicy_buffer import OnPolicyBuffer

SIZE = (39, 100)


@pytest.fixture(scope="module")
def cached(tmp_path_factory) -> CachedRecording:
    """30 s of expert driving at 10 Hz (with its poses), cached at the demo's network size."""
    root = tmp_path_factory.mktemp("onpolicy")
    simulate(root / "logs", minutes=0.5, seed=2, fps=10.0, noise_std=0.0)
    (rec,) = cache_recordings(read_logs(str(root / "logs")), Preprocessing(size=SIZE), root / "cache")
    return rec


def test_the_cache_keeps_the_poses_and_its_frames_are_a_camera_of_their_own(cached):
    assert cached.poses is not None and cached.poses.shape == (len(cached), 3)
    a, _ = source_to_model(cached.info)
    cam, small = cached.info["camera"], model_camera(cached.info)
    # a ground point projects to the same place whether through the source camera and the resize,
    # or through the cached frames' own intrinsics
    u_src = np.array([cam["cx"] + 13.0, cam["cy"] + 7.0, 1.0])
    u_model = a @ u_src
    assert u_model[0] == pytest.approx(small["cx"] + 13.0 * small["fx"] / cam["fx"])
    assert u_model[1] == pytest.approx(small["cy"] + 7.0 * small["fy"] / cam["fy"])
    assert small["height_m"] == cam["height_m"] and small["pitch_rad"] == cam["pitch_rad"]


def _straight_ahead(views: np.ndarray, episodes: np.ndarray, start: np.ndarray) -> np.ndarray:
    return np.zeros(len(episodes))


def test_a_rollout_keeps_every_step_with_a_label_that_steers_back_to_the_path(cached):
    (path,) = cached_paths(cached)
    worlds = [cached_world(cached, path, 10.0, s) for s in (0.0, 60.0, 120.0)]
    done = rollout(worlds, [7, 7, 7], _straight_ahead, steps=80, lookahead_s=2.0, min_lookahead_m=5.0)
    assert len(done) == 3 * 80 and set(done.recording) == {7} and set(done.episode) == {0, 1, 2}
    assert done.start[[0, 80, 160]].all() and done.start.sum() > 3  # straight ahead leaves the lane
    assert np.allclose(done.dt_s, 0.1)
    assert np.abs(done.left_m).max() <= 1.3 and np.abs(done.left_m).max() > 0.5
    # the label is the recorded command plus pure pursuit back towards the path: far left of the
    # path, it turns right of what was recorded there
    recorded = cached.curvature[done.frame]
    left = done.left_m > 0.5
    right = done.left_m < -0.5
    assert left.any() or right.any()
    assert np.all(done.label_per_m[left] < recorded[left]) and np.all(
        done.label_per_m[right] > recorded[right]
    )
    # each step's frame is the one shot nearest the car: frames advance with the car
    first = done.frame[done.episode == 0]
    assert np.all(np.diff(first) >= 0) and first[-1] - first[0] >= 60


def test_on_policy_windows_replace_the_stated_share_of_a_batch_and_survive_a_checkpoint(cached):
    (path,) = cached_paths(cached)
    worlds = [cached_world(cached, path, 10.0, s) for s in (0.0, 100.0)]
    done = rollout(worlds, [0, 0], _straight_ahead, steps=60)
    cb = OnPolicyData(every_n_steps=10, share=0.25)
    cb.recordings, cb.seq_len, cb.curve_factor = [cached], 8, 0.0  # what the fit's set-up gives it
    cb.buffer.add(done)
    starts = cb.buffer.window_starts(8)
    for s in starts:  # windows stay inside one episode and never span a takeover
        assert len(set(done.episode[s : s + 8])) == 1 and not done.start[s + 1 : s + 8].any()
    b, t = 8, 8
    batch = {
        "frames": torch.zeros(b, t, 3, *SIZE, dtype=torch.uint8),
        "curvature": torch.full((b, t), 9.0),
        "dt": torch.zeros(b, t),
        "weight": torch.zeros(b, t),
        "speed": torch.zeros(b, t),
    }
    cb._mix(batch, step=30)
    replaced = (batch["curvature"] != 9.0).all(dim=1)
    assert replaced.tolist() == [False] * 6 + [True] * 2  # round(0.25 x 8) windows, at the end
    assert torch.allclose(batch["dt"][6:], torch.full((2, t), 0.1))
    assert (batch["frames"][6:].float().mean() > 20) and (batch["weight"][6:] == 1.0).all()
    labels = set(np.round(done.label_per_m, 6))
    assert all(round(float(v), 6) in labels for v in batch["curvature"][6:].reshape(-1).double())
    again = {k: v.clone().fill_(0) if k == "frames" else v.clone().fill_(9.0) for k, v in batch.items()}
    cb._mix(again, step=30)  # the draw is a function of the step
    assert torch.equal(again["frames"][6:], batch["frames"][6:])
    state = cb.state_dict()
    restored = OnPolicyData(every_n_steps=10, share=0.25)
    restored.load_state_dict(state)
    for key, value in done.to_dict().items():
        np.testing.assert_array_equal(restored.buffer.rounds[0].to_dict()[key], value)


def test_windows_outside_the_offset_envelope_are_not_trained_on(cached):
    (path,) = cached_paths(cached)
    worlds = [cached_world(cached, path, 10.0, s) for s in (0.0, 100.0)]
    done = rollout(worlds, [0, 0], lambda v, e, s: np.full(len(e), 0.004), steps=60)  # drifts left
    assert np.abs(done.left_m).max() > 0.3
    limited, unlimited = OnPolicyBuffer(max_offset_m=0.3, max_yaw_rad=np.radians(3.0)), OnPolicyBuffer()
    for buffer in (limited, unlimited):
        buffer.add(done)
    starts = limited.window_starts(8)
    assert 0 < len(starts) < len(unlimited.window_starts(8))
    steps = starts[:, None] + np.arange(8)
    assert np.abs(done.left_m[steps]).max() <= 0.3 and np.abs(done.yaw_rad[steps]).max() <= np.radians(3.0)


def test_on_policy_settings_out_of_range_are_refused():
    with pytest.raises(ValueError, match="0 < share < 1"):
        OnPolicyData(every_n_steps=10, share=1.5)


def test_without_augmentation_rollouts_label_at_the_look_ahead_fitted_on_the_logs(tmp_path):
    """`drive fit` with `--data.augment null`: the on-policy rounds fit the label look-ahead on the
    training logs themselves (DART logs: shorter than 2 s), and every kept step's label is the
    recorded command corrected at that look-ahead."""
    from drive.checkpoint import read_checkpoint
    from drive.cli import main
    from drive.data.viewpoint import corrected_curvature
    from drive.train.label_lookahead import fit_on_recordings

    simulate(tmp_path / "logs", minutes=1.0, seed=11, fps=10.0, noise_std=0.015, recording_minutes=1.0)
    root = tmp_path / "run"
    argv = ["fit", "--config", "demo", "--data.augment", "null", "--data.train", f"[{tmp_path / 'logs'}]"]
    argv += [
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--data.val_split",
        "none",
        "--data.num_workers",
        "0",
    ]
    argv += ["--data.batch_size", "2", "--trainer.max_steps", "4", "--trainer.default_root_dir", str(root)]
    argv += ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    argv += ["--onpolicy.every_n_steps", "2", "--onpolicy.start_step", "0"]
    argv += ["--onpolicy.episodes", "2", "--onpolicy.episode_s", "3"]
    assert main([*argv, "--onpolicy.process", "false"]) == 0
    state = read_checkpoint(root / "checkpoints" / "last.ckpt")["callbacks"]
    (rounds,) = [v["rounds"] for k, v in state.items() if k.startswith("OnPolicyData")]
    done = {k: v.numpy() for k, v in rounds[0].items()}
    (rec,) = cache_recordings(read_logs(str(tmp_path / "logs")), Preprocessing(size=SIZE), tmp_path / "cache")
    lookahead_s = fit_on_recordings([rec], 10.0, 5.0).lookahead_s
    assert lookahead_s < 2.0
    recorded = rec.curvature[done["frame"]]
    args = (done["left_m"], done["yaw_rad"], done["speed_mps"])
    np.testing.assert_allclose(done["label_per_m"], corrected_curvature(recorded, *args, lookahead_s, 5.0))
    assert not np.allclose(done["label_per_m"], corrected_curvature(recorded, *args, 2.0, 5.0))


def test_dart_noise_in_a_round_moves_the_car_and_keeps_the_labels_of_the_states_visited(cached):
    """``noise_std``: the executed commands carry DART noise, reproducibly by seed; the labels stay
    the corrected labels of wherever the car was pushed."""
    from drive.data.viewpoint import corrected_curvature
    from drive.nn.heads import NCPConvHead
    from drive.nn.policy import Policy
    from drive.train.rounds import RoundJob, run_round

    torch.manual_seed(0)
    policy = Policy(NCPConvHead(SIZE), None, frame_period_s=0.1)
    job = RoundJob([str(cached.directory)], policy.config(), policy.state_dict(), 5, 2, 40, 0.9, 5.0)
    quiet = run_round(job)
    noisy, again = (run_round(replace(job, noise_std=0.02)) for _ in range(2))
    np.testing.assert_allclose(noisy["left_m"], again["left_m"], atol=1e-9)
    assert np.abs(noisy["left_m"] - quiet["left_m"]).max() > 0.05
    recorded = cached.curvature[noisy["frame"]]
    label = corrected_curvature(recorded, noisy["left_m"], noisy["yaw_rad"], noisy["speed_mps"], 0.9, 5.0)
    np.testing.assert_allclose(noisy["label_per_m"], label, atol=1e-12)
    with pytest.raises(ValueError, match="noise_std"):
        OnPolicyData(every_n_steps=10, noise_std=-0.01)


def _fit_args(logs, root, steps: int, profile: str = "demo") -> list:
    """``drive fit --config <profile>`` on ``logs`` for ``steps`` steps, small and fast, rounds in-process."""
    argv = ["fit", "--config", profile, "--data.train", f"[{logs}]", "--data.cache_dir", str(root / "cache")]
    argv += ["--data.val_split", "none", "--data.num_workers", "0", "--data.batch_size", "2"]
    argv += ["--trainer.max_steps", str(steps), "--trainer.default_root_dir", str(root / "run")]
    argv += ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    return argv + ["--onpolicy.episodes", "2", "--onpolicy.episode_s", "2", "--onpolicy.process", "false"]


@pytest.mark.parametrize(("start", "rounds"), [(0, 1), (1, 2)])
def test_rounds_start_at_start_step_and_follow_every_n_steps(tmp_path, start: int, rounds: int) -> None:
    """Rounds every 4 steps of a 9-step run, each landing 2 steps after it starts: from step 4 (the
    default, 0) only the round at 4 lands before the end; from step 1 those at 1 and 5 do."""
    from drive.checkpoint import read_checkpoint
    from drive.cli import main

    simulate(tmp_path / "logs", minutes=0.5, seed=11, fps=10.0, noise_std=0.015, recording_minutes=0.5)
    argv = _fit_args(tmp_path / "logs", tmp_path, 9) + ["--trainer.logger", "true"]
    assert main([*argv, "--onpolicy.every_n_steps", "4", "--onpolicy.start_step", str(start)]) == 0
    state = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")["callbacks"]["OnPolicyData"]
    assert len(state["rounds"]) == rounds and state["pending"] is None
    # what each round saw is logged at the step it lands, whatever log_every_n_steps is
    (log,) = (tmp_path / "run" / "csv").glob("version_*/metrics.csv")
    seen = [r for r in csv.DictReader(log.open()) if r.get("onpolicy/takeovers_per_km")]
    assert [int(r["step"]) for r in seen] == [start + 4 * i + 2 if start else 6 for i in range(rounds)]
    assert all(float(r["onpolicy/takeovers_per_km"]) >= 0 for r in seen)
    with pytest.raises(ValueError, match="start_step >= 0"):
        OnPolicyData(every_n_steps=4, start_step=-1)


def test_a_run_that_ends_before_its_first_round_needs_no_camera_calibration(tmp_path, capsys) -> None:
    """The shipped profiles train in the loop from step 100, which needs the logs' camera calibration;
    a shorter run has no round and trains on logs without one, and a run with a round names what is
    missing before it trains."""
    import json

    from drive.cli import main

    simulate(tmp_path / "logs", minutes=0.5, seed=11, fps=10.0, noise_std=0.015, recording_minutes=0.5)
    (meta_path,) = (tmp_path / "logs").glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    del meta["camera"]
    meta_path.write_text(json.dumps(meta))
    argv = _fit_args(tmp_path / "logs", tmp_path, 6) + ["--data.augment.viewpoint_p", "0"]
    assert main(argv) == 0  # the demo profile: the first round would land at step 150
    ncp_ltc = _fit_args(tmp_path / "logs", tmp_path / "ncp_ltc", -1, "ncp_ltc")
    assert main([*ncp_ltc, "--trainer.max_epochs", "1"]) == 0  # an epoch ends before a round lands
    capsys.readouterr()
    assert main([*argv, "--onpolicy.start_step", "2", "--onpolicy.every_n_steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "onpolicy: rollouts re-render frames and need camera calibration" in err


def test_logs_without_a_drivable_stretch_are_refused_before_training(tmp_path, capsys) -> None:
    """Rollouts drive stretches of at least 30 m; 3 s of logs (25 m) have none: one line, exit 2, at
    the start of the fit rather than at the first round."""
    from drive.cli import main

    simulate(tmp_path / "logs", minutes=0.05, seed=11, fps=10.0, noise_std=0.015, recording_minutes=0.05)
    argv = _fit_args(tmp_path / "logs", tmp_path, 6) + ["--data.seq_len", "8"]
    assert main([*argv, "--onpolicy.every_n_steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "onpolicy: rollouts need a drivable stretch of 30 m" in err and "--onpolicy.every_n_steps 0" in err
    assert not (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()


def test_the_buffer_keeps_rounds_draws_windows_by_seed_and_step_and_restores(cached):
    """OnPolicyBuffer alone, without Lightning: a ring of ``keep_rounds``, windows that never span an
    episode's end or a takeover, the same draw for the same (seed, step), a state dict that restores."""
    from drive.train.onpolicy_buffer import OnPolicyBuffer

    (path,) = cached_paths(cached)
    rounds = [
        rollout([cached_world(cached, path, 10.0, s)], [0], _straight_ahead, steps=40)
        for s in (0.0, 60.0, 120.0)
    ]
    buffer = OnPolicyBuffer(keep_rounds=2)
    for r in rounds:
        buffer.add(r)
    assert len(buffer) == 2 and buffer.rounds[0] is rounds[1]  # the oldest left the ring
    starts = buffer.window_starts(8)
    data = buffer.data
    for s in starts:
        assert len(set(data.episode[s : s + 8])) == 1 and not data.start[s + 1 : s + 8].any()
    first, again, other = buffer.draw(3, 50, 6, 8), buffer.draw(3, 50, 6, 8), buffer.draw(3, 51, 6, 8)
    assert np.array_equal(first, again) and not np.array_equal(first, other) and set(first) <= set(starts)
    assert buffer.takeover_places(1) == [(0, int(f)) for f in rounds[2].frame[rounds[2].start][1:]]
    restored = OnPolicyBuffer(keep_rounds=2)
    restored.load_state_dict(buffer.state_dict())
    assert np.array_equal(restored.draw(3, 50, 6, 8), first)
    assert len(OnPolicyBuffer().draw(3, 50, 6, 8)) == 0  # nothing to draw from an empty buffer
    with pytest.raises(ValueError, match="keep_rounds"):
        OnPolicyBuffer(keep_rounds=-1)
