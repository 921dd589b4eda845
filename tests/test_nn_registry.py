"""The name registry (drive.nn.registry): checkpoints store names, old module paths are aliases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drive.checkpoint import load_policy, policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.nn import registry
from drive.nn.baselines import CTRNN, LSTM, Stateless
from drive.nn.cfc import CfC, WiredCfC
from drive.nn.closed_form import ClosedFormLTC
from drive.nn.families import build_policy
from drive.nn.ltc import LTC
from drive.nn.policy import build_rnn, rnn_spec
from drive.nn.wiring import lane_keeping_ncp

FIXTURES = Path(__file__).parent / "fixtures" / "compat"

# every module path a checkpoint written by an earlier drive can hold (git history of drive/nn)
OLD_PATHS = {
    "drive.nn.ltc.LTC": LTC,
    "drive.nn.cfc.CfC": CfC,
    "drive.nn.cfc.dense.CfC": CfC,
    "drive.nn.cfc.WiredCfC": WiredCfC,
    "drive.nn.wired_cfc.WiredCfC": WiredCfC,
    "drive.nn.cfc.wired.WiredCfC": WiredCfC,
    "drive.nn.baselines.LSTM": LSTM,
    "drive.nn.baselines.CTRNN": CTRNN,
    "drive.nn.closed_form.ClosedFormLTC": ClosedFormLTC,
    "drive.nn.closed_form.ltc.ClosedFormLTC": ClosedFormLTC,
    "drive.nn.policy.Stateless": Stateless,
}
# the names files hold: never renamed, never dropped (new ones may join)
NAMES = {
    "ltc": LTC,
    "cfc": CfC,
    "wired_cfc": WiredCfC,
    "lstm": LSTM,
    "ctrnn": CTRNN,
    "closed_form_ltc": ClosedFormLTC,
    "stateless": Stateless,
}


def test_names_round_trip() -> None:
    assert NAMES.items() <= registry.classes().items()
    for name, cls in registry.classes().items():
        assert registry.lookup(name) is cls and registry.name_of(cls) == name
    assert registry.names() == list(registry.classes())


@pytest.mark.parametrize("path", sorted(OLD_PATHS))
def test_every_old_module_path_resolves_to_its_class(path: str) -> None:
    assert registry.lookup(path) is OLD_PATHS[path]
    assert registry.aliases()[path] == registry.name_of(OLD_PATHS[path])


def test_every_class_path_in_the_fixtures_is_an_alias() -> None:
    paths = {
        torch.load(f, map_location="cpu", weights_only=True)["drive"]["policy_config"]["rnn"]["class"]
        for f in sorted(FIXTURES.glob("*.ckpt")) + sorted(FIXTURES.glob("*.pt"))
    }
    assert paths and paths <= set(OLD_PATHS)
    assert set(OLD_PATHS) == set(registry.aliases())


def test_unknown_names_are_refused_in_one_line_naming_them() -> None:
    for bad in ("drive.nn.heads.NCPConvHead", "subprocess.Popen", "Ltc", ""):
        with pytest.raises(ValueError) as err:
            registry.lookup(bad)
        message = str(err.value)
        assert "\n" not in message and repr(bad) in message
        assert message.endswith("known: " + ", ".join(registry.names()))


def test_registering_a_taken_name_or_alias_is_refused() -> None:
    class Other(torch.nn.Module):
        pass

    with pytest.raises(ValueError, match="'ltc' is already registered"):
        registry.register("ltc")(Other)
    with pytest.raises(ValueError, match="'drive.nn.ltc.LTC' is already registered"):
        registry.register("other", aliases=("drive.nn.ltc.LTC",))(Other)
    with pytest.raises(ValueError, match="LTC is already registered as 'ltc'"):
        registry.register("ltc2")(LTC)
    assert "other" not in registry.names() and "ltc2" not in registry.names()
    with pytest.raises(ValueError, match="is not a registered recurrent module"):
        registry.name_of(Other)


def test_a_family_is_declared_with_its_cell_once() -> None:
    fams = registry.families()
    assert set(fams) == {"ncp_ltc", "cfc", "lstm", "ctrnn", "cnn"}
    assert {name: fam.cell for name, fam in fams.items()} == {
        "ncp_ltc": LTC,
        "cfc": CfC,
        "lstm": LSTM,
        "ctrnn": CTRNN,
        "cnn": Stateless,
    }
    assert fams["cnn"].head == "pilotnet" and fams["cfc"].head == "ncp_conv"

    class NoBuilder(torch.nn.Module):
        pass

    taken = registry.Family("cfc", type(fams["cfc"].options()))
    with pytest.raises(ValueError, match="model family 'cfc' is already registered"):
        registry.register("cfc2", family=taken)(NoBuilder)
    with pytest.raises(TypeError, match="has no from_options"):
        registry.register("nob", family=registry.Family("nob", type(fams["cfc"].options())))(NoBuilder)
    with pytest.raises(TypeError, match="options must be a dataclass type"):
        registry.register("nob", family=registry.Family("nob", dict))(NoBuilder)
    assert "cfc2" not in registry.names() and "nob" not in registry.names()
    assert set(registry.families()) == set(fams)


@pytest.mark.parametrize("family", list(registry.families()))
def test_a_checkpoint_written_now_stores_the_registered_name(family: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = build_policy(family, frame_period_s=0.05).eval()
    meta = policy_meta(policy, Preprocessing(size=(78, 200), crop=(20, 98, 0, 200)), fps=20.0, family=family)
    path = save_policy(tmp_path / "p.ckpt", policy, meta)
    stored = torch.load(path, map_location="cpu", weights_only=True)["drive"]["policy_config"]["rnn"]
    assert stored["class"] == registry.name_of(type(policy.rnn)) and stored["class"] in registry.names()
    json.dumps(stored)  # plain JSON, no Python path
    loaded, _ = load_policy(path)
    frames = torch.rand(1, 3, 3, 78, 200, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(frames)[0], policy(frames)[0])


@pytest.mark.parametrize("path", sorted(OLD_PATHS))
def test_an_old_spec_builds_the_same_module_as_its_name(path: str) -> None:
    cls = OLD_PATHS[path]
    torch.manual_seed(0)
    made = build_rnn({"class": registry.name_of(cls), "kwargs": _kwargs(cls)})
    torch.manual_seed(0)
    old = build_rnn({"class": path, "kwargs": _kwargs(cls)})
    assert type(old) is cls and rnn_spec(old) == rnn_spec(made)
    assert all(torch.equal(a, b) for a, b in zip(old.state_dict().values(), made.state_dict().values()))


def _kwargs(cls: type) -> dict:
    wiring = lane_keeping_ncp().to_dict()
    return {
        LTC: {"wiring": wiring},
        WiredCfC: {"wiring": wiring},
        ClosedFormLTC: {"wiring": wiring},
        CfC: {"input_size": 32, "units": 8},
        LSTM: {"input_size": 32},
        CTRNN: {"input_size": 32},
        Stateless: {"input_size": 32},
    }[cls]
