"""Reader for the NCP authors' HDF5 drives: ``camera_front`` [N, H, W, 3] uint8 RGB,
``inverse_r`` [N] curvature in 1/m, ``timestamp`` [N] seconds (Lechner et al. 2020).

The file stays closed until a frame is read (and reopens in each DataLoader worker), so the source
pickles. An optional ``speed`` dataset is used when present, otherwise ``speed_mps`` from the
options (the paper drove at 30 km/h).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import h5py
import numpy as np

from drive.data.errors import Problems
from drive.data.label_units import speed_to_mps, time_to_s, to_curvature_per_m
from drive.data.readers.base import ReaderOptions, build_recording
from drive.data.readers.registry import register_reader
from drive.io.recording import Recording

__all__ = ["read", "detect", "HDF5Frames", "HDF5_EXTENSIONS"]

HDF5_EXTENSIONS = (".h5", ".hdf5", ".hdf")


def detect(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in HDF5_EXTENSIONS


class HDF5Frames:
    """Frames of one HDF5 dataset [N, H, W, 3] uint8 RGB, opened lazily (picklable)."""

    def __init__(self, path: Path, dataset: str, count: int):
        self.path, self.dataset, self.count = Path(path), dataset, count
        self._file: Optional[h5py.File] = None

    def __len__(self) -> int:
        return self.count

    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "dataset": self.dataset, "count": self.count}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["path"], state["dataset"], state["count"])

    def read(self, index: int) -> np.ndarray:
        if self._file is None:
            self._file = h5py.File(self.path, "r")
        return np.asarray(self._file[self.dataset][index])


def read(path: Path, options: ReaderOptions, problems: Problems) -> List[Recording]:
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        problems.report(str(path), None, "unreadable", f"not a readable HDF5 file ({e})")
        return []
    with f:
        missing = [k for k in ("camera_front", "inverse_r", "timestamp") if k not in f]
        if missing:
            problems.report(
                str(path), None, "missing_dataset", f"lacks dataset(s) {missing} (has {sorted(f)})"
            )
            return []
        cam = f["camera_front"]
        if cam.ndim != 4 or cam.shape[3] != 3 or cam.dtype != np.uint8:
            problems.report(
                str(path),
                None,
                "bad_frames",
                f"camera_front must be uint8 [N,H,W,3], got {cam.dtype} {cam.shape}",
            )
            return []
        time_unit, speed_unit, speed_mps = options.units()
        curv = to_curvature_per_m(
            np.asarray(f["inverse_r"], dtype=np.float64).reshape(-1),
            options.label_spec(unit="curvature_per_m"),
        )
        t = time_to_s(np.asarray(f["timestamp"], dtype=np.float64).reshape(-1), time_unit)
        speed = (
            speed_to_mps(np.asarray(f["speed"], dtype=np.float64).reshape(-1), speed_unit)
            if "speed" in f
            else np.full(len(curv), speed_mps)
        )
        n_frames, height, width = cam.shape[0], cam.shape[1], cam.shape[2]
    lengths = {"camera_front": n_frames, "inverse_r": len(curv), "timestamp": len(t), "speed": len(speed)}
    n = min(lengths.values())
    if len(set(lengths.values())) > 1:
        problems.report(
            str(path), n, "count_mismatch", f"datasets differ in length {lengths}; rows from {n} on dropped"
        )
    log = {"timestamp_s": t[:n], "curvature": curv[:n], "speed_mps": speed[:n]}
    meta = {
        "width": int(width),
        "height": int(height),
        "source": f"hdf5_ncp:{path}",
        "camera": options.calibration(),
        "extra": {"drive": str(path)},
    }
    rec = build_recording(
        file=str(path),
        rows=np.arange(n),
        log=log,
        source=HDF5Frames(path, "camera_front", n),
        problems=problems,
        meta=meta,
        path=path,
    )
    return [rec] if rec is not None else []


register_reader("hdf5", detect=detect, read=read, layout="an NCP .h5 file", suffixes=HDF5_EXTENSIONS)
