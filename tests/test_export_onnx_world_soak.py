"""drive.export beyond one step: ONNX parity with onnxruntime, closed-loop driving in the built-in
world identical to the checkpoint, and a soak with bounded state and flat memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drive.checkpoint import policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.export import export_policy, load_exported, read_metadata
from drive.export.soak import soak
from drive.nn.families import build_policy
from drive.policy_drivers import load_driver
from drive.sim.closed_loop import evaluate

pytestmark = pytest.mark.usefixtures("one_thread")


def checkpoint(path, family="ncp_ltc", fps=30.0, steer_bias_per_km=0.0, seed=0):
    """An untrained policy for the world's default camera (200x78, no crop)."""
    torch.manual_seed(seed)
    policy = build_policy(family, frame_period_s=1.0 / fps)
    if steer_bias_per_km:
        with torch.no_grad():
            policy.rnn.output_b.fill_(steer_bias_per_km)  # LTC readout: a steady left turn
    meta = policy_meta(policy, Preprocessing(size=(78, 200)), fps, family, frame_size=[78, 200])
    return save_policy(path, policy, meta)


@pytest.mark.kernels  # onnxruntime's MLAS kernels vs torch's
def test_onnx_file_matches_torchscript_under_onnxruntime(tmp_path):
    ckpt = checkpoint(tmp_path / "p.ckpt")
    onnx_model = load_exported(export_policy(ckpt, tmp_path / "p.onnx", format="onnx"))
    ts_model = load_exported(export_policy(ckpt, tmp_path / "p.ts"))
    assert type(onnx_model._session).__module__.startswith("onnxruntime")
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (100, 78, 200, 3), dtype=torch.uint8, generator=g)
    frames[40] = 0  # held in both
    h_o, h_t = onnx_model.initial_state(), ts_model.initial_state()
    worst = 0.0
    for frame in frames:
        c_o, h_o, s_o = onnx_model.step(frame, h_o)
        c_t, h_t, s_t = ts_model.step(frame, h_t)
        assert int(s_o[0]) == int(s_t[0])
        worst = max(worst, float((h_o - h_t).abs().max()), abs(float(c_o[0]) - float(c_t[0])) * 1000)
    assert worst < 1e-5, worst
    assert read_metadata(tmp_path / "p.onnx")["format"] == "onnx"
    with pytest.raises(ValueError, match=r"\[1, H, W, 3\]"):
        onnx_model.step(frames[:2], onnx_model.initial_state(2))


@pytest.mark.kernels  # the exported file's kernels vs the checkpoint's, closed loop
def test_exported_file_drives_the_world_like_its_checkpoint(tmp_path):
    # a policy that steers left steadily leaves the lane: interventions happen and must match
    ckpt = checkpoint(tmp_path / "p.ckpt", steer_bias_per_km=25.0)
    path = export_policy(ckpt, tmp_path / "p.ts")
    runs = [evaluate(load_driver(p), km=0.15, seed=3) for p in (ckpt, path)]
    (a, b) = runs
    assert a.metrics["interventions"] == b.metrics["interventions"] >= 1
    for sa, sb in zip(a.segments, b.segments):
        assert sa.reset_steps == sb.reset_steps
        np.testing.assert_allclose(sa.curvature_cmd_per_m, sb.curvature_cmd_per_m, atol=1e-7)
        np.testing.assert_allclose(sa.lateral_offset_m, sb.lateral_offset_m, atol=1e-5)


def test_soak_keeps_the_ltc_state_bounded_and_memory_flat(tmp_path):
    path = export_policy(checkpoint(tmp_path / "p.ckpt"), tmp_path / "p.ts")
    g = torch.Generator().manual_seed(1)
    frames = torch.randint(0, 256, (16, 78, 200, 3), dtype=torch.uint8, generator=g)
    report = soak(load_exported(path), steps=3000, frames=frames, black_every=500)
    assert report.all_finite and report.other_status_steps == 0 and report.held_steps == 6
    # LTC Theorem 2: every state stays within [min(vleak, erev), max(vleak, erev)] = [-1, 1]
    assert 0.0 < report.max_abs_state <= 1.0 + 1e-5
    assert report.rss_max_growth_mb < 8.0, report  # a leak of a few KB per step would show here
