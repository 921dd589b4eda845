"""A torch Dataset of windows over cached recordings: the batch contract of drive.data.

One item (the DataLoader stacks them into a batch with a leading B):

=============  =================  ==========================================================
key            dtype, shape       meaning
=============  =================  ==========================================================
frames         uint8 [T,3,H,W]    preprocessed (and, when training, augmented) RGB frames
curvature      float32 [T]        label, curvature in 1/m (positive = left); corrected for
                                  viewpoint augmentation
dt             float32 [T]        elapsed time before each frame, seconds
weight         float32 [T]        NCP sample weight exp(|1000 curvature| c), 0 on padding
mask           bool [T]           False on padding (only the last window of a segment in
                                  full-recording iteration is padded)
speed          float32 [T]        m/s
reset          bool []            the window starts a segment (recording start or time gap)
recording      int64 []           index into the datamodule's recording list of this split
start          int64 []           first frame index in that recording
=============  =================  ==========================================================
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from drive.data.augment import AugmentConfig, Augmenter
from drive.data.cache import CachedRecording, source_to_model
from drive.data.sequences import Window, median_dt

__all__ = ["SequenceDataset", "sample_weights"]


def sample_weights(curvature_per_m: np.ndarray, curve_factor: float) -> np.ndarray:
    """NCP weighted-MSE sample weights exp(|y| c) with y = curvature in 1/km (Lechner et al. 2020)."""
    return np.exp(np.abs(np.asarray(curvature_per_m) * 1000.0) * curve_factor)


class SequenceDataset(Dataset):
    """Windows of ``seq_len`` frames over cached recordings; see the module docstring for items."""

    def __init__(
        self,
        recordings: Sequence[CachedRecording],
        windows: Sequence[Window],
        seq_len: int,
        augment: Optional[AugmentConfig] = None,
        curve_factor: float = 0.1,
        seed: int = 0,
    ):
        self.recordings = list(recordings)
        self.windows = list(windows)
        self.seq_len = seq_len
        self.augmenter = Augmenter(augment) if augment is not None else None
        self.curve_factor = curve_factor
        self.seed = seed
        self._nominal = [median_dt(r.timestamp_s) for r in self.recordings]
        self._geometry = [(r.info.get("camera"), source_to_model(r.info)[0]) for r in self.recordings]
        if augment is not None and augment.needs_camera():
            self.require_camera()

    def require_camera(self) -> None:
        """Refuse recordings without camera calibration (viewpoint synthesis needs it)."""
        missing = [r.info["source"] for r in self.recordings if r.info.get("camera") is None]
        if missing:
            raise ValueError(
                f"viewpoint augmentation needs camera calibration, missing for {missing[:3]}; "
                "set the reader option camera: {fx, fy, cx, cy, height_m, pitch_rad}, camera: {hfov_deg, "
                "height_m, pitch_rad}, camera: approximate (docs/data.md), or viewpoint_p: 0"
            )

    def geometry(self, recording: int) -> Tuple[Optional[Dict[str, float]], np.ndarray]:
        """(camera calibration, source->model affine) of a recording, for viewpoint synthesis."""
        return self._geometry[recording]

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, key: Union[int, Tuple[int, ...]]) -> Dict[str, torch.Tensor]:
        """``key`` = a window index, or a draw key ``(window, epoch)`` from
        :class:`~drive.data.sampling.EpochSampler` (``(window, epoch, k)`` from ``BalancedSampler``);
        augmentation is seeded by (seed, epoch, window[, k])."""
        index, epoch, *repeat = key if isinstance(key, tuple) else (key, 0)
        w = self.windows[index]
        rec = self.recordings[w.recording]
        t_len, n = self.seq_len, w.length
        frames = torch.from_numpy(np.array(rec.frames[w.start : w.start + n]))
        t = rec.timestamp_s
        dt = np.empty(n)
        dt[1:] = np.diff(t[w.start : w.start + n])
        dt[0] = self._nominal[w.recording] if w.reset else t[w.start] - t[w.start - 1]
        curvature = rec.curvature[w.start : w.start + n]
        speed = rec.speed_mps[w.start : w.start + n]
        if self.augmenter is not None:
            camera, affine = self._geometry[w.recording]
            rng = np.random.default_rng([self.seed, epoch, index, *repeat])
            frames, curvature = self.augmenter(frames, curvature, speed, rng, camera, affine)
        weight = sample_weights(curvature, self.curve_factor)
        mask = np.ones(t_len, dtype=bool)
        if n < t_len:  # pad the last window of a segment: repeat the last frame, weight 0
            pad = t_len - n
            frames = torch.cat([frames, frames[-1:].expand(pad, -1, -1, -1)])
            curvature, speed = np.pad(curvature, (0, pad), mode="edge"), np.pad(speed, (0, pad), mode="edge")
            dt = np.pad(dt, (0, pad), constant_values=self._nominal[w.recording])
            weight = np.pad(weight, (0, pad))
            mask[n:] = False
        return {
            "frames": frames,
            "curvature": torch.from_numpy(np.asarray(curvature, dtype=np.float32)),
            "dt": torch.from_numpy(dt.astype(np.float32)),
            "weight": torch.from_numpy(np.asarray(weight, dtype=np.float32)),
            "mask": torch.from_numpy(mask),
            "speed": torch.from_numpy(np.asarray(speed, dtype=np.float32)),
            "reset": torch.tensor(w.reset),
            "recording": torch.tensor(w.recording, dtype=torch.int64),
            "start": torch.tensor(w.start, dtype=torch.int64),
        }

    def mean_abs_curvature(self) -> np.ndarray:
        """Each window's mean |recorded label| (1/m), padding excluded: what rarity is judged by."""
        return np.array(
            [
                np.abs(self.recordings[w.recording].curvature[w.start : w.start + w.length]).mean()
                for w in self.windows
            ]
        )

    def names(self) -> List[str]:
        return [r.name for r in self.recordings]
