"""Files written whole or not at all.

Every single-file output of drive (checkpoints, exported policies, reports, predictions, plots,
images, demo stage stamps) goes to a hidden temporary file beside its destination and is renamed
onto it (``os.replace``, atomic on one file system) only once it is complete and flushed to the
disk (``fsync`` of the file, then of the directory after the rename, so a power cut or ``kill -9``
cannot leave a renamed but empty file either): a crash or an error halfway leaves the previous
file, or none, never a truncated one, and the temporary file is removed. The temporary lives in
the destination's directory, never in ``TMPDIR`` (a rename across file systems is a copy that a
kill can cut short). A write that fails for want of space or permission raises
:class:`WriteError` (an ``OSError``) naming the file, the reason, and that the previous file is
intact. Streamed outputs follow the same rule with their own temporary names (saliency videos,
recordings, the frame cache; :func:`commit` renames and syncs them).
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import shutil
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Tuple, Union

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "atomic_path",
    "commit",
    "fsync_path",
    "fsync_tree",
    "write_bytes",
    "write_text",
    "write_image",
    "save_figure",
    "WriteError",
    "no_empty_dir_on_error",
    "all_or_nothing",
]

PathLike = Union[str, "os.PathLike[str]"]


class WriteError(OSError):
    """A file could not be written (no space, read-only, no permission); the previous one is intact."""

    def __str__(self) -> str:  # the message alone, which names the file (not "[Errno 28] ...: 'file'")
        return str(self.strerror)


def fsync_path(path: PathLike) -> None:
    """Flush a file's (or a directory's) data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:  # some file systems cannot sync a directory: nothing to flush there
        if not (os.path.isdir(path) and e.errno in (errno.EINVAL, errno.ENOTSUP, errno.EBADF)):
            raise
    finally:
        os.close(fd)


# A tree of more files than this is flushed with one syncfs(2) where the system has it: a
# recording's thousands of JPEG frames cost ~0.5 ms each to fsync one by one (2 s per 3,000 on a
# busy machine), its whole file system ~0.1 s.
SYNCFS_FILES = 32


def _syncfs(directory: PathLike) -> bool:
    """Flush the whole file system holding ``directory`` (data and metadata; Linux ``syncfs``);
    False where the call does not exist or fails (the caller then syncs file by file)."""
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError, TypeError):
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        return syncfs(fd) == 0
    finally:
        os.close(fd)


def fsync_tree(directory: PathLike) -> None:
    """Flush every file below ``directory`` and each directory's entries: one syncfs(2) for a tree
    of more than :data:`SYNCFS_FILES` files where the system has it, else file by file, then
    each directory bottom-up."""
    walk = list(os.walk(directory, topdown=False))
    if sum(len(files) for _, _, files in walk) > SYNCFS_FILES and _syncfs(directory):
        return
    for root, _dirs, files in walk:
        for name in files:
            fsync_path(os.path.join(root, name))
        fsync_path(root)


# the outputs of the innermost all_or_nothing() block, waiting for its end: (temporary, destination)
_PENDING: ContextVar[Optional[List[Tuple[str, str]]]] = ContextVar("drive_pending_outputs", default=None)


def commit(tmp: PathLike, out: PathLike) -> None:
    """Sync ``tmp`` (a file, or a directory with everything below it) and rename it onto ``out``
    (same directory; a directory replaces an existing one), then sync the directory. Inside
    :func:`all_or_nothing` the rename waits for the block's end: ``tmp`` moves to a hidden name of
    its own until then (so a caller that removes ``tmp`` after committing removes nothing); outputs
    waiting to go inside a folder that is committed so go into it first (it waits as a whole)."""
    pending = _PENDING.get()
    if pending is not None and os.path.isdir(tmp):
        inside = [(t, o) for t, o in pending if Path(o).absolute().is_relative_to(Path(tmp).absolute())]
        for item in inside:
            _rename(*item)
            pending.remove(item)
    if os.path.isdir(tmp):
        fsync_tree(tmp)
    else:
        fsync_path(tmp)
    if pending is None:
        _rename(tmp, out)
        return
    waiting = os.path.join(
        os.path.dirname(os.path.abspath(out)), f".{os.path.basename(out)}.{secrets.token_hex(4)}.pending"
    )
    os.rename(tmp, waiting)
    pending.append((waiting, str(out)))


def _rename(tmp: PathLike, out: PathLike) -> None:
    if os.path.isdir(tmp) and os.path.isdir(out):
        shutil.rmtree(out)
    os.replace(tmp, out)
    fsync_path(os.path.dirname(os.path.abspath(out)))


def _discard(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


@contextmanager
def all_or_nothing() -> Iterator[None]:
    """A command's outputs appear together or not at all: every output committed inside the block
    (files of :func:`atomic_path` and the ``write_*`` helpers, recordings, videos: :func:`commit`)
    stays a synced temporary until the block ends; then they are renamed into place, one after
    the other; when the block raises, every temporary is deleted and no earlier file is touched.
    Nested blocks join the outermost one. Outputs must not be read back inside the block."""
    outer = _PENDING.get()
    pending: List[Tuple[str, str]] = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            _discard(tmp)
        raise
    finally:
        _PENDING.reset(token)
    if outer is not None:
        outer.extend(pending)
        return
    for i, (tmp, out) in enumerate(pending):
        try:
            _rename(tmp, out)
        except OSError as e:
            for rest, _ in pending[i:]:
                _discard(rest)
            raise _write_error(Path(out), e) from None


def _write_error(out: Path, err: OSError) -> WriteError:
    previous = "the previous file is left intact" if out.exists() else "nothing was written"
    reason = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        reason = f"{reason} (free some space or write elsewhere)"
    e = WriteError(err.errno, f"{out}: could not be written: {reason}; {previous}")
    e.filename = str(out)
    return e


@contextmanager
def atomic_path(out: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``out`` (its parents created) to write to; on a clean exit it
    is synced and replaces ``out``, on an exception it is deleted. The temporary name ends in
    ``out``'s suffix, so writers that choose a format by extension (matplotlib, OpenCV) still see
    it, and the file has the mode a plain ``open(out, "w")`` would give (the umask's). An
    ``OSError`` of the file system (full disk, read-only, no permission) becomes :class:`WriteError`."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        while (
            True
        ):  # not tempfile.mkstemp: its files are private (0600); this one gets the umask's mode, as out would
            tmp = out.parent / f".{out.stem}.{secrets.token_hex(4)}.tmp{out.suffix}"
            try:
                os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
                break
            except FileExistsError:
                continue
    except WriteError:
        raise
    except OSError as e:
        raise _write_error(out, e) from None
    try:
        yield Path(tmp)
        commit(tmp, out)
    except WriteError:
        raise
    except OSError as e:
        if e.errno in _FS_ERRNOS:
            raise _write_error(out, e) from None
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# errors of the file system rather than of the data written
_FS_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def write_bytes(out: PathLike, data: bytes) -> Path:
    """``Path(out).write_bytes(data)``, atomically (a short write on a full disk is an error)."""
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(out)


def write_text(out: PathLike, text: str) -> Path:
    """``Path(out).write_text(text)``, atomically (UTF-8)."""
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(out)


def write_image(out: PathLike, rgb: "np.ndarray") -> Path:
    """An RGB ``uint8 [H, W, 3]`` array as an image file (format from the suffix), atomically; an
    encoder failure is an error naming the file, not a silently missing image."""
    import cv2  # this module stays light (no numpy, no OpenCV at import): start-up time

    with atomic_path(out) as tmp:
        try:
            ok = cv2.imwrite(str(tmp), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        except cv2.error as e:  # e.g. no encoder for the suffix
            raise RuntimeError(f"{out}: could not write the image: {str(e).strip()}") from None
        if not ok:
            raise RuntimeError(f"{out}: could not write the image")
    return Path(out)


def save_figure(fig: Any, out: PathLike, **kwargs: Any) -> Path:
    """``fig.savefig(out, **kwargs)`` atomically, then close the figure."""
    # the caller made `fig`, so matplotlib is loaded already; at module level it would cost every
    # importer of drive.io ~1 s (start-up time)
    import matplotlib.pyplot as plt

    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, **kwargs)
    finally:
        plt.close(fig)
    return Path(out)


@contextmanager
def no_empty_dir_on_error(directory: PathLike) -> Iterator[Path]:
    """A command's output directory: if the block fails, the directories it created for
    ``directory`` (and its missing parents) are removed again when they are still empty, so a
    refused run leaves no empty ``--out`` folder behind. Pre-existing folders are never touched."""
    directory = Path(directory).absolute()
    missing = []
    probe = directory
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    try:
        yield directory
    except BaseException:
        for folder in missing:  # deepest first
            try:
                folder.rmdir()
            except OSError:  # not empty (something was written) or already gone
                break
        raise
