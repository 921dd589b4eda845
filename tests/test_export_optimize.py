"""Load-time specialisation of exported TorchScript files (oneDNN convolutions + torch.jit.freeze)
and the deployed head's rearranged arithmetic give the same numbers as the portable file and the
training head."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from drive.checkpoint import policy_meta, save_policy
from drive.data.preprocess import Preprocessing, preprocess_frames
from drive.export import PRESERVED, build_deployed, decode_status, export_policy, optimize_loaded
from drive.export.head import DeployedNCPHead
from drive.nn.families import build_policy
from drive.nn.heads import NCPConvHead

FPS = 30.0


pytestmark = pytest.mark.usefixtures("one_thread")


def ncp_checkpoint(path: Path, crop=None, camera=(78, 200)) -> Path:
    torch.manual_seed(5)
    policy = build_policy("ncp_ltc", frame_period_s=1.0 / FPS)
    meta = policy_meta(
        policy, Preprocessing(size=(78, 200), crop=crop), FPS, "ncp_ltc", frame_size=list(camera)
    )
    return save_policy(path, policy, meta)


def jit_load(path: Path) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.jit.load(str(path)).eval()


@pytest.mark.kernels  # frozen, oneDNN-prepacked module vs the portable one
def test_optimized_module_equals_the_portable_one_over_300_steps_and_keeps_its_methods(tmp_path):
    path = export_policy(ncp_checkpoint(tmp_path / "p.ckpt"), tmp_path / "p.ts")
    portable, fast = jit_load(path), optimize_loaded(jit_load(path))
    for name in PRESERVED:  # methods and attributes the runners read survive freezing
        assert hasattr(fast, name), name
    assert json.loads(fast.metadata())["family"] == "ncp_ltc" and fast.hidden_size == portable.hidden_size
    assert torch.equal(fast.initial_state(2), portable.initial_state(2))
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (300, 78, 200, 3), dtype=torch.uint8, generator=g)
    frames[100] = 0  # held and flagged in both
    h_a, h_b, worst = portable.initial_state(1), fast.initial_state(1), 0.0
    with torch.inference_mode():
        for i, frame in enumerate(frames):
            c_a, h_a, s_a = portable.step_with_status(frame, h_a)
            c_b, h_b, s_b = fast.step_with_status(frame, h_b)
            assert int(s_a) == int(s_b), i
            worst = max(worst, float((c_a - c_b).abs().max()) * 1000, float((h_a - h_b).abs().max()))
    assert decode_status(int(fast.step_with_status(frames[100], h_b)[2])) == ["FRAME_BLACK"]
    assert worst < 1e-5, worst  # command in 1/km, state
    c2, h2 = fast.step(frames[:2], fast.initial_state(2))  # batches still work after freezing
    assert c2.shape == (2,) and h2.shape == (2, fast.hidden_size)


@pytest.mark.parametrize("half", [False, True])
def test_deployed_ncp_head_equals_the_training_head(half):
    torch.manual_seed(1)
    head = NCPConvHead().eval()
    frames = torch.randint(0, 256, (3, 78, 200, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    frames[2] = 77  # a uniform frame: the standard deviation's floor
    deployed = DeployedNCPHead(head)
    with torch.no_grad():
        want = head(frames.float() / 255.0)
        for use_mkldnn in (False, True):
            deployed.use_mkldnn = use_mkldnn and torch.backends.mkldnn.is_available()
            module = deployed.half() if half else deployed
            got, mean = module(frames)
            assert torch.allclose(mean, frames.float().mean(dim=[1, 2, 3]), rtol=1e-6)
            tol = 2e-2 if half else 1e-5
            assert torch.allclose(got, want, atol=tol, rtol=tol), (got - want).abs().max()


def test_crop_without_resize_skips_the_copy_and_equals_preprocessing(tmp_path):
    """A camera frame whose crop has the network's size goes to the head as a view of the frame."""
    crop = (4, 82, 6, 206)
    policy = build_policy("ncp_ltc", frame_period_s=1.0 / FPS)
    meta = policy_meta(policy, Preprocessing(size=(78, 200), crop=crop), FPS, "ncp_ltc", frame_size=[90, 212])
    deployed = build_deployed(policy, meta)
    frames = torch.randint(0, 256, (2, 90, 212, 3), dtype=torch.uint8)
    view = deployed._network_view(frames)
    assert torch.equal(view, preprocess_frames(frames, list(crop), [78, 200]))
    assert view.untyped_storage().data_ptr() == frames.untyped_storage().data_ptr()  # a view, no copy
    with pytest.raises(ValueError, match="does not fit"):
        build_deployed(policy, dict(meta, frame_size=[80, 200]))
