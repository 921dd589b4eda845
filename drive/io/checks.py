"""What a user gives: numbers checked for finiteness and range, texts and YAML read with errors
that name the option or file, one wording of each refusal.

Every number that comes from a user (a reader option, a camera calibration, a ``meta.json``, a
command-line option) passes through :func:`number` before it is used, so ``nan``, ``inf``, a
boolean, a text that is not a number and a value out of range are refused with a ``ValueError``
naming the option and the value, never carried into a drive or written into a file. YAML (an
option's value or a file) is read by :func:`load_yaml` / :func:`read_yaml`: a syntax error or a key
given twice is one line naming the option or file, line and column.
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional, Union

import yaml

__all__ = [
    "number",
    "text",
    "load_yaml",
    "read_yaml",
    "read_text",
    "yaml_problem",
    "decode_lines",
    "existing_paths",
]


def _describe(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def number(
    value: Any,
    name: str,
    *,
    low: Optional[float] = None,
    high: Optional[float] = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
) -> float:
    """``value`` as a finite float in ``[low, high]`` (an end is excluded with ``low_open`` /
    ``high_open``; ``integer`` asks for a whole number), else a ``ValueError`` naming ``name``.
    Numeric text (``"2.5"``, as YAML or a CSV gives it) is accepted; a boolean is not a number."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{name} must be a number, got {_describe(value)}")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number, got {_describe(value)}") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {_describe(value)}")
    if integer and x != int(x):
        raise ValueError(f"{name} must be a whole number, got {_describe(value)}")
    below = low is not None and (x <= low if low_open else x < low)
    above = high is not None and (x >= high if high_open else x > high)
    if below or above:
        raise ValueError(f"{name} must be {_range(low, high, low_open, high_open)}, got {_describe(value)}")
    return x


def _range(low: Optional[float], high: Optional[float], low_open: bool, high_open: bool) -> str:
    if high is None:
        return f"{'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def text(value: Any, name: str, choices: Optional[tuple] = None) -> str:
    """``value`` as a string (an integer is taken as its digits: a YAML ``0`` for column 0), one of
    ``choices`` when given; else a ``ValueError`` naming ``name``."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a text, got {_describe(value)}")
    if choices is not None and value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (the later one would
    silently win)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(source: str, where: str) -> Any:
    """YAML ``source`` as Python values (safe types only); a syntax error, or a key given twice, is
    a ``ValueError``: ``<where>: not valid YAML: <problem> (line L, column C)``, one line."""
    try:
        return yaml.load(source, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
    except yaml.YAMLError as e:
        raise ValueError(f"{where}: not valid YAML: {yaml_problem(e)}") from None


def yaml_problem(err: BaseException) -> str:
    """A YAML error in one line: its problem and where (``expected ',' or '}' (line 1, column 33)``)."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def read_text(path: Union[str, "os.PathLike[str]"], what: str = "") -> str:
    """A text file's content as UTF-8 (a BOM accepted); bytes that are not UTF-8 are a
    ``ValueError`` naming the file, the line and the byte, not a bare ``UnicodeDecodeError``."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"{what}{path}, line {line}: byte 0x{data[e.start]:02x} is not UTF-8 text "
            "(save the file as UTF-8)"
        ) from None


def read_yaml(path: Union[str, "os.PathLike[str]"], what: str = "") -> Any:
    """A YAML file's content (:func:`read_text`, :func:`load_yaml`); errors name ``what`` and the file."""
    return load_yaml(read_text(path, what), f"{what}{path}")


def decode_lines(path: Union[str, "os.PathLike[str]"], report: Callable[[int, str], None]) -> str:
    """A text file (a CSV) as UTF-8 (a BOM accepted) where every line that is not UTF-8 is reported,
    ``report(line, message)`` (1-based line, which may raise), and left blank: the other lines keep
    their numbers, and nothing is decoded into replacement characters silently."""
    data = Path(path).read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    lines = data.split(b"\n")
    for i, raw in enumerate(lines):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            report(i + 1, f"byte 0x{raw[e.start]:02x} is not UTF-8 text (save the file as UTF-8)")
            lines[i] = b""
    return b"\n".join(lines).decode("utf-8")


def existing_paths(values: Iterable[object]) -> List[Path]:
    """The existing paths among option values (strings, paths, lists of them; globs expanded),
    resolved (symbolic links followed)."""
    found: List[Path] = []
    for value in values:
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            found += existing_paths(value)
            continue
        text = str(value)
        hits = glob.glob(text) if any(ch in text for ch in "*?[") else [text]
        found += [Path(os.path.realpath(hit)) for hit in hits if os.path.exists(hit)]
    return found


def check_writable(path: Union[str, "os.PathLike[str]"], name: str) -> None:
    """Refuse, naming ``name`` (``--out runs/x``), a path that cannot be written: a file where a
    folder of its path should be (``ENOTDIR``), a read-only file system, no permission. The
    nearest existing folder on the path is what is tested; nothing is created."""
    path = Path(path).absolute()
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_file() and probe != path:
        raise NotADirectoryError(f"{name}: {probe} is a file, not a folder")
    if probe.is_file():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        read_only = bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
        reason = "read-only file system" if read_only else "permission denied"
        raise PermissionError(f"{name}: cannot write in {probe} ({reason})")
