"""Perception heads: the paper's sizes, parameter counts, standardisation and scripting."""

import pytest
import torch

from drive.nn.heads import NCPConvHead, PilotNetCNN, build_head, standardize_frames


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_ncp_conv_head_has_79420_parameters_split_71388_conv_8032_dense():
    head = NCPConvHead()
    assert _count(head) == 79_420
    assert _count(head.convs) == 71_388
    assert head.dense_weight.numel() + head.dense_bias.numel() == 8_032


def test_pilotnet_has_5068900_parameters():
    assert _count(PilotNetCNN()) == 5_068_900


def test_ncp_conv_head_gives_8_maps_of_10x25_and_32_features():
    head = NCPConvHead().eval()
    frames = torch.rand(3, 3, 78, 200)
    maps = head.convs(head.standardize(frames))
    assert maps.shape == (3, 8, 10, 25)
    out = head(frames)
    assert out.shape == (3, 32) and head.output_size == 32 and head.input_size == (78, 200)
    assert (out >= 0).all()  # ReLU on the per-map dense layers


def test_pilotnet_maps_are_4x19x64_and_output_is_one_value():
    head = PilotNetCNN().eval()
    maps = head.convs(head.standardize(torch.rand(2, 3, 78, 200)))
    assert maps.shape == (2, 64, 4, 19)
    assert head(torch.rand(2, 3, 78, 200)).shape == (2, 1) and head.output_size == 1
    assert head.out.bias is None


def test_per_map_dense_layers_see_only_their_own_map():
    head = NCPConvHead().eval()
    frames = torch.rand(1, 3, 78, 200)
    maps = head.convs(head.standardize(frames))[0]  # [8, 10, 25]
    expected = torch.stack(
        [torch.relu(maps[g].flatten() @ head.dense_weight[g] + head.dense_bias[g]) for g in range(8)]
    ).flatten()
    torch.testing.assert_close(head(frames)[0], expected, rtol=1e-5, atol=1e-6)


def test_standardisation_gives_zero_mean_unit_std_per_frame_and_guards_constant_frames():
    frames = torch.stack([torch.rand(3, 16, 20) * 0.3 + 0.5, torch.full((3, 16, 20), 0.7)])
    out = standardize_frames(frames)
    assert out[0].mean().abs() < 1e-5 and (out[0].std(unbiased=False) - 1).abs() < 1e-4
    assert torch.isfinite(out).all() and out[1].abs().max() < 1e-4


def test_standardisation_equals_the_formula_in_float64_within_float32_rounding():
    """The two-pass mean-of-squares form is ``(x - mean) / max(std, 1/sqrt(n))``: against the formula
    in float64 on bright, dark, low-contrast and uniform frames (float32: 1e-5 relative)."""
    g = torch.Generator().manual_seed(0)
    frames = torch.cat(
        [
            torch.rand(4, 3, 39, 100, generator=g),
            torch.rand(2, 3, 39, 100, generator=g) * 0.01 + 0.9,  # low contrast, bright
            torch.rand(1, 3, 39, 100, generator=g) * 1e-4,  # below the floor's scale: the floor decides
            torch.full((1, 3, 39, 100), 0.3),
        ]
    ).contiguous(memory_format=torch.channels_last)
    n = 3 * 39 * 100
    flat = frames.double().reshape(frames.shape[0], -1)
    std = flat.std(dim=1, unbiased=False).clamp_min(n**-0.5).view(-1, 1, 1, 1)
    expected = (frames.double() - flat.mean(dim=1).view(-1, 1, 1, 1)) / std
    out = standardize_frames(frames)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_heads_are_invariant_to_brightness_and_contrast_of_a_frame():
    head = NCPConvHead().eval()
    frames = torch.rand(2, 3, 78, 200) * 0.5
    torch.testing.assert_close(head(frames), head(frames * 1.6 + 0.1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls", [NCPConvHead, PilotNetCNN])
def test_scripted_head_equals_eager(cls):
    head = cls().eval()
    scripted = torch.jit.script(head)
    frames = torch.rand(4, 3, 78, 200)
    torch.testing.assert_close(scripted(frames), head(frames), rtol=0, atol=0)


@pytest.mark.parametrize("hw, map_hw", [((66, 200), (9, 25)), ((120, 160), (15, 20))])
def test_ncp_conv_head_builds_for_other_input_sizes(hw, map_hw):
    head = NCPConvHead(input_hw=hw).eval()
    assert head.map_hw == map_hw
    assert head(torch.rand(2, 3, *hw)).shape == (2, 32)
    assert PilotNetCNN(input_hw=hw).eval()(torch.rand(2, 3, *hw)).shape == (2, 1)


def test_frame_size_mismatch_is_a_clear_error():
    with pytest.raises((AssertionError, RuntimeError), match="input_size"):
        NCPConvHead()(torch.rand(1, 3, 66, 200))


def test_config_rebuilds_the_same_architecture():
    for head in (NCPConvHead(input_hw=(66, 200)), PilotNetCNN(dropout=0.2)):
        rebuilt = type(head)(**head.config())
        rebuilt.load_state_dict(head.state_dict())
        assert rebuilt.config() == head.config()
    assert isinstance(build_head("pilotnet"), PilotNetCNN)
    with pytest.raises(ValueError, match="unknown head"):
        build_head("resnet")
