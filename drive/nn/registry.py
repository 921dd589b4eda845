"""The registry of recurrent modules and model families: the one list of them.

A recurrent class registers a name, which is what checkpoints store (as torchvision's
``register_model``), and optionally the model family ``drive fit`` trains with it::

    @register("ltc", aliases=("drive.nn.ltc.LTC",), family=Family("ncp_ltc", NCPLTCOptions))
    class LTC(RecurrentModule):
        @classmethod
        def from_options(cls, features: int, options: NCPLTCOptions) -> "LTC": ...

    lookup("drive.nn.ltc.LTC") is LTC;  name_of(LTC) == "ltc";  families()["ncp_ltc"].cell is LTC

Names on disk: a checkpoint's policy config names its recurrent module, ``{"class": "ltc",
"kwargs": {...}}``; the name, not the Python module path, is the format, so files do not depend on
where a class lives. Files written before the registry store module paths (``"drive.nn.ltc.LTC"``,
``"drive.nn.wired_cfc.WiredCfC"``, ...): every path an earlier drive wrote is an alias of its class.
A name is looked up in this table only: nothing named in a file is ever imported.

Everything else derives from this table: :func:`classes` (every recurrent class),
:func:`families` (what :func:`drive.nn.families.build_policy` builds) and the per-family option
groups ``drive fit`` takes (``--model.cfc.mode no_gate``; :func:`drive.train.hparams.option_groups`).

The classes register themselves when their modules are imported: ``drive.nn`` imports every
module of its package and the plugins (:mod:`drive.plugins`), so a new cell is one module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, TypeVar

__all__ = ["register", "lookup", "name_of", "names", "aliases", "classes", "Family", "families"]

T = TypeVar("T", bound=type)

_CLASSES: Dict[str, type] = {}  # registered name -> class
_ALIASES: Dict[str, str] = {}  # alias (an earlier module path) -> registered name
_NAMES: Dict[type, str] = {}  # class -> registered name
_FAMILIES: Dict[str, "Family"] = {}  # family name -> family (its cell set)


@dataclass(frozen=True)
class Family:
    """A model family ``drive fit`` trains (``--model.family <name>``).

    Args:
        name: the family's name.
        options: a frozen dataclass of its options, ``--model.<name>.<field>`` (a dataclass without
            fields: no options, no group).
        head: the perception head, a name in :data:`drive.nn.heads.HEADS`.
        cell: the class registered with it (set by :func:`register`); its classmethod
            ``from_options(features, options)`` builds the policy's recurrent compartment.
    """

    name: str
    options: type
    head: str = "ncp_conv"
    cell: Optional[type] = None


def register(name: str, aliases: Iterable[str] = (), family: Optional[Family] = None) -> Callable[[T], T]:
    """Class decorator: register the class under ``name``, the ``aliases`` older files use and the
    ``family`` it is trained in (the class then needs ``from_options(features, options)``)."""

    def add(cls: T) -> T:
        for key in (name, *aliases):
            if key in _CLASSES or key in _ALIASES:
                raise ValueError(f"recurrent module name {key!r} is already registered")
        if cls in _NAMES:
            raise ValueError(f"{cls.__qualname__} is already registered as {_NAMES[cls]!r}")
        if family is not None:
            _check_family(family, cls)
        _CLASSES[name] = cls
        _NAMES[cls] = name
        for alias in aliases:
            _ALIASES[alias] = name
        if family is not None:
            _FAMILIES[family.name] = dataclasses.replace(family, cell=cls)
        return cls

    return add


def _check_family(family: Family, cls: type) -> None:
    if family.name in _FAMILIES:
        raise ValueError(f"model family {family.name!r} is already registered")
    if not (dataclasses.is_dataclass(family.options) and isinstance(family.options, type)):
        raise TypeError(f"family {family.name!r}: options must be a dataclass type")
    if not callable(getattr(cls, "from_options", None)):
        raise TypeError(f"{cls.__qualname__} trains family {family.name!r} but has no from_options()")


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


def classes() -> Dict[str, type]:
    """Every registered recurrent class by its name, sorted by name."""
    return {name: _CLASSES[name] for name in names()}


def families() -> Dict[str, Family]:
    """Every model family by its name, sorted by name."""
    return {name: _FAMILIES[name] for name in sorted(_FAMILIES)}
