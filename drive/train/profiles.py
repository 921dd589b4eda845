"""The training profiles shipped inside the package (``drive/configs/*.yaml``), by name.

``drive fit --config ncp_ltc --config trainer/cpu`` names shipped profiles; a path to a YAML file
works as ever. Names are resolved before LightningCLI (jsonargparse) sees the command line:

* an existing file is used as it is (a folder is not: ``drive demo --out demo`` makes one);
* otherwise a name (``ncp_ltc``), with or without ``.yaml``, also written as a checkout's path
  (``configs/ncp_ltc.yaml``, ``drive/configs/trainer/cpu.yaml``), is the shipped profile;
* inline YAML or JSON (``--config '{"model": ...}'``) passes through to jsonargparse;
* anything else is an error naming the option and listing the shipped profiles.

The files are package data read through :mod:`importlib.resources`, so the same names work from a
checkout, an editable install and an installed wheel.
"""

from __future__ import annotations

import os
import re
from importlib.resources import files
from pathlib import Path
from typing import List, Optional

__all__ = [
    "UnknownProfile",
    "configs_dir",
    "shipped_profiles",
    "profile_path",
    "resolve_config",
    "resolve_config_args",
]

_SUFFIXES = (".yaml", ".yml")
_NAME = re.compile(r"^[\w./\\-]+$")  # a name or a path; inline YAML/JSON has spaces, braces or colons
CONFIG_OPTIONS = ("--config", "-c")


class UnknownProfile(ValueError):
    """``--config`` names neither a file nor a shipped profile."""


def configs_dir() -> Path:
    """The folder of the shipped profiles (inside the installed package)."""
    return Path(str(files("drive") / "configs"))


def shipped_profiles() -> List[str]:
    """Every shipped profile's name: ``cfc``, ``demo``, ``ncp_ltc``, ..., ``trainer/cpu``."""
    root = configs_dir()
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml"))


def _profile_name(value: str) -> str:
    """``configs/trainer/cpu.yaml``, ``./drive/configs/ncp_ltc.yml``, ``ncp_ltc`` -> the bare name."""
    name = value.replace("\\", "/")
    while name.startswith("./"):
        name = name[2:]
    for prefix in ("drive/configs/", "configs/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def profile_path(name: str) -> Path:
    """The file of the shipped profile ``name`` (any form :func:`resolve_config` takes)."""
    bare = _profile_name(name)
    if bare not in shipped_profiles():
        raise UnknownProfile(
            f"{name}: no shipped profile of that name; shipped profiles: {', '.join(shipped_profiles())}"
        )
    return configs_dir() / f"{bare}.yaml"


def resolve_config(value: str, option: str = "--config") -> str:
    """``value`` of a config option as a file jsonargparse can read (see the module docstring).

    Raises :class:`UnknownProfile` (a ``ValueError``: one line, exit 2 in ``drive``) for a name or
    path that is neither a file nor a shipped profile."""
    if os.path.isfile(value) or not _NAME.match(value):
        return value
    bare = _profile_name(value)
    if bare in shipped_profiles():  # a folder of that name (drive demo --out demo) is no config
        return str(configs_dir() / f"{bare}.yaml")
    what = "is a folder, not a YAML file" if os.path.isdir(value) else "no such file"
    raise UnknownProfile(
        f"{option} {value}: {what}, and no shipped profile of that name; "
        f"shipped profiles: {', '.join(shipped_profiles())} (or a path to a YAML file)"
    )


def resolve_config_args(argv: List[str]) -> List[str]:
    """``argv`` with the value of every ``--config`` / ``-c`` (also ``--config=X``) resolved."""
    out: List[str] = []
    pending: Optional[str] = None
    for arg in argv:
        if pending is not None:
            out.append(resolve_config(arg, pending))
            pending = None
        elif arg in CONFIG_OPTIONS:
            out.append(arg)
            pending = arg
        elif arg.startswith("--config="):
            out.append("--config=" + resolve_config(arg[len("--config=") :]))
        else:
            out.append(arg)
    return out
