"""Every ``drive`` command, discovered as the dispatcher finds them (and the LightningCLI four), fed
(a) broken YAML where it takes YAML, (b) a number that is not finite, (c) an ``--out`` it cannot
write: exactly one line on stderr, exit status 2, and the output location byte for byte as it was;
with ``--debug`` the same mistake shows its traceback. A command added without a row here fails
the test. Everything is refused before any work, so each case costs a parse (in-process).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest
import torch
from bad_input_util import HW, run_cli, snapshot, tiny_recordings

from drive.checkpoint import policy_meta, save_policy
from drive.cli import main
from drive.cli.discover import RESERVED, find_commands
from drive.data.preprocess import Preprocessing
from drive.nn.families import build_policy

Argv = Callable[[Dict[str, Path], Path], List[str]]
pytestmark = pytest.mark.usefixtures("quiet_lightning_notes")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Dict[str, Path]:
    d = tmp_path_factory.mktemp("every-command")
    (rec,) = tiny_recordings(d / "logs", minutes=0.05)
    torch.manual_seed(0)
    policy = build_policy("cfc", frame_period_s=0.1, units=8, input_hw=HW)
    ckpt = save_policy(d / "cfc.ckpt", policy, policy_meta(policy, Preprocessing(size=HW), 10.0, "cfc"))
    broken = d / "broken.yaml"
    broken.write_text("model: {lr: 0.1\n")
    return {"rec": rec, "logs": d / "logs", "ckpt": ckpt, "broken": broken}


def _lightning(command: str) -> Callable[[Dict[str, Path], Path, List[str]], List[str]]:
    def argv(w: Dict[str, Path], out: Path, extra: List[str]) -> List[str]:
        split = {"fit": "train", "validate": "val"}.get(command, "test")
        ckpt = [] if command == "fit" else ["--ckpt_path", str(w["ckpt"])]
        return [
            command,
            f"--data.{split}",
            f"[{w['logs']}]",
            "--data.cache_dir",
            str(out / "cache"),
            "--trainer.default_root_dir",
            str(out),
            *ckpt,
            *extra,
        ]

    return argv


# command -> (a) broken YAML or None when it takes no YAML, (b) a non-finite number, and the
# command line writing to ``out`` (c), every one otherwise valid
CASES: Dict[str, Dict[str, Optional[Argv]]] = {
    "simulate": {
        "yaml": None,
        "nan": lambda w, o: ["simulate", "--out", str(o), "--minutes", "nan"],
        "out": lambda w, o: ["simulate", "--out", str(o), "--minutes", "0.01"],
    },
    "evaluate": {
        "yaml": lambda w, o: [
            "evaluate",
            "--logs",
            str(w["logs"]),
            "--policy",
            "expert",
            "--out",
            str(o),
            "--set",
            "camera={fx: 1",
        ],
        "nan": lambda w, o: ["evaluate", "--policy", "expert", "--out", str(o), "--km", "inf"],
        "out": lambda w, o: ["evaluate", "--policy", "expert", "--km", "0.01", "--out", str(o)],
    },
    "data": {
        "yaml": lambda w, o: [
            "data",
            "convert",
            str(w["logs"]),
            "--out",
            str(o),
            "--reader",
            str(w["broken"]),
        ],
        "nan": lambda w, o: ["data", "convert", str(w["logs"]), "--out", str(o), "--set", "fps=.nan"],
        "out": lambda w, o: ["data", "convert", str(w["logs"]), "--out", str(o)],
    },
    "export": {
        "yaml": None,
        "nan": lambda w, o: [
            "export",
            "--ckpt",
            str(w["ckpt"]),
            "--out",
            str(o / "p.ts"),
            "--max-gap",
            "nan",
        ],
        "out": lambda w, o: ["export", "--ckpt", str(w["ckpt"]), "--out", str(o / "p.ts"), "--no-verify"],
    },
    "closed-form": {
        "yaml": None,
        "nan": lambda w, o: [
            "closed-form",
            "--ckpt",
            str(w["ckpt"]),
            "--out",
            str(o / "cf.pt"),
            "--km",
            "nan",
        ],
        "out": lambda w, o: ["closed-form", "--ckpt", str(w["ckpt"]), "--out", str(o / "cf.pt"), "--km", "0"],
    },
    "saliency": {
        "yaml": None,
        "nan": lambda w, o: [
            "saliency",
            "--ckpt",
            str(w["ckpt"]),
            "--recording",
            str(w["rec"]),
            "--out",
            str(o / "s.mp4"),
            "--noise",
            "nan",
        ],
        "out": lambda w, o: [
            "saliency",
            "--ckpt",
            str(w["ckpt"]),
            "--recording",
            str(w["rec"]),
            "--out",
            str(o / "s.mp4"),
        ],
    },
    "robustness": {
        "yaml": None,
        "nan": lambda w, o: [
            "robustness",
            "--ckpt",
            str(w["ckpt"]),
            "--recordings",
            str(w["rec"]),
            "--out",
            str(o),
            "--noise",
            "0.1",
            "inf",
        ],
        "out": lambda w, o: [
            "robustness",
            "--ckpt",
            str(w["ckpt"]),
            "--recordings",
            str(w["rec"]),
            "--out",
            str(o),
        ],
    },
    "demo": {
        "yaml": lambda w, o: ["demo", "--out", str(o), "--config", str(w["broken"])],
        "nan": lambda w, o: ["demo", "--out", str(o), "--km", "nan"],
        "out": lambda w, o: ["demo", "--out", str(o)],
    },
    **{
        command: {
            "yaml": lambda w, o, c=command: _lightning(c)(w, o, ["--data.reader", "{camera: {fx: 1"]),
            "nan": lambda w, o, c=command: _lightning(c)(w, o, ["--data.curve_factor", "nan"]),
            "out": lambda w, o, c=command: _lightning(c)(w, o, []),
        }
        for command in RESERVED
    },
}
MUST = {"yaml": "not valid YAML", "nan": "finite number", "out": "cannot write in"}


def _commands() -> List[str]:
    return sorted(find_commands()) + list(RESERVED)


def test_every_command_has_its_cases() -> None:
    assert sorted(CASES) == sorted(_commands()), "a new command: add its row to CASES"


def _takes_yaml(command: str) -> bool:
    """Whether a command's options mention YAML (their help says so), as the table must know."""
    module = importlib.import_module(find_commands()[command].module)
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return "yaml" in parser.format_help().lower()


@pytest.mark.parametrize("case", ["yaml", "nan", "out"])
@pytest.mark.parametrize("command", _commands())
def test_one_line_exit_2_and_out_untouched(
    command, case, world, tmp_path, read_only, capsys, warnings_on_stderr
) -> None:
    build = CASES[command][case]
    if build is None:
        assert not _takes_yaml(command), f"{command} takes YAML: give its broken-YAML case"
        pytest.skip(f"drive {command} takes no YAML")
    if case == "out":
        out, watched = read_only / "out", read_only
    else:  # an earlier run's output, which a refused run must leave as it is
        out = watched = tmp_path / "out"
        (out / "sub").mkdir(parents=True)
        (out / "sub" / "previous.bin").write_bytes(bytes(range(256)))
    before = snapshot(watched)
    argv = build(world, out)
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"drive {command}: error: "), err[-3000:]
    assert MUST[case] in lines[0], lines[0]
    assert snapshot(watched) == before
    with pytest.raises(Exception) as raised:  # the traceback, not the line
        main([*argv, "--debug"])
    assert not isinstance(raised.value, SystemExit)
    assert snapshot(watched) == before


@pytest.mark.parametrize("command, case", [("evaluate", "yaml"), ("data", "nan"), ("fit", "yaml")])
def test_a_real_process_prints_exactly_that_line(command, case, world, tmp_path) -> None:
    """In a process of its own (Lightning's notes and Python's warnings on their real streams)."""
    done = run_cli(*CASES[command][case](world, tmp_path / "out"))
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1 and MUST[case] in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "out").exists()
