"""Bad input: one error type that names the file and row, and a collector for ``on_error="skip"``.

Every reader and the cache report problems through :class:`Problems`. With ``on_error="raise"``
(the default) the first problem raises :class:`DataError`; with ``on_error="skip"`` the offending
row or frame is dropped, counted, and listed in :meth:`Problems.summary`. Nothing bad is ever
kept silently.
"""

from __future__ import annotations

from collections import Counter
from typing import List, Optional

from drive.io.recording import Problem

__all__ = ["DataError", "Problem", "Problems", "ON_ERROR"]

ON_ERROR = ("raise", "skip")


class DataError(ValueError):
    """A driving log cannot be used as it is. The message names the file and, when known, the row."""

    def __init__(self, file: str, row: Optional[int], kind: str, message: str):
        self.file, self.row, self.kind = str(file), row, kind
        self.message = message
        where = f"{file}" if row is None else f"{file}, row {row}"
        super().__init__(f"{where}: {message} [{kind}]")

    def __reduce__(self) -> tuple:  # re-raised from a worker process: its four arguments, not one
        return (type(self), (self.file, self.row, self.kind, self.message))


class Problems:
    """Raise on the first problem, or collect them (``on_error`` = ``"raise"`` | ``"skip"``)."""

    def __init__(self, on_error: str = "raise"):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.on_error = on_error
        self.items: List[Problem] = []

    def report(self, file: str, row: Optional[int], kind: str, message: str) -> None:
        """Raise :class:`DataError`, or record the problem when skipping."""
        if self.on_error == "raise":
            raise DataError(file, row, kind, message)
        self.items.append(Problem(str(file), row, kind, message))

    def extend(self, other: "Problems") -> None:
        self.items.extend(other.items)

    def __len__(self) -> int:
        return len(self.items)

    def counts(self) -> dict:
        """Number of problems per kind."""
        return dict(Counter(p.kind for p in self.items))

    def summary(self, limit: int = 20) -> str:
        """Human-readable summary: counts per kind, then the first ``limit`` problems."""
        if not self.items:
            return "no problems"
        head = ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items()))
        lines = [f"skipped {len(self.items)} bad item(s): {head}"]
        lines += [f"  {p}" for p in self.items[:limit]]
        if len(self.items) > limit:
            lines.append(f"  ... and {len(self.items) - limit} more")
        return "\n".join(lines)
