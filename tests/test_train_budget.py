"""``--budget.*`` (drive.train.budget): the demo profile sets no step budget of its own; ``drive fit``
sizes it from the minutes of training logs, within its bounds, and a budget given on the command line
wins. Without either the fit is refused in one line (Lightning would train forever)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import List

import pytest

from drive.checkpoint import read_checkpoint
from drive.cli import main
from drive.sim.record import simulate
from drive.train.budget import StepBudget, check_budget


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("budget")
    simulate(root / "logs", minutes=1.0, seed=3, fps=10.0, recording_minutes=0.5)  # 2 x 30 s
    return root


def _fit(logs: Path, run: str, *extra: str) -> List[str]:
    argv = ["fit", "--config", "demo", "--data.train", f"[{logs / 'logs'}]", "--data.val_split", "none"]
    argv += ["--data.cache_dir", str(logs / "cache"), "--data.num_workers", "0", "--data.augment", "null"]
    argv += ["--data.batch_size", "2", "--onpolicy.every_n_steps", "0", "--val_replay.enabled", "false"]
    argv += ["--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]
    return [*argv, "--trainer.default_root_dir", str(logs / run), *extra]


def _steps(logs: Path, run: str) -> int:
    return int(read_checkpoint(logs / run / "checkpoints" / "last.ckpt")["global_step"])


def test_the_budget_follows_the_minutes_of_logs_within_its_bounds(logs, caplog):
    """1 minute of logs at 5 steps per minute: 5 steps; bounded by max_steps 3: 3."""
    with caplog.at_level("INFO"):
        assert main(_fit(logs, "free", "--budget.steps_per_minute", "5", "--budget.min_steps", "1")) == 0
    assert _steps(logs, "free") == 5  # and the cosine schedule read 5 (unbounded, it could not run)
    assert "step budget 5: 1.0 minutes of training logs x 5 steps per minute" in caplog.text
    bounded = ["--budget.steps_per_minute", "5", "--budget.min_steps", "1", "--budget.max_steps", "3"]
    assert main(_fit(logs, "capped", *bounded)) == 0
    assert _steps(logs, "capped") == 3


def test_a_budget_given_on_the_command_line_wins(logs):
    assert main(_fit(logs, "given", "--budget.min_steps", "1", "--trainer.max_steps", "2")) == 0
    assert _steps(logs, "given") == 2  # the profile's budget would be its min_steps


def test_no_budget_at_all_is_refused_in_one_line_before_the_logs_are_read(logs, capsys):
    argv = _fit(logs, "none", "--budget.steps_per_minute", "0", "--data.cache_dir", str(logs / "cache_none"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no training budget" in err and "--trainer.max_steps" in err
    assert not (logs / "none" / "checkpoints" / "last.ckpt").exists()
    assert not (logs / "cache_none").exists()  # refused when parsed: no log was read or cached


@pytest.mark.parametrize(
    "max_steps, max_epochs, max_time, refused",
    [
        (-1, -1, None, True),  # Lightning would train forever
        (None, -1, None, True),
        (10, -1, None, False),
        (-1, 3, None, False),
        (-1, None, None, False),  # Lightning's own default: 1000 epochs
        (-1, -1, "00:01:00:00", False),  # the user chose wall time
    ],
)
def test_what_counts_as_a_budget(max_steps, max_epochs, max_time, refused):
    trainer = SimpleNamespace(max_steps=max_steps, max_epochs=max_epochs, max_time=max_time)
    if refused:
        with pytest.raises(ValueError, match="no training budget"):
            check_budget(trainer, 0.0)
    else:
        check_budget(trainer, 0.0)
    check_budget(trainer, 360.0)  # the callback sizes one


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(steps_per_minute=-1.0), "budget.steps_per_minute must be >= 0"),
        (dict(steps_per_minute=float("nan")), "budget.steps_per_minute must be a finite number"),
        (dict(min_steps=0), "budget.min_steps must be >= 1"),
        (dict(min_steps=10, max_steps=5), "budget.max_steps must be >= 10"),
    ],
)
def test_bad_bounds_are_named(kw, message):
    with pytest.raises(ValueError, match=message):
        StepBudget(**kw)
