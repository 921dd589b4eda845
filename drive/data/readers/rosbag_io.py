"""Opening ROS bags: topics listed and picked, camera frames streamed one message at a time.

:func:`open_bag` opens any bag kind :mod:`drive.data.readers.rosbag` reads (ROS 1 ``.bag``,
rosbag2 with sqlite3 or MCAP storage) through ``rosbags``' ``AnyReader``; :func:`pick_topic`
chooses the camera, steering, speed or pose topic (the one candidate, or the one named); and
:class:`BagFrames` is the frame source of a recording read from a bag.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from drive.data.errors import Problems
from drive.data.readers.ros_messages import (
    IMAGE_TYPES,
    POSE_TYPES,
    SPEED_TYPES,
    STEERING_TYPES,
    decode_image,
    typestore,
)
from drive.io.recording import RecordingError

__all__ = ["open_bag", "open_or_report", "list_topics", "pick_topic", "BagFrames"]


def open_bag(path: Path) -> Any:
    # imported on first use: rosbags costs ~0.1 s of start-up to every drive command otherwise
    from rosbags.highlevel import AnyReader

    reader = AnyReader([path], default_typestore=typestore(ros1=path.suffix == ".bag"))
    reader.open()
    return reader


def open_or_report(path: Path, problems: Problems) -> Optional[Any]:
    try:
        return open_bag(path)
    # rosbags (and the storage libraries below it: sqlite3, MCAP, lz4, bz2) raise their own error
    # types for every kind of damage; any of them makes the bag unreadable, reported as such
    except Exception as e:  # noqa: BLE001
        problems.report(str(path), None, "unreadable", f"cannot open the bag ({type(e).__name__}: {e})")
        return None


def list_topics(path: Path) -> List[Dict[str, Any]]:
    """Every topic of a bag: name, type, message count, and the role drive can give it."""
    reader = open_bag(Path(path))
    try:
        out = []
        for name, info in sorted(reader.topics.items()):
            roles = [
                r
                for r, types in (
                    ("camera", IMAGE_TYPES),
                    ("steering", STEERING_TYPES),
                    ("speed", SPEED_TYPES),
                    ("pose", POSE_TYPES),
                )
                if info.msgtype in types
            ]
            out.append({"topic": name, "type": info.msgtype, "messages": int(info.msgcount), "roles": roles})
        return out
    finally:
        reader.close()


def _topic_table(reader: Any) -> str:
    return "; ".join(f"{n} ({i.msgtype}, {i.msgcount} msgs)" for n, i in sorted(reader.topics.items()))


def pick_topic(
    reader: Any, bag: Path, given: Optional[str], types: Sequence[str], role: str, option: str, required: bool
) -> Optional[str]:
    topics = reader.topics
    if given:
        if given not in topics:
            raise ValueError(f"{bag}: no topic {given!r} ({option}); topics: {_topic_table(reader)}")
        if topics[given].msgtype not in types:
            raise ValueError(
                f"{bag}: {option} {given!r} is a {topics[given].msgtype}; a {role} topic must be one of "
                f"{', '.join(types)}"
            )
        return given
    candidates = [n for n, i in sorted(topics.items()) if i.msgtype in types and i.msgcount > 0]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates and not required:
        return None
    if not candidates:
        raise ValueError(f"{bag}: no {role} topic (types {', '.join(types)}); topics: {_topic_table(reader)}")
    listed = "; ".join(f"{n} ({topics[n].msgtype}, {topics[n].msgcount} msgs)" for n in candidates)
    raise ValueError(
        f"{bag}: {len(candidates)} {role} topics: {listed}; name one with {option} (--set {option}=TOPIC)"
    )


class BagFrames:
    """The frames of one camera topic, read from the bag one message at a time.

    ``times_ns[i]`` is the bag (receive) time of frame ``i`` and ``ordinals[i]`` its 0-based index
    on the topic. Reading ``i`` after ``i - 1`` continues one open iterator; any other index opens
    a new one at that receive time (an indexed seek in every storage kind). Picklable for
    DataLoader workers (the reader reopens lazily in each process).
    """

    def __init__(self, path: Path, topic: str, times_ns: np.ndarray, ordinals: np.ndarray):
        self.path, self.topic = Path(path), topic
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.ordinals = np.asarray(ordinals, dtype=np.int64)
        self._reader: Any = None
        self._iter: Optional[Iterator] = None
        self._next = -1

    def __len__(self) -> int:
        return len(self.times_ns)

    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "topic": self.topic, "times_ns": self.times_ns, "ordinals": self.ordinals}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["path"], state["topic"], state["times_ns"], state["ordinals"])

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader, self._iter, self._next = None, None, -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- a finalizer must not raise (at exit, modules may be gone)
            pass

    def _where(self, index: int) -> str:
        return f"{self.path} {self.topic}, message {int(self.ordinals[index])}"

    def read(self, index: int) -> np.ndarray:
        if not 0 <= index < len(self):
            raise IndexError(f"{self.path} {self.topic}: frame {index} out of range 0..{len(self) - 1}")
        if self._reader is None:
            try:
                self._reader = open_bag(self.path)
            except Exception as e:  # noqa: BLE001 -- any damage, as in open_or_report: one error type
                raise RecordingError(f"{self.path}: cannot open the bag ({type(e).__name__}: {e})") from None
        if index != self._next or self._iter is None:
            # messages at the same receive time as frame `index` but before it on the topic are skipped
            t = int(self.times_ns[index])
            conns = [c for c in self._reader.connections if c.topic == self.topic]
            self._iter = self._reader.messages(connections=conns, start=t)
            earlier = int(np.sum(self.times_ns[:index] == t))
            # frames dropped by the reader (bad stamps) with this receive time count too
            skip = int(self.ordinals[index]) - int(self.ordinals[index - earlier]) if earlier else 0
            skip = max(skip, earlier)
            for _ in range(skip):
                next(self._iter, None)
        else:
            gap = int(self.ordinals[index]) - int(self.ordinals[index - 1]) - 1 if index > 0 else 0
            for _ in range(gap):  # messages dropped between two kept frames
                next(self._iter, None)
        item = next(self._iter, None)
        if item is None:
            self._iter = None
            raise RecordingError(f"{self._where(index)}: the message is missing (bag truncated?)")
        conn, _, raw = item
        self._next = index + 1
        try:
            msg = self._reader.deserialize(raw, conn.msgtype)
            return decode_image(msg, conn.msgtype)
        # a damaged message fails deserialization with whatever its bytes trigger (struct, index,
        # unicode errors, rosbags' own); the frame cache reports RecordingError by frame
        except Exception as e:  # noqa: BLE001
            raise RecordingError(f"{self._where(index)}: {e}") from None
