"""Feature scale between the conv head and the cell (issue 25): data-dependent initialisation, the
head's batch normalisation, and that both survive export, scripting and old checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from drive.data.datamodule import DriveDataModule
from drive.export.head import DeployedNCPHead
from drive.nn.families import build_policy
from drive.nn.heads import NCPConvHead
from drive.nn.init import data_init, feature_health, sample_frames
from drive.nn.policy import Policy
from drive.sim.synthetic import LaneScene, write_synthetic_lanes
from drive.train.module import PolicyModule

HW = (40, 100)
# a camera, look and label range unlike the built-in world's: high, narrow, dark and orange-tinted
SCENE = LaneScene(
    width=100,
    height=40,
    hfov_deg=50.0,
    camera_height_m=2.6,
    pitch_rad=0.3,
    exposure=0.6,
    ground_rgb=(0.5, 0.35, 0.2),
    road_rgb=(0.2, 0.18, 0.15),
    sky_rgb=(0.9, 0.7, 0.4),
    max_curvature_per_m=1 / 15,
)


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> torch.Tensor:
    root = tmp_path_factory.mktemp("scale")
    write_synthetic_lanes(root / "train", SCENE, frames=160, seed=1)
    dm = DriveDataModule(
        train=[str(root / "train")],
        image_size=list(HW),
        seq_len=16,
        stride=8,
        batch_size=4,
        num_workers=0,
        cache_dir=str(root / "cache"),
        val_split="none",
    )
    dm.setup("fit")
    out = sample_frames(dm.datasets["train"])
    assert out is not None and out.dtype == torch.uint8 and out.shape[1:] == (3, *HW)
    return out.float() / 255.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_init_starves_the_ltc_and_data_init_feeds_it(frames: torch.Tensor, seed: int) -> None:
    torch.manual_seed(seed)
    policy = build_policy("ncp_ltc", input_hw=HW)
    with torch.no_grad():
        before = policy.head(frames)
    # PyTorch's default init: most features dead or constant across frames (no image information)
    informative = ((before.std(0) > 0.05) & (before.amax(0) > 0)).float().mean()
    assert informative < 0.5, f"default init already gives informative features ({informative:.2f})"
    health = data_init(policy, frames)
    with torch.no_grad():
        after = policy.head(frames)
    assert health["dead"] == 0.0
    assert after.std(0).min() > 0.3 and after.std(0).max() < 1.5, after.std(0)
    assert health["saturated"] < 0.05, health  # the sensory sigmoids see the features' spread
    # the sensory map puts each feature's mean near its synapses' centres
    ltc = policy.rnn
    u = after * ltc.input_w + ltc.input_b
    mu = (ltc.sensory_mu * ltc.sensory_mask.abs()).sum(1) / ltc.sensory_mask.abs().sum(1)
    assert torch.allclose(u.mean(0), mu, atol=1e-3)


@pytest.mark.parametrize("family", ["cfc", "ctrnn", "lstm"])
def test_data_init_gives_every_family_live_unit_scale_features(frames: torch.Tensor, family: str) -> None:
    torch.manual_seed(0)
    policy = build_policy(family, input_hw=HW, feature_norm="batch")
    health = data_init(policy, frames)
    policy.eval()
    with torch.no_grad():
        f = policy.head(frames)
    assert health["dead"] == 0.0 and 0.3 < float(f.std(0).min()) and float(f.max()) < 10.0


def test_batch_norm_keeps_features_on_scale_when_the_head_grows(frames: torch.Tensor) -> None:
    """The failure mode measured on foreign logs: training scales the head up (features ~100).
    With the normalisation the cell's inputs keep their scale; without it they follow the head."""
    out = {}
    for norm in ("none", "batch"):
        torch.manual_seed(0)
        policy = build_policy("ncp_ltc", input_hw=HW, feature_norm=norm)
        data_init(policy, frames)
        with torch.no_grad():
            policy.head.convs[-2].weight.mul_(50.0)  # what a few hundred large Adam steps did
            policy.head.train()
            f = policy.head(frames)
        out[norm] = (feature_health(policy, f), float(f.max()))
    assert out["none"][1] > 20.0 and out["none"][0]["saturated"] > 0.3
    assert out["batch"][1] < 6.0 and out["batch"][0]["saturated"] < 0.1 and out["batch"][0]["dead"] == 0.0


def test_normalised_head_exports_folded_and_scripts(frames: torch.Tensor) -> None:
    torch.manual_seed(0)
    policy = build_policy("ncp_ltc", input_hw=HW, feature_norm="batch")
    data_init(policy, frames)
    policy.train()
    with torch.no_grad():  # move the running statistics away from their initial values
        for _ in range(5):
            policy.head(frames * 0.8 + 0.1)
    policy.eval()
    bn = policy.head.feature_norm
    assert isinstance(bn, torch.nn.BatchNorm1d) and not torch.allclose(bn.running_mean, torch.zeros(32))
    with torch.no_grad():
        eager = policy.head(frames[:8])
        deployed, _ = DeployedNCPHead(policy.head)(frames[:8] * 255.0)
        scripted = torch.jit.script(policy)
        hidden = policy.initial_state(8)
        dt = torch.full((8,), 0.1)
        y_eager, _ = policy.step(frames[:8], hidden, dt)
        y_script, _ = scripted.step(frames[:8], hidden, dt)
    assert torch.allclose(deployed, eager, atol=1e-4)
    assert torch.allclose(y_eager, y_script, atol=1e-6)
    cfg = policy.config()
    assert cfg["head"]["kwargs"]["norm"] == "batch"
    rebuilt = Policy.from_config(cfg)
    rebuilt.load_state_dict(policy.state_dict())  # strict: the same architecture


def test_paper_head_config_is_unchanged_and_old_checkpoints_load(tmp_path: Path) -> None:
    paper = NCPConvHead(HW)
    assert paper.config() == {"input_hw": list(HW), "features_per_map": 4}  # as before the option
    assert sum(p.numel() for p in NCPConvHead().parameters()) == 79_420
    # a checkpoint written before the option existed: no norm in its head, none in its state dict
    old = PolicyModule(family="ncp_ltc", input_hw=HW, feature_norm="none")
    state = {k: v.clone() for k, v in old.state_dict().items()}
    assert not any("feature_norm" in k for k in state)
    ckpt = {"state_dict": state, "drive": old.drive_meta()}
    torch.save(ckpt, tmp_path / "old.ckpt")
    loaded = torch.load(tmp_path / "old.ckpt", weights_only=True)
    fresh = PolicyModule(family="ncp_ltc", input_hw=HW)  # today's default: the normalised head
    assert fresh.policy.head.norm == "batch"
    fresh.on_load_checkpoint(loaded)
    fresh.load_state_dict(loaded["state_dict"])  # strict
    assert fresh.policy.head.norm == "none" and fresh.hparams.feature_norm == "none"
    # and the other way: a normalised checkpoint into a module built without the normalisation
    new = PolicyModule(family="ncp_ltc", input_hw=HW)
    paper_module = PolicyModule(family="ncp_ltc", input_hw=HW, feature_norm="none")
    paper_module.on_load_checkpoint({"state_dict": new.state_dict()})
    paper_module.load_state_dict(new.state_dict())
    assert paper_module.policy.head.norm == "batch"


def test_init_option_is_validated() -> None:
    with pytest.raises(ValueError, match="init must be"):
        PolicyModule(init="lsuv")
    with pytest.raises(ValueError, match="feature_norm must be"):
        PolicyModule(feature_norm="layer")


def test_export_curvature_limit_comes_from_the_training_labels(recwarn) -> None:
    import warnings

    from drive.export.formats import build_deployed

    module = PolicyModule(family="lstm", input_hw=HW)
    full_lock = 0.34 * np.sin(np.linspace(0, 6, 300))  # a car whose full lock is 0.34 1/m
    glitch = full_lock.copy()
    glitch[100] = 2.0  # one single-frame spike must not widen the limit
    module._label_limits([glitch], curve_factor=0.0)
    assert module.label_range == pytest.approx([full_lock.min(), full_lock.max()], abs=1e-9)
    meta = module.drive_meta()
    assert meta["curvature_limit_per_m"] == pytest.approx(0.43)  # ceil(1.25 x 0.34, 0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the limit covers the labels
        deployed = build_deployed(module.policy, meta, frame_size=HW)
    assert deployed.curvature_limit_per_m == pytest.approx(0.43)
    with pytest.warns(UserWarning, match=r"curvature limit 0.2 1/m is below the training labels' range"):
        build_deployed(module.policy, meta, frame_size=HW, curvature_limit_per_m=0.2)


def test_a_curve_factor_that_makes_the_loss_a_few_frames_error_is_warned_once() -> None:
    """The NCP weights exp(c |y|) at the paper's c = 0.1: highway curvatures (tens of 1/km) spread them
    by less than 1000x, a junction turn of 1/5 m (200 1/km) by e^20; the warning says so and suggests
    a c that keeps the spread at 100x."""
    import warnings

    module = PolicyModule(family="lstm", input_hw=HW)
    highway = 0.03 * np.sin(np.linspace(0, 6, 300))  # up to 30 1/km
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module._label_limits([highway], curve_factor=0.1)
    junction = highway.copy()
    junction[100:130] = 0.2  # 30 frames of a 1/5 m turn: not a single-frame spike
    with pytest.warns(
        UserWarning, match=r"curve_factor 0.1 weighs the sharpest .* \(200 1/km\) e\^1[89] times"
    ) as w:
        module._label_limits([junction], curve_factor=0.1)
    assert len(w) == 1 and "use 0.026 or less" in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module._label_limits([junction], curve_factor=0.0)  # plain MSE: nothing to say


def test_data_init_of_the_pilotnet_cnn(frames: torch.Tensor) -> None:
    torch.manual_seed(0)
    policy = build_policy("cnn", input_hw=(66, 100))
    x = torch.nn.functional.interpolate(frames[:128], size=(66, 100), mode="bilinear", align_corners=False)
    data_init(policy, x)
    head = policy.head.eval()
    with torch.no_grad():
        h = head.fc(head.convs(head.standardize(x)).flatten(1))
        out = head(x)
    assert float((h.amax(0) > 0).float().mean()) > 0.9  # FC units alive
    assert 0.5 < float(out.std()) < 2.0  # unit output scale: the readout's label scale reaches the labels
