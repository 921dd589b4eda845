"""Which ``drive`` commands there are, read from the command modules themselves.

A command is one module that states, at its top level, its name and its one-line help as plain
strings, beside ``add_arguments(parser)`` and ``run(args) -> int``::

    COMMAND = "closed-form"
    HELP = "convert a trained LTC policy to its closed form (no ODE solver)"

The commands are the modules directly in ``drive/cli/`` that say so, and the plugins (the modules
named in ``DRIVE_PLUGINS`` or in an installed distribution's ``drive.plugins`` entry points,
:mod:`drive.plugins`) that say so. Both strings are read from the module's source with ``ast``:
nothing is imported to list the commands, so ``drive --help`` stays instant however heavy a
command's imports are; the dispatcher imports a command's module only when it runs.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from drive.plugins import named_plugins

__all__ = ["Command", "find_commands", "declared", "RESERVED"]

RESERVED = ("fit", "validate", "test", "predict")  # the LightningCLI commands (drive.cli.fit)
_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Command:
    """A command: its name, its one-line help, the module that runs it and where it was found."""

    name: str
    help: str
    module: str
    where: str


def declared(source: str, filename: str = "<source>") -> Optional[Tuple[str, str]]:
    """``(COMMAND, HELP)`` when the module's top level assigns both as string literals, else None
    (a helper module of the CLI, or a plugin that registers a cell or a reader)."""
    found: Dict[str, str] = {}
    for node in ast.parse(source, filename).body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id in ("COMMAND", "HELP"):
            if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
                raise ValueError(f"{filename}:{node.lineno}: {target.id} must be a string literal")
            found[target.id] = value.value
    if "COMMAND" not in found:
        return None
    if "HELP" not in found:
        raise ValueError(f"{filename}: COMMAND {found['COMMAND']!r} without HELP (its one-line help)")
    return found["COMMAND"], found["HELP"]


def _in_tree() -> List[Command]:
    out = []
    for path in sorted(_HERE.glob("*.py")):
        named = declared(path.read_text(), str(path))
        if named is not None:
            out.append(Command(named[0], named[1], f"drive.cli.{path.stem}", str(path)))
    return out


def _plugins() -> List[Command]:
    out = []
    for module, where in named_plugins():
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as e:
            raise ImportError(f"plugin {module!r} ({where}) cannot be found: {e}") from e
        if spec is None:
            raise ImportError(f"plugin {module!r} ({where}) cannot be found on sys.path")
        if not spec.origin or not spec.origin.endswith(".py"):
            continue  # a compiled or namespace module: no source to read, so not a command
        named = declared(Path(spec.origin).read_text(), spec.origin)
        if named is not None:
            out.append(Command(named[0], named[1], module, f"plugin {module!r} ({where})"))
    return out


def find_commands() -> Dict[str, Command]:
    """Every command by name: drive's own (``drive/cli/*.py``) first, then the plugins'. A name
    declared twice, or one of the LightningCLI commands, is an error naming both places."""
    commands: Dict[str, Command] = {}
    for command in _in_tree() + _plugins():
        if command.name in RESERVED:
            raise ValueError(f"{command.where}: command {command.name!r} is drive's own (drive.cli.fit)")
        if command.name in commands:
            first = commands[command.name].where
            raise ValueError(f"command {command.name!r} is declared twice: {first} and {command.where}")
        commands[command.name] = command
    return commands
