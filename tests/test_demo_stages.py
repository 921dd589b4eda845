"""`drive demo` stages are idempotent: same settings skip, changed settings or lost outputs re-run."""
from __future__ import annotations

import json
from pathlib import Path

from drive.demo.run import _Stages


def _run(out: Path, calls: list, a: int, b: int) -> None:
    stage = _Stages(out, total=2)

    def first() -> dict:
        calls.append("first")
        (out / "first.txt").write_text(str(a))
        return {"value": a, "_outputs": [out / "first.txt"]}

    def second() -> dict:
        calls.append("second")
        return {"value": b}

    stage("first", {"a": a}, first)
    stage("second", {"b": b}, second)


def test_rerun_with_same_settings_skips_every_stage(tmp_path: Path) -> None:
    calls: list = []
    _run(tmp_path, calls, 1, 2)
    _run(tmp_path, calls, 1, 2)
    assert calls == ["first", "second"]
    saved = json.loads((tmp_path / "stages" / "first.json").read_text())
    assert saved["result"]["value"] == 1 and saved["outputs"] == [str(tmp_path / "first.txt")]


def test_changed_upstream_setting_reruns_that_stage_and_everything_after(tmp_path: Path) -> None:
    calls: list = []
    _run(tmp_path, calls, 1, 2)
    _run(tmp_path, calls, 5, 2)
    assert calls == ["first", "second", "first", "second"]


def test_changed_downstream_setting_reruns_only_downstream(tmp_path: Path) -> None:
    calls: list = []
    _run(tmp_path, calls, 1, 2)
    _run(tmp_path, calls, 1, 3)
    assert calls == ["first", "second", "second"]


def test_missing_output_reruns_the_stage(tmp_path: Path) -> None:
    calls: list = []
    _run(tmp_path, calls, 1, 2)
    (tmp_path / "first.txt").unlink()
    _run(tmp_path, calls, 1, 2)
    assert calls == ["first", "second", "first", "second"]


def test_unknown_baseline_family_is_named_before_any_training(tmp_path: Path) -> None:
    import pytest

    from drive.demo.run import DemoSettings, _baselines

    with pytest.raises(ValueError, match=r"unknown families \['gru'\]"):
        _baselines(DemoSettings(out=str(tmp_path), baselines="lstm,gru"), tmp_path, {"train": [], "val": []})
    assert not (tmp_path / "baselines").exists()
