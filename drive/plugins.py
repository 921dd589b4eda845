"""Where drive's extensions come from: the modules of a package, and plugins.

A recurrent cell (:func:`drive.nn.registry.register`) and a log reader
(:func:`drive.data.readers.registry.register_reader`) register themselves when their module is
imported, so adding one is adding one module, in the tree or out of it:

- in the tree, every module directly in ``drive/nn/`` or ``drive/data/readers/`` (a package there
  through its ``__init__``) is imported with its package (:func:`import_all`): no list to extend;
- out of the tree, :func:`load_plugins` imports, once per process, the modules named in the
  environment variable ``DRIVE_PLUGINS`` (comma-separated module names, found on ``sys.path``, e.g.
  through ``PYTHONPATH``) and those that installed distributions declare in the entry-point group
  ``drive.plugins`` (``[project.entry-points."drive.plugins"] name = "package.module"``).

Both registries load the plugins when their package is imported, so ``drive fit`` (the families and
their ``--model.<family>.*`` options), ``drive data inspect|convert`` (the formats) and a checkpoint
naming a plugin's cell see them as they see drive's own. A plugin that cannot be imported is an
``ImportError`` naming it and where it was named.

A plugin may also be a ``drive`` command (a module declaring ``COMMAND`` and ``HELP``,
:mod:`drive.cli.discover`): the dispatcher reads those two strings from its source, without
importing it, and imports it when the command runs.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from importlib.metadata import entry_points
from typing import Iterable, List, Tuple

__all__ = ["import_all", "load_plugins", "named_plugins", "PLUGINS_VARIABLE", "ENTRY_POINT_GROUP"]

PLUGINS_VARIABLE = "DRIVE_PLUGINS"
ENTRY_POINT_GROUP = "drive.plugins"
_loaded: List[str] = []  # the plugins imported so far, in order
_started = False


def import_all(package: str, path: Iterable[str]) -> None:
    """Import every module and subpackage directly in ``package`` (its ``__path__``), by name."""
    for info in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        importlib.import_module(f"{package}.{info.name}")


def load_plugins() -> List[str]:
    """Import the plugins named in ``DRIVE_PLUGINS`` and the ``drive.plugins`` entry points, once per
    process (a second call, also one made while a plugin imports, returns at once); returns their
    module names in import order."""
    global _started
    if _started:
        return list(_loaded)
    _started = True
    for name, where in named_plugins():
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"plugin {name!r} ({where}) cannot be imported: {e}") from e
        _loaded.append(name)
    return list(_loaded)


def named_plugins() -> List[Tuple[str, str]]:
    """(module name, where it was named) of every plugin, without importing any (``drive --help``
    reads the plugins' commands from their source, :mod:`drive.cli.discover`)."""
    found = [
        (name.strip(), f"${PLUGINS_VARIABLE}")
        for name in os.environ.get(PLUGINS_VARIABLE, "").split(",")
        if name.strip()
    ]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.append((ep.value.split(":")[0].strip(), f"entry point {ep.name!r} of {ENTRY_POINT_GROUP}"))
    return found
