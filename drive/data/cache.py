"""Preprocessing cache: decode, crop and resize every frame once into a memory-mapped array.

Per recording, ``<cache_dir>/<name>/`` holds

    frames.npy   uint8 [N, 3, H, W] model-size frames (``np.load(mmap_mode="r")``)
    index.npz    timestamp_s, curvature (1/m), speed_mps [N] float64, valid [N] bool, and the car's
                 pose x_m, y_m, yaw_rad [N] where the log has it (log replay's path)
    index.json   fingerprint, preprocessing, camera, source geometry, problems

The crop/resize is :class:`drive.data.preprocess.Preprocessing` -- the very code exported modules run on
the car -- so training and deployment see byte-identical inputs. The cache is rebuilt when its
fingerprint changes: the preprocessing, the log's labels and timestamps (hashed), the camera
calibration and frame rate (viewpoint augmentation reads them from the index), or the size and
modification time of any frame file (images, video, HDF5). Writes are atomic: the index is removed
first and written last (via a temporary file and ``os.replace``), so a crash leaves no index and the
next run rebuilds.

Frames that cannot be decoded or have the wrong size are reported through
:class:`~drive.data.errors.Problems` (file and frame) and, with ``on_error="skip"``, stay in the
array as zeros with ``valid=False``; sequences never include them.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from drive.data.errors import Problems
from drive.data.preprocess import Preprocessing
from drive.io.atomic import commit
from drive.io.recording import POSE_COLUMNS, ImageFiles, Recording, RecordingError, SubsetFrames

__all__ = [
    "CachedRecording",
    "build_cache",
    "cache_recordings",
    "fingerprint",
    "decode_frame",
    "frame_files",
    "iter_decoded",
    "source_to_model",
    "model_camera",
    "display_name",
]

CACHE_VERSION = 1
_CHUNK = 64


class CachedRecording:
    """A preprocessed recording: frames uint8 [N, 3, H, W] (memory-mapped) and its log.

    Attributes:
        directory: cache directory. ``frames`` opens lazily (also after pickling into a worker).
        timestamp_s, curvature (1/m), speed_mps: float64 [N]; ``valid`` bool [N].
        poses: float64 [N, 3] (x_m, y_m, yaw_rad) where the log has poses, else None.
        info: index.json contents (name, source, drive, camera, source_size, preprocessing).
    """

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.info: Dict[str, Any] = json.loads((self.directory / "index.json").read_text())
        with np.load(self.directory / "index.npz") as z:
            self.timestamp_s = z["timestamp_s"]
            self.curvature = z["curvature"]
            self.speed_mps = z["speed_mps"]
            self.valid = z["valid"]
            self.poses = np.stack([z[c] for c in POSE_COLUMNS], axis=1) if POSE_COLUMNS[0] in z else None
        self._frames: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.timestamp_s)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_frames"] = None  # never pickle the mapped pixels; each worker maps the file itself
        return state

    @property
    def frames(self) -> np.ndarray:
        if self._frames is None:
            self._frames = np.load(self.directory / "frames.npy", mmap_mode="r")
        return self._frames

    @property
    def name(self) -> str:
        return str(self.info["name"])

    @property
    def drive(self) -> str:
        """Identifier of the physical drive (side cameras of one drive share it)."""
        return str(self.info.get("drive") or self.info["source"])

    def __repr__(self) -> str:
        return f"CachedRecording({self.info['source']}, {len(self)} frames, {int(self.valid.sum())} valid)"


def frame_files(source: Any) -> List[Path]:
    if isinstance(source, SubsetFrames):
        inner = frame_files(source.source)
        return [inner[i] for i in source.indices] if isinstance(source.source, ImageFiles) else inner
    if isinstance(source, ImageFiles):
        return list(source.paths)
    path = getattr(source, "path", None)
    return [Path(path)] if path is not None else []


def _root(source: Any) -> Any:
    return _root(source.source) if isinstance(source, SubsetFrames) else source


def fingerprint(rec: Recording, preprocessing: Preprocessing) -> str:
    """Hash of everything the cached content depends on (see module docstring)."""
    h = hashlib.sha256()
    h.update(
        json.dumps(
            {
                "v": CACHE_VERSION,
                "pre": preprocessing.to_dict(),
                "source": rec.meta.source,
                "size": [rec.meta.width, rec.meta.height],
                "fps": rec.meta.fps,
                "camera": rec.meta.camera.to_dict() if rec.meta.camera else None,
            },
            sort_keys=True,
        ).encode()
    )
    for column in ("timestamp_s", "curvature", "speed_mps", *POSE_COLUMNS):
        if column in rec.log:
            h.update(np.ascontiguousarray(rec.log[column], dtype=np.float64).tobytes())
    for path in frame_files(rec.source):
        try:
            st = os.stat(path)
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
        except FileNotFoundError:
            h.update(f"{path}:missing;".encode())
    return h.hexdigest()


def display_name(rec: Recording) -> str:
    """Short human name: the recording's folder or file stem, plus the camera for side cameras.

    Logs whose file name is the same in every recording (a folder + CSV log's ``labels.csv``, the
    Udacity ``driving_log.csv``) are named after their folder, so per-recording metrics do not collide.
    """
    p = rec.path if rec.path is not None else Path("recording")
    per_folder = p.name in ("driving_log.csv", "interpolated.csv") or rec.meta.source.startswith(
        "folder_csv:"
    )
    base = p.parent.name if per_folder and p.parent.name else p.stem
    camera = rec.meta.extra.get("camera")
    return f"{base}-{camera}" if camera else base


def _cache_name(rec: Recording) -> str:
    ident = f"{rec.path}|{rec.meta.source}"
    stem = (rec.path.stem if rec.path is not None else "recording")[:40]
    return f"{stem}-{hashlib.sha1(ident.encode()).hexdigest()[:12]}"


def decode_frame(rec: Recording, index: int, problems: Problems, files: List[Path]) -> Optional[np.ndarray]:
    """Frame ``index`` as uint8 [H, W, 3], or None after reporting why it is unusable (naming the
    user's file and row the frame came from, and the image file when frames are files)."""
    file, row = rec.origin_of(index)
    image = f"{files[index].name}: " if len(files) == len(rec) else ""
    try:
        frame = rec.frame(index)
    except (RecordingError, OSError, IndexError, ValueError) as e:
        kind = "truncated_video" if "truncated" in str(e) else "unreadable_frame"
        problems.report(file, row, kind, str(e))  # names the image or video
        return None
    expected = (rec.meta.height, rec.meta.width, 3)
    if frame.shape != expected or frame.dtype != np.uint8:
        problems.report(
            file,
            row,
            "wrong_image_size",
            f"{image}frame is {frame.dtype} {tuple(frame.shape)}, "
            f"the recording's frames are uint8 {expected}",
        )
        return None
    return frame


def iter_decoded(rec: Recording, problems: Problems) -> Iterator[Tuple[int, Optional[np.ndarray]]]:
    """(index, frame or None) for every frame in order; stops after a video truncation point."""
    files = frame_files(rec.source)
    for i in range(len(rec)):
        frame = decode_frame(rec, i, problems, files)
        yield i, frame
        if frame is None and problems.items and problems.items[-1].kind == "truncated_video":
            return


def _prepared(
    rec: Recording, pre: Preprocessing, problems: Problems, threads: int
) -> Iterator[Tuple[int, Optional[np.ndarray]]]:
    """(index, preprocessed uint8 [3, h, w] or None) in order. Image files are decoded and
    preprocessed ``threads`` at a time (OpenCV and torch release the GIL); videos sequentially."""

    def prepare(frame: Optional[np.ndarray]) -> Optional[np.ndarray]:
        return None if frame is None else pre(frame)[0].numpy()

    if not (isinstance(_root(rec.source), ImageFiles) and threads > 1):
        for i, frame in iter_decoded(rec, problems):
            yield i, prepare(frame)
        return
    files = frame_files(rec.source)
    with ThreadPoolExecutor(threads) as pool:
        for start in range(0, len(rec), _CHUNK):
            idx = range(start, min(len(rec), start + _CHUNK))
            yield from zip(idx, pool.map(lambda i: prepare(decode_frame(rec, i, problems, files)), idx))


def build_cache(
    rec: Recording,
    preprocessing: Preprocessing,
    cache_dir: Path,
    problems: Optional[Problems] = None,
    threads: int = 2,
) -> CachedRecording:
    """Return the up-to-date cache of ``rec``, building it when missing or stale."""
    problems = problems if problems is not None else Problems("raise")
    directory = Path(cache_dir) / _cache_name(rec)
    key = fingerprint(rec, preprocessing)
    index_path = directory / "index.json"
    if index_path.is_file():
        try:
            info = json.loads(index_path.read_text())
            complete = (directory / "frames.npy").is_file() and (directory / "index.npz").is_file()
            if info.get("fingerprint") == key and complete:
                for p in info.get("problems", []):
                    problems.report(p["file"], p["row"], p["kind"], p["message"])
                if info.get("name") != display_name(rec):  # a cache from before folder + CSV naming
                    info["name"] = display_name(rec)
                    tmp_json = directory / "index.tmp.json"
                    tmp_json.write_text(json.dumps(info, indent=1))
                    os.replace(tmp_json, index_path)
                return CachedRecording(directory)
        except (json.JSONDecodeError, OSError):
            pass
    directory.mkdir(parents=True, exist_ok=True)
    index_path.unlink(missing_ok=True)
    for stale in directory.glob("*.tmp.*"):  # left by an interrupted build
        stale.unlink(missing_ok=True)
    local = Problems(problems.on_error)
    n = len(rec)
    h, w = preprocessing.size
    tmp = directory / f"frames.{os.getpid()}.tmp.npy"
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, 3, h, w))
    valid = np.zeros(n, dtype=bool)
    try:
        for i, frame in _prepared(rec, preprocessing, local, threads):
            if frame is not None:
                out[i] = frame
                valid[i] = True
        out.flush()
        del out
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    commit(tmp, directory / "frames.npy")  # fsynced: a power cut leaves no renamed but empty cache
    np.savez(
        directory / "index.tmp.npz",
        timestamp_s=rec.log["timestamp_s"],
        curvature=rec.log["curvature"],
        speed_mps=rec.log["speed_mps"],
        valid=valid,
        **({c: rec.log[c] for c in POSE_COLUMNS} if all(c in rec.log for c in POSE_COLUMNS) else {}),
    )
    commit(directory / "index.tmp.npz", directory / "index.npz")
    info = {
        "fingerprint": key,
        "name": display_name(rec),
        "source": rec.meta.source,
        "path": str(rec.path),
        "drive": rec.meta.extra.get("drive", str(rec.path)),
        "fps": rec.meta.fps,
        "camera": rec.meta.camera.to_dict() if rec.meta.camera else None,
        "source_size": [rec.meta.height, rec.meta.width],
        "preprocessing": preprocessing.to_dict(),
        "problems": [dict(file=p.file, row=p.row, kind=p.kind, message=p.message) for p in local.items],
    }
    tmp_json = directory / "index.tmp.json"
    tmp_json.write_text(json.dumps(info, indent=1))
    commit(tmp_json, index_path)
    problems.extend(local)
    return CachedRecording(directory)


def cache_recordings(
    recordings: Sequence[Recording],
    preprocessing: Preprocessing,
    cache_dir: Path,
    problems: Optional[Problems] = None,
    threads: int = 2,
) -> List[CachedRecording]:
    """:func:`build_cache` for each recording; recordings without any valid frame are dropped."""
    problems = problems if problems is not None else Problems("raise")
    out = []
    for rec in recordings:
        cached = build_cache(rec, preprocessing, cache_dir, problems, threads)
        if cached.valid.any():
            out.append(cached)
        else:
            problems.report(str(rec.path), None, "empty", "no frame of this recording could be decoded")
    return out


def source_to_model(info: Dict[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """3x3 affine A mapping source-camera pixels to cached model pixels (and its inverse).

    Crop then resize (align_corners=False): u_model = (u_src - left + 0.5) * sx - 0.5.
    """
    src_h, src_w = info["source_size"]
    pre = Preprocessing.from_dict(info["preprocessing"])
    top, bottom, left, right = pre.crop if pre.crop is not None else (0, src_h, 0, src_w)
    sy, sx = pre.size[0] / (bottom - top), pre.size[1] / (right - left)
    a = np.array([[sx, 0.0, (0.5 - left) * sx - 0.5], [0.0, sy, (0.5 - top) * sy - 0.5], [0.0, 0.0, 1.0]])
    return a, np.linalg.inv(a)


def model_camera(info: Dict[str, Any]) -> Optional[Dict[str, float]]:
    """The calibration of a cache's model-size frames (``index.json`` ``info``), or None without one.

    Crop and resize are an affine map A of pixels, so the cached frames are a pinhole camera too,
    with intrinsics ``A K`` and the same mounting: view synthesis on them is the source camera's,
    less the content outside the crop."""
    camera = info.get("camera")
    if camera is None:
        return None
    a, _ = source_to_model(info)
    k = a @ np.array([[camera["fx"], 0.0, camera["cx"]], [0.0, camera["fy"], camera["cy"]], [0.0, 0.0, 1.0]])
    return {**camera, "fx": float(k[0, 0]), "fy": float(k[1, 1]), "cx": float(k[0, 2]), "cy": float(k[1, 2])}
