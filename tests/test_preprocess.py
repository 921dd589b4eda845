"""Crop + resize shared by the data cache and exported modules."""

import numpy as np
import pytest
import torch

from drive.data.preprocess import Preprocessing, preprocess_frames


def test_ncp_crop_of_a_full_hd_camera_gives_the_model_size():
    frames = np.zeros((2, 1208, 1920, 3), np.uint8)
    frames[:, 590:950, 520:1440] = 200  # only the crop region is bright
    out = Preprocessing.ncp()(frames)
    assert out.shape == (2, 3, 78, 200) and out.dtype == torch.uint8
    assert int(out.min()) == 200 and int(out.max()) == 200


def test_identity_when_already_at_size():
    frames = torch.randint(0, 255, (3, 78, 200, 3), dtype=torch.uint8)
    out = Preprocessing()(frames)
    assert torch.equal(out, frames.permute(0, 3, 1, 2))


def test_downscale_averages_like_area_resampling():
    frames = torch.zeros(1, 156, 400, 3, dtype=torch.uint8)
    frames[:, :, ::2] = 255  # alternating columns: the antialiased average is mid-grey
    out = Preprocessing()(frames)
    assert out.float()[..., 10:-10].mean().item() == pytest.approx(127.5, abs=2)


def test_scripted_matches_eager():
    scripted = torch.jit.script(preprocess_frames)
    frames = torch.randint(0, 255, (2, 120, 320, 3), dtype=torch.uint8)
    assert torch.equal(
        scripted(frames, [10, 110, 0, 300], [78, 200]),
        preprocess_frames(frames, [10, 110, 0, 300], [78, 200]),
    )


def test_bad_crop_names_the_sizes():
    with pytest.raises(ValueError, match="does not fit frames of size 100x100"):
        preprocess_frames(torch.zeros(1, 100, 100, 3, dtype=torch.uint8), [0, 200, 0, 50], [78, 200])
    with pytest.raises(ValueError, match="must be uint8"):
        preprocess_frames(torch.zeros(1, 100, 100, 3), [], [78, 200])


def test_round_trips_through_a_dict():
    p = Preprocessing.ncp()
    assert Preprocessing.from_dict(p.to_dict()) == p
