"""Shipped profiles (``drive/configs/``, package data) by name, and the vehicle runtime's sources
(``drive/deploy/``) where the package says they are: ``drive fit --config ncp_ltc``, a checkout's
``--config configs/ncp_ltc.yaml``, one line and exit 2 for a name that is neither."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drive.cli import main
from drive.export.vehicle import RUNTIME_FILES, runtime_dir
from drive.train.profiles import (
    UnknownProfile,
    configs_dir,
    profile_path,
    resolve_config,
    resolve_config_args,
    shipped_profiles,
)

FAMILIES = ("cfc", "cnn", "ctrnn", "lstm", "ncp_ltc")


def test_every_profile_ships_inside_the_package_and_parses() -> None:
    import drive

    assert configs_dir().is_relative_to(Path(drive.__file__).parent)
    names = shipped_profiles()
    assert set(FAMILIES) | {"demo", "data", "data_ncp", "data_udacity"} <= set(names)
    assert {"trainer/cpu", "trainer/gpu", "trainer/ddp"} <= set(names)
    for name in names:
        assert isinstance(yaml.safe_load(profile_path(name).read_text()), dict), name
    for family in FAMILIES:
        assert yaml.safe_load(profile_path(family).read_text())["model"]["family"] == family


@pytest.mark.parametrize(
    "value, name",
    [
        ("ncp_ltc", "ncp_ltc"),
        ("ncp_ltc.yaml", "ncp_ltc"),
        ("configs/ncp_ltc.yaml", "ncp_ltc"),  # a checkout's path from before the profiles moved
        ("./configs/trainer/cpu.yaml", "trainer/cpu"),
        ("drive/configs/trainer/ddp.yaml", "trainer/ddp"),
        ("trainer/gpu", "trainer/gpu"),
    ],
)
def test_names_and_checkout_paths_resolve_to_the_shipped_file(
    value: str, name: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)  # any folder: nothing of a checkout is there
    assert Path(resolve_config(value)) == configs_dir() / f"{name}.yaml"


def test_files_and_inline_yaml_pass_through_and_unknown_names_are_refused(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "ncp_ltc.yaml"  # a user's file of the same name wins over the profile
    mine.write_text("model: {lr: 0.1}\n")
    assert resolve_config(str(mine)) == str(mine) and resolve_config("ncp_ltc.yaml") == "ncp_ltc.yaml"
    inline = '{"model": {"lr": 0.1}}'
    assert resolve_config(inline) == inline
    with pytest.raises(UnknownProfile, match=r"--config nosuch: no such file.*shipped profiles: cfc, cnn"):
        resolve_config("nosuch")
    with pytest.raises(UnknownProfile, match=r"--config my/missing\.yaml: no such file"):
        resolve_config("my/missing.yaml")
    args = ["fit", "--config", "cfc", "-c", "trainer/cpu", "--config=lstm", "--model.lr", "1"]
    assert resolve_config_args(args) == [
        "fit",
        "--config",
        str(configs_dir() / "cfc.yaml"),
        "-c",
        str(configs_dir() / "trainer/cpu.yaml"),
        f"--config={configs_dir() / 'lstm.yaml'}",
        "--model.lr",
        "1",
    ]


def test_drive_fit_reads_a_profile_by_name_and_refuses_an_unknown_one(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--config", "ncp_ltc", "--config", "configs/trainer/cpu.yaml", "--print_config"])
    assert stop.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["ncp_ltc"]["ode_unfolds"] == 6 and printed["trainer"]["accelerator"] == "cpu"
    assert main(["fit", "--config", "ncp_ltx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("drive fit: error: --config ncp_ltx: no such file")
    assert "ncp_ltc" in err[0] and "trainer/cpu" in err[0]


def test_drive_demo_and_data_name_unknown_profiles_in_one_line(tmp_path: Path, capsys) -> None:
    assert main(["demo", "--config", "nosuch", "--out", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and err[0].startswith("drive demo: error: --config nosuch: no such file")
    assert not (tmp_path / "demo" / "stages").exists()  # refused before any stage ran
    assert main(["data", "inspect", str(tmp_path), "--reader", "nosuch"]) == 2
    assert "drive data: error: --reader nosuch: no such file" in capsys.readouterr().err


def test_a_folder_named_like_a_profile_is_no_config_and_outputs_may_be_written_again(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``drive demo --out demo`` makes a folder ``demo``; run again in that folder, ``--config demo``
    (the default) took the folder for the config and refused to write the output over it, and
    ``drive evaluate --policy expert --out expert`` refused its own output the same way."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").mkdir()
    (tmp_path / "mine").mkdir()
    assert Path(resolve_config("demo")) == configs_dir() / "demo.yaml"
    with pytest.raises(UnknownProfile, match=r"--config mine: is a folder, not a YAML file"):
        resolve_config("mine")
    for _ in range(2):  # the second run writes into the folder the first one made
        assert main(["evaluate", "--policy", "expert", "--km", "0.01", "--out", "expert"]) == 0
    assert (tmp_path / "expert" / "metrics.json").is_file()
    assert main(["evaluate", "--policy", str(tmp_path / "demo"), "--km", "0.01", "--out", "demo"]) == 2
    assert "--out demo: is the input --policy" in capsys.readouterr().err  # a policy file still is one


def test_the_vehicle_runtime_ships_with_the_package_and_export_says_where(capsys) -> None:
    import drive

    folder = runtime_dir()
    assert folder.is_relative_to(Path(drive.__file__).parent)
    assert all((folder / name).is_file() for name in RUNTIME_FILES)
    assert main(["export", "--print-runtime-dir"]) == 0
    assert capsys.readouterr().out.strip() == str(folder)
    assert main(["export", "--out", "x.ts"]) == 2
    assert "the following arguments are required: --ckpt" in capsys.readouterr().err


def test_the_demos_policy_trains_in_the_loop_at_the_demo_profiles_rate() -> None:
    """``drive demo`` trains its policy in the loop for its last ``--onpolicy-steps`` only (behaviour
    cloning trains beside it); with its defaults the rounds come at the rate the profile ``demo``
    trains with from step 100 (tests/test_demo_run.py checks that such a branch is one fit with
    ``onpolicy.start_step`` at the branch)."""
    from drive.demo.settings import DemoSettings
    from drive.demo.training import ONPOLICY_ROUNDS, branch_step

    profile = yaml.safe_load(profile_path("demo").read_text())
    s = DemoSettings(config=str(profile_path("demo")))
    assert branch_step(s) == s.max_steps - s.onpolicy_steps > 0
    assert s.max_steps < profile["budget"]["min_steps"]  # its 15 minutes: fewer than drive fit would give
    assert s.onpolicy_steps // ONPOLICY_ROUNDS == profile["onpolicy"]["every_n_steps"] > 0
    assert profile["onpolicy"].get("start_step", 0) == 0  # drive fit --config demo: from step 100


def test_parse_gives_the_configuration_a_run_would_use_and_runs_nothing(tmp_path: Path) -> None:
    """``drive.train.launch.parse``: the profile, a later profile and overrides merged by LightningCLI's
    parser, defaults filled in from the callbacks' signatures; no folder made, no seed set."""
    import inspect

    import torch

    from drive.train.launch import parse
    from drive.train.onpolicy import OnPolicyData

    root = tmp_path / "run"
    torch.manual_seed(5)
    expected = torch.rand(1)
    torch.manual_seed(5)
    cfg = parse(
        ["fit", "--config", "demo", "--trainer.default_root_dir", str(root), "--onpolicy.noise_std", "0.02"]
    )
    assert torch.rand(1) == expected  # the global generator untouched
    profile = yaml.safe_load(profile_path("demo").read_text())
    assert cfg.trainer.max_steps == profile["trainer"]["max_steps"] == -1  # sized from the logs:
    assert cfg.budget.steps_per_minute == profile["budget"]["steps_per_minute"] > 0
    assert cfg.onpolicy.every_n_steps == profile["onpolicy"]["every_n_steps"]
    assert cfg.onpolicy.noise_std == 0.02  # the command line over the profile
    assert cfg.onpolicy.share == inspect.signature(OnPolicyData).parameters["share"].default
    assert not root.exists()
