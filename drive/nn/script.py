"""``torch.jit.script`` without its deprecation notice (TorchScript is deprecated since torch 2.11 in
favour of torch.export; drive still scripts its recurrent kernels, whose loops TorchScript runs with
less dispatch than Python, and its deployment files, docs/deploy.md)."""

import warnings
from typing import Any

import torch

__all__ = ["script"]


def script(fn: Any) -> Any:
    """``torch.jit.script(fn)``, silencing only TorchScript's own FutureWarning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.", category=FutureWarning)
        return torch.jit.script(fn)
