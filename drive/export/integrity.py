"""Damaged exported files are errors naming the file, never a crash or a leftover.

Loading a ``.pt2`` extracts its shared library into ``TMPDIR/aotinductor_*`` and ``dlopen``s it:
a truncated library crashes the process with SIGBUS, and any failure left the extracted folder
behind. :func:`check_aoti_package` tests the archive (CRCs) and every ELF library in it (its
segments and section table lie inside the file) before anything is extracted;
:func:`load_aoti_package` removes the extraction folder of a load that fails.
:func:`load_error` turns a failure of torch, zipfile, onnx or onnxruntime into one ``ValueError``
line naming the file (and, for a file that names an op this torch lacks, both torch versions).
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import struct
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Union

__all__ = ["check_aoti_package", "load_aoti_package", "load_error", "removing_failed_extractions"]

PathLike = Union[str, "os.PathLike[str]"]


def load_error(path: PathLike, err: BaseException) -> ValueError:
    """``err`` (from reading ``path``) as one line naming the file."""
    if isinstance(err, ValueError) and str(path) in str(err):
        return err
    size = os.path.getsize(path) if os.path.isfile(path) else None
    if size == 0:
        return ValueError(f"{path}: cannot load: the file is empty (0 bytes; an interrupted copy?)")
    unknown = re.search(r"Unknown builtin op: (\S+?)\.", str(err))
    if unknown:
        import torch  # the installed torch's version; this module otherwise needs none

        made = _exported_with(path)
        return ValueError(
            f"{path}: cannot load: it names the op {unknown.group(1)}, which this torch "
            f"({torch.__version__}) lacks; it was exported with torch {made or 'of another version'}: "
            "load it with that torch, or export it again with this one"
        )
    detail = " ".join(str(err).split())[:200]
    detail = f"{type(err).__name__}: {detail}" if detail else type(err).__name__
    return ValueError(
        f"{path}: cannot load: not a policy exported by drive, or a truncated or corrupt one ({detail})"
    )


def _exported_with(path: PathLike) -> str:
    """The torch version a drive TorchScript file records (its metadata), or ''."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next(n for n in z.namelist() if n.endswith("/extra/drive_meta.json"))
            return str(json.loads(z.read(name)).get("torch_version", ""))
    except Exception:  # noqa: BLE001 - only an embellishment of an error being reported
        return ""


def _elf_fits(data: bytes) -> bool:
    """Whether a 64-bit little-endian ELF's program segments and section table lie inside ``data``."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return False
    if data[4] != 2 or data[5] != 1:  # only ELF64 LE is produced here; others are not checked further
        return True
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    if phoff + phentsize * phnum > len(data) or shoff + shentsize * shnum > len(data):
        return False
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1 and p_offset + p_filesz > len(data):  # PT_LOAD
            return False
    return True


def check_aoti_package(path: PathLike) -> None:
    """Refuse a ``.pt2`` whose archive or libraries are damaged (``ValueError`` naming the file)."""
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
            if bad is not None:
                raise ValueError(f"{path}: damaged archive: {bad} fails its checksum")
            for name in zf.namelist():
                if name.endswith(".so") and not _elf_fits(zf.read(name)):
                    raise ValueError(
                        f"{path}: damaged package: the library {name} is cut short or not a library"
                    )
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise load_error(path, err) from None


@contextmanager
def removing_failed_extractions(path: PathLike) -> Iterator[None]:
    """On a failure inside the block, remove the ``aotinductor_*`` folders it extracted into
    ``TMPDIR`` and raise a ``ValueError`` naming ``path``."""
    pattern = os.path.join(tempfile.gettempdir(), "aotinductor_*")
    before = set(glob.glob(pattern))
    try:
        yield
    except Exception as err:  # noqa: BLE001 (torch raises RuntimeError, OSError, zip errors ...)
        for folder in set(glob.glob(pattern)) - before:
            shutil.rmtree(folder, ignore_errors=True)
        raise load_error(path, err) from None


def load_aoti_package(path: PathLike) -> Any:
    """``torch._inductor.aoti_load_package`` after :func:`check_aoti_package`; a failing load
    removes the ``aotinductor_*`` folder it extracted and is a ``ValueError`` naming the file."""
    # torch._inductor takes ~5 s to import: only loading a .pt2 pays it (start-up time)
    from torch._inductor import aoti_load_package

    check_aoti_package(path)
    with removing_failed_extractions(path):
        return aoti_load_package(str(Path(path)))
    raise AssertionError("unreachable")  # pragma: no cover
