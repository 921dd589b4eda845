"""How many leading frames of a video file are stored whole, read from the container's own index.

A video cut short (a copy or a recording that stopped mid-write) ends inside a frame, and OpenCV
decodes that last, partial frame without an error, half garbage. The container's index says where
every frame's bytes lie: MP4/MOV sample tables (``moov``, and ``moof`` track runs of a fragmented
file) and AVI chunks. :func:`complete_video_frames` compares them with the file's size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

__all__ = ["complete_video_frames"]

PathLike = Union[str, os.PathLike]


def _boxes(f, start: int, end: int) -> Iterator[Tuple[bytes, int, int]]:
    """(type, payload start, payload end) of the ISO-BMFF boxes in ``[start, end)`` (ends clipped
    to ``end``: a box cut short by the end of the file still lists)."""
    pos = start
    while pos + 8 <= end:
        f.seek(pos)
        head = f.read(16)
        if len(head) < 8:
            return
        size, kind, payload = int.from_bytes(head[:4], "big"), head[4:8], pos + 8
        if size == 1:
            if len(head) < 16:
                return
            size, payload = int.from_bytes(head[8:16], "big"), pos + 16
        elif size == 0:
            size = end - pos
        if size < payload - pos:
            return
        yield kind, payload, min(pos + size, end)
        pos += size


def _child(f, start: int, end: int, path: Sequence[bytes]) -> Optional[Tuple[int, int]]:
    for kind, a, b in _boxes(f, start, end):
        if kind == path[0]:
            return (a, b) if len(path) == 1 else _child(f, a, b, path[1:])
    return None


def _mp4_complete_frames(f, size: int) -> Optional[int]:
    """Complete frames of an MP4/MOV's video track in presentation order: the prefix before the
    first frame whose sample, or any sample decoded after it, ends past the end of the file. The
    samples come from the sample tables in ``moov`` and, for a fragmented file, from every
    ``moof``'s track runs. None when the index cannot be read."""
    moov = _child(f, 0, size, [b"moov"])
    if moov is None:
        return None
    track = _video_track(f, moov)
    if track is None:
        return None
    track_id, stbl = track
    samples = _stbl_samples(f, stbl) if stbl is not None else None
    if samples is None:
        return None
    ends, times = [samples[0]], [samples[1]]
    clock = int(samples[1][-1]) + 1 if len(samples[1]) else 0
    for kind, a, b in _boxes(f, 0, size):
        if kind == b"moof":
            found = _fragment_samples(f, a - 8, a, b, track_id, clock)
            if found is None:
                return None
            ends.append(found[0])
            times.append(found[1])
            clock = int(found[2])
    end = np.concatenate(ends)
    pts = np.concatenate(times)
    if len(end) == 0:
        return None
    cut = np.flatnonzero(end > size)
    if len(cut) == 0:
        return int(len(end))
    order = np.argsort(pts, kind="stable")  # decode index of each presented frame
    return int(np.flatnonzero(order >= cut[0])[0])


def _video_track(f, moov: Tuple[int, int]) -> Optional[Tuple[int, Optional[Tuple[int, int]]]]:
    """(track ID, stbl span) of the first video track."""
    for kind, a, b in _boxes(f, *moov):
        if kind != b"trak":
            continue
        hdlr = _child(f, a, b, [b"mdia", b"hdlr"])
        tkhd = _child(f, a, b, [b"tkhd"])
        if hdlr is None or tkhd is None:
            continue
        f.seek(hdlr[0] + 8)
        if f.read(4) != b"vide":
            continue
        f.seek(tkhd[0])
        version = f.read(1)[0]
        f.seek(tkhd[0] + (20 if version == 1 else 12))
        return int.from_bytes(f.read(4), "big"), _child(f, a, b, [b"mdia", b"minf", b"stbl"])
    return None


def _stbl_samples(f, stbl: Tuple[int, int]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(end offset, presentation time) of every sample in a sample table, in decode order."""
    tables = {kind: (x, y) for kind, x, y in _boxes(f, *stbl)}

    def table(kind: bytes) -> Optional[bytes]:
        if kind not in tables:
            return None
        x, y = tables[kind]
        f.seek(x)
        return f.read(y - x)

    stsz, stsc = table(b"stsz"), table(b"stsc")
    stco, co64 = table(b"stco"), table(b"co64")
    if stsz is None or stsc is None or (stco is None and co64 is None):
        return None
    sizes, count = _sample_sizes(stsz)
    chunks, n = _chunk_offsets(stco, co64)
    runs = (  # (first chunk, samples per chunk, description index) per run of chunks
        np.frombuffer(stsc[8 : 8 + 12 * int.from_bytes(stsc[4:8], "big")], ">u4")
        .reshape(-1, 3)
        .astype(np.int64)
    )
    if len(sizes) != count or len(chunks) != n or (count and len(runs) == 0):
        return None
    offsets = _sample_offsets(runs, chunks, sizes)
    if offsets is None:
        return None
    return offsets + sizes, _presentation_times(table(b"stts"), table(b"ctts"), count)


def _sample_sizes(stsz: bytes) -> Tuple[np.ndarray, int]:
    """Every sample's size (``stsz``: one size for all, or one per sample) and the declared count."""
    fixed, count = int.from_bytes(stsz[4:8], "big"), int.from_bytes(stsz[8:12], "big")
    if fixed:
        return np.full(count, fixed, np.int64), count
    return np.frombuffer(stsz[12 : 12 + 4 * count], ">u4").astype(np.int64), count


def _chunk_offsets(stco: Optional[bytes], co64: Optional[bytes]) -> Tuple[np.ndarray, int]:
    """Every chunk's file offset (``stco`` 32-bit, else ``co64`` 64-bit) and the declared count."""
    if stco is not None:
        n = int.from_bytes(stco[4:8], "big")
        return np.frombuffer(stco[8 : 8 + 4 * n], ">u4").astype(np.int64), n
    n = int.from_bytes(co64[4:8], "big")
    return np.frombuffer(co64[8 : 8 + 8 * n], ">u8").astype(np.int64), n


def _sample_offsets(runs: np.ndarray, chunks: np.ndarray, sizes: np.ndarray) -> Optional[np.ndarray]:
    """Every sample's file offset: the chunks' samples laid end to end from each chunk's offset, as
    many per chunk as its run says; None when the runs do not place every sample."""
    count, n = len(sizes), len(chunks)
    offsets = np.empty(count, np.int64)
    sample = 0
    for r, (first, per_chunk, _) in enumerate(runs):
        last = runs[r + 1][0] - 1 if r + 1 < len(runs) else n
        for chunk in range(first - 1, min(last, n)):
            pos = chunks[chunk]
            for _ in range(per_chunk):
                if sample >= count:
                    break
                offsets[sample] = pos
                pos += sizes[sample]
                sample += 1
    return offsets if sample == count else None


def _presentation_times(stts: Optional[bytes], ctts: Optional[bytes], count: int) -> np.ndarray:
    """Decode times (``stts``) plus composition offsets (``ctts``); the decode index without them."""
    times = np.arange(count, dtype=np.int64)
    if stts is not None and count:
        deltas = _per_sample(stts, ">u4", count)
        if len(deltas) == count:
            times = np.concatenate([[0], np.cumsum(deltas)[:-1]])
    if ctts is not None and count:
        shifts = _per_sample(ctts, ">i4", count)
        if len(shifts) == count:
            times = times + shifts
    return times


def _per_sample(box: bytes, dtype: str, count: int) -> np.ndarray:
    """A run-length table of (sample count, value) entries (``stts``, ``ctts``), one value per sample."""
    entries = np.frombuffer(box[8 : 8 + 8 * int.from_bytes(box[4:8], "big")], dtype).reshape(-1, 2)
    return np.repeat(entries[:, 1].astype(np.int64), entries[:, 0].astype(np.int64))[:count]


def _fragment_samples(
    f, moof_start: int, a: int, b: int, track_id: int, clock: int
) -> Optional[Tuple[np.ndarray, np.ndarray, int]]:
    """(end offset, presentation time, next decode time) of the video track's samples in one
    ``moof`` (ISO 14496-12 8.8: tfhd defaults, trun sizes, durations and composition offsets)."""
    ends: List[int] = []
    times: List[int] = []
    for kind, x, y in _boxes(f, a, b):
        if kind != b"traf":
            continue
        tfhd = _child(f, x, y, [b"tfhd"])
        if tfhd is None:
            return None
        f.seek(tfhd[0])
        head = f.read(tfhd[1] - tfhd[0])
        if int.from_bytes(head[4:8], "big") != track_id:
            continue
        defaults = _fragment_defaults(head, moof_start)
        offset = defaults[0]
        for kind2, u, v in _boxes(f, x, y):
            if kind2 != b"trun":
                continue
            f.seek(u)
            offset, clock = _track_run(f.read(v - u), defaults, offset, clock, ends, times)
    return np.asarray(ends, np.int64), np.asarray(times, np.int64), clock


def _fragment_defaults(tfhd: bytes, moof_start: int) -> Tuple[int, int, int]:
    """(base data offset, default sample duration, default sample size) of a ``tfhd``: the base is
    the ``moof``'s start unless the box gives one."""
    flags = int.from_bytes(tfhd[1:4], "big")
    pos, base, duration, size = 8, moof_start, 0, 0
    if flags & 0x1:
        base = int.from_bytes(tfhd[pos : pos + 8], "big")
        pos += 8
    pos += 4 if flags & 0x2 else 0  # sample description index
    if flags & 0x8:
        duration = int.from_bytes(tfhd[pos : pos + 4], "big")
        pos += 4
    if flags & 0x10:
        size = int.from_bytes(tfhd[pos : pos + 4], "big")
    return base, duration, size


def _track_run(
    run: bytes, defaults: Tuple[int, int, int], offset: int, clock: int, ends: List[int], times: List[int]
) -> Tuple[int, int]:
    """Append a ``trun``'s samples (end offset, presentation time) to ``ends`` and ``times``; returns
    the data offset and the decode time after its last sample. A sample whose entry the run's end
    cuts short ends "past any file" (its bytes are not all there)."""
    base, duration, size = defaults
    rflags, count = int.from_bytes(run[1:4], "big"), int.from_bytes(run[4:8], "big")
    q = 8
    if rflags & 0x1:
        offset = base + int.from_bytes(run[q : q + 4], "big", signed=True)
        q += 4
    q += 4 if rflags & 0x4 else 0  # first sample's flags
    for _ in range(count):
        d, n, shift = duration, size, 0
        if rflags & 0x100:
            d = int.from_bytes(run[q : q + 4], "big")
            q += 4
        if rflags & 0x200:
            n = int.from_bytes(run[q : q + 4], "big")
            q += 4
        q += 4 if rflags & 0x400 else 0  # sample flags
        if rflags & 0x800:
            shift = int.from_bytes(run[q : q + 4], "big", signed=run[0] == 1)
            q += 4
        ends.append(1 << 62 if q > len(run) else offset + n)
        times.append(clock + shift)
        offset += n
        clock += d
    return offset, clock


def _avi_complete_frames(f, size: int) -> Optional[int]:
    """Complete video chunks (``##dc``/``##db``) in an AVI's ``movi`` list before the first one the
    end of the file cuts short; None when the file is not a RIFF AVI."""
    f.seek(0)
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"AVI ":
        return None
    pos, end, complete = 12, size, 0
    stack: List[int] = []
    while pos + 8 <= end or stack:
        if pos + 8 > end:
            pos, end = end, stack.pop()
            continue
        f.seek(pos)
        chunk = f.read(12)
        kind, length = chunk[:4], int.from_bytes(chunk[4:8], "little")
        if kind == b"LIST" and len(chunk) == 12 and chunk[8:12] in (b"movi", b"rec "):
            stack.append(end)
            end, pos = min(pos + 8 + length, size), pos + 12
            continue
        if kind[2:] in (b"dc", b"db") and stack:
            if pos + 8 + length > size:
                return complete
            complete += 1
        pos += 8 + length + (length & 1)
    return None


def complete_video_frames(path: PathLike) -> Optional[int]:
    """How many leading frames of a video are stored whole, when a file cut short (a copy or a
    recording that stopped mid-write) ends inside a frame: OpenCV decodes that last, partial
    frame without an error, half garbage. Read from the container's own index (MP4/MOV sample
    tables, AVI chunks); None when the container says nothing (unknown format, no index).
    For an intact MP4/MOV this is its frame count; for an intact AVI, None."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(12)
            if head[:4] == b"RIFF":
                return _avi_complete_frames(f, size)
            if head[4:8] in (b"ftyp", b"moov", b"free", b"mdat", b"wide", b"skip"):
                return _mp4_complete_frames(f, size)
    except (OSError, ValueError, IndexError):
        return None
    return None
