"""Pictures of a closed-loop drive: a map (road, driven path, interventions) and an MP4."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence, Union

import cv2
import numpy as np

from drive.io.atomic import save_figure, write_image
from drive.io.video import VideoFile
from drive.sim.appearance import CONDITION_AXES, sample_appearance
from drive.sim.camera import Camera
from drive.sim.render import Renderer
from drive.sim.road import generate_road

__all__ = ["plot_drive", "DriveVideo", "conditions_sheet"]


def plot_drive(segments: Sequence[Any], path: Union[str, Path], title: str = "") -> Path:
    """One panel per segment: lane edges, the driven path, red crosses at interventions."""
    import matplotlib  # here, not at the top: matplotlib's 0.35 s start-up only when a map is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

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
    return save_figure(fig, path, dpi=110)


class DriveVideo:
    """MP4 (mp4v) of the camera view, upscaled, with lateral offset and intervention count overlaid."""

    def __init__(self, path: Union[str, Path], camera: Camera, fps: float, scale: int = 3) -> None:
        self.path, self.scale = Path(path), scale
        self.file = VideoFile(self.path, fps)  # whole or not at all (drive.io.video)

    def __call__(self, obs: Any, interventions: int) -> None:
        img = cv2.resize(obs.image, None, fx=self.scale, fy=self.scale, interpolation=cv2.INTER_LINEAR)
        bgr = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
        text = f"t {obs.timestamp_s:6.1f} s  lat {obs.lateral_offset_m:+.2f} m  takeovers {interventions}"
        cv2.putText(bgr, text, (6, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        self.file.write_bgr(bgr)

    def close(self, keep: bool = True) -> None:
        """Finish the file and rename it into place (``keep``), or delete it (a failed run)."""
        self.file.close(keep=keep and self.file.frames > 0)


def conditions_sheet(path: Union[str, Path], seed: int = 0, scale: int = 2) -> Path:
    """Contact sheet: every season x light (rows) under every markings style (columns), labelled."""
    renderer = Renderer(Camera.default())
    road = generate_road(seed, 3000.0, "train")
    tiles = []
    for r, (season, light) in enumerate(
        (s, li) for s in CONDITION_AXES["season"] for li in CONDITION_AXES["light"]
    ):
        row = []
        for c, markings in enumerate(CONDITION_AXES["markings"]):
            app = sample_appearance(
                seed, "train", r * 3 + c, {"season": season, "light": light, "markings": markings}
            )
            img = renderer.render_at(road, app, 60.0 + 97.0 * (r * 3 + c))
            img = cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
            cv2.putText(
                img,
                f"{season} / {light} / {markings}",
                (4, 12),
                cv2.FONT_HERSHEY_SIMPLEX,
                0.38,
                (255, 255, 255),
                1,
                cv2.LINE_AA,
            )
            row.append(np.pad(img, ((1, 1), (1, 1), (0, 0)), constant_values=255))
        tiles.append(np.concatenate(row, axis=1))
    return write_image(path, np.concatenate(tiles, axis=0))


if __name__ == "__main__":  # python -m drive.sim.plot docs/conditions.png
    import sys

    print(conditions_sheet(sys.argv[1] if len(sys.argv) > 1 else "docs/conditions.png"))
