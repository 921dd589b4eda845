"""drive's own work under DDP: every rank does a share, and every rank gets the whole (:func:`gather`).

On-policy rounds (:mod:`drive.train.onpolicy`) and validation by driving
(:mod:`drive.train.replay_validation`) run in a process of their own beside each training process;
under Lightning's DDP (``drive fit`` with ``--trainer.devices N``, ``torchrun``, SLURM) each rank
drives its share of a round's episodes or of the validation paths, and the shares are all-gathered
at a step every rank reaches, so every rank ends with the same buffer and the same numbers. A share
that failed on one rank fails the gather on every rank, naming that rank, so no rank waits forever for
a peer that stopped.

:func:`side_process` is the process each rank drives in: one spawned worker that exits when its
training process dies (a ``kill -9``, a preempted node), instead of waiting forever for work.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent import futures
from typing import Any, Callable, Dict, List

import torch
import torch.distributed as dist

from drive.io.workers import QuietPool

__all__ = ["gather", "gather_results", "policy_snapshot", "side_process"]


def policy_snapshot(pl_module: Any, world: int) -> Dict[str, torch.Tensor]:
    """A CPU copy of the policy's weights to drive with; under DDP rank 0's on every rank (a
    collective): parameters agree across ranks, but between DDP's buffer broadcasts each rank's
    batch-norm running statistics are its own, and rank 0's are the ones its checkpoints keep."""
    weights = {k: v.detach().to("cpu", copy=True) for k, v in pl_module.policy.state_dict().items()}
    if world > 1:
        weights = pl_module.trainer.strategy.broadcast(weights, src=0)
    return weights


def side_process() -> futures.ProcessPoolExecutor:
    """One spawned worker process for work beside training (rollouts, validation drives) that exits
    within a second of its training process's death, and leaves Ctrl-C to it
    (:class:`drive.io.workers.QuietPool`; end it with :func:`drive.io.workers.stop_now`)."""
    return QuietPool(1, initializer=_exit_with, initargs=(os.getpid(),))


def _exit_with(parent: int) -> None:
    """In the worker: a watchdog thread that ends the process once ``parent`` is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def gather(obj: Any, world: int) -> List[Any]:
    """Every rank's ``obj`` in rank order, on every rank (``all_gather_object``); ``[obj]`` in one
    process. Every rank must call it at the same point."""
    if world <= 1:
        return [obj]
    out: List[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def gather_results(result: Callable[[], Any], world: int) -> List[Any]:
    """:func:`gather` of ``result()``, every rank's in rank order. A rank whose ``result()`` raised
    re-raises it after the gather and every other rank raises a ``RuntimeError`` naming that rank and
    the error; in one process ``result()``'s exception propagates as it is."""
    if world <= 1:
        return [result()]
    failure = None
    try:
        value, error = result(), ""
    except Exception as e:  # noqa: BLE001 -- handed to every rank, then re-raised here
        failure, value, error = e, None, f"{type(e).__name__}: {e}"
    parts = gather((value, error), world)
    if failure is not None:
        raise failure
    failed = [f"rank {r}: {err}" for r, (_, err) in enumerate(parts) if err]
    if failed:
        raise RuntimeError("; ".join(failed))
    return [value for value, _ in parts]
