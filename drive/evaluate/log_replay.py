"""Closed loop on recorded logs (``drive evaluate --logs``): a policy drives every recording by log replay.

Every log any reader takes (:mod:`drive.data.readers`) is read, each of its recordings driven by
:func:`drive.replay.replay_recording` (the built-in world's closed loop, intervention rule and metrics
over the recorded path and its re-rendered frames), and the results gathered overall, per recording and
per condition, each interventions/km with its exact 95 % interval. Logs run in parallel worker
processes (one torch thread each, so the numbers do not depend on ``workers``).

At fleet size the logs are also split across the processes of a ``torchrun`` or SLURM (``srun``)
launch (:func:`launch_rank`): each process drives every ``world``-th log with its own workers, the
results are gathered to rank 0 over ``torch.distributed`` (gloo, on the CPU) and rank 0 alone writes
the one report, the same as one process's (every recording is driven alone, on one thread).

Where the method stops being true is said, not hidden: a log without camera calibration is refused
unless the reader option ``camera`` gives one (``approximate`` is stated in the report), and every
recording carries the share of re-rendered pixels that had no recorded content, flagged above
:data:`drive.replay.NO_SOURCE_FLAG`.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from concurrent import futures
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch
import torch.distributed as dist

from drive.data.perturb import Perturbation
from drive.data.readers import ReaderOptions, discover, no_log_message, read_logs
from drive.io.recording import Recording
from drive.policy_drivers import make_driver
from drive.replay import RecordingReplay, replay_recording
from drive.replay.video import ReplayVideo
from drive.sim.closed_loop import TAKEOVER_S, summarize, summarize_with_conditions

__all__ = ["ReplaySettings", "ReplayResult", "evaluate_logs", "launch_rank"]

Driven = List[Tuple[RecordingReplay, Dict[str, Any]]]  # one log's recordings, driven, with their info


@dataclass(frozen=True)
class ReplaySettings:
    """How the policy drives the logs.

    fps: the policy's step rate (None: its own, from its checkpoint or exported file; else the log's).
    noise_std: Gaussian noise std on [0, 1] pixels of the policy's view (0 = none), seeded by ``seed``.
    max_lateral_m, max_heading_rad: the intervention rule (the world's: 1 m, pi/10).
    use_poses: build the path from the log's poses where it has them (else from curvature and speed).
    video: write a video per recording (re-rendered view | top-down map).
    """

    fps: Optional[float] = None
    noise_std: float = 0.0
    seed: int = 0
    max_lateral_m: float = 1.0
    max_heading_rad: float = math.pi / 10
    use_poses: bool = True
    video: bool = False
    device: str = "cpu"


@dataclass
class ReplayResult:
    """``metrics`` (JSON-able) and every recording's :class:`~drive.replay.RecordingReplay`."""

    metrics: Dict[str, Any]
    recordings: List[RecordingReplay]

    def save(self, out_dir: Path) -> Dict[str, Path]:
        # imported here: matplotlib's start-up only where a report is written, never in the workers
        from drive.evaluate.log_replay_report import write_replay_report

        return write_replay_report(self, Path(out_dir))


def _camera_origin(rec: Recording, options: ReaderOptions) -> str:
    """Where a recording's calibration came from: ``log``, ``given`` (reader option) or ``approximate``."""
    given = options.calibration()
    if given is None or rec.meta.camera is None:
        return "log"
    if hasattr(given, "resolve"):
        given = given.resolve(rec.meta.width, rec.meta.height)
    if given != rec.meta.camera:
        return "log"  # a canonical recording keeps its own calibration over the option
    return "approximate" if options.camera == "approximate" else "given"


def _check_frame_size(driver: Any, rec: Recording) -> None:
    size = (getattr(driver, "meta", None) or {}).get("frame_size")
    if size is not None and [rec.meta.height, rec.meta.width] != [int(v) for v in size]:
        raise ValueError(
            f"{rec.path}: frames are {rec.meta.width}x{rec.meta.height}, the policy was trained on "
            f"{int(size[1])}x{int(size[0])} camera frames; replay it on logs of its own camera"
        )


def _step_rate(driver: Any, rec: Recording, fps: Optional[float]) -> float:
    own = getattr(driver, "nominal_dt_s", None)
    if fps is not None:
        return float(fps)
    return 1.0 / float(own) if own else float(rec.meta.fps)


def _replay_log(
    policy: str,
    log: Tuple[str, str],
    reader: Dict[str, Any],
    settings: ReplaySettings,
    video_dir: Optional[str],
) -> List[Tuple[RecordingReplay, Dict[str, Any]]]:
    """One log (all its recordings) driven by a fresh driver: runs in a worker process, on one core
    (one torch thread, one OpenCV thread: workers are the parallelism)."""
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    driver = make_driver(policy, settings.device, threads=1)
    options = ReaderOptions.from_any(reader)
    out = []
    for rec in read_logs([log[0]], log[1], options):
        _check_frame_size(driver, rec)
        fps = _step_rate(driver, rec, settings.fps)
        if settings.noise_std > 0:
            perturb = Perturbation("gaussian", settings.noise_std, seed=settings.seed)
            if hasattr(driver, "view"):  # a checkpoint's PolicyDriver: noise on the network's view
                driver.perturb, perturb = perturb, None
        else:
            perturb = None
        crop = ((getattr(driver, "meta", None) or {}).get("preprocessing") or {}).get("crop")
        video = None
        if video_dir is not None:
            name = Path(str(rec.path)).name or "recording"
            video = ReplayVideo(Path(video_dir) / f"{len(out):02d}-{name}.mp4", fps)
        try:
            replay = replay_recording(
                rec,
                driver,
                fps,
                region=crop,
                perturb=perturb,
                video=video,
                max_lateral_m=settings.max_lateral_m,
                max_heading_rad=settings.max_heading_rad,
                use_poses=settings.use_poses,
            )
        finally:
            if video is not None:
                video.close(keep=True)
        out.append((replay, {"fps": fps, "camera": _camera_origin(rec, options)}))
    return out


def _recording_row(rec: RecordingReplay, info: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "name": rec.name,
        **summarize(rec.segments),
        "conditions": rec.conditions,
        "segments": len(rec.segments),
        "recorded_km": rec.recorded_km,
        "not_driven_s": rec.not_driven_s,
        "path_source": rec.path_source,
        "camera": info["camera"],
        "fps": info["fps"],
        "frames_shown": rec.frames_shown,
        "no_source_share": rec.no_source,
        "no_source_flagged": rec.flagged,
    }


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


def _join(rank: int, world: int) -> bool:
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


def _local_cpus() -> int:
    """CPUs for this process's workers: those it may run on, shared with the launch's other processes
    on this node (``LOCAL_WORLD_SIZE``, set by torchrun; srun binds each task to its own CPUs)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def _drive_logs(
    args: List[Tuple[Any, ...]], workers: int, progress: Optional[Callable[[Dict[str, Any]], None]]
) -> List[Driven]:
    """Every log of ``args`` (:func:`_replay_log`'s arguments) driven, in order, by ``workers`` processes."""
    if workers == 1:
        done: Any = (_replay_log(*a) for a in args)
    else:
        pool = futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("spawn")
        )
        done = (job.result() for job in [pool.submit(_replay_log, *a) for a in args])
    out: List[Driven] = []
    try:
        for results in done:
            out.append(results)
            for rec, info in results if progress is not None else []:
                progress(_recording_row(rec, info))
    finally:
        if workers > 1:
            pool.shutdown(cancel_futures=True)
    return out


def _gather_logs(
    mine: List[int], driven: List[Driven], failure: Optional[Exception], world: int
) -> Optional[List[Driven]]:
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


def evaluate_logs(
    policy: str,
    logs: Sequence[str],
    format: Optional[str] = None,
    reader: Optional[Dict[str, Any]] = None,
    settings: ReplaySettings = ReplaySettings(),
    workers: Optional[int] = None,
    video_dir: Optional[Path] = None,
    progress: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Optional[ReplayResult]:
    """Drive ``policy`` (``expert``, ``constant:K``, a checkpoint or an exported file) closed loop on
    every recording of ``logs`` (module docstring); ``progress(row)`` after each recording this
    process drove. In a launch of several processes (:func:`launch_rank`) each drives its share and
    only rank 0 returns the result (the others return None)."""
    ReaderOptions.from_any(reader)  # a bad option is refused before any worker starts
    items: List[Tuple[str, str]] = []
    for path in logs:
        found = discover(path, format)
        if not found:
            raise ValueError(f"{path}: {no_log_message(path)}")
        items += [(str(p), fmt) for p, fmt in found]
    make_driver(policy, settings.device)  # a bad policy is refused here, with its own message
    rank, world = launch_rank()
    mine = list(range(rank, len(items), world))
    workers = max(1, min(workers or _local_cpus(), len(mine)))
    args = [
        (policy, items[i], dict(reader or {}), settings, str(video_dir) if video_dir else None) for i in mine
    ]
    if world == 1:
        return _result(policy, logs, settings, _drive_logs(args, workers, progress))
    joined = _join(rank, world)
    try:
        driven: List[Driven] = []
        failure: Optional[Exception] = None
        try:
            driven = _drive_logs(args, workers, progress)
        except Exception as e:  # noqa: BLE001 -- told to every rank, then re-raised (_gather_logs)
            failure = e
        every = _gather_logs(mine, driven, failure, world)
    finally:
        if joined:
            dist.destroy_process_group()
    return None if every is None else _result(policy, logs, settings, every)


def _result(policy: str, logs: Sequence[str], settings: ReplaySettings, driven: List[Driven]) -> ReplayResult:
    """The report's metrics over every log's driven recordings, in the logs' order."""
    recordings: List[RecordingReplay] = []
    rows: List[Dict[str, Any]] = []
    for rec, info in (pair for results in driven for pair in results):
        first = sum(len(r.segments) for r in recordings)
        for i, seg in enumerate(rec.segments):  # segments are numbered across recordings
            seg.index = first + i
        recordings.append(rec)
        rows.append(_recording_row(rec, info))
    segments = [s for r in recordings for s in r.segments]
    if not segments:
        raise ValueError(f"{', '.join(logs)}: no recording has a drivable stretch (moving, gap-free, > 2 m)")
    shown = np.array([r.frames_shown for r in recordings], dtype=np.float64)
    means = np.array([r.no_source["mean"] for r in recordings])
    metrics: Dict[str, Any] = {
        "driver": policy,
        "logs": list(logs),
        "settings": asdict(settings),
        "criteria": {
            "max_lateral_m": settings.max_lateral_m,
            "max_heading_rad": settings.max_heading_rad,
            "takeover_s": TAKEOVER_S,
            "reference": "the recorded path",
        },
        "recordings": len(recordings),
        "segments": len(segments),
        "camera": sorted({row["camera"] for row in rows}),
        "no_source_share_mean": float((means * shown).sum() / shown.sum()) if shown.sum() else 0.0,
        **summarize_with_conditions(segments),
        "per_recording": rows,
    }
    return ReplayResult(metrics, recordings)
