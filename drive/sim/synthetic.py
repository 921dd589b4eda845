"""Plainly synthetic lane scenes: flat colours and two painted lines, for checks on data unlike the world.

Nothing here looks like :mod:`drive.sim.render`'s world: the ground and sky are flat colours, the
only structure is a lane of two lines (no verges, trees, shadows or texture), and the camera,
exposure, colours, curvature range and label noise are all parameters. The car follows a lane of
piecewise-constant curvature with a path-following law and DART-style steering noise, so the logs
carry recoveries; each frame's label is the law's clean command (1/m, positive = left)::

    kappa = kappa_road - 2 (e + L psi) / L^2          (e lateral offset, psi heading error, L lookahead)

``spike_p`` replaces that fraction of labels by single-frame spikes of ``spike_scale`` x the label
range (a logger glitch), to check that training and ``drive data inspect`` cope with them.
Recordings are written in the canonical format with the camera's calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Tuple, Union

import numpy as np

from drive.io.recording import CameraCalibration, RecordingMeta, RecordingWriter

__all__ = ["LaneScene", "write_synthetic_lanes"]


@dataclass(frozen=True)
class LaneScene:
    """Camera, look and driving of a synthetic lane recording (see the module docstring)."""

    width: int = 160
    height: int = 96
    hfov_deg: float = 60.0
    camera_height_m: float = 2.2
    pitch_rad: float = 0.22
    lane_width_m: float = 3.2
    line_width_m: float = 0.2
    sky_rgb: Tuple[float, float, float] = (0.55, 0.6, 0.75)
    ground_rgb: Tuple[float, float, float] = (0.25, 0.3, 0.22)
    road_rgb: Tuple[float, float, float] = (0.3, 0.3, 0.32)
    line_rgb: Tuple[float, float, float] = (0.95, 0.9, 0.5)
    exposure: float = 1.0  # gain on every colour (clipped at 1)
    pixel_noise: float = 0.02  # Gaussian noise std per pixel, in [0, 1] units
    max_curvature_per_m: float = 1.0 / 20.0
    speed_mps: float = 8.0
    fps: float = 10.0
    lookahead_m: float = 8.0
    noise_std: float = 0.03  # DART noise on the executed command, 1/m
    spike_p: float = 0.0
    spike_scale: float = 4.0

    def calibration(self) -> CameraCalibration:
        f = 0.5 * self.width / math.tan(math.radians(self.hfov_deg) / 2.0)
        return CameraCalibration(
            fx=f,
            fy=f,
            cx=(self.width - 1) / 2.0,
            cy=(self.height - 1) / 2.0,
            height_m=self.camera_height_m,
            pitch_rad=self.pitch_rad,
        )


def _render(
    scene: LaneScene,
    cal: CameraCalibration,
    offset_m: float,
    heading_rad: float,
    kappa: float,
    rng: np.random.Generator,
) -> np.ndarray:
    h, w = scene.height, scene.width
    v = np.arange(h, dtype=np.float64)[:, None]
    u = np.arange(w, dtype=np.float64)[None, :]
    angle = np.arctan((v - cal.cy) / cal.fy) + cal.pitch_rad  # ray angle below the horizontal
    ground = angle > 0.01
    dist = np.where(ground, cal.height_m / np.tan(np.maximum(angle, 0.01)), 1e3)  # forward distance, m
    depth = dist * math.cos(cal.pitch_rad) + cal.height_m * math.sin(cal.pitch_rad)
    centre = -offset_m - heading_rad * dist + 0.5 * kappa * dist**2  # lane centre, m to the left
    lateral = (cal.cx - u) * depth / cal.fx  # m to the left at each pixel's ground point
    rel = np.abs(lateral - centre)
    px_per_m = cal.fx / depth
    half = scene.lane_width_m / 2.0
    line = np.clip(scene.line_width_m * px_per_m / 2.0 - np.abs(rel - half) * px_per_m + 0.5, 0.0, 1.0)
    road = np.clip((half - rel) * px_per_m + 0.5, 0.0, 1.0)
    img = np.empty((h, w, 3))
    for c in range(3):
        g = scene.ground_rgb[c] * (1 - road) + scene.road_rgb[c] * road
        g = g * (1 - line) + scene.line_rgb[c] * line
        img[:, :, c] = np.where(ground, g, scene.sky_rgb[c])
    img = img * scene.exposure + rng.normal(0.0, scene.pixel_noise, img.shape)
    return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def write_synthetic_lanes(
    out_dir: Union[str, Path], scene: LaneScene, frames: int, seed: int, recordings: int = 1
) -> List[Path]:
    """Write ``recordings`` canonical recordings of ``frames`` frames each under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cal = scene.calibration()
    dt = 1.0 / scene.fps
    paths = []
    for r in range(recordings):
        rng = np.random.default_rng([seed, r])
        meta = RecordingMeta(
            fps=scene.fps,
            width=scene.width,
            height=scene.height,
            camera=cal,
            source="drive.sim.synthetic",
            seed=int(seed),
            extra={"scene": {k: (list(v) if isinstance(v, tuple) else v) for k, v in scene.__dict__.items()}},
        )
        path = out / f"synthetic-s{seed}-{r:03d}"
        e, psi, drift, kappa_road, seg_left = 0.0, 0.0, 0.0, 0.0, 0.0
        lim = scene.max_curvature_per_m
        lookahead = scene.lookahead_m
        with RecordingWriter(path, meta, overwrite=True) as writer:
            for i in range(frames):
                if seg_left <= 0:  # a new segment: straight or an arc up to the curvature limit
                    kappa_road = 0.0 if rng.random() < 0.3 else float(rng.uniform(-lim, lim))
                    seg_left = float(rng.uniform(25.0, 70.0))
                clean = kappa_road - 2.0 * (e + lookahead * psi) / lookahead**2
                label = clean
                if scene.spike_p > 0 and rng.random() < scene.spike_p:
                    label = float(rng.choice([-1.0, 1.0]) * scene.spike_scale * lim)
                img = _render(scene, cal, e, psi, kappa_road, rng)
                writer.append(
                    img,
                    timestamp_s=round(i * dt, 6),
                    curvature=float(label),
                    speed_mps=scene.speed_mps,
                    lateral_offset_m=e,
                    heading_error_rad=psi,
                )
                drift += (-drift * 0.5 * dt) + scene.noise_std * math.sqrt(dt) * float(rng.normal())
                executed = clean + (drift if abs(e) < 0.8 else 0.0)
                psi += (executed - kappa_road) * scene.speed_mps * dt
                e += scene.speed_mps * math.sin(psi) * dt
                seg_left -= scene.speed_mps * dt
        paths.append(path)
    return paths
