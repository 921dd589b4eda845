"""Drive a recording closed loop: every segment of its reference path, with the world's safety driver.

:func:`replay_recording` turns one recording into :class:`~drive.sim.closed_loop.Segment` results (the
built-in world's, so :func:`~drive.sim.closed_loop.summarize` gives the same metrics) and the
replay's own measures: how much of each frame had no recorded content, where the path came from,
and how much of the recording could not be driven (standing, or segments too short).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from drive.io.recording import Recording
from drive.replay.path import reference_paths
from drive.replay.world import LogWorld
from drive.sim.closed_loop import Segment, drive_segment
from drive.sim.driver import Observation, needs_image
from drive.sim.safety import SAFETY_DRIVER, InterventionRule

__all__ = ["RecordingReplay", "replay_recording", "open_loop_errors", "recording_camera", "NO_SOURCE_FLAG"]

# A recording whose re-rendered views lack recorded content for more than this share of the pixels the
# policy sees (on average) is flagged: what the policy saw there was mostly repeated border.
NO_SOURCE_FLAG = 0.05
END_MARGIN_M = 1.0  # a segment's drive stops this far before its last frame


@dataclass
class RecordingReplay:
    """One recording driven in replay.

    ``segments``: the driven segments; ``recorded_km``: length of the recording's drivable path;
    ``not_driven_s``: recorded time outside any driven segment (standing, gaps, short pieces);
    ``no_source``: mean / p95 / max share of viewed pixels without recorded content;
    ``path_source``: ``poses`` or ``curvature``; ``conditions``: named conditions of the log.
    """

    name: str
    conditions: Dict[str, str]
    segments: List[Segment]
    recorded_km: float
    not_driven_s: float
    path_source: str
    frames_shown: int
    no_source: Dict[str, float] = field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        return self.no_source.get("mean", 0.0) > NO_SOURCE_FLAG


def recording_camera(recording: Recording) -> Dict[str, float]:
    """The recording's calibration as a dict, or a ValueError saying how to give one."""
    if recording.meta.camera is None:
        raise ValueError(
            f"{recording.path}: the log carries no camera calibration, and log replay re-renders its "
            "frames with it: give the reader option camera (--set camera='{hfov_deg: 80, height_m: 1.5, "
            "pitch_rad: 0.1}' or full fx, fy, cx, cy, height_m, pitch_rad), or --set camera=approximate "
            "(stated in the report)"
        )
    return recording.meta.camera.to_dict()


def replay_recording(
    recording: Recording,
    driver: Any,
    fps: float,
    region: Optional[Sequence[int]] = None,
    perturb: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    video: Optional[Callable[[Any, int], None]] = None,
    rule: InterventionRule = SAFETY_DRIVER,
    use_poses: bool = True,
) -> RecordingReplay:
    """Drive every segment of ``recording`` with ``driver`` stepping at ``fps`` (module docstring), with
    the safety driver's ``rule``.

    ``region``: [top, bottom, left, right] of the frame the policy sees (for the no-source share).
    """
    camera = recording_camera(recording)
    name = str(recording.path) if recording.path is not None else "recording"
    conditions = {k: v for k, v in recording.meta.conditions.items() if isinstance(v, str)}
    paths = reference_paths(recording, use_poses=use_poses)
    segments: List[Segment] = []
    shares: List[float] = []
    driven_s = 0.0
    for path in paths:
        if path.length_m <= 2.0 * END_MARGIN_M:
            continue
        world = LogWorld(path, recording.source, camera, fps, region)
        segments.append(
            drive_segment(
                world, driver, path.length_m - END_MARGIN_M, perturb, rule, video, len(segments), conditions
            )
        )
        shares += world.no_source
        driven_s += path.duration_s
    t = recording.log["timestamp_s"]
    share = np.asarray(shares) if shares else np.zeros(1)
    return RecordingReplay(
        name=name,
        conditions=conditions,
        segments=segments,
        recorded_km=sum(p.length_m for p in paths) / 1000.0,
        not_driven_s=max(0.0, float(t[-1] - t[0]) - driven_s) if len(t) else 0.0,
        path_source=paths[0].source if paths else "none",
        frames_shown=len(shares),
        no_source={
            "mean": float(share.mean()),
            "p95": float(np.percentile(share, 95)),
            "max": float(share.max()),
        },
    )


def open_loop_errors(recording: Recording, driver: Any, use_poses: bool = True) -> np.ndarray:
    """The driver's command minus the recorded curvature (1/m) at every frame of every segment,
    open loop: it sees each recorded frame at the recorded pose (no feedback), with the recorded
    elapsed time, and its state is carried through a segment (reset at each segment's start)."""
    errors: List[float] = []
    for path in reference_paths(recording, use_poses=use_poses):
        driver.reset()
        for k, index in enumerate(path.frames):
            x, y, yaw = path.frame_pose[k]
            dt = float(path.timestamp_s[k] - path.timestamp_s[k - 1]) if k else 1.0 / recording.meta.fps
            image = recording.source.read(int(index)) if needs_image(driver) else None
            obs = Observation(
                image=image,
                dt_s=dt,
                speed_mps=float(path.speed_mps[k]),
                timestamp_s=float(path.timestamp_s[k]),
                road=path.road,
                s_m=float(path.frame_s_m[k]),
                x_m=float(x),
                y_m=float(y),
                yaw_rad=float(yaw),
                lateral_offset_m=0.0,
                heading_error_rad=0.0,
            )
            errors.append(float(driver.act(obs)) - float(path.curvature_per_m[k]))
    return np.asarray(errors)
