"""Data collection: the expert drives, DART noise perturbs it, the world writes recordings.

Each recording is one road (``index`` of world ``(seed, split)``) under one appearance,
written in the canonical format by :class:`drive.io.recording.RecordingWriter`. The label
``curvature`` is the expert's CLEAN command for the state the car is in; the executed
command adds :class:`~drive.sim.expert.SteeringNoise` (DART), so the logs contain
recoveries; the noise pauses while the car is more than ``NOISE_PAUSE_LATERAL_M`` off the
lane centre. ``lateral_offset_m`` and ``heading_error_rad`` are ground truth, and so is the car's pose
(``x_m``, ``y_m``, ``yaw_rad``, world frame), from which log replay builds the driven path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from drive.io.recording import CameraCalibration, RecordingMeta, RecordingWriter
from drive.sim.appearance import (
    CONDITION_AXES,
    Appearance,
    condition_grid,
    parse_conditions,
    sample_appearance,
)
from drive.sim.camera import Camera
from drive.sim.expert import PurePursuitExpert, SteeringNoise
from drive.sim.render import Renderer
from drive.sim.road import generate_road, kind_position, road_kind
from drive.sim.world import DEFAULT_FPS, DEFAULT_SPEED_MPS, World

__all__ = [
    "camera_calibration",
    "check_world_settings",
    "latin_conditions",
    "record_drive",
    "record_logs",
    "simulate",
    "LOG_FPS",
    "MAX_SPEED_KMH",
]

DEFAULT_NOISE_STD = 0.01  # 1/m: lateral deviations of ~0.2 m RMS, up to ~0.7 m, at 30 km/h
NOISE_PAUSE_LATERAL_M = 0.7
# Bounds of settings that describe a car on the world's roads; anything beyond is a typo (1e6 km/h) and is
# refused rather than recorded.
MAX_SPEED_KMH = 150.0
MAX_FPS = 240.0
MAX_NOISE_STD = 0.2  # 1/m: a 5 m radius, the tightest lane of hard roads
IMAGE_SIDES = {"--width": 16, "--height": 8}  # the camera's least size; at most 4096 pixels
LOG_FPS = 10.0  # the rate of record_logs' held-out logs


def check_world_settings(
    speed_kmh: Optional[float] = None,
    fps: Optional[float] = None,
    width: Optional[int] = None,
    height: Optional[int] = None,
    noise_std: Optional[float] = None,
    minutes: Optional[float] = None,
    recording_minutes: Optional[float] = None,
) -> None:
    """Refuse absurd or non-finite settings with a ``ValueError`` naming the option (``--speed-kmh``,
    the ``drive simulate | evaluate`` spelling); ``None`` means not given."""

    def bad(option: str, value: Any, want: str) -> ValueError:
        return ValueError(
            f"{option} must be {want}, got {float(value):g}"
            if isinstance(value, (int, float))
            else f"{option} must be {want}, got {value!r}"
        )

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and math.isfinite(value)

    if speed_kmh is not None and not (number(speed_kmh) and 0 < speed_kmh <= MAX_SPEED_KMH):
        raise bad("--speed-kmh", speed_kmh, f"in (0, {MAX_SPEED_KMH:g}] km/h")
    if fps is not None and not (number(fps) and 0 < fps <= MAX_FPS):
        raise bad("--fps", fps, f"in (0, {MAX_FPS:g}] Hz")
    for option, side in (("--width", width), ("--height", height)):
        if side is not None and not (isinstance(side, int) and IMAGE_SIDES[option] <= side <= 4096):
            raise bad(option, side, f"a whole number of pixels in [{IMAGE_SIDES[option]}, 4096]")
    if noise_std is not None and not (number(noise_std) and 0 <= noise_std <= MAX_NOISE_STD):
        raise bad("--noise-std", noise_std, f"in [0, {MAX_NOISE_STD:g}] 1/m")
    for option, value in (("--minutes", minutes), ("--recording-minutes", recording_minutes)):
        if value is not None and not (number(value) and value > 0):
            raise bad(option, value, "positive (minutes)")


def camera_calibration(camera: Camera) -> CameraCalibration:
    """The canonical calibration of a sim camera (mounted on the vehicle's centre line)."""
    return CameraCalibration(
        fx=camera.fx,
        fy=camera.fy,
        cx=camera.cx,
        cy=camera.cy,
        height_m=camera.height_m,
        pitch_rad=camera.pitch_rad,
    )


def record_drive(
    out_dir: Union[str, Path],
    seed: int,
    index: int = 0,
    split: str = "train",
    minutes: float = 2.0,
    conditions: Optional[Dict[str, str]] = None,
    storage: str = "frames",
    noise_std: float = DEFAULT_NOISE_STD,
    camera: Optional[Camera] = None,
    speed_mps: float = DEFAULT_SPEED_MPS,
    fps: float = DEFAULT_FPS,
    overwrite: bool = False,
    roads: str = "easy",
) -> Path:
    """Record ``minutes`` of expert driving on road ``index`` of world ``(seed, split)`` from the set
    ``roads`` (:mod:`drive.sim.road`; on hard roads ``speed_mps`` is the cruise speed).

    ``conditions`` pins appearance axes by name (``{"season": "winter"}``). Returns the directory.
    """
    if not minutes > 0:
        raise ValueError(f"minutes must be positive, got {minutes}")
    n_frames = int(round(minutes * 60.0 * fps))
    length = n_frames / fps * speed_mps + 300.0  # + room for the camera to look ahead
    road = generate_road(seed, length, split=split, index=index, roads=roads)
    appearance = sample_appearance(seed, split, index, conditions)
    renderer = Renderer(camera or Camera.default())
    world = World(road, appearance, renderer, speed_mps=speed_mps, fps=fps, start_s_m=5.0)
    expert = PurePursuitExpert()
    noise = SteeringNoise(noise_std, seed=int(seed) * 100_003 + int(index) + (1 << 40) * (split == "test"))
    cam = renderer.camera
    meta = RecordingMeta(
        fps=float(fps),
        width=cam.width,
        height=cam.height,
        camera=camera_calibration(cam),
        source="drive.sim",
        conditions=appearance.to_dict(),
        seed=int(seed),
        storage=storage,
        extra={
            "split": split,
            "road_index": int(index),
            "speed_mps": float(speed_mps),
            **({"road_kind": "hard", "speed": "follows the road"} if road.kind == "hard" else {}),
            "dart_noise_std_per_m": float(noise_std),
            "expert": "pure_pursuit",
            "label": "expert's clean command (DART)",
        },
    )
    with RecordingWriter(out_dir, meta, overwrite=overwrite) as writer:
        for _ in range(n_frames):
            obs = world.observe(with_image=True)
            clean = expert.act(obs)
            writer.append(
                obs.image,
                timestamp_s=round(obs.timestamp_s, 6),
                curvature=clean,
                speed_mps=obs.speed_mps,
                lateral_offset_m=obs.lateral_offset_m,
                heading_error_rad=obs.heading_error_rad,
                x_m=round(obs.x_m, 6),
                y_m=round(obs.y_m, 6),
                yaw_rad=round(obs.yaw_rad, 9),
            )
            drift = noise(world.dt_s)
            # DART noise pauses while the car is far off-centre, so recoveries stay inside the lane
            world.step(clean + (drift if abs(obs.lateral_offset_m) < NOISE_PAUSE_LATERAL_M else 0.0))
    return Path(out_dir)


def _slug(app: Appearance) -> str:
    return f"{app.season}-{app.light}-{app.markings}"


def simulate(
    out_dir: Union[str, Path],
    minutes: float,
    seed: int,
    conditions: Optional[Sequence[str]] = None,
    split: str = "train",
    recording_minutes: float = 2.0,
    storage: str = "frames",
    noise_std: float = DEFAULT_NOISE_STD,
    camera: Optional[Camera] = None,
    speed_mps: float = DEFAULT_SPEED_MPS,
    fps: float = DEFAULT_FPS,
    overwrite: bool = False,
    progress: Optional[Callable[[int, int, Path], None]] = None,
    roads: str = "easy",
) -> List[Path]:
    """Write ``ceil(minutes / recording_minutes)`` recordings under ``out_dir``.

    Named conditions cycle over all their combinations (``summer,winter`` alternates seasons), on
    mixed roads over each kind's recordings on their own (:func:`~drive.sim.road.kind_position`);
    unnamed axes are random per recording. Recording ``i`` uses road ``i`` of ``(seed, split)`` from the
    set ``roads``; hard roads are named ``...-hard`` (``train-s0-001-hard-summer-noon-marked``).
    """
    cam = camera or Camera.default()
    check_world_settings(
        speed_kmh=speed_mps * 3.6,
        fps=fps,
        width=cam.width,
        height=cam.height,
        noise_std=noise_std,
        minutes=minutes,
        recording_minutes=recording_minutes,
    )
    road_kind(roads, 0)  # an unknown set is refused before anything is written
    grid = condition_grid(parse_conditions(conditions))
    count = int(math.ceil(minutes / recording_minutes - 1e-9))
    out = Path(out_dir)
    planned = []
    for i in range(count):
        fixed = grid[kind_position(roads, i) % len(grid)]
        app = sample_appearance(seed, split, i, fixed)
        hard = "-hard" if road_kind(roads, i) == "hard" else ""
        planned.append((i, fixed, out / f"{split}-s{seed}-{i:03d}{hard}-{_slug(app)}"))
    if not overwrite:  # refused before anything is written, not after the first recordings
        existing = [str(path) for _, _, path in planned if path.exists()]
        if existing:
            more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
            raise ValueError(f"{existing[0]}{more}: already exists (pass overwrite=True to replace)")
    out.mkdir(parents=True, exist_ok=True)
    paths: List[Path] = []
    for i, fixed, path in planned:
        length = min(recording_minutes, minutes - i * recording_minutes)
        record_drive(
            path, seed, i, split, length, fixed, storage, noise_std, camera, speed_mps, fps, overwrite, roads
        )
        paths.append(path)
        if progress is not None:
            progress(i, count, path)
    return paths


def latin_conditions(j: int) -> Dict[str, str]:
    """A Latin square over the named conditions: nine recordings show every pair of two axes' values."""
    season, light, markings = CONDITION_AXES.values()
    return {
        "season": season[j % 3],
        "light": light[(j + j // 3) % 3],
        "markings": markings[(j + 2 * (j // 3)) % 3],
    }


def record_logs(out: Path, seeds: Sequence[int], km: float, recording_km: float) -> List[Dict[str, Any]]:
    """Noise-free expert logs at 10 Hz on test roads of ``seeds`` (taking turns), ``km`` in recordings
    of ``recording_km``, with the world's camera and the conditions of a Latin square
    (:func:`latin_conditions`); written once. Held-out logs for log replay's measurements
    (``tools/bench_replay.py``, ``tools/bench_onpolicy.py``). One entry per recording: path, seed, road
    index, minutes, conditions."""
    count = int(math.ceil(km / recording_km - 1e-9))
    minutes = recording_km * 1000.0 / DEFAULT_SPEED_MPS / 60.0
    logs = []
    for j in range(count):
        seed, index = int(seeds[j % len(seeds)]), j // len(seeds)
        path = Path(out) / f"test-s{seed}-{index:03d}"
        if not (path / "meta.json").exists():
            record_drive(
                path,
                seed,
                index,
                "test",
                minutes,
                latin_conditions(j),
                noise_std=0.0,
                fps=LOG_FPS,
                overwrite=True,
            )
        logs.append(
            {
                "path": str(path),
                "seed": seed,
                "index": index,
                "minutes": minutes,
                "conditions": latin_conditions(j),
            }
        )
    return logs
