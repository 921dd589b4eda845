"""The package's shape (docs/architecture.md): no import cycles, imports one way down the layers,
no module over 400 lines, argparse only in drive/cli, in-function imports explained; and the check
itself catches each kind of breach on a package written here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_architecture", ROOT / "tools" / "check_architecture.py")
arch = importlib.util.module_from_spec(_spec)
sys.modules["check_architecture"] = arch
_spec.loader.exec_module(arch)


def test_drive_package_keeps_its_shape() -> None:
    found = arch.problems(arch.load())
    assert {rule: items for rule, items in found.items() if items} == {}


def test_every_subpackage_sits_in_a_layer() -> None:
    modules = arch.load()
    top = {".".join(name.split(".")[:2]) for name in modules if name != "drive"}
    assert {name for name in top if arch.unit(name) == "drive"} == set()


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, arch.Module]:
    for rel, text in files.items():
        path = tmp_path / "drive" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return arch.load(tmp_path / "drive")


CLEAN = {
    "__init__.py": "",
    "io/__init__.py": "",
    "io/atomic.py": "import os\n",
    "nn/__init__.py": "",
    "nn/ltc.py": "from drive.io import atomic\n",
    "cli/__init__.py": "import argparse\n",
}


HINTS = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"  # then an indented import


def test_a_clean_package_passes(tmp_path: Path) -> None:
    found = arch.problems(_package(tmp_path, CLEAN))
    assert all(items == [] for items in found.values()), found


@pytest.mark.parametrize(
    ("files", "rule", "needle"),
    [
        (
            {"nn/a.py": "from drive.nn import b\n", "nn/b.py": "import drive.nn.a\n"},
            "import cycles",
            "drive.nn.a",
        ),
        # a cycle hidden in a function is still a cycle
        (
            {
                "nn/a.py": "from drive.nn import b\n",
                "nn/b.py": "def f():\n    # lazy\n    import drive.nn.a\n",
            },
            "import cycles",
            "drive.nn.b",
        ),
        ({"io/rec.py": "from drive.nn import ltc\n"}, "upward imports", "drive.io.rec imports drive.nn"),
        (
            {"nn/x.py": "def f():\n    # start-up time\n    from drive.cli import main\n"},
            "upward imports",
            "drive.cli",
        ),
        ({"nn/big.py": "x = 1\n" * 401}, "modules over 400 lines", "big.py: 401"),
        ({"nn/opts.py": "from argparse import ArgumentParser\n"}, "argparse outside drive/cli", "opts.py"),
        (
            {"nn/lazy.py": "def f():\n    import json\n    return json\n"},
            "imports inside functions without a reason",
            "lazy.py:2",
        ),
        # a type hint's import is an edge too: a circle through TYPE_CHECKING is still a circle
        (
            {
                "nn/a.py": "def f():\n    # lazy\n    from drive.nn import b\n",
                "nn/b.py": HINTS + "    from drive.nn.a import A\n",
            },
            "import cycles",
            "drive.nn.a",
        ),
        (
            {"nn/hint.py": "import typing\nif typing.TYPE_CHECKING:\n    from drive.cli import main\n"},
            "upward imports",
            "drive.nn.hint imports drive.cli",
        ),
    ],
    ids=[
        "cycle",
        "hidden-cycle",
        "upward",
        "imports-cli",
        "size",
        "argparse",
        "unexplained-local",
        "type-checking-cycle",
        "type-checking-upward",
    ],
)
def test_each_breach_is_reported(tmp_path: Path, files: dict[str, str], rule: str, needle: str) -> None:
    found = arch.problems(_package(tmp_path, {**CLEAN, **files}))
    assert any(needle in item for item in found[rule]), found
    assert sum(len(items) for items in found.values()) >= 1


def test_explained_local_and_type_checking_imports_are_accepted(tmp_path: Path) -> None:
    files = {
        "nn/plot.py": "def f():\n    import matplotlib  # start-up time: only when drawing\n",
        "nn/hint.py": HINTS + "    from drive.io import atomic\n",
    }
    found = arch.problems(_package(tmp_path, {**CLEAN, **files}))
    assert all(items == [] for items in found.values()), found
