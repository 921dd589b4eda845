"""Names of the recurrent modules, as checkpoints store them (as torchvision's ``register_model``).

A checkpoint's policy config names its recurrent module: ``{"class": "ltc", "kwargs": {...}}``. The
name, not the Python module path, is the on-disk format, so files do not depend on where a class
lives. Files written before the registry store module paths (``"drive.nn.ltc.LTC"``,
``"drive.nn.wired_cfc.WiredCfC"``, ...): every path an earlier drive wrote is an alias of its class.
A name is looked up in this table only: nothing named in a file is ever imported.

    @register("ltc", aliases=("drive.nn.ltc.LTC",))
    class LTC(RecurrentModule): ...

    lookup("drive.nn.ltc.LTC") is LTC;  name_of(LTC) == "ltc"

The classes register themselves when their modules are imported; :mod:`drive.nn.policy` (which
builds them from a config: ``build_rnn``) imports them all.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, TypeVar

__all__ = ["register", "lookup", "name_of", "names", "aliases"]

T = TypeVar("T", bound=type)

_CLASSES: Dict[str, type] = {}  # registered name -> class
_ALIASES: Dict[str, str] = {}  # alias (an earlier module path) -> registered name
_NAMES: Dict[type, str] = {}  # class -> registered name


def register(name: str, aliases: Iterable[str] = ()) -> Callable[[T], T]:
    """Class decorator: register the class under ``name`` and the ``aliases`` older files use."""

    def add(cls: T) -> T:
        for key in (name, *aliases):
            if key in _CLASSES or key in _ALIASES:
                raise ValueError(f"recurrent module name {key!r} is already registered")
        if cls in _NAMES:
            raise ValueError(f"{cls.__qualname__} is already registered as {_NAMES[cls]!r}")
        _CLASSES[name] = cls
        _NAMES[cls] = name
        for alias in aliases:
            _ALIASES[alias] = name
        return cls

    return add


def lookup(name: str) -> type:
    """The class registered under ``name`` or one of its aliases; ValueError naming it otherwise."""
    key = _ALIASES.get(name, name)
    cls = _CLASSES.get(key)
    if cls is None:
        raise ValueError(f"unknown recurrent module {name!r}; known: {', '.join(names())}")
    return cls


def name_of(cls: type) -> str:
    """The registered name of ``cls`` (ValueError for an unregistered class)."""
    name = _NAMES.get(cls)
    if name is None:
        raise ValueError(
            f"{cls.__module__}.{cls.__qualname__} is not a registered recurrent module "
            f"(drive.nn.registry.register)"
        )
    return name


def names() -> List[str]:
    """The registered names, sorted."""
    return sorted(_CLASSES)


def aliases() -> Dict[str, str]:
    """Every alias and the name it resolves to."""
    return dict(_ALIASES)
