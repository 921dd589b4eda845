"""``torch.jit.script`` without its deprecation notice (TorchScript is deprecated since torch 2.11 in
favour of torch.export; drive still scripts its recurrent kernels, whose loops TorchScript runs with
less dispatch than Python, and its deployment files, docs/deploy.md)."""

import contextlib
import warnings
from typing import Any, Iterator

import torch

__all__ = ["script", "quiet_torchscript"]


@contextlib.contextmanager
def quiet_torchscript() -> Iterator[None]:
    """Silence only TorchScript's own deprecation notice, whatever its category: torch 2.11 issues
    it as a DeprecationWarning, later versions as a FutureWarning (a CLI must keep stderr to its
    one error line under either)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.")
        yield


def script(fn: Any) -> Any:
    """``torch.jit.script(fn)`` without TorchScript's deprecation notice."""
    with quiet_torchscript():
        return torch.jit.script(fn)
