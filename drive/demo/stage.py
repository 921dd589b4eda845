"""``drive demo``'s stage runner: each stage runs once for its settings, and is skipped when re-run with
the same settings (and the same upstream) while the files it made still exist.

A stage's result is a dataclass (:mod:`drive.demo.results`); its file keeps it as JSON, and a skipped
stage hands on the dataclass rebuilt from that file. A file whose result no longer fits the dataclass
(a field renamed or added since it was written) is stale: the stage runs again."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

from drive.demo.results import Result
from drive.io.atomic import write_text

__all__ = ["Made", "Stages"]

R = TypeVar("R", bound=Result)


@dataclass
class Made:
    """What a stage hands on: its result (later stages and the report read it) and the files it made
    (a re-run skips the stage only while they all exist)."""

    result: Result
    outputs: List[Any] = field(default_factory=list)


class Stages:
    """Idempotent stages: ``<out>/stages/<name>.json`` keeps each stage's settings key and result."""

    def __init__(self, out: Path, total: int) -> None:
        self.out, self.total, self.index = out, total, 0
        self.key = ""  # chained: a stage's key covers its own settings and every upstream key
        self.dirty = False  # once a stage runs, every later stage runs too (its inputs changed)
        self.started = time.perf_counter()
        (out / "stages").mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str, settings: Dict[str, Any], fn: Callable[[], Made], kind: Type[R]) -> R:
        """Run stage ``name`` (``fn``, whose result is a ``kind``) unless it ran before with the same
        ``settings`` and upstream, its outputs still exist and its saved result still fits ``kind``;
        returns its result (with ``seconds``)."""
        self.index += 1
        self.key = hashlib.sha256(
            json.dumps([self.key, name, settings], sort_keys=True).encode()
        ).hexdigest()[:16]
        stamp = self.out / "stages" / f"{name}.json"
        prefix = f"[{self.index}/{self.total}] {name}"
        saved = self._saved(stamp, prefix, kind)
        if saved is not None:
            print(f"{prefix}: done before with the same settings, skipped", flush=True)
            return saved
        print(f"{prefix} ...", flush=True)
        self.dirty = True
        t0 = time.perf_counter()
        made = fn()
        if not isinstance(made.result, kind):
            raise TypeError(f"stage {name} made a {type(made.result).__name__}, not a {kind.__name__}")
        result = made.result
        result.seconds = round(time.perf_counter() - t0, 1)
        outputs = [str(p) for p in made.outputs]
        write_text(
            stamp, json.dumps({"key": self.key, "result": result.to_json(), "outputs": outputs}, indent=2)
        )
        print(
            f"{prefix}: {result.seconds:.0f} s (total {time.perf_counter() - self.started:.0f} s)", flush=True
        )
        return result

    def _saved(self, stamp: Path, prefix: str, kind: Type[R]) -> Optional[R]:
        """The result ``stamp`` keeps, if it is for this key, its outputs exist and it fits ``kind``."""
        if not stamp.is_file() or self.dirty:
            return None
        saved = json.loads(stamp.read_text())
        if saved.get("key") != self.key or not all(Path(p).exists() for p in saved.get("outputs", [])):
            return None
        try:
            return kind.from_json(saved.get("result"))
        except (TypeError, KeyError, AttributeError) as e:  # written for other fields: stale
            print(f"{prefix}: its saved result does not fit {kind.__name__} ({e}), run again", flush=True)
            return None
