"""Shadow bands: the NCP paper's gamma (``shadow_kind="gamma"``) and cast shadows that scale the
light (``"cast"``), on real uint8 frames through the augmenter."""

import numpy as np
import pytest
import torch

from drive.data.augment import AugmentConfig, Augmenter

ONLY_SHADOWS = dict(photometric_p=0.0, blur_p=0.0, noise_p=0.0, jpeg_p=0.0, viewpoint_p=0.0, shadow_p=1.0)


def _shadowed(levels, kind, seed, **extra):
    """A window of flat frames, one per grey level [T], every window given a band."""
    frames = torch.stack([torch.full((3, 78, 200), v, dtype=torch.uint8) for v in levels])
    cfg = AugmentConfig(shadow_kind=kind, **{**ONLY_SHADOWS, **extra})
    out, k = Augmenter(cfg)(
        frames, np.zeros(len(levels)), np.full(len(levels), 8.0), np.random.default_rng(seed)
    )
    return out.numpy().astype(np.float64), k


def test_cast_shadows_scale_the_light_darker_only_within_the_strengths():
    for seed in range(12):
        out, k = _shadowed([230, 115], "cast", seed)
        assert np.array_equal(k, [0.0, 0.0])  # shadows leave the labels alone
        bright, dim = out[0], out[1]
        assert bright.max() <= 230 and dim.max() <= 115  # never lighter
        core = bright < 230 * 0.75  # the band's inside, beyond its blurred edge
        assert core.mean() > 0.02, "a band of >= 10 px of 200 must cover some of the frame"
        # the light factor of the band's inside: 1 - s, s in [0.3, 0.7] (rounding: 0.5 / 230)
        factor = bright[core] / 230
        assert factor.min() >= 0.3 - 3e-3 and factor.min() <= 0.7 + 3e-3
        # a cast shadow multiplies: the dim frame is darkened by the same factor at every pixel
        np.testing.assert_allclose(dim[core] / 115, factor, atol=1.0 / 115)


def test_cast_shadows_darken_bright_snow_where_the_gamma_barely_does():
    """The world's shadows scale the light by 0.35-0.6; a gamma of at most 2.5 leaves 230 at >= 197."""
    cast = min(_shadowed([230], "cast", s)[0].min() for s in range(12))
    gamma = min(_shadowed([230], "gamma", s)[0].min() for s in range(12))
    assert gamma >= 255 * (230 / 255) ** 2.5 - 1  # the NCP band, unchanged
    assert cast <= 230 * 0.7 + 1 < gamma


def test_cast_shadows_with_gamma_jitter_compose_in_one_pass():
    jitter = dict(photometric_p=1.0, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0)
    for seed in range(6):
        out, _ = _shadowed([200], "cast", seed, **jitter)
        # the same draws without the band: the gamma jitter alone, 255 (200/255) ** g, g in [0.8, 1.2]
        plain, _ = _shadowed([200], "cast", seed, **{**jitter, "shadow_p": 0.0})
        assert (
            len(np.unique(plain)) == 1
            and 255 * (200 / 255) ** 1.2 - 1 <= plain.max() <= 255 * (200 / 255) ** 0.8 + 1
        )
        light = out[0] / plain[0]  # and the band's light on top of it
        assert light.max() <= 1 + 1e-9 and 0.3 - 0.01 <= light.min() <= 0.7 + 0.01


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"shadow_kind": "light"}, "augment.shadow_kind"),
        ({"shadow_strength_min": -0.1}, "augment.shadow_strength_min"),
        ({"shadow_strength_min": 0.6, "shadow_strength_max": 0.4}, "augment.shadow_strength_max"),
        ({"shadow_strength_max": 1.0}, "augment.shadow_strength_max"),
    ],
)
def test_bad_shadow_settings_name_the_setting(extra, words):
    with pytest.raises(ValueError, match=words):
        AugmentConfig(**extra)
