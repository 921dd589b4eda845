"""Policy contract: scripted == eager, step == forward, config round trip, safe checkpoint loading."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
import torch

from drive.checkpoint import load_policy, policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.nn.families import build_policy
from drive.nn.policy import Policy, build_rnn
from drive.policy_drivers import PolicyDriver, load_driver

FAMILIES = ["ncp_ltc", "cfc", "cnn"]


def _frames(b: int = 2, length: int = 5, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, length, 3, 78, 200, generator=g)


@pytest.mark.parametrize("family", FAMILIES)
def test_scripted_policy_equals_eager_in_forward_and_step(family: str) -> None:
    torch.manual_seed(0)
    policy = build_policy(family, frame_period_s=0.1).eval()
    scripted = torch.jit.script(policy)
    frames, dt = _frames(), torch.full((2, 5), 0.1)
    with torch.no_grad():
        y, h = policy(frames, None, dt)
        ys, hs = scripted(frames, None, dt)
        y1, h1 = scripted.step(frames[:, 0], scripted.initial_state(2), dt[:, 0])
    torch.testing.assert_close(ys, y, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(hs, h)
    torch.testing.assert_close(y1, y[:, 0], rtol=1e-5, atol=1e-9)
    assert h.shape == (2, policy.state_size)


def test_step_by_step_equals_sequence_forward_for_recurrent_policy() -> None:
    torch.manual_seed(1)
    policy = build_policy("ncp_ltc", frame_period_s=0.05).eval()
    frames = _frames(1, 6, seed=1)
    dt = torch.tensor([[0.05, 0.05, 0.1, 0.05, 0.05, 0.15]])  # a dropped frame is a longer step
    with torch.no_grad():
        y_seq, h_seq = policy(frames, None, dt)
        h = policy.initial_state(1)
        ys = []
        for t in range(6):
            y, h = policy.step(frames[:, t], h, dt[:, t])
            ys.append(y)
    torch.testing.assert_close(torch.stack(ys, 1), y_seq, rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(h, h_seq, rtol=1e-5, atol=1e-7)
    # memory matters: the same last frame after a different history gives a different output
    with torch.no_grad():
        y_fresh, _ = policy.step(frames[:, 5], policy.initial_state(1), dt[:, 5])
    assert not torch.allclose(y_fresh, y_seq[:, 5])


def test_policy_outputs_are_network_units_divided_by_1000() -> None:
    torch.manual_seed(2)
    policy = build_policy("cfc").eval()
    frames = _frames(1, 3)
    with torch.no_grad():
        km, _ = policy.forward_per_km(frames)
        m, _ = policy(frames)
    torch.testing.assert_close(m * 1000.0, km)


@pytest.mark.parametrize("family", FAMILIES)
def test_config_rebuilds_same_architecture(family: str) -> None:
    policy = build_policy(family, frame_period_s=0.1)
    rebuilt = Policy.from_config(policy.config())
    assert rebuilt.config() == policy.config()
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {
        k: v.shape for k, v in policy.state_dict().items()
    }


@pytest.mark.parametrize(
    "name", ["os.system", "drive.nn.heads.NCPConvHead", "drive.nn.ltc.fused_solver", "LTC"]
)
def test_build_rnn_refuses_names_that_are_not_registered(name: str) -> None:
    """Only registered names and their aliases build: not arbitrary code, not another drive.nn class."""
    with pytest.raises(ValueError, match=f"unknown recurrent module '{name}'; known: cfc, closed_form_ltc"):
        build_rnn({"class": name, "kwargs": {}})


def _meta(policy: Policy) -> dict:
    return policy_meta(
        policy, Preprocessing(size=(78, 200), crop=(20, 98, 0, 200)), fps=20.0, family="ncp_ltc"
    )


def test_checkpoint_round_trip_gives_identical_outputs(tmp_path) -> None:
    torch.manual_seed(3)
    policy = build_policy("ncp_ltc", frame_period_s=0.05).eval()
    path = save_policy(tmp_path / "p.pt", policy, _meta(policy))
    loaded, meta = load_policy(path)
    assert meta["fps"] == 20.0 and meta["label_units"]["policy"] == "1/m"
    assert meta["preprocessing"] == {"size": [78, 200], "crop": [20, 98, 0, 200]}
    frames = _frames(1, 4)
    with torch.no_grad():
        torch.testing.assert_close(loaded(frames)[0], policy(frames)[0])


def test_pickled_payload_is_rejected_without_running_it(tmp_path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (marker.touch, ())

    path = tmp_path / "evil.ckpt"
    torch.save({"drive": {"x": Payload()}, "state_dict": {}}, path)
    with pytest.raises(ValueError, match="refusing to load"):
        load_policy(path)
    assert not marker.exists()


def test_another_pickle_protocol_is_read_or_named_without_torchs_note(tmp_path) -> None:
    """Protocol 3 loads; 4 and 5, which torch's safe loader cannot read, are named as such (not
    as pickled code); torch's note on the protocol (a second stderr line under the CLI's one-line
    errors) never escapes."""
    torch.manual_seed(5)
    policy = build_policy("ncp_ltc", frame_period_s=0.05).eval()
    ckpt = torch.load(save_policy(tmp_path / "p.pt", policy, _meta(policy)), weights_only=True)
    for protocol in (3, 4, 5):
        torch.save(ckpt, tmp_path / f"p{protocol}.pt", pickle_protocol=protocol)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded, meta = load_policy(tmp_path / "p3.pt")
        for protocol in (4, 5):
            with pytest.raises(ValueError, match=f"written with pickle protocol {protocol}, which"):
                load_policy(tmp_path / f"p{protocol}.pt")
    assert meta["fps"] == 20.0
    frames = _frames(1, 2)
    with torch.no_grad():
        torch.testing.assert_close(loaded(frames)[0], policy(frames)[0])


def test_a_damaged_checkpoint_is_named_in_one_short_sentence(tmp_path) -> None:
    torch.manual_seed(6)
    policy = build_policy("ncp_ltc", frame_period_s=0.05)
    data = save_policy(tmp_path / "p.pt", policy, _meta(policy)).read_bytes()
    bad = tmp_path / "half.pt"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError) as err:
        load_policy(bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: cannot load:") and message.endswith(".)"), message
    assert "\n" not in message and len(message) < len(str(bad)) + 250, message


def test_driver_preprocesses_like_training_and_resets_its_memory(tmp_path) -> None:
    torch.manual_seed(4)
    policy = build_policy("ncp_ltc", frame_period_s=0.05).eval()
    path = save_policy(tmp_path / "p.ckpt", policy, _meta(policy))
    driver = load_driver(path)
    assert isinstance(driver, PolicyDriver)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (120, 240, 3), dtype=np.uint8) for _ in range(3)]
    obs = [types.SimpleNamespace(image=im, dt_s=0.05) for im in images]
    driver.reset()
    got = [driver.act(o) for o in obs]
    prep = Preprocessing(size=(78, 200), crop=(20, 98, 0, 200))
    frames = torch.stack([prep(im)[0] for im in images]).float().div(255.0).unsqueeze(0)
    with torch.no_grad():
        want, _ = policy(frames, None, torch.full((1, 3), 0.05))
    np.testing.assert_allclose(got, want[0].numpy(), rtol=1e-5, atol=1e-9)
    driver.reset()
    assert driver.act(obs[2]) != pytest.approx(got[2], rel=1e-6)
    with pytest.raises(ValueError, match="dt_s"):
        driver.act(types.SimpleNamespace(image=images[0], dt_s=0.0))


def test_load_driver_rejects_unknown_suffix(tmp_path) -> None:
    with pytest.raises(ValueError, match="suffix"):
        load_driver(tmp_path / "policy.bin")
