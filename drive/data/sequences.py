"""Sequences: fixed-length windows over cached recordings that never cross a time gap.

A *segment* is a maximal run of valid frames in which every step ``dt`` is at most
``gap_factor`` x the recording's median step; recording starts, dropped frames and long pauses
all end segments. Training windows have length T and start every ``stride`` frames inside one
segment. Full-recording iteration (stateful evaluation) tiles every segment with consecutive,
non-overlapping windows; the first window of each segment has ``reset=True`` (start from a fresh
hidden state), the last one is padded (padding has ``mask=False`` and weight 0).

Per-frame elapsed time ``dt`` [s] is ``t[i] - t[i-1]`` inside a segment and the recording's median
step on a segment's first frame (its true predecessor is unknown or not part of the sequence).

Splits are by recording (drive), never by shuffled frames: :func:`split_ranges` implements a
seeded hold-out of whole drives and the NCP paper's scheme (validation = first and last 5% of
every training drive).
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Sequence, Tuple

import numpy as np

from drive.data.cache import CachedRecording

__all__ = [
    "Window",
    "segments",
    "median_dt",
    "elapsed",
    "train_windows",
    "stateful_windows",
    "split_ranges",
    "VAL_SPLITS",
]

VAL_SPLITS = ("none", "drives", "ncp")
Range = Tuple[int, int, int]  # (recording index, first frame, end frame exclusive)


@dataclasses.dataclass(frozen=True)
class Window:
    """Frames ``start .. start+length-1`` of recording ``recording``; ``length`` <= T (rest is padding)."""

    recording: int
    start: int
    length: int
    reset: bool


def median_dt(timestamp_s: np.ndarray) -> float:
    """Median frame step [s] of a recording (1.0 for a single frame)."""
    return float(np.median(np.diff(timestamp_s))) if len(timestamp_s) > 1 else 1.0


def segments(
    timestamp_s: np.ndarray, valid: np.ndarray, gap_factor: float = 3.0, lo: int = 0, hi: int = -1
) -> List[Tuple[int, int]]:
    """Maximal gap-free runs ``[start, end)`` of valid frames within frames ``[lo, hi)``."""
    hi = len(timestamp_s) if hi < 0 else hi
    limit = gap_factor * median_dt(timestamp_s)
    ok = np.asarray(valid[lo:hi], dtype=bool)
    steps = np.diff(timestamp_s[lo:hi])
    # frame i continues frame i-1 when both are valid and the step is not a gap
    cont = np.zeros(len(ok), dtype=bool)
    cont[1:] = ok[1:] & ok[:-1] & (steps <= limit)
    out: List[Tuple[int, int]] = []
    i = 0
    while i < len(ok):
        if not ok[i]:
            i += 1
            continue
        j = i + 1
        while j < len(ok) and cont[j]:
            j += 1
        out.append((lo + i, lo + j))
        i = j
    return out


def elapsed(timestamp_s: np.ndarray, seg_start: int, start: int, length: int, nominal: float) -> np.ndarray:
    """dt [length] in seconds for frames ``start..`` of a segment starting at ``seg_start``."""
    idx = np.arange(start, start + length)
    prev = np.maximum(idx - 1, 0)
    dt = timestamp_s[idx] - timestamp_s[prev]
    dt[idx == seg_start] = nominal
    return dt


def train_windows(
    recs: Sequence[CachedRecording],
    ranges: Sequence[Range],
    seq_len: int,
    stride: int,
    gap_factor: float = 3.0,
) -> List[Window]:
    """All full-length windows inside the gap-free segments of ``ranges``; ``reset`` marks segment starts."""
    if seq_len < 1 or stride < 1:
        raise ValueError(f"seq_len and stride must be >= 1, got {seq_len}, {stride}")
    out: List[Window] = []
    for r, lo, hi in ranges:
        rec = recs[r]
        for s, e in segments(rec.timestamp_s, rec.valid, gap_factor, lo, hi):
            for start in range(s, e - seq_len + 1, stride):
                out.append(Window(r, start, seq_len, start == s))
    return out


def stateful_windows(
    recs: Sequence[CachedRecording], ranges: Sequence[Range], seq_len: int, gap_factor: float = 3.0
) -> List[Window]:
    """Consecutive windows covering every valid frame once, in time order (for stateful evaluation).

    Iterate them in order with batch size 1, or as B parallel streams, and carry the hidden state
    from one window of a recording to the next unless ``reset``.
    """
    out: List[Window] = []
    for r, lo, hi in ranges:
        rec = recs[r]
        for s, e in segments(rec.timestamp_s, rec.valid, gap_factor, lo, hi):
            for start in range(s, e, seq_len):
                out.append(Window(r, start, min(seq_len, e - start), start == s))
    return out


def split_ranges(
    recs: Sequence[CachedRecording], mode: str, val_fraction: float = 0.1, seed: int = 0
) -> Tuple[List[Range], List[Range]]:
    """Deterministic (train, val) frame ranges.

    mode: ``none`` (everything trains), ``drives`` (a seeded ``val_fraction`` of the drives -- side
    cameras stay with their drive -- go to validation), ``ncp`` (validation = first and last
    ``val_fraction / 2`` of every drive; default 0.1 = the paper's 5% + 5%).
    """
    if mode not in VAL_SPLITS:
        raise ValueError(f"val_split must be one of {VAL_SPLITS}, got {mode!r}")
    whole = [(i, 0, len(r)) for i, r in enumerate(recs)]
    if mode == "none":
        return whole, []
    if mode == "drives":
        drives = sorted({r.drive for r in recs})
        n_val = min(len(drives) - 1, max(1, int(round(val_fraction * len(drives))))) if len(drives) > 1 else 0
        order = np.random.default_rng(seed).permutation(len(drives))
        val = {drives[k] for k in order[:n_val]}
        return (
            [w for w in whole if recs[w[0]].drive not in val],
            [w for w in whole if recs[w[0]].drive in val],
        )
    train: List[Range] = []
    val_r: List[Range] = []
    for i, r in enumerate(recs):
        n = len(r)
        edge = int(math.ceil(n * val_fraction / 2))
        train.append((i, edge, n - edge))
        val_r += [(i, 0, edge), (i, n - edge, n)]
    return train, val_r
