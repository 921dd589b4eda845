"""Log replay: closed loop on recorded drives by view synthesis (data-driven simulation).

A recording plays the part the procedural road plays in :mod:`drive.sim`: :mod:`~drive.replay.path`
builds the path its car drove, :mod:`~drive.replay.view` re-renders its frames for a nearby pose,
:mod:`~drive.replay.world` is the world-like object the closed loop drives, and
:mod:`~drive.replay.loop` drives a whole recording. Policies come in as drivers (``reset``, ``act``),
so nothing here imports a policy file. Method, assumptions and limits: docs/replay.md.
"""

from drive.replay.loop import (
    NO_SOURCE_FLAG,
    RecordingReplay,
    open_loop_errors,
    recording_camera,
    replay_recording,
)
from drive.replay.path import ReferencePath, reference_paths
from drive.replay.view import ViewSynthesis
from drive.replay.world import LogWorld, replay_limits

__all__ = [
    "LogWorld",
    "NO_SOURCE_FLAG",
    "RecordingReplay",
    "ReferencePath",
    "ViewSynthesis",
    "open_loop_errors",
    "recording_camera",
    "reference_paths",
    "replay_limits",
    "replay_recording",
]
