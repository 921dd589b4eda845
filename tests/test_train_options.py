"""Family options live in drive.nn.families, stated once (issue 23, item 7): ``PolicyModule`` takes
the family and one options group per family (``--model.cfc.mode``), and checkpoints written with
the flat names of earlier versions (``units``, ``cfc_mode``, ``ode_unfolds`` ...) still rebuild
their network and run under ``drive test --ckpt_path`` as they did."""

from __future__ import annotations

import csv
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from drive.checkpoint import load_policy
from drive.cli import main
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs
from drive.nn.baselines import RNNOptions
from drive.nn.cfc import CfCOptions
from drive.nn.families import build_policy, upgrade_flat_options
from drive.nn.ltc import NCPLTCOptions
from drive.nn.registry import families
from drive.sim.synthetic import LaneScene, write_synthetic_lanes
from drive.train.hparams import option_groups, upgrade_hparams
from drive.train.module import PolicyModule

FIXTURES = Path(__file__).parent / "fixtures" / "compat"
# written by drive fit with the flat option names (tools/make_compat_fixtures.py, before issue 23)
FLAT = [
    "ncp_ltc",
    "cfc_default",
    "cfc_no_gate_mixed",
    "cfc_pure",
    "cfc_wired_mixed",
    "cfc_wired_pure",
    "lstm",
    "ctrnn",
    "cnn",
]


def _ckpt(name: str) -> dict:
    return torch.load(FIXTURES / f"{name}.ckpt", map_location="cpu", weights_only=True)


def test_each_default_is_stated_once_in_the_families() -> None:
    """PolicyModule's option groups are the registered families' option types with their defaults,
    derived from the registry (drive.nn.registry), not copies of them."""
    groups = inspect.signature(option_groups).parameters
    assert list(groups) == ["cfc", "ctrnn", "lstm", "ncp_ltc"]  # cnn has no options
    for family, spec in families().items():
        if family != "cnn":
            assert groups[family].default == spec.options() and groups[family].annotation is spec.options
    params = inspect.signature(PolicyModule.__init__).parameters
    assert params["options"].kind is inspect.Parameter.VAR_KEYWORD and not set(groups) & set(params)
    flat = {"units", "cfc_mode", "cfc_mixed_memory", "cfc_wired", "ode_unfolds", "positivity", "wiring_seed"}
    assert not flat & set(params), "family options are grouped per family, not flat module arguments"
    assert NCPLTCOptions().ode_unfolds == 6 and CfCOptions().units == 64 and RNNOptions().units == 64


def test_the_module_records_every_group_and_refuses_unknown_ones() -> None:
    module = PolicyModule(family="lstm", input_hw=(32, 80), lstm={"units": 8})
    assert set(module.hparams) >= {"family", "ncp_ltc", "cfc", "lstm", "ctrnn", "lr"}
    assert module.hparams["lstm"] == {"units": 8} and module.hparams["cfc"] == CfCOptions()
    flat = PolicyModule(family="lstm", input_hw=(32, 80), units=8)  # an earlier version's flat name
    assert flat.policy.config()["rnn"]["kwargs"]["units"] == 8 and "units" not in flat.hparams
    assert flat.hparams["lstm"] == {"units": 8} and flat.hparams["cfc"] == {"units": 8}
    with pytest.raises(TypeError, match="unexpected keyword argument 'gru'.*option groups: cfc, ctrnn"):
        PolicyModule(family="lstm", input_hw=(32, 80), gru={"units": 8})


def test_drive_fit_offers_every_group_and_reads_the_flat_config(tmp_path: Path, capsys) -> None:
    """LightningCLI reads the groups through option_groups' signature: --model.cfc.mode, the YAML
    configs, and the defaults of the groups not given."""
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    shown = capsys.readouterr().out
    for option in (
        "--model.cfc.mode",
        "--model.ncp_ltc.ode_unfolds",
        "--model.lstm.units",
        "--model.ctrnn.units",
    ):
        assert option in shown
    with pytest.raises(SystemExit):
        main(["fit", "--config", "configs/cfc.yaml", "--model.cfc.mode", "no_gate", "--print_config"])
    printed = capsys.readouterr().out
    assert "mode: no_gate" in printed and "ode_unfolds: 6" in printed


def test_build_policy_takes_the_familys_options_and_refuses_others() -> None:
    policy = build_policy("cfc", input_hw=(32, 80), units=8, mode="pure")
    kwargs = policy.config()["rnn"]["kwargs"]
    assert kwargs["units"] == 8 and kwargs["mode"] == "pure"
    same = build_policy("cfc", input_hw=(32, 80), options={"units": 8, "mode": "pure"})
    assert same.config() == policy.config()
    with pytest.raises(ValueError, match="family 'ncp_ltc' has no option units; its options: ode_unfolds"):
        build_policy("ncp_ltc", units=8)
    with pytest.raises(TypeError, match="takes RNNOptions"):
        build_policy("lstm", options=CfCOptions())
    with pytest.raises(ValueError, match="unknown family 'gru'"):
        PolicyModule(family="gru")


def test_module_builds_the_chosen_familys_group_only() -> None:
    module = PolicyModule(family="lstm", input_hw=(32, 80), lstm=RNNOptions(units=8), cfc={"units": 3})
    assert module.policy.config()["rnn"]["kwargs"]["units"] == 8
    wired = PolicyModule(family="cfc", input_hw=(32, 80), cfc={"wired": True, "mode": "no_gate"})
    assert wired.policy.config()["rnn"]["kwargs"]["mode"] == "no_gate"
    assert wired.policy.config()["rnn"]["kwargs"]["wiring"]["units"] == 19


@pytest.mark.parametrize("name", FLAT)
def test_flat_hyperparameters_of_earlier_checkpoints_rebuild_their_network(name: str) -> None:
    ckpt = _ckpt(name)
    hparams = ckpt["hyper_parameters"]
    assert "units" in hparams and "cfc" not in hparams  # written with the flat names
    upgraded = upgrade_hparams(hparams)
    assert upgraded == {k: v for k, v in upgrade_flat_options(hparams).items() if k != "_instantiator"}
    family = upgraded["family"]
    module = PolicyModule(**upgraded)
    recorded = ckpt["drive"]["policy_config"]["rnn"]
    built = module.policy.config()["rnn"]
    assert {**built, "class": None} == {**recorded, "class": None}, family  # class paths may move (issue 23)
    module.load_state_dict(ckpt["state_dict"], strict=True)
    if family in ("cfc", "lstm", "ctrnn"):
        assert upgraded[family]["units"] == hparams["units"]


@pytest.mark.parametrize("name", ["cfc_no_gate_mixed", "cfc_wired_pure", "lstm", "ncp_ltc"])
def test_lightning_load_from_checkpoint_reads_the_flat_names(name: str) -> None:
    """Lightning's own API (``PolicyModule.load_from_checkpoint``) on a checkpoint written with the
    flat names: the recorded network, its weights, and the outputs of the checkpoint's policy."""
    ckpt = _ckpt(name)
    module = PolicyModule.load_from_checkpoint(FIXTURES / f"{name}.ckpt", map_location="cpu")
    recorded = ckpt["drive"]["policy_config"]["rnn"]
    assert {**module.policy.config()["rnn"], "class": None} == {**recorded, "class": None}
    for key, value in ckpt["state_dict"].items():
        assert torch.equal(module.state_dict()[key], value), key
    override = PolicyModule.load_from_checkpoint(FIXTURES / f"{name}.ckpt", lr=1e-3)
    assert override.hparams.lr == 1e-3  # keyword arguments still override the checkpoint's


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs53")
    write_synthetic_lanes(root, LaneScene(width=80, height=60), 48, 3, recordings=2)
    return root


@pytest.mark.parametrize("name", ["cfc_no_gate_mixed", "cfc_wired_pure", "lstm"])
def test_drive_test_runs_a_checkpoint_written_with_the_flat_names(
    name: str, logs: Path, tmp_path: Path
) -> None:
    """The model options come from the old checkpoint (Lightning re-applies its hyperparameters): the
    logged MSE is the checkpoint's own policy's over the recordings in one pass."""
    ckpt = FIXTURES / f"{name}.ckpt"
    args = [
        "test",
        "--ckpt_path",
        str(ckpt),
        "--data.test",
        f"[{logs}]",
        "--data.image_size",
        "[53, 53]",
        "--data.eval_batch_size",
        "4",
        "--data.num_workers",
        "0",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--trainer.accelerator",
        "cpu",
        "--trainer.default_root_dir",
        str(tmp_path),
        "--trainer.enable_progress_bar",
        "false",
    ]
    assert main(args) == 0
    (metrics_csv,) = (tmp_path / "csv").rglob("metrics.csv")
    with open(metrics_csv, newline="") as f:
        logged = {k: float(v) for row in csv.DictReader(f) for k, v in row.items() if v}
    policy, meta = load_policy(ckpt)
    pre = Preprocessing.from_dict(meta["preprocessing"])
    errors = []
    for rec in read_logs(str(logs)):
        frames = pre(np.stack(list(rec.frames()))).float().div(255.0)
        dt = np.diff(rec.timestamps_s, prepend=rec.timestamps_s[0] - 1.0 / meta["fps"])
        with torch.no_grad():
            y, _ = policy(frames[None], None, torch.from_numpy(dt).float()[None])
        errors.append(1000.0 * y[0].double().numpy() - 1000.0 * rec.curvature)
    assert logged["test/mse_km"] == pytest.approx(float(np.mean(np.concatenate(errors) ** 2)), rel=1e-4)
