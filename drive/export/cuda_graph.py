"""One policy step captured in a CUDA graph (:class:`CapturedStep`): what
:meth:`drive.export.runtime.ExportedPolicy.step` replays on CUDA for TorchScript and AOTInductor
files, one graph per (batch size, frame dtype)."""

from __future__ import annotations

from typing import Callable, Tuple

import torch

__all__ = ["CapturedStep"]


class CapturedStep:
    """One step captured in a CUDA graph: static input buffers, replay, outputs copied out.

    The step runs ``WARMUP`` times on a side stream first (TorchScript's profiling executor
    specialises its plan over the first calls; cuDNN and cuBLAS pick and cache their algorithms),
    so the captured kernels are the ones plain stepping runs from then on."""

    WARMUP = 4

    def __init__(
        self,
        fn: Callable[[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, ...]],
        frame: torch.Tensor,
        hidden: torch.Tensor,
    ) -> None:
        device = hidden.device if hidden.is_cuda else torch.device("cuda", torch.cuda.current_device())
        self.frame = frame.to(device, copy=True)
        self.hidden = hidden.to(device, copy=True)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP):
                fn(self.frame, self.hidden)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        self.graph = torch.cuda.CUDAGraph()
        # its own memory pool (a few MB): no graph's replay can touch another's static outputs
        with torch.cuda.graph(self.graph):
            self.out = fn(self.frame, self.hidden)

    def __call__(
        self, frame: torch.Tensor, hidden: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.frame.copy_(frame)
        self.hidden.copy_(hidden)
        self.graph.replay()
        return tuple(o.clone() for o in self.out)  # type: ignore[return-value]
