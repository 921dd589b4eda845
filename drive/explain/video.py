"""Saliency videos a person wants to watch: camera | saliency overlay | steering trace.

Each row shows what the network saw (upscaled), the VisualBackProp mask blended over it with the
JET colormap, and the steering trace of the last seconds (prediction vs label, in 1/km, the papers'
units; positive = left). With a second row the same drive runs again with Gaussian noise on the
input, so clean and noisy attention can be compared side by side (NCP paper, Fig. 5).

Output: an MP4 (``mp4v``, the recording's frame rate) written atomically, and a PNG contact sheet
of evenly spaced frames beside it (``<out>.contact.png``).
"""

from __future__ import annotations

import os
from collections import deque
from pathlib import Path
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import cv2
import numpy as np
import torch
from torch import nn

from drive.data.preprocess import Preprocessing
from drive.explain.policy_saliency import SaliencyFrame, policy_saliency
from drive.io.atomic import write_image
from drive.io.recording import Recording
from drive.io.video import VideoFile

__all__ = [
    "overlay",
    "TracePanel",
    "SaliencyCanvas",
    "SaliencyVideoWriter",
    "saliency_video",
    "saliency_still",
    "contact_sheet_path",
]

PathLike = Union[str, os.PathLike]
_FONT = cv2.FONT_HERSHEY_SIMPLEX
_LABEL_COLOUR = (235, 235, 235)  # RGB
_ROW_COLOURS = ((60, 220, 90), (255, 150, 40))  # clean prediction green, noisy prediction orange


def overlay(frame_rgb: np.ndarray, mask: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """JET-coloured ``mask [h, w]`` in [0, 1] blended over ``frame_rgb`` uint8 ``[h, w, 3]``."""
    heat = cv2.applyColorMap(np.clip(mask * 255.0 + 0.5, 0, 255).astype(np.uint8), cv2.COLORMAP_JET)
    heat = cv2.cvtColor(heat, cv2.COLOR_BGR2RGB)
    return cv2.addWeighted(frame_rgb, 1.0 - alpha, heat, alpha, 0.0)


def _title(panel: np.ndarray, text: str, bottom: bool = False) -> np.ndarray:
    """Outlined white text in the top-left (or bottom-left) corner of ``panel``, drawn in place."""
    origin = (8, panel.shape[0] - 10 if bottom else 22)
    cv2.putText(panel, text, origin, _FONT, 0.6, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(panel, text, origin, _FONT, 0.6, (255, 255, 255), 1, cv2.LINE_AA)
    return panel


class TracePanel:
    """Scrolling steering plot: the last ``window`` frames of prediction and label curves (1/km).

    The vertical range is symmetric, ``+-max(y_limit_per_km, largest |value| seen)``, so the scale
    only ever grows and a curve never leaves the panel.
    """

    def __init__(
        self, size_hw: Tuple[int, int], window: int, rows: int = 1, y_limit_per_km: float = 5.0
    ) -> None:
        self.height, self.width = size_hw
        self.window = max(2, int(window))
        self.limit = float(y_limit_per_km)
        self.labels: Deque[float] = deque(maxlen=self.window)
        self.predictions: List[Deque[float]] = [deque(maxlen=self.window) for _ in range(rows)]

    def push(self, predictions_per_km: Sequence[float], label_per_km: Optional[float]) -> None:
        """Append one frame: a prediction per row and the label (``None``/NaN: no label)."""
        label = float("nan") if label_per_km is None else float(label_per_km)
        self.labels.append(label)
        for queue, value in zip(self.predictions, predictions_per_km):
            queue.append(float(value))
        finite = [abs(v) for v in [label, *predictions_per_km] if np.isfinite(v)]
        self.limit = max([self.limit, *finite])

    def _points(self, values: Sequence[float]) -> List[np.ndarray]:
        """Pixel polylines of ``values``, split at NaNs."""
        x_step = (self.width - 1) / (self.window - 1)
        y_mid, y_scale = (self.height - 1) / 2.0, (self.height / 2.0 - 14) / (self.limit * 1.05)
        lines, current = [], []
        for i, v in enumerate(values):
            if np.isfinite(v):
                current.append((round(i * x_step), round(y_mid - v * y_scale)))
            elif current:
                lines.append(np.array(current, np.int32))
                current = []
        if current:
            lines.append(np.array(current, np.int32))
        return lines

    def render(self, row: int) -> np.ndarray:
        """uint8 RGB ``[height, width, 3]`` plot for ``row`` (its prediction and the label)."""
        panel = np.full((self.height, self.width, 3), 24, np.uint8)
        cv2.line(panel, (0, self.height // 2), (self.width - 1, self.height // 2), (90, 90, 90), 1)
        for colour, values in ((_LABEL_COLOUR, self.labels), (_ROW_COLOURS[row % 2], self.predictions[row])):
            for line in self._points(values):
                cv2.polylines(panel, [line], False, colour, 2, cv2.LINE_AA)
        now = self.predictions[row][-1] if self.predictions[row] else float("nan")
        label = self.labels[-1] if self.labels else float("nan")
        _title(panel, f"steering 1/km  pred {now:+6.1f}  label {label:+6.1f}")
        cv2.putText(
            panel,
            f"+{self.limit:.0f} (left)",
            (8, self.height - 28),
            _FONT,
            0.4,
            (160, 160, 160),
            1,
            cv2.LINE_AA,
        )
        cv2.putText(
            panel,
            f"-{self.limit:.0f} (right)",
            (8, self.height - 10),
            _FONT,
            0.4,
            (160, 160, 160),
            1,
            cv2.LINE_AA,
        )
        return panel


def contact_sheet_path(video_path: PathLike) -> Path:
    """Where the contact sheet of ``video.mp4`` goes: ``video.contact.png`` beside it."""
    path = Path(video_path)
    return path.with_name(path.stem + ".contact.png")


class SaliencyCanvas:
    """Lays out one time step: per row camera | saliency overlay | steering trace, ``scale`` x larger.

    Args:
        input_hw: size of the network input frames.
        fps: frame rate (the trace shows the last ``trace_seconds``).
        row_names: one title per row (e.g. ``["clean"]`` or ``["clean", "noise 0.2"]``).
    """

    def __init__(
        self,
        input_hw: Tuple[int, int],
        fps: float,
        row_names: Sequence[str] = ("clean",),
        scale: int = 3,
        trace_seconds: float = 10.0,
    ) -> None:
        self.row_names = list(row_names)
        self.panel_hw = (int(input_hw[0]) * scale, int(input_hw[1]) * scale)
        self.size_wh = (3 * self.panel_hw[1], len(self.row_names) * self.panel_hw[0])
        self.trace = TracePanel(self.panel_hw, window=round(trace_seconds * fps), rows=len(self.row_names))

    def _panel(self, image: np.ndarray) -> np.ndarray:
        return cv2.resize(image, self.panel_hw[::-1], interpolation=cv2.INTER_NEAREST)

    def compose(self, rows: Sequence[SaliencyFrame], label_per_m: Optional[float]) -> np.ndarray:
        """Push one time step (one :class:`SaliencyFrame` per row) and return the RGB canvas."""
        if len(rows) != len(self.row_names):
            raise ValueError(f"expected {len(self.row_names)} rows, got {len(rows)}")
        label = None if label_per_m is None else 1000.0 * float(label_per_m)
        self.trace.push([1000.0 * r.prediction for r in rows], label)
        strips = []
        for i, (row, name) in enumerate(zip(rows, self.row_names)):
            camera = _title(self._panel(row.frame), f"camera ({name})")
            saliency = _title(self._panel(overlay(row.frame, row.mask)), "VisualBackProp")
            strips.append(np.concatenate([camera, saliency, self.trace.render(i)], axis=1))
        return np.concatenate(strips, axis=0)


class SaliencyVideoWriter:
    """Compose saliency rows into an MP4 plus a contact sheet, both appearing only on :meth:`close`.

    Args:
        path: output ``.mp4``.
        fps: frame rate of the video (the recording's).
        input_hw, row_names, scale, trace_seconds: the layout (:class:`SaliencyCanvas`).
        sheet_frames: frames on the contact sheet (evenly spaced over the whole video).
    """

    def __init__(
        self,
        path: PathLike,
        fps: float,
        input_hw: Tuple[int, int],
        row_names: Sequence[str] = ("clean",),
        scale: int = 3,
        trace_seconds: float = 10.0,
        sheet_frames: int = 8,
    ) -> None:
        if fps <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.path = Path(path)
        self.fps = float(fps)
        self.canvas = SaliencyCanvas(input_hw, self.fps, row_names, scale, trace_seconds)
        self.trace = self.canvas.trace
        self.size_wh = self.canvas.size_wh
        self.frames_written = 0
        self.sheet_frames = max(1, int(sheet_frames))
        self._sheet: List[Tuple[int, np.ndarray]] = []
        self._sheet_stride = 1
        self._video = VideoFile(self.path, self.fps)  # whole or not at all (drive.io.video)

    def write(self, rows: Sequence[SaliencyFrame], label_per_m: Optional[float] = None) -> None:
        """Render and append one time step (``label_per_m``: the recorded curvature, if any)."""
        canvas = self.canvas.compose(rows, label_per_m)
        self._video.write(canvas)
        if self.frames_written % self._sheet_stride == 0:
            self._sheet.append((self.frames_written, canvas))
            if len(self._sheet) >= 2 * self.sheet_frames:  # keep memory bounded on long drives
                self._sheet = self._sheet[::2]
                self._sheet_stride *= 2
        self.frames_written += 1

    def _write_sheet(self) -> Path:
        keep = (
            np.linspace(0, len(self._sheet) - 1, min(self.sheet_frames, len(self._sheet))).round().astype(int)
        )
        tiles = []
        for index, canvas in (self._sheet[k] for k in keep):
            tile = cv2.resize(
                canvas, (canvas.shape[1] // 2, canvas.shape[0] // 2), interpolation=cv2.INTER_AREA
            )
            tiles.append(_title(tile, f"frame {index}  t={index / self.fps:.1f}s", bottom=True))
        columns = 2 if len(tiles) > 1 else 1
        while len(tiles) % columns:
            tiles.append(np.zeros_like(tiles[0]))
        grid = np.concatenate(
            [np.concatenate(tiles[r : r + columns], axis=1) for r in range(0, len(tiles), columns)]
        )
        path = contact_sheet_path(self.path)
        return write_image(path, grid)

    def close(self) -> Dict[str, Any]:
        """Finish the video and the contact sheet; returns frames, fps, size (w, h) and paths."""
        self._video.close()  # an empty video is an error naming the file; nothing is left
        sheet = self._write_sheet()
        return {
            "frames": self.frames_written,
            "fps": self.fps,
            "size": list(self.size_wh),
            "video": str(self.path),
            "contact_sheet": str(sheet),
        }

    def abort(self) -> None:
        """Discard the partial video."""
        self._video.close(keep=False)


def _streams(
    policy: nn.Module,
    meta: Mapping[str, Any],
    recording: Recording,
    count: int,
    noise_levels: Sequence[Optional[float]],
    method: str,
    seed: int,
    device: Union[str, torch.device],
):
    """One :func:`policy_saliency` stream per noise level over the first ``count`` frames, and row names."""
    preprocessing = Preprocessing.from_dict(meta["preprocessing"])
    streams = [
        policy_saliency(
            policy,
            (recording.frame(i) for i in range(count)),
            preprocessing=preprocessing,
            timestamps_s=recording.timestamps_s[:count],
            noise=level,
            seed=seed,
            method=method,
            device=device,
        )
        for level in noise_levels
    ]
    names = ["clean" if not level else f"noise {level:g}" for level in noise_levels]
    return zip(*streams), names, preprocessing.size


def saliency_video(
    policy: nn.Module,
    meta: Mapping[str, Any],
    recording_dir: PathLike,
    out_path: PathLike,
    noise: Optional[float] = None,
    side_by_side: bool = False,
    max_frames: Optional[int] = None,
    method: str = "bojarski",
    seed: int = 0,
    scale: int = 3,
    device: Union[str, torch.device] = "cpu",
) -> Dict[str, Any]:
    """Saliency video of ``policy`` driving along a recording (open loop, hidden state carried).

    Args:
        policy, meta: as returned by :func:`drive.checkpoint.load_policy`.
        recording_dir: a canonical recording (:class:`drive.io.recording.Recording`).
        out_path: the ``.mp4`` to write; the contact sheet goes to :func:`contact_sheet_path`.
        noise: Gaussian noise std on [0, 1] input pixels for the noisy row.
        side_by_side: two rows, clean and noisy (``noise`` defaults to 0.2 then); without it a
            single row, noisy if ``noise`` is given.
        max_frames: explain only the first frames of the recording.

    Returns:
        ``{"frames", "fps", "size": [w, h], "video", "contact_sheet", "method", "noise", "rows"}``.
    """
    recording = Recording.open(recording_dir)
    count = len(recording) if max_frames is None else min(len(recording), int(max_frames))
    if count <= 0:
        raise ValueError(f"{recording_dir}: nothing to explain (max_frames={max_frames})")
    if side_by_side and not noise:
        noise = 0.2
    noise_levels: List[Optional[float]] = [None, noise] if side_by_side else [noise]
    steps, names, input_hw = _streams(policy, meta, recording, count, noise_levels, method, seed, device)
    writer = SaliencyVideoWriter(out_path, recording.meta.fps, input_hw, names, scale=scale)
    try:
        for i, rows in enumerate(steps):
            writer.write(rows, float(recording.curvature[i]))
    except BaseException:
        writer.abort()
        raise
    return {**writer.close(), "method": method, "noise": noise, "rows": names}


def saliency_still(
    policy: nn.Module,
    meta: Mapping[str, Any],
    recording_dir: PathLike,
    out_png: PathLike,
    frame_index: Optional[int] = None,
    noise: Optional[float] = 0.2,
    method: str = "bojarski",
    seed: int = 0,
    scale: int = 3,
    device: Union[str, torch.device] = "cpu",
) -> Path:
    """One PNG of the saliency layout at ``frame_index`` (default: the middle of the recording).

    Rows: clean, plus noisy when ``noise`` is given; the steering trace holds the seconds before
    the frame (the policy's state is carried from the start of the recording, as in the video).
    """
    recording = Recording.open(recording_dir)
    index = len(recording) // 2 if frame_index is None else int(frame_index)
    if not 0 <= index < len(recording):
        raise ValueError(f"{recording_dir}: frame {index} outside 0..{len(recording) - 1}")
    levels: List[Optional[float]] = [None, noise] if noise else [None]
    steps, names, input_hw = _streams(policy, meta, recording, index + 1, levels, method, seed, device)
    canvas = SaliencyCanvas(input_hw, recording.meta.fps, names, scale)
    for i, rows in enumerate(steps):
        image = canvas.compose(rows, float(recording.curvature[i]))
    return write_image(out_png, image)
