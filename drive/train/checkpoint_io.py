"""Checkpoints that survive a kill or a full disk: :class:`AtomicCheckpointIO`.

Lightning's own writer serialises to memory and then writes the destination in place (with a
``TMPDIR`` on another file system, through a temporary there that is *copied* onto it): a kill in
between left a 0-byte ``last.ckpt``, and a full disk a cut-short one, the previous checkpoint gone.
Here every checkpoint is serialised to memory, written to a hidden temporary file in the
checkpoint's own directory, flushed and fsynced, and renamed over the old one
(:mod:`drive.io.atomic`), whatever ``TMPDIR`` is. A write that fails (no space, read-only, quota)
raises :class:`~drive.io.atomic.WriteError` naming the file and saying that the previous checkpoint
is intact; training stops there rather than running on without checkpoints. Loading names the
file when it is empty, truncated or not a checkpoint at all (instead of a bare ``EOFError``).

A kill during a save can leave that hidden temporary (``.last.<hex>.tmp.ckpt``); the next save of
the same checkpoint removes it. ``drive fit`` installs it unless the config names another
``CheckpointIO`` plugin; remote paths (``s3://`` ...) go to Lightning's writer.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from drive.checkpoint import checked_load
from drive.io.atomic import write_bytes

__all__ = ["AtomicCheckpointIO"]


def _remote(path: Any) -> bool:
    text = str(path)
    return "://" in text and not text.startswith("file://")


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to memory, then temporary file beside the checkpoint + fsync + rename."""

    def save_checkpoint(
        self, checkpoint: Dict[str, Any], path: Any, storage_options: Optional[Any] = None
    ) -> None:
        if _remote(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        target = Path(path)
        # a run killed during a save left its hidden temporary: this run writes that file now
        for stale in target.parent.glob(f".{target.stem}.*.tmp{target.suffix}"):
            stale.unlink(missing_ok=True)
        write_bytes(target, buffer.getbuffer())

    def load_checkpoint(
        self,
        path: Any,
        map_location: Optional[Callable] = lambda storage, loc: storage,
        weights_only: Optional[bool] = None,
    ) -> Dict[str, Any]:
        if _remote(path):
            return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        return checked_load(
            path,
            lambda: super(AtomicCheckpointIO, self).load_checkpoint(
                path, map_location=map_location, weights_only=weights_only
            ),
        )
