"""Random erasing (``augment.erase_p``): a share ``erase_p`` of windows gets one rectangle of one
colour, at the same place in every frame of the window, within the stated area; the labels and
every other pixel stay as they were. Exact comparisons: erasing copies values, it computes none."""

import numpy as np
import pytest
import torch

from drive.data.augment import AugmentConfig, Augmenter

ONLY_ERASE = dict(viewpoint_p=0.0, photometric_p=0.0, shadow_p=0.0, blur_p=0.0, noise_p=0.0, jpeg_p=0.0)
H, W = 30, 40


def _erased(erase_p, n=400, t=3, seed=1, **kw):
    rng = np.random.default_rng(seed)
    # frames with no flat patch: every pixel differs from its neighbours, so a box shows as one colour
    frames = torch.from_numpy(rng.integers(0, 256, (n, t, 3, H, W), dtype=np.uint8))
    labels = rng.normal(0.0, 0.05, (n, t))
    cfg = AugmentConfig(erase_p=erase_p, **ONLY_ERASE, **kw)
    out, k = Augmenter(cfg).augment(frames, labels, np.full((n, t), 8.0), rng, [(None, None)] * n)
    return frames, out, labels, k


def test_a_share_of_windows_gets_one_box_of_one_colour_at_one_place_in_every_frame():
    frames, out, labels, k = _erased(0.5, erase_area_max=0.2)
    np.testing.assert_array_equal(k, labels)  # labels unchanged
    changed = (out != frames).any(dim=1)  # [n, t, H, W]: a pixel changed in some channel
    hit = changed.flatten(1).any(1).numpy()
    assert 0.4 < hit.mean() < 0.6  # binomial(400, 0.5): 5 standard deviations
    areas = []
    for w in np.flatnonzero(hit):
        frame_boxes = []
        for f in range(out.shape[1]):
            rows, cols = np.nonzero(changed[w, f].numpy())
            top, bottom, left, right = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
            box = out[w, f, :, top:bottom, left:right]
            # one colour fills the box (a random frame pixel equals it now and then: the box's extent
            # is where the changed pixels lie, every pixel inside holds the fill)
            assert torch.equal(box, box[:, :1, :1].expand_as(box))
            frame_boxes.append((top, bottom, left, right))
            outside = torch.ones(H, W, dtype=torch.bool)
            outside[top:bottom, left:right] = False
            assert torch.equal(out[w, f][:, outside], frames[w, f][:, outside])
        assert len(set(frame_boxes)) == 1  # drawn once per window
        top, bottom, left, right = frame_boxes[0]
        areas.append((bottom - top) * (right - left) / (H * W))
    # 0.02-0.2 of the frame, less where the box met an edge's rounding; a pixel of fill may equal
    # the frame's (1 in 256 per channel, all three 1 in 1.7e7): the changed extent is the box
    assert 0.012 < min(areas) and max(areas) < 0.23
    assert np.mean(areas) == pytest.approx(0.11, abs=0.02)  # uniform area: mean (0.02 + 0.2) / 2


def test_erasing_off_draws_nothing_so_runs_without_it_draw_what_they_drew_before():
    """erase_p 0 (the default) draws no number for erasing; any erase_p > 0 draws, even one that
    never erases: the later steps' draws shift and the window comes out otherwise."""
    base = dict(ONLY_ERASE, photometric_p=0.8, shadow_p=0.5, noise_p=0.2)
    frames = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (20, 2, 3, H, W), dtype=np.uint8))
    labels, speed = np.zeros((20, 2)), np.full((20, 2), 8.0)

    def run(**kw):
        rng = np.random.default_rng(3)
        out, _ = Augmenter(AugmentConfig(**base, **kw)).augment(
            frames, labels, speed, rng, [(None, None)] * 20
        )
        return out, rng.random()

    assert AugmentConfig().erase_p == 0.0
    off, next_off = run()
    never, next_never = run(erase_p=1e-300)  # draws, but no window is erased
    assert next_off != next_never and not torch.equal(off, never)
    assert run(erase_p=0.0)[1] == next_off


@pytest.mark.parametrize("name,value", [("erase_p", 1.5), ("erase_area_max", 0.01), ("erase_area_max", 2.0)])
def test_erase_settings_out_of_range_are_refused_by_name(name, value):
    with pytest.raises(ValueError, match=rf"augment\.{name} must be"):
        AugmentConfig(**{name: value})
