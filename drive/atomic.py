"""Files written whole or not at all.

Every single-file output of drive (checkpoints, exported policies, reports, predictions, plots,
images, demo stage stamps) goes to a hidden temporary file beside its destination and is renamed
onto it (``os.replace``, atomic on one file system) only once it is complete: a crash or an error
halfway leaves the previous file, or none, never a truncated one, and the temporary file is
removed. Streamed outputs follow the same rule with their own temporary names (saliency videos,
recordings, the frame cache).
"""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Union

if TYPE_CHECKING:
    import numpy as np

__all__ = ["atomic_path", "write_text", "write_image", "save_figure"]

PathLike = Union[str, "os.PathLike[str]"]


@contextmanager
def atomic_path(out: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``out`` (its parents created) to write to; on a clean exit it
    replaces ``out``, on an exception it is deleted. The temporary name ends in ``out``'s suffix,
    so writers that choose a format by extension (matplotlib, OpenCV) still see it, and the file
    has the mode a plain ``open(out, "w")`` would give (the umask's)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:  # not tempfile.mkstemp: its files are private (0600); this one gets the umask's mode, as out would
        tmp = out.parent / f".{out.stem}.{secrets.token_hex(4)}.tmp{out.suffix}"
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            break
        except FileExistsError:
            continue
    try:
        yield Path(tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(out: PathLike, text: str) -> Path:
    """``Path(out).write_text(text)``, atomically (UTF-8)."""
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(out)


def write_image(out: PathLike, rgb: "np.ndarray") -> Path:
    """An RGB ``uint8 [H, W, 3]`` array as an image file (format from the suffix), atomically; an
    encoder failure is an error naming the file, not a silently missing image."""
    import cv2

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
    import matplotlib.pyplot as plt

    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, **kwargs)
    finally:
        plt.close(fig)
    return Path(out)
