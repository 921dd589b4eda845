"""CSV label tables of foreign logs: text columns with their file lines, and the images they name.

:func:`read_csv_table` reads a CSV (detecting a header) and reports malformed rows by their
1-based line number; :func:`reroot` finds an image a log names by a path from another machine;
:func:`resolve_images` and :func:`rows_as_float` turn a table's columns into image paths and
numbers for :func:`~drive.data.readers.base.build_recording`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from pathlib import Path, PureWindowsPath
from typing import List, Optional, Sequence, Set, Tuple

import numpy as np

from drive.data.errors import DataError, Problems
from drive.io.checks import decode_lines

__all__ = [
    "IMAGE_EXTENSIONS",
    "CsvTable",
    "read_csv_table",
    "reroot",
    "rows_as_float",
    "resolve_images",
    "check_unique_columns",
]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp", ".tif", ".tiff")


@dataclasses.dataclass
class CsvTable:
    """A CSV file as text columns. ``lines[i]`` is the 1-based file line of data row i."""

    path: Path
    header: Optional[List[str]]
    rows: List[List[str]]
    lines: List[int]
    dropped: Set[int] = dataclasses.field(default_factory=set)  # rows reported bad, by position

    def __len__(self) -> int:
        return len(self.rows)

    def keep(self) -> np.ndarray:
        """[N] bool: the rows not reported bad (by :func:`rows_as_float`)."""
        keep = np.ones(len(self), dtype=bool)
        keep[[i for i in self.dropped if i < len(self)]] = False
        return keep

    def name_of(self, index: int) -> str:
        return (
            self.header[index] if self.header is not None and index < len(self.header) else f"column {index}"
        )

    def column_index(self, name: str, what: str) -> int:
        """Index of column ``name`` (a header name, or an integer index for headerless files)."""
        if self.header is not None and name in self.header:
            return self.header.index(name)
        if name.isdigit() and (self.header is None or int(name) < len(self.header)):
            return int(name)
        have = (
            self.header
            if self.header is not None
            else f"{len(self.rows[0]) if self.rows else 0} unnamed columns"
        )
        raise ValueError(f"{self.path}: no {what} column {name!r} (columns: {have})")

    def column(self, index: int) -> List[str]:
        return [r[index] if index < len(r) else "" for r in self.rows]


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def read_csv_table(
    path: Path, problems: Problems, header: Optional[bool] = None, numeric_columns: Sequence[int] = ()
) -> CsvTable:
    """Read a CSV. ``header=None`` detects one: the first row is a header when it has a field that
    is neither a number nor a file path. Rows with the wrong number of fields are reported."""

    def not_utf8(line: int, message: str) -> None:
        problems.report(str(path), line, "not_utf8", message)

    text = decode_lines(path, not_utf8)
    reader = csv.reader(io.StringIO(text, newline=""))
    raw = [(i + 1, row) for i, row in enumerate(reader) if row and any(c.strip() for c in row)]
    if not raw:
        return CsvTable(path, None, [], [])
    first = [c.strip() for c in raw[0][1]]
    if header is None:
        header = any(not _is_number(c) and not _looks_like_path(c) for c in first)
    names = first if header else None
    if names is not None:
        check_unique_columns(names, str(path), raw[0][0])
    body = raw[1:] if header else raw
    width = len(first)
    rows, lines = [], []
    for line, row in body:
        row = [c.strip() for c in row]
        if len(row) != width:
            problems.report(str(path), line, "malformed_row", f"{len(row)} fields, expected {width}")
            continue
        bad = [j for j in numeric_columns if not _is_number(row[j])]
        if bad:
            col = names[bad[0]] if names else f"column {bad[0]}"
            problems.report(str(path), line, "not_a_number", f"{col} = {row[bad[0]]!r} is not a number")
            continue
        rows.append(row)
        lines.append(line)
    return CsvTable(path, names, rows, lines)


def check_unique_columns(names: Sequence[str], file: str, line: int = 1) -> None:
    """A header that names a column twice is ambiguous (which one is the label?): a
    :class:`DataError` naming both places, never the last one silently."""
    seen: dict = {}
    for j, name in enumerate(names):
        if name and name in seen:  # unnamed columns (a trailing comma) cannot be picked by name
            raise DataError(
                file,
                line,
                "duplicate_column",
                f"column {name!r} appears twice in the header (fields {seen[name] + 1} and {j + 1}); "
                "rename or remove one",
            )
        seen[name] = j


def _looks_like_path(text: str) -> bool:
    return text.lower().endswith(IMAGE_EXTENSIONS) or "/" in text or "\\" in text


def reroot(recorded: str, base: Path) -> Optional[Path]:
    """Find an image a log names by a path from another machine (absolute Unix or Windows paths).

    Tries the path as written (relative to ``base`` when relative), then ever shorter trailing
    parts of it under ``base`` (``C:\\Users\\me\\run1\\IMG\\c.jpg`` -> ``base/IMG/c.jpg`` ->
    ``base/c.jpg``). Returns None when nothing exists.
    """
    text = recorded.strip()
    direct = Path(text)
    candidate = direct if direct.is_absolute() else base / direct
    if _is_file(candidate):
        return candidate
    parts = [
        p for p in PureWindowsPath(text).parts if p not in ("\\", "/") and not re.match(r"^[A-Za-z]:\\?$", p)
    ]
    for k in range(len(parts), 0, -1):
        candidate = base.joinpath(*parts[-k:])
        if _is_file(candidate):
            return candidate
    return None


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the system refuses (too long, a NUL byte): a damaged
    row's image is not found, it does not end the read."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def rows_as_float(table: CsvTable, index: int, problems: Optional[Problems] = None) -> np.ndarray:
    """Column ``index`` of a table as float64. A text that is not a number is NaN; with
    ``problems`` its row is reported (``not_a_number``, naming the column and the text, once per
    row) and left out of :meth:`CsvTable.keep`, so it is not reported again as a NaN label."""
    out = np.empty(len(table), dtype=np.float64)
    for i, r in enumerate(table.rows):
        try:
            out[i] = float(r[index])
        except (ValueError, IndexError):
            out[i] = np.nan
            if problems is not None and i not in table.dropped:
                text = r[index] if index < len(r) else ""
                table.dropped.add(i)
                problems.report(
                    str(table.path),
                    table.lines[i],
                    "not_a_number",
                    f"{table.name_of(index)} = {text!r} is not a number",
                )
    return out


def resolve_images(
    table: CsvTable, index: int, base: Path, problems: Problems
) -> Tuple[List[Path], np.ndarray]:
    """Image paths of column ``index`` re-rooted under ``base``; missing ones reported, keep=False."""
    paths: List[Path] = []
    keep = np.ones(len(table), dtype=bool)
    for i, row in enumerate(table.rows):
        found = reroot(row[index], base)
        if found is None:
            problems.report(
                str(table.path),
                table.lines[i],
                "missing_image",
                f"image {row[index]!r} not found under {base}",
            )
            keep[i] = False
            paths.append(base / PureWindowsPath(row[index]).name)
        else:
            paths.append(found)
    return paths, keep
