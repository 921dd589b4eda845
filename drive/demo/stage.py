"""``drive demo``'s stage runner: each stage runs once for its settings, and is skipped when re-run with
the same settings (and the same upstream) while the files it made still exist."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List

from drive.io.atomic import write_text

__all__ = ["Made", "Stages"]


@dataclass
class Made:
    """What a stage hands on: its result (JSON-able; later stages and the report read it) and the files
    it made (a re-run skips the stage only while they all exist)."""

    result: Dict[str, Any]
    outputs: List[Any] = field(default_factory=list)


class Stages:
    """Idempotent stages: ``<out>/stages/<name>.json`` keeps each stage's settings key and result."""

    def __init__(self, out: Path, total: int) -> None:
        self.out, self.total, self.index = out, total, 0
        self.key = ""  # chained: a stage's key covers its own settings and every upstream key
        self.dirty = False  # once a stage runs, every later stage runs too (its inputs changed)
        self.started = time.perf_counter()
        (out / "stages").mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str, settings: Dict[str, Any], fn: Callable[[], Made]) -> Dict[str, Any]:
        """Run stage ``name`` (``fn``) unless it ran before with the same ``settings`` and upstream and
        its outputs still exist; returns its result (with ``seconds``)."""
        self.index += 1
        self.key = hashlib.sha256(
            json.dumps([self.key, name, settings], sort_keys=True).encode()
        ).hexdigest()[:16]
        stamp = self.out / "stages" / f"{name}.json"
        prefix = f"[{self.index}/{self.total}] {name}"
        if stamp.is_file() and not self.dirty:
            saved = json.loads(stamp.read_text())
            if saved.get("key") == self.key and all(Path(p).exists() for p in saved.get("outputs", [])):
                print(f"{prefix}: done before with the same settings, skipped", flush=True)
                return saved["result"]
        print(f"{prefix} ...", flush=True)
        self.dirty = True
        t0 = time.perf_counter()
        made = fn()
        result = {**made.result, "seconds": round(time.perf_counter() - t0, 1)}
        outputs = [str(p) for p in made.outputs]
        write_text(stamp, json.dumps({"key": self.key, "result": result, "outputs": outputs}, indent=2))
        print(
            f"{prefix}: {result['seconds']:.0f} s (total {time.perf_counter() - self.started:.0f} s)",
            flush=True,
        )
        return result
