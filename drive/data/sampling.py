"""Training order that a killed run can resume exactly where it stopped.

An epoch's order and every augmentation draw are pure functions of ``(seed, epoch, window)``:

- :class:`EpochSampler` shuffles the windows with a permutation seeded by ``(seed, epoch)`` and
  yields *draw keys* ``(window, epoch)``; :class:`~drive.data.dataset.SequenceDataset` seeds the
  window's augmentation with ``(seed, epoch, window)``. Nothing depends on worker seeds, on how many
  items a process has drawn before, or on how many epochs a DataLoader has run, so a resumed run
  draws exactly what the uninterrupted run would have (and persistent workers still draw fresh
  augmentation every epoch).
- :class:`ResumableLoader` is a DataLoader with ``state_dict`` / ``load_state_dict`` (Lightning's
  stateful-loader protocol: the state is saved in every checkpoint and loaded before the epoch's
  iterator is created): it records the epoch and how many batches of it were handed out, and on
  resume skips those batches by index, without loading them.

:class:`BalancedSampler` (``--data.balance``) draws an epoch's windows instead of permuting them, each
with a probability that grows with how rare its curvature is (:func:`rarity_weights`), so the tight
curves that fill a few per cent of a log get more than a few per cent of the gradient. Its draws are
seeded by ``(seed, epoch)`` too, and its keys ``(window, epoch, k)`` (the window's ``k``-th draw this
epoch) give every repeat of a window its own augmentation.

Under DDP the training loader's sampler is an :class:`EpochShards` over the epoch sampler: the
ranks together train exactly the global batches one process would (same windows, same
augmentation), each rank an interleaved share of every one, and Lightning leaves it in place (it
is a DistributedSampler), so the loader stays resumable. Evaluation loaders under DDP use
:class:`RecordingShards` instead of Lightning's round-robin sampler, so stateful evaluation sees
every stream whole and counts every window once, also where streams are fewer than ranks.
"""

from __future__ import annotations

import itertools
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from torch.utils.data import DataLoader, DistributedSampler, Sampler

__all__ = [
    "BalancedSampler",
    "EpochSampler",
    "EpochShards",
    "Padding",
    "RARITY_EDGES_PER_M",
    "RecordingShards",
    "ResumableLoader",
    "global_rows",
    "rarity_weights",
]

DrawKey = Tuple[int, ...]  # (window, epoch) or (window, epoch, k)
# bins of a window's mean |curvature| (1/m) for rarity: straight, gentle ... a junction turn's 1/5 m
RARITY_EDGES_PER_M = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16)


class EpochSampler(Sampler[DrawKey]):
    """Every window once per epoch, shuffled by ``(seed, epoch)``; yields ``(window, epoch)``."""

    def __init__(self, size: int, seed: int, shuffle: bool = True) -> None:
        self.size, self.seed, self.shuffle = int(size), int(seed), shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[DrawKey]:
        order = (
            np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
            if self.shuffle
            else np.arange(self.size)
        )
        return iter([(int(i), self.epoch) for i in order])


def rarity_weights(mean_abs_curvature: np.ndarray, power: float) -> np.ndarray:
    """Draw weights (mean 1) of windows whose labels' mean |curvature| (1/m) is given: the share of
    windows in the window's bin of :data:`RARITY_EDGES_PER_M`, to the power ``-power`` (0: all equal;
    1: every bin drawn equally often; 0.5 halfway, in logarithm)."""
    if not 0.0 <= power <= 1.0:
        raise ValueError(f"balance must be in [0, 1], got {power}")
    k = np.asarray(mean_abs_curvature, dtype=np.float64)
    bins = np.digitize(k, RARITY_EDGES_PER_M)
    share = np.bincount(bins, minlength=len(RARITY_EDGES_PER_M) + 1) / max(len(k), 1)
    weights = share[bins] ** -power
    return weights / weights.mean() if len(weights) else weights


class BalancedSampler(EpochSampler):
    """``size`` windows an epoch, drawn with replacement by ``weights`` (:func:`rarity_weights`),
    seeded by ``(seed, epoch)``; yields ``(window, epoch, k)``, ``k`` counting the window's draws."""

    def __init__(self, weights: np.ndarray, seed: int) -> None:
        super().__init__(len(weights), seed)
        self.p = np.asarray(weights, dtype=np.float64) / np.sum(weights)

    def __iter__(self) -> Iterator[DrawKey]:
        picks = np.random.default_rng([self.seed, self.epoch, 0xBA]).choice(self.size, self.size, p=self.p)
        seen: Dict[int, int] = {}
        keys = []
        for i in picks.tolist():
            keys.append((i, self.epoch, seen.get(i, 0)))
            seen[i] = seen.get(i, 0) + 1
        return iter(keys)


class RecordingShards(DistributedSampler):
    """Evaluation windows for one DDP rank: whole streams, in time order, nothing counted twice.

    Stateful evaluation carries the hidden state from a window to the next one of the same
    recording unless the window starts a stream (``reset``: a new recording, a time gap, the next
    validation range of a recording), so a rank must see all of a stream's windows, consecutively.
    Lightning's default DistributedSampler deals windows out round-robin (each would start from a
    zero state) and pads the shards with repeated windows (counted twice in the metrics); being a
    DistributedSampler, this one is left in place. Streams go, largest first, to the rank with the
    fewest windows so far (deterministic: every rank computes the same assignment). A rank left
    without a stream (fewer streams than ranks) evaluates one :class:`Padding` window, which counts
    nothing (the datamodule masks it), so that every rank runs the evaluation loop and joins its
    reductions: the metrics stay exactly those of one process.

    Args:
        recording_of: the recording index of every window, in dataset order (a recording's windows
            are contiguous, as :func:`drive.data.sequences.stateful_windows` lays them out).
        starts: whether each window starts a stream (``Window.reset``); None: only a new recording does.
    """

    def __init__(
        self,
        recording_of: Sequence[int],
        num_replicas: int,
        rank: int,
        starts: Optional[Sequence[bool]] = None,
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        # DistributedSampler.__init__ wants a process group and pads; its attributes are set here
        self.num_replicas, self.rank, self.epoch, self.seed = int(num_replicas), int(rank), 0, 0
        self.shuffle = self.drop_last = False
        load = [0] * self.num_replicas
        mine: List[List[int]] = []
        for group in sorted(_streams(recording_of, starts), key=len, reverse=True):
            target = load.index(min(load))
            load[target] += len(group)
            if target == self.rank:
                mine.append(group)
        self.indices: List[int] = [i for group in sorted(mine) for i in group]
        if not self.indices and len(recording_of):
            self.indices = [Padding(0)]
        self.num_samples = self.total_size = len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples


def _streams(recording_of: Sequence[int], starts: Optional[Sequence[bool]]) -> List[List[int]]:
    """Window indices grouped into streams: a new one at every new recording and every ``starts``."""
    groups: List[List[int]] = []
    for i, rec in enumerate(recording_of):
        if not groups or rec != recording_of[i - 1] or (starts is not None and starts[i]):
            groups.append([])
        groups[-1].append(i)
    return groups


class Padding(int):
    """A window index that a rank evaluates without counting it (:class:`RecordingShards`)."""


class EpochShards(DistributedSampler):
    """One DDP rank's share of an :class:`EpochSampler`'s epoch, such that the ranks together train
    exactly the batches one process would at ``batch_size x num_replicas`` (the global batch).

    The epoch's draw keys are cut into global batches of ``B = batch_size x num_replicas``
    consecutive keys, as one process would batch them; each is dealt out interleaved: rank ``r``
    gets its keys ``r, r + W, r + 2W, ...`` (W = num_replicas), so row ``i`` of a rank's batch is
    row ``i W + r`` of the global batch (:func:`global_rows` says which). A last, partial global
    batch is padded with repeats of its first keys to a multiple of W, so every rank has the same
    number of batches (DDP steps in lockstep). Order, augmentation and resume stay those of the
    sampler: a pure function of ``(seed, epoch)``; Lightning leaves a DistributedSampler in place.
    """

    def __init__(self, sampler: EpochSampler, batch_size: int, num_replicas: int, rank: int) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.sampler, self.batch_size = sampler, int(batch_size)
        self.num_replicas, self.rank, self.seed = int(num_replicas), int(rank), sampler.seed
        self.shuffle = self.drop_last = False
        full, rest = divmod(len(sampler), self.batch_size * self.num_replicas)
        self.num_samples = full * self.batch_size + -(-rest // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    @property
    def epoch(self) -> int:  # type: ignore[override]
        return self.sampler.epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        self.sampler.set_epoch(value)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[DrawKey]:
        keys, size, w = list(self.sampler), self.batch_size * self.num_replicas, self.num_replicas
        mine: List[DrawKey] = []
        for lo in range(0, len(keys), size):
            block = keys[lo : lo + size]
            block += [block[i] for i in range(-len(block) % w)]  # the last: to a multiple of W
            mine += block[self.rank :: w]
        return iter(mine)

    def __len__(self) -> int:
        return self.num_samples


def global_rows(batch: int, rank: int, world: int) -> np.ndarray:
    """Rows of the global batch (:class:`EpochShards`) that a rank's batch of ``batch`` rows holds."""
    return np.arange(batch) * world + rank


class _SkipFirst:
    """The loader's batches of indices, leaving out the first ``loader._skip`` (the loader zeroes it
    once its iteration serves a batch: DataLoader iterators may call ``iter()`` here more than once
    before that); ``len()`` stays the whole epoch's, as Lightning counts skipped batches as done."""

    def __init__(self, batches: Any, loader: "ResumableLoader") -> None:
        self.batches, self.loader = batches, loader

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.batches), self.loader._skip, None)


class ResumableLoader(DataLoader):
    """A training DataLoader over an :class:`EpochSampler` (``sampler=``) that saves and restores
    its position: ``state_dict()`` = ``{"epoch", "batches"}`` handed out so far in that epoch (a
    finished epoch is saved as the start of the next); after ``load_state_dict`` the next iteration
    starts there, skipping the batches by index without loading them.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not hasattr(self.sampler, "set_epoch"):
            raise TypeError("ResumableLoader needs a sampler with set_epoch, e.g. EpochSampler")
        self._skip = 0
        self._served = 0

    @property
    def _index_sampler(self) -> Any:
        return _SkipFirst(super()._index_sampler, self)

    def __iter__(self) -> Iterator[Any]:
        self._served = self._skip
        for batch in super().__iter__():
            self._skip = 0
            self._served += 1
            yield batch
        self._skip = 0

    def state_dict(self) -> Dict[str, int]:
        epoch = int(self.sampler.epoch)
        if self._served >= len(self):
            return {"epoch": epoch + 1, "batches": 0}
        return {"epoch": epoch, "batches": self._served}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.sampler.set_epoch(int(state["epoch"]))
        self._skip = int(state["batches"])
