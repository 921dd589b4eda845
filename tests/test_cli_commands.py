"""A ``drive`` command is one module (drive.cli.discover): a toy command, dropped into a copy of the
package's drive/cli/ or named as a plugin in DRIVE_PLUGINS, runs through ``drive`` with no other
edit, and ``drive --help`` lists it without importing it."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

from drive.cli.discover import declared, find_commands

ROOT = Path(__file__).resolve().parent.parent
DRIVE = Path(sys.executable).parent / "drive"  # the console script pip installed

# Importing it says so on stdout: `drive --help` must not import a command's module.
TOY = '''
"""``drive toy``: a test's command."""

import argparse

print("toy module imported")

COMMAND = "toy"
HELP = "repeat a word (a command written by a test)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("word")
    parser.add_argument("--times", type=int, default=1, help="how often")


def run(args: argparse.Namespace) -> int:
    if args.times < 1:
        raise ValueError(f"--times must be at least 1, got {args.times}")
    print(" ".join([args.word] * args.times))
    return 0
'''


def _run(command: List[str], cwd: Path, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _check_toy(command: List[str], cwd: Path, env: Dict[str, str]) -> None:
    """``drive --help`` lists the toy without importing it; ``drive toy`` runs it and answers its
    input error in one line, exit status 2, as every command's."""
    listing = _run([*command, "--help"], cwd, env)
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert "  toy " in listing.stdout and "repeat a word (a command written by a test)" in listing.stdout
    assert "toy module imported" not in listing.stdout
    done = _run([*command, "toy", "hello", "--times", "3"], cwd, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["toy module imported", "hello hello hello"]
    refused = _run([*command, "toy", "hello", "--times", "0"], cwd, env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == "drive toy: error: --times must be at least 1, got 0"


def test_a_module_dropped_into_drive_cli_is_a_command(tmp_path: Path) -> None:
    """A copy of the package with one new file in drive/cli/: nothing else changes."""
    shutil.copytree(
        ROOT / "drive", tmp_path / "drive", ignore=shutil.ignore_patterns("__pycache__", "build*")
    )
    (tmp_path / "drive" / "cli" / "toy.py").write_text(textwrap.dedent(TOY))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DRIVE_PLUGINS")}
    # python -m from tmp_path: the copy is first on sys.path, ahead of the installed drive
    located = _run([sys.executable, "-c", "import drive.cli; print(drive.cli.__file__)"], tmp_path, env)
    assert Path(located.stdout.strip()).is_relative_to(tmp_path), located
    _check_toy([sys.executable, "-m", "drive.cli"], tmp_path, env)


def test_a_plugin_module_is_a_command(tmp_path: Path) -> None:
    """Out of the tree: one module on PYTHONPATH named in DRIVE_PLUGINS, through the ``drive`` script."""
    (tmp_path / "toy_command.py").write_text(textwrap.dedent(TOY))
    env = {**os.environ, "DRIVE_PLUGINS": "toy_command", "PYTHONPATH": str(tmp_path)}
    _check_toy([str(DRIVE)], tmp_path, env)


def test_every_cli_module_with_add_arguments_and_run_is_a_command() -> None:
    """A command module that forgot ``COMMAND`` would be silently missing from ``drive``."""
    found = {c.module for c in find_commands().values()}
    for path in sorted((ROOT / "drive" / "cli").glob("*.py")):
        defs = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
        if {"add_arguments", "run"} <= defs:
            assert f"drive.cli.{path.stem}" in found, f"{path.name} declares no COMMAND"
    assert {c.module for c in find_commands().values() if c.name == "closed-form"} == {
        "drive.cli.closed_form"
    }


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('COMMAND = "x"\n', "COMMAND 'x' without HELP"),
        ('COMMAND = "x"\nHELP = "a " + "b"\n', "HELP must be a string literal"),
        ("COMMAND = NAME\nHELP = 'h'\n", "COMMAND must be a string literal"),
    ],
)
def test_a_bad_declaration_is_named(source: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        declared(source, "cmd.py")


def test_helpers_and_other_plugins_are_not_commands() -> None:
    assert declared("def add_arguments(p): ...\n") is None
    assert declared('HELP = "only help"\n') is None
    assert declared('COMMAND: str = "x"\nHELP: str = "h"\n') == ("x", "h")


@pytest.mark.parametrize(
    ("plugins", "source", "message"),
    [
        ("no_such_command_plugin", None, "drive: error: plugin 'no_such_command_plugin' ($DRIVE_PLUGINS) "),
        ("dup_demo", 'COMMAND = "demo"\nHELP = "h"\n', "drive: error: command 'demo' is declared twice: "),
        ("own_fit", 'COMMAND = "fit"\nHELP = "h"\n', "command 'fit' is drive's own"),
    ],
)
def test_a_plugin_command_that_cannot_be_used_is_named(
    tmp_path: Path, plugins: str, source: str, message: str
) -> None:
    if source is not None:
        (tmp_path / f"{plugins}.py").write_text(source)
    env = {**os.environ, "DRIVE_PLUGINS": plugins, "PYTHONPATH": str(tmp_path)}
    done = _run([str(DRIVE), "--help"], tmp_path, env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert message in done.stderr
