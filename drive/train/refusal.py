"""A refused ``drive fit | validate | test | predict`` leaves no trace: the run's logger folders
(``tensorboard/version_N``, ``csv/version_N``), the ``config.yaml`` it saved and the folders it
made are removed again when the run fails before its first batch, so a retry after fixing the
input does not add one more empty ``version_N`` each time; the warnings of its set-up are not
printed beside its one error line. A run that completed a batch keeps everything (its logs are a
record of what it did).

Lightning creates the logger folders when it sets a run up (before the datamodule's ``setup``
and the callbacks' ``on_fit_start``, where data and on-policy rounds are refused), so refusing
earlier is not always possible; what is made is undone here.
"""

from __future__ import annotations

import os
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from drive.io.atomic import write_bytes

__all__ = ["FirstBatch", "no_trace_if_refused"]


class FirstBatch(Callback):
    """Notes that a run completed a batch (training, or evaluation outside the sanity check), and
    holds back the warnings issued before its first batch starts: a run refused while it is set
    up prints its one error line alone, a run that starts prints them then."""

    def __init__(self) -> None:
        self.done = False
        self._held: Optional[List[Tuple[Any, ...]]] = None
        self._show: Any = None

    def hold_warnings(self) -> None:
        self._held, self._show = [], warnings.showwarning
        warnings.showwarning = self._hold

    def _hold(self, *args: Any, **kwargs: Any) -> None:
        if self._held is None:
            self._show(*args, **kwargs)
        else:
            self._held.append((args, kwargs))

    def release_warnings(self, show: bool = True) -> None:
        """Show the warnings held back (``show``) or drop them, and stop holding."""
        held, self._held = self._held or [], None
        if self._show is not None:
            warnings.showwarning = self._show
            for args, kwargs in held if show else []:
                self._show(*args, **kwargs)

    def _started(self, *args: Any, **kwargs: Any) -> None:
        self.release_warnings()

    on_sanity_check_start = on_train_batch_start = on_validation_batch_start = _started
    on_test_batch_start = on_predict_batch_start = _started

    def on_train_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        self.done = True

    def on_validation_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        self.done = self.done or not trainer.sanity_checking

    def on_test_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        self.done = True

    def on_predict_batch_end(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        self.done = True


def _missing_parents(path: Path) -> List[Path]:
    """``path`` and its parents that do not exist yet, deepest first."""
    missing = []
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    return missing


def _log_dirs(trainer: Any) -> List[Path]:
    """The version folders of the run's TensorBoard and CSV loggers (named, not yet made)."""
    return [Path(lg.log_dir) for lg in trainer.loggers if isinstance(lg, (TensorBoardLogger, CSVLogger))]


@contextmanager
def no_trace_if_refused(trainer: Any, hold_warnings: bool = True) -> Iterator[FirstBatch]:
    """Run the block; if it raises before :class:`FirstBatch` saw a batch, remove what the run made:
    new logger version folders, a new or changed ``config.yaml`` of a run without loggers (the
    previous one restored), and the folders made for them when they are left empty; the warnings
    of its set-up are not shown (``hold_warnings``; they are once the first batch starts)."""
    first = FirstBatch()
    trainer.callbacks.append(first)
    fresh = [d for d in _log_dirs(trainer) if not d.exists()]
    made: List[Path] = []
    for folder in [Path(trainer.default_root_dir), *fresh]:
        made += _missing_parents(folder)
    config = Path(trainer.default_root_dir) / "config.yaml"
    before: Optional[bytes] = config.read_bytes() if config.is_file() else None
    if hold_warnings:
        first.hold_warnings()
    try:
        yield first
    except BaseException:
        first.release_warnings(show=first.done)
        if not first.done:
            _undo(fresh, made, {} if trainer.loggers else {config: before})
        raise
    first.release_warnings()


def _undo(fresh: List[Path], made: List[Path], files: Dict[Path, Optional[bytes]]) -> None:
    for folder in fresh:
        shutil.rmtree(folder, ignore_errors=True)
    for path, content in files.items():
        if content is None and path.is_file():
            path.unlink()
        elif content is not None and path.is_file() and path.read_bytes() != content:
            write_bytes(path, content)
    for folder in sorted(set(made), key=lambda p: len(p.parts), reverse=True):
        try:
            os.rmdir(folder)  # only when empty: anything else in it is not this run's to remove
        except OSError:
            pass
