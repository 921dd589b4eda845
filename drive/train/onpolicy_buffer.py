"""The on-policy buffer: the rounds kept and the windows drawn from them, with no Lightning in it
(:class:`~drive.train.onpolicy.OnPolicyData` is the callback around it).

A round is a :class:`~drive.replay.rollout.Rollout`, every visited step of its episodes. The buffer
keeps every round (``keep_rounds = 0``, DAgger's growing aggregate) or the last ``keep_rounds`` (a
ring). A *window* is ``seq_len`` (the training windows' length) consecutive steps of one episode with
no takeover after its first step (and, with limits, no step beyond ``max_offset_m`` / ``max_yaw_rad``
of the recorded frame's camera); :meth:`OnPolicyBuffer.draw` draws windows by ``(seed, step)``, so the
same step of a resumed run draws the same windows.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from drive.replay.rollout import Rollout
from drive.train.rounds import takeover_places

__all__ = ["OnPolicyBuffer"]


def _count_in_windows(flags: np.ndarray, t: int) -> np.ndarray:
    """How many of ``flags[i : i + t]`` are set, for every full window i."""
    return np.convolve(flags.astype(np.int64), np.ones(t, np.int64), "valid")


class OnPolicyBuffer:
    """Rounds of on-policy steps, and windows of ``seq_len`` steps drawn from them (module docstring)."""

    def __init__(self, keep_rounds: int = 0, max_offset_m: float = 0.0, max_yaw_rad: float = 0.0) -> None:
        if keep_rounds < 0 or max_offset_m < 0 or max_yaw_rad < 0:
            raise ValueError(
                "on-policy buffer: keep_rounds, max_offset_m, max_yaw_rad >= 0, got "
                f"{keep_rounds}, {max_offset_m}, {max_yaw_rad}"
            )
        self.keep = int(keep_rounds)
        self.max_offset_m, self.max_yaw_rad = float(max_offset_m), float(max_yaw_rad)
        self.rounds: List[Rollout] = []
        self._data: Optional[Rollout] = None  # the rounds joined, and where windows of a length start
        self._starts: Dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.rounds)

    def add(self, rollout: Rollout) -> None:
        """A round joins the buffer (the oldest leaves it beyond ``keep_rounds``)."""
        self.rounds.append(rollout)
        if self.keep:
            self.rounds = self.rounds[-self.keep :]
        self._data, self._starts = None, {}

    def takeover_places(self, last: int) -> List[Tuple[int, int]]:
        """``(recording, frame)`` of every takeover in the ``last`` rounds."""
        return [p for r in self.rounds[-last:] for p in takeover_places(r)] if last > 0 else []

    @property
    def data(self) -> Rollout:
        """Every kept step, round after round."""
        if self._data is None:
            self._data = Rollout.concat(self.rounds) if len(self.rounds) > 1 else self.rounds[0]
        return self._data

    def window_starts(self, seq_len: int) -> np.ndarray:
        """Steps of :attr:`data` that begin a window of ``seq_len`` steps (module docstring)."""
        if seq_len not in self._starts:
            found = self._find_starts(self.data, int(seq_len)) if self.rounds else np.zeros(0, np.int64)
            self._starts[seq_len] = found
        return self._starts[seq_len]

    def _find_starts(self, data: Rollout, t: int) -> np.ndarray:
        n = len(data)
        if n < t:
            return np.zeros(0, np.int64)
        ok = data.episode[t - 1 :] == data.episode[: n - t + 1]
        if t > 1:
            ok &= _count_in_windows(data.start[1:], t - 1)[: n - t + 1] == 0
        outside = np.zeros(n, bool)
        if self.max_offset_m > 0:
            outside |= np.abs(data.left_m) > self.max_offset_m
        if self.max_yaw_rad > 0:
            outside |= np.abs(data.yaw_rad) > self.max_yaw_rad
        if outside.any():
            ok &= _count_in_windows(outside, t) == 0
        return np.flatnonzero(ok)

    def draw(self, seed: int, step: int, count: int, seq_len: int) -> np.ndarray:
        """``count`` starts of windows of ``seq_len`` steps, drawn with replacement by ``(seed, step)``
        (none if the buffer holds no window)."""
        starts = self.window_starts(seq_len)
        if count <= 0 or len(starts) == 0:
            return np.zeros(0, np.int64)
        return np.random.default_rng([seed, step, 0x0C]).choice(starts, size=count)

    def state_dict(self) -> Dict[str, Any]:
        return {"rounds": [{k: torch.from_numpy(v) for k, v in r.to_dict().items()} for r in self.rounds]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.rounds = [Rollout(**{k: v.numpy() for k, v in r.items()}) for r in state.get("rounds", [])]
        self._data, self._starts = None, {}
