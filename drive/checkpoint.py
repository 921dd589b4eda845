"""Policies on disk: save a policy with its metadata, load it back safely.

A drive checkpoint is a ``torch.save`` dict that ``torch.load(..., weights_only=True)`` reads
without running any pickled code:

- ``"state_dict"``: the policy's tensors, keys prefixed ``"policy."`` (the LightningModule's
  attribute; Lightning checkpoints from ``drive fit`` have exactly this layout);
- ``"drive"``: the metadata (plain JSON types only) -- see :data:`META_KEYS`:
  ``policy_config`` (:meth:`drive.nn.policy.Policy.config`, wiring included), ``preprocessing``
  (:meth:`drive.data.preprocess.Preprocessing.to_dict`), ``fps``, ``label_units``, ``family``,
  ``drive_version``.

Training writes it through Lightning (``PolicyModule.on_save_checkpoint``); any other producer
(closed-form conversion, tools) writes it with :func:`save_policy`. A file that needs more than
tensors and plain types to load (a pickled payload) is rejected before anything in it runs.

Driving with a checkpoint (or an exported file) is :mod:`drive.policy_drivers`.
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import torch

from drive import __version__
from drive.data.preprocess import Preprocessing
from drive.io.atomic import write_bytes
from drive.nn.policy import Policy

__all__ = [
    "load_policy",
    "save_policy",
    "read_checkpoint",
    "policy_meta",
    "checked_load",
    "CHECKPOINT_SUFFIXES",
    "EXPORT_SUFFIXES",
    "META_KEYS",
    "LABEL_UNITS",
]

META_KEYS = ("policy_config", "preprocessing", "fps", "label_units", "family", "drive_version")
LABEL_UNITS = {"network": "1/km", "policy": "1/m", "label": "curvature"}
CHECKPOINT_SUFFIXES = (".ckpt", ".pt")
EXPORT_SUFFIXES = (".ts", ".pt2", ".onnx")
PathLike = Union[str, os.PathLike]


def policy_meta(
    policy: Policy, preprocessing: Preprocessing, fps: float, family: str, **extra: Any
) -> Dict[str, Any]:
    """The checkpoint metadata dict for ``policy`` (plain JSON types; ``extra`` must be plain too)."""
    return {
        "policy_config": policy.config(),
        "preprocessing": preprocessing.to_dict(),
        "fps": float(fps),
        "label_units": dict(LABEL_UNITS),
        "family": str(family),
        "drive_version": __version__,
        **extra,
    }


def _refusal(path: Path, err: BaseException) -> ValueError:
    detail = [line.strip() for line in str(err).splitlines() if "Unsupported global" in line]
    return ValueError(
        f"{path}: refusing to load: it holds pickled Python objects beyond tensors and plain "
        f"types, which could run code; drive checkpoints never do. {' '.join(detail)}".strip()
    )


def checked_load(path: PathLike, load: Callable[[], Any]) -> Any:
    """``load()`` (a ``torch.load(path, weights_only=True)``), its failures turned into one-line
    ``ValueError``s naming ``path``: an empty file, a truncated or foreign one (torch answers those
    with a bare ``EOFError``, ``OSError: Invalid argument`` or zip errors), or pickled code.
    torch's note on a pickle protocol other than its own is silenced: such a file either loads
    (plain types) or is refused here in one line, and the note would be a second line."""
    path = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return load()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such checkpoint file") from None
    except pickle.UnpicklingError as err:
        protocol = _pickle_protocol(path) if "Unsupported operand" in str(err) else None
        if protocol is not None and protocol >= 4:
            raise ValueError(
                f"{path}: cannot load safely: written with pickle protocol {protocol}, which "
                "torch.load(weights_only=True) does not read; save it again with torch.save's "
                "default protocol (no pickle_protocol argument)"
            ) from None
        if "Weights only load failed" in str(err):
            raise _refusal(path, err) from None
        raise ValueError(
            f"{path}: cannot load: not a checkpoint, or a corrupt one ({_one_line(err)})"
        ) from None
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001 (torch raises many types for a damaged archive)
        size = path.stat().st_size if path.is_file() else None
        if size == 0:
            raise ValueError(
                f"{path}: cannot load: the file is empty (0 bytes; an interrupted write?)"
            ) from None
        raise ValueError(
            f"{path}: cannot load: not a checkpoint, or a truncated or corrupt one ({_one_line(err)})"
        ) from None


def _pickle_protocol(path: Path) -> Optional[int]:
    """The pickle protocol of a ``torch.save`` file (its ``data.pkl`` in the zip, or the legacy
    format's first pickle), from the PROTO opcode it starts with; None when there is none."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                name = next((n for n in zf.namelist() if n.endswith("/data.pkl")), None)
                head = zf.read(name)[:2] if name else b""
        else:
            with open(path, "rb") as f:
                head = f.read(2)
    except (OSError, zipfile.BadZipFile):
        return None
    return head[1] if len(head) == 2 and head[0] == pickle.PROTO[0] else None


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            return any(n.endswith("/constants.pkl") or "/code/__torch__" in n for n in zf.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _one_line(err: BaseException) -> str:
    """``err`` as ``Type: text`` on one line: its first sentence, at most 200 characters (torch's
    zip errors go on with advice about its own internals)."""
    text = " ".join(str(err).split())
    end = text.find(". ")
    if 0 < end < 200:
        text = text[: end + 1]
    elif len(text) > 200:
        text = text[:197] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def read_checkpoint(path: PathLike, map_location: Union[str, torch.device] = "cpu") -> Dict[str, Any]:
    """``torch.load(path, weights_only=True)`` with a clear error for unsafe, damaged or foreign files."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    if path.suffix.lower() in EXPORT_SUFFIXES or _is_torchscript(path):
        raise ValueError(
            f"{path}: an exported policy, not a checkpoint: give the .ckpt / .pt it was exported "
            "from (`drive evaluate --policy` runs exported files)"
        )
    ckpt = checked_load(path, lambda: torch.load(path, map_location=map_location, weights_only=True))
    if not isinstance(ckpt, dict) or "drive" not in ckpt or "state_dict" not in ckpt:
        raise ValueError(f"{path}: not a drive policy checkpoint (needs 'drive' metadata and a 'state_dict')")
    missing = [k for k in META_KEYS if k not in ckpt["drive"]]
    if missing:
        raise ValueError(f"{path}: checkpoint metadata lacks {missing}")
    return ckpt


def load_policy(
    path: PathLike, map_location: Union[str, torch.device] = "cpu"
) -> Tuple[Policy, Dict[str, Any]]:
    """Rebuild a trained policy from a checkpoint: ``(policy in eval mode, meta dict)``.

    Works for Lightning checkpoints from ``drive fit`` and files from :func:`save_policy`.
    """
    ckpt = read_checkpoint(path, map_location)
    meta = dict(ckpt["drive"])
    policy = Policy.from_config(meta["policy_config"])
    prefix = "policy."
    state = {k[len(prefix) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
    policy.load_state_dict(state, strict=True)
    policy.to(map_location).eval()
    return policy, meta


def save_policy(path: PathLike, policy: Policy, meta: Mapping[str, Any]) -> Path:
    """Write a standalone policy checkpoint that :func:`load_policy` reads (atomic rename).

    ``meta`` must hold :data:`META_KEYS` (``policy_config`` is refreshed from ``policy``).
    """
    meta = {**dict(meta), "policy_config": policy.config()}
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"policy metadata lacks {missing}")
    path = Path(path)
    state = {"policy." + k: v.detach().cpu() for k, v in policy.state_dict().items()}
    buffer = io.BytesIO()  # serialised in memory: torch's file writer cannot report a full disk cleanly
    torch.save({"drive": meta, "state_dict": state}, buffer)
    return write_bytes(path, buffer.getbuffer())
