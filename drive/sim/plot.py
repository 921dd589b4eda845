"""Pictures of a closed-loop drive: a map (road, driven path, interventions) and an MP4."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence, Union

import cv2
import numpy as np

from drive.sim.render import Camera

__all__ = ["plot_drive", "DriveVideo"]


def plot_drive(segments: Sequence[Any], path: Union[str, Path], title: str = "") -> Path:
    """One panel per segment: lane edges, the driven path, red crosses at interventions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(segments), 1)
    cols = min(n, 4)
    rows = int(math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    for ax, seg in zip(axes.ravel(), segments):
        road = seg.road
        end = road.index_at(seg.km * 1000.0 + 10.0) + 1
        x, y, h, w = road.x_m[:end], road.y_m[:end], road.heading_rad[:end], road.lane_width_m[:end]
        for d in (w, np.zeros_like(w), -w):
            ax.plot(x - d * np.sin(h), y + d * np.cos(h), color="0.6", lw=0.8)
        ax.plot(seg.x_m, seg.y_m, color="tab:blue", lw=1.2, label="driven")
        if seg.intervention_xy:
            p = np.asarray(seg.intervention_xy)
            ax.plot(p[:, 0], p[:, 1], "x", color="red", ms=8, mew=2, label="intervention")
        names = "/".join(seg.conditions.values())
        ax.set_title(f"segment {seg.index} ({names}): {len(seg.intervention_xy)} interventions", fontsize=8)
        ax.set_aspect("equal")
        ax.tick_params(labelsize=7)
    axes.ravel()[0].legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


class DriveVideo:
    """MP4 (mp4v) of the camera view, upscaled, with lateral offset and intervention count overlaid."""

    def __init__(self, path: Union[str, Path], camera: Camera, fps: float, scale: int = 3) -> None:
        self.path, self.scale = Path(path), scale
        self.path.parent.mkdir(parents=True, exist_ok=True)
        size = (camera.width * scale, camera.height * scale)
        self.writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
        if not self.writer.isOpened():
            raise ValueError(f"{self.path}: OpenCV cannot write this video")

    def __call__(self, obs: Any, interventions: int) -> None:
        img = cv2.resize(obs.image, None, fx=self.scale, fy=self.scale, interpolation=cv2.INTER_LINEAR)
        bgr = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
        text = f"t {obs.timestamp_s:6.1f} s  lat {obs.lateral_offset_m:+.2f} m  takeovers {interventions}"
        cv2.putText(bgr, text, (6, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        self.writer.write(bgr)

    def close(self) -> None:
        self.writer.release()
