"""The registry of log readers: the one list of formats.

A reader module registers itself, at its end, with everything drive needs to know about its format::

    register_reader("dave2", detect=detect, read=read, layout="data.txt")

- ``name``: the format's name (``--format``, ``data.format``);
- ``detect(path) -> bool``: whether ``path`` (a file or a folder) is one log of this format;
- ``read(path, options, problems) -> [Recording]``: the log as canonical recordings
  (:mod:`drive.data.readers.base` has the shared machinery);
- ``layout``: what the format looks like on disk, for the message that no log was found;
- ``suffixes``: files with these suffixes are looked at when a folder is walked (folders always are);
- ``priority``: detection order, :data:`FIRST` (the canonical recording), :data:`SPECIFIC` (the
  default: a layout of its own) or :data:`FALLBACK` (catch-alls: any video, any CSV); ties by name.

:data:`FORMATS` (name -> :class:`Reader`, in detection order) derives from the registrations, as do
the suffixes a walk looks at (:func:`walked_suffixes`). ``drive.data.readers`` imports every module
of its package and the plugins (:mod:`drive.plugins`), so a new reader is one module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

__all__ = ["Reader", "register_reader", "FORMATS", "walked_suffixes", "FIRST", "SPECIFIC", "FALLBACK"]

FIRST, SPECIFIC, FALLBACK = 0, 50, 90


@dataclass(frozen=True)
class Reader:
    """One registered format (the fields are :func:`register_reader`'s arguments)."""

    name: str
    detect: Callable[[Path], bool]
    read: Callable[..., List[Any]]
    layout: str
    suffixes: Tuple[str, ...] = ()
    priority: int = SPECIFIC


# name -> Reader in detection order; kept sorted as readers register (a plugin imported later joins it)
FORMATS: Dict[str, Reader] = {}


def register_reader(
    name: str,
    *,
    detect: Callable[[Path], bool],
    read: Callable[..., List[Any]],
    layout: str,
    suffixes: Tuple[str, ...] = (),
    priority: int = SPECIFIC,
) -> Reader:
    """Register the format ``name`` (module docstring for the fields); returns its :class:`Reader`."""
    if name in FORMATS:
        raise ValueError(f"log format {name!r} is already registered")
    reader = Reader(name, detect, read, layout, tuple(s.lower() for s in suffixes), priority)
    ordered = sorted([*FORMATS.values(), reader], key=lambda r: (r.priority, r.name))
    FORMATS.clear()
    FORMATS.update((r.name, r) for r in ordered)
    return reader


def walked_suffixes() -> Tuple[str, ...]:
    """The file suffixes a folder walk looks at (every reader's ``suffixes``)."""
    return tuple(sorted({s for r in FORMATS.values() for s in r.suffixes}))
