"""Closed loop on recorded logs (``drive evaluate --logs``): a policy drives every recording by log replay.

Every log any reader takes (:mod:`drive.data.readers`) is read, each of its recordings driven by
:func:`drive.replay.replay_recording` (the built-in world's closed loop, intervention rule and metrics
over the recorded path and its re-rendered frames), and the results gathered overall, per recording and
per condition, each interventions/km with its exact 95 % interval. Logs run in parallel worker
processes (one torch thread each, so the numbers do not depend on ``workers``).

At fleet size the logs are also split across the processes of a ``torchrun`` or SLURM (``srun``)
launch (:func:`~drive.evaluate.log_replay_ranks.launch_rank`): each process drives every ``world``-th
log with its own workers, the results are gathered to rank 0 over ``torch.distributed`` (gloo, on the
CPU) and rank 0 alone writes the one report, the same as one process's (every recording is driven
alone, on one thread).

Where the method stops being true is said, not hidden: a log without camera calibration is refused
unless the reader option ``camera`` gives one (``approximate`` is stated in the report), and every
recording carries the share of re-rendered pixels that had no recorded content, flagged above
:data:`drive.replay.NO_SOURCE_FLAG`.
"""

from __future__ import annotations

import os
import shutil
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch
import torch.distributed as dist

from drive.data.cache import iter_decoded
from drive.data.errors import Problems
from drive.data.perturb import Perturbation
from drive.data.readers import ReaderOptions, discover, no_log_message, read_logs
from drive.evaluate.log_replay_ranks import gather_logs, join, launch_rank, local_cpus
from drive.io.atomic import commit
from drive.io.recording import Recording
from drive.io.workers import worker_pool
from drive.policy_drivers import make_driver
from drive.replay import RecordingReplay, replay_recording
from drive.replay.loop import END_MARGIN_M
from drive.replay.video import ReplayVideo
from drive.sim.closed_loop import summarize, summarize_with_conditions
from drive.sim.safety import SAFETY_DRIVER, InterventionRule

__all__ = ["ReplaySettings", "ReplayResult", "evaluate_logs", "launch_rank"]

Driven = List[Tuple[RecordingReplay, Dict[str, Any]]]  # one log's recordings, driven, with their info


@dataclass(frozen=True)
class ReplaySettings:
    """How the policy drives the logs.

    fps: the policy's step rate (None: its own, from its checkpoint or exported file; else the log's).
    noise_std: Gaussian noise std on [0, 1] pixels of the policy's view (0 = none), seeded by ``seed``.
    rule: the safety driver's intervention rule (the world's: 1 m, pi/10).
    use_poses: build the path from the log's poses where it has them (else from curvature and speed).
    video: write a video per recording (re-rendered view | top-down map).
    """

    fps: Optional[float] = None
    noise_std: float = 0.0
    seed: int = 0
    rule: InterventionRule = SAFETY_DRIVER
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
        # every frame decoded once, whatever drives: a truncated or mis-sized image is named (file
        # and row) even for the expert, which never looks at frames, and before the drive starts
        for _ in iter_decoded(rec, Problems("raise")):
            pass
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
                rule=settings.rule,
                use_poses=settings.use_poses,
            )
        except BaseException:
            if video is not None:
                video.close(keep=False)
            raise
        if video is not None:
            video.close(keep=bool(replay.segments))  # no empty video of a recording with nothing to drive
        info = {"fps": fps, "camera": _camera_origin(rec, options)}
        if not replay.segments:
            info["skipped"] = _nothing_to_drive(rec, replay)
        out.append((replay, info))
    return out


def _nothing_to_drive(rec: Recording, replay: RecordingReplay) -> str:
    """Why a recording gave no segment to drive, in words for the report."""
    speed = rec.log["speed_mps"]
    if len(rec) < 2:
        return f"nothing to drive: {len(rec)} row{'' if len(rec) == 1 else 's'}"
    if not (speed > 0).any():
        return "nothing to drive: the car stands still (speed_mps is 0 in every row)"
    return (
        f"nothing to drive: no moving, gap-free stretch longer than {2 * END_MARGIN_M:g} m "
        f"(the recorded path is {1000 * replay.recorded_km:.1f} m)"
    )


def _recording_row(rec: RecordingReplay, info: Dict[str, Any]) -> Dict[str, Any]:
    if "skipped" in info:
        return {"name": rec.name, "skipped": info["skipped"]}
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
    mine = list(range(rank, len(items), world))  # under torchrun / srun: every world-th log
    workers = max(1, min(workers or local_cpus(), len(mine)))
    # videos are written into a hidden folder beside video_dir (by the workers, in any process of the
    # launch) and it replaces video_dir only when every log was driven: a failed run leaves no video
    token = f"{world}ranks" if world > 1 else str(os.getpid())  # one folder every rank writes into
    staging = video_dir.with_name(f".{video_dir.name}.partial-{token}") if video_dir else None
    args = [(policy, items[i], dict(reader or {}), settings, str(staging) if staging else None) for i in mine]
    try:
        driven = _drive_launch(args, mine, workers, progress, rank, world)
        if driven is None:  # a process other than rank 0: rank 0 writes the report
            return None
        recordings, rows = _collect(driven)
        metrics = _metrics(policy, logs, settings, recordings, rows)
        if staging is not None and video_dir is not None:
            staging.mkdir(parents=True, exist_ok=True)
            commit(staging, video_dir)
    finally:
        if staging is not None and staging.exists() and rank == 0:
            shutil.rmtree(staging, ignore_errors=True)
    return ReplayResult(metrics, recordings)


def _drive_launch(
    args: List[Tuple[Any, ...]],
    mine: List[int],
    workers: int,
    progress: Optional[Callable[[Dict[str, Any]], None]],
    rank: int,
    world: int,
) -> Optional[List[Driven]]:
    """This process's logs driven; in a launch of several, every process's gathered on rank 0 in the
    logs' order (None on the others; a failed share fails every process, naming its rank)."""
    if world == 1:
        return _drive_logs(args, workers, progress)
    joined = join(rank, world)
    try:
        driven: List[Driven] = []
        failure: Optional[Exception] = None
        try:
            driven = _drive_logs(args, workers, progress)
        except Exception as e:  # noqa: BLE001 -- told to every rank, then re-raised (gather_logs)
            failure = e
        return gather_logs(mine, driven, failure, world)
    finally:
        if joined:
            dist.destroy_process_group()


def _drive_logs(
    args: List[Tuple[Any, ...]], workers: int, progress: Optional[Callable[[Dict[str, Any]], None]]
) -> List[Driven]:
    """Every log of ``args`` (:func:`_replay_log`'s arguments) driven, in order, by ``workers`` processes."""
    with ExitStack() as stack:
        if workers == 1:
            done: Any = (_replay_log(*a) for a in args)
        else:
            pool = stack.enter_context(worker_pool(workers))
            done = (job.result() for job in [pool.submit(_replay_log, *a) for a in args])
        out: List[Driven] = []
        for results in done:
            out.append(results)
            for rec, info in results if progress is not None else []:
                progress(_recording_row(rec, info))
    return out


def _collect(driven: List[Driven]) -> Tuple[List[RecordingReplay], List[Dict[str, Any]]]:
    """The recordings driven and every recording's row, in the logs' order (a recording with nothing
    to drive is a row saying why, ``skipped``); segments are numbered across the recordings driven."""
    recordings: List[RecordingReplay] = []
    rows: List[Dict[str, Any]] = []
    for rec, info in (pair for results in driven for pair in results):
        row = _recording_row(rec, info)
        if "skipped" not in row:
            first = sum(len(r.segments) for r in recordings)
            for i, seg in enumerate(rec.segments):
                seg.index = first + i
            recordings.append(rec)
        rows.append(row)
    return recordings, rows


def _metrics(
    policy: str,
    logs: Sequence[str],
    settings: ReplaySettings,
    recordings: List[RecordingReplay],
    rows: List[Dict[str, Any]],
) -> Dict[str, Any]:
    """metrics.json: overall, per recording and per condition; the recordings skipped, and why."""
    skipped = [{"name": r["name"], "reason": r["skipped"]} for r in rows if "skipped" in r]
    rows = [r for r in rows if "skipped" not in r]
    segments = [s for r in recordings for s in r.segments]
    if not segments:
        why = "; ".join(f"{s['name']}: {s['reason']}" for s in skipped)
        raise ValueError(
            f"{', '.join(logs)}: no recording has a drivable stretch "
            f"(moving, gap-free, > {2 * END_MARGIN_M:g} m): {why}"
        )
    shown = np.array([r.frames_shown for r in recordings], dtype=np.float64)
    means = np.array([r.no_source["mean"] for r in recordings])
    return {
        "driver": policy,
        "logs": list(logs),
        "settings": asdict(settings),
        "criteria": {**settings.rule.to_dict(), "reference": "the recorded path"},
        "recordings": len(recordings),
        "segments": len(segments),
        "camera": sorted({row["camera"] for row in rows}),
        # per recording: the path from the log's own poses, or integrated from curvature and speed
        "path_sources": {src: sum(r["path_source"] == src for r in rows) for src in ("poses", "curvature")},
        "no_source_share_mean": float((means * shown).sum() / shown.sum()) if shown.sum() else 0.0,
        **summarize_with_conditions(segments),
        "per_recording": rows,
        "skipped": skipped,
    }
