"""Saliency recorded live while a policy drives the built-in world."""

import re

import cv2
import pytest
import torch

from drive.checkpoint import policy_meta
from drive.data.preprocess import Preprocessing
from drive.explain.live import SaliencyRecorder
from drive.nn.heads import NCPConvHead
from drive.nn.policy import Policy
from drive.policy_drivers import PolicyDriver
from drive.sim.appearance import sample_appearance
from drive.sim.expert import PurePursuitExpert
from drive.sim.road import generate_road
from drive.sim.world import World

FPS = 10.0


def _world() -> World:
    return World(generate_road(seed=5, length_m=200.0), sample_appearance(seed=5), fps=FPS)


def _meta(policy: Policy):
    return policy_meta(policy, Preprocessing(size=(78, 200)), FPS, "cnn")


def test_recorder_steers_exactly_like_the_policy_and_writes_one_video_frame_per_step(tmp_path):
    torch.manual_seed(0)
    policy = Policy(NCPConvHead(), None, frame_period_s=1 / FPS).eval()
    recorder = SaliencyRecorder(
        policy, tmp_path / "live.mp4", meta=_meta(policy), reference=PurePursuitExpert()
    )
    plain = PolicyDriver(policy, _meta(policy))
    world = _world()
    recorder.reset()
    plain.reset()
    for step in range(12):
        if step == 6:  # an intervention: both drivers restart
            recorder.reset()
            plain.reset()
        obs = world.observe()
        command = recorder.act(obs)
        assert command == plain.act(obs)
        world.step(command)
    info = recorder.close()
    capture = cv2.VideoCapture(info["video"])
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 12 and capture.get(cv2.CAP_PROP_FPS) == FPS
    ok, first = capture.read()
    assert ok and first.shape == (3 * 78, 3 * 3 * 200, 3)
    assert cv2.imread(info["contact_sheet"]) is not None


def test_recorder_refuses_what_it_cannot_explain(tmp_path):
    with pytest.raises(TypeError, match="PolicyDriver or a Policy"):
        SaliencyRecorder(PurePursuitExpert(), tmp_path / "x.mp4")
    with pytest.raises(ValueError, match="meta"):
        SaliencyRecorder(Policy(NCPConvHead(), None), tmp_path / "x.mp4")


def test_closed_loop_evaluation_drives_the_recorder_and_its_video_has_every_frame(tmp_path):
    from drive.sim.closed_loop import evaluate

    torch.manual_seed(0)
    policy = Policy(NCPConvHead(), None, frame_period_s=1 / 30).eval()
    meta = policy_meta(policy, Preprocessing(size=(78, 200)), 30.0, "cnn")
    recorder = SaliencyRecorder(
        policy, tmp_path / "closed_loop.mp4", meta=meta, reference=PurePursuitExpert()
    )
    calls = []
    result = evaluate(recorder, km=0.01, seed=0, perturb=lambda image: calls.append(1) or image)
    info = recorder.close()
    assert result.metrics and info["frames"] == len(calls) > 0
    capture = cv2.VideoCapture(info["video"])
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == len(calls) and capture.get(cv2.CAP_PROP_FPS) == 30.0


def test_saliency_cli_world_mode_writes_a_closed_loop_video_with_metrics(tmp_path, capsys):
    import json

    from drive.checkpoint import save_policy
    from drive.cli import main

    torch.manual_seed(0)
    policy = Policy(NCPConvHead(), None, frame_period_s=1 / 30)
    ckpt = save_policy(tmp_path / "p.ckpt", policy, policy_meta(policy, Preprocessing(), 30.0, "cnn"))
    out = tmp_path / "world.mp4"
    assert (
        main(["saliency", "--ckpt", str(ckpt), "--world", "--km", "0.05", "--out", str(out), "--scale", "1"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    capture = cv2.VideoCapture(str(out))
    frames = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    # 50 m at 30 km/h is 6 s of driving at 30 Hz: every step of the drive is one video frame
    assert frames == summary["frames"] and 170 <= frames <= 190
    assert summary["closed_loop"]["km"] == pytest.approx(0.05, abs=0.002)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--world", "--side-by-side"], "--side-by-side cannot be used with --world"),
        (
            ["--world", "--still", "still.png", "--still-frame", "3"],
            "--still, --still-frame cannot be used with --world",
        ),
        (["--world", "--max-frames", "10"], "--max-frames cannot be used with --world"),
        (["--recording", "rec", "--km", "1"], "--km cannot be used with --recording"),
        (["--recording", "rec", "--conditions", "winter"], "--conditions cannot be used with --recording"),
        (["--recording", "rec", "--still-frame", "3"], "--still-frame picks the frame of --still"),
    ],
    ids=[
        "world-side-by-side",
        "world-still",
        "world-max-frames",
        "recording-km",
        "recording-conditions",
        "still-frame-alone",
    ],
)
def test_saliency_cli_refuses_options_its_source_would_ignore(tmp_path, extra, message, capsys):
    from drive.checkpoint import save_policy
    from drive.cli import main

    policy = Policy(NCPConvHead(), None, frame_period_s=1 / FPS)
    ckpt = save_policy(tmp_path / "p.ckpt", policy, _meta(policy))
    assert main(["saliency", "--ckpt", str(ckpt), "--out", str(tmp_path / "video.mp4"), *extra]) == 2
    assert re.match(f"^drive saliency: error: {message}", capsys.readouterr().err)  # one line, exit 2
    assert [p.name for p in tmp_path.iterdir()] == ["p.ckpt"]
