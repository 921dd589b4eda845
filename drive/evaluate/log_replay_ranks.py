"""``drive evaluate --logs`` across the processes of a launch (``torchrun``, an ``srun`` step): which
process this is, the process group its share is gathered over (gloo), and the gathering itself, on
rank 0 in the logs' order (:mod:`drive.evaluate.log_replay` drives the shares)."""

from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

import torch.distributed as dist

__all__ = ["gather_logs", "join", "launch_rank", "local_cpus"]


def launch_rank() -> Tuple[int, int]:
    """This process's ``(rank, world size)`` among the processes of a launch: ``torchrun``'s ``RANK``
    and ``WORLD_SIZE``, else, inside an ``srun`` step of several tasks, ``SLURM_PROCID`` and
    ``SLURM_STEP_NUM_TASKS`` (never the batch script's own ``SLURM_*``, which describe the job);
    ``(0, 1)`` for a process on its own."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    tasks = int(env.get("SLURM_STEP_NUM_TASKS", "1"))
    if tasks > 1 and "SLURM_PROCID" in env:
        return int(env["SLURM_PROCID"]), tasks
    return 0, 1


def join(rank: int, world: int) -> bool:
    """Join the launch's process group (gloo); True if this call created it. Under SLURM without
    ``MASTER_ADDR`` / ``MASTER_PORT`` both are derived as Lightning derives them for ``drive fit``."""
    if world == 1 or dist.is_initialized():
        return False
    if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        if "SLURM_PROCID" not in os.environ:
            raise ValueError(f"rank {rank} of {world}: set MASTER_ADDR and MASTER_PORT (torchrun sets both)")
        # here: Lightning's start-up only for a SLURM launch, whose address and port it derives
        from lightning.fabric.plugins.environments import SLURMEnvironment

        slurm = SLURMEnvironment()
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = slurm.main_address, str(slurm.main_port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return True


def local_cpus() -> int:
    """CPUs for this process's workers: those it may run on, shared with the launch's other processes
    on this node (``LOCAL_WORLD_SIZE``, set by torchrun; srun binds each task to its own CPUs)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def gather_logs(
    mine: List[int], driven: List[Any], failure: Optional[Exception], world: int
) -> Optional[List[Any]]:
    """Every rank's driven logs on rank 0, in the logs' order (None on the other ranks). A rank that
    failed raises its error after telling the others, which raise a ``ValueError`` naming it."""
    errors: List[Any] = [None] * world
    dist.all_gather_object(errors, "" if failure is None else f"{type(failure).__name__}: {failure}")
    if failure is not None:
        raise failure
    failed = [f"rank {r} of {world} failed: {e}" for r, e in enumerate(errors) if e]
    if failed:
        raise ValueError("; ".join(failed))
    parts: Optional[List[Any]] = [None] * world if dist.get_rank() == 0 else None
    dist.gather_object(list(zip(mine, driven)), parts, dst=0)
    if parts is None:
        return None
    return [d for _, d in sorted((pair for part in parts for pair in part), key=lambda pair: pair[0])]
