"""Worker processes that leave Ctrl-C to the process that started them.

Ctrl-C sends SIGINT to every process of the terminal's process group. A spawned worker would raise
``KeyboardInterrupt`` wherever it stood (importing torch, waiting for work) and print a traceback of
its own beside the command's one line. :func:`worker_pool`'s workers start with SIGINT ignored (a
disposition the spawn's ``exec`` keeps, and Python keeps at start-up), so the parent alone answers
it: an exception in the pool's block, ``KeyboardInterrupt`` included, stops the workers at once and
cancels the jobs not started, instead of waiting for the running ones to finish. What a worker
writes goes into a temporary its command discards when it fails (log replay's videos), so stopping
one loses nothing a later run needs.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from concurrent import futures
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["QuietPool", "stop_now", "worker_pool"]


class QuietPool(futures.ProcessPoolExecutor):
    """A spawn ``ProcessPoolExecutor`` whose workers ignore SIGINT (they are started by ``submit``,
    with SIGINT ignored in this process for that moment)."""

    def __init__(self, workers: int, **kwargs: Any) -> None:
        super().__init__(max_workers=workers, mp_context=multiprocessing.get_context("spawn"), **kwargs)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future:
        previous = signal.getsignal(signal.SIGINT)
        # signals are the main thread's to set; a handler not set from Python could not be restored
        if previous is None or threading.current_thread() is not threading.main_thread():
            return super().submit(fn, *args, **kwargs)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return super().submit(fn, *args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)


def stop_now(pool: futures.ProcessPoolExecutor) -> None:
    """End ``pool`` without waiting for its jobs: the jobs not started cancelled, the workers
    terminated (SIGTERM, which they do not handle) and gone when this returns, so none writes on
    into a temporary its caller is about to remove."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=10)


@contextmanager
def worker_pool(workers: int, **kwargs: Any) -> Iterator[QuietPool]:
    """A :class:`QuietPool` for the block: shut down as ``with ProcessPoolExecutor`` does when the
    block ends, stopped at once (:func:`stop_now`) when it raises."""
    pool = QuietPool(workers, **kwargs)
    try:
        yield pool
    except BaseException:
        stop_now(pool)
        raise
    pool.shutdown(wait=True)
