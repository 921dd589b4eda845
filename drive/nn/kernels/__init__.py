"""Fused GPU kernels for the liquid networks (Triton), chosen automatically on CUDA.

:func:`ltc_fused_solve` runs the LTC's fused semi-implicit solver (all unfolds of all steps of a
sequence) forward and backward as one Triton kernel each: one program per block of batch rows
runs the whole recurrence with the neuron state in registers (``drive/nn/kernels/ltc_triton.py``),
instead of ~2,000 launches of tiny matmuls. :class:`drive.nn.LTC` uses it when :func:`use_kernels`
says so; the TorchScript solver stays the path on CPU, in scripted modules and under
``torch.export`` / ``torch.compile``.

Switches: ``DRIVE_TRITON=0`` turns the kernels off; ``DRIVE_TRITON=interpret`` together with
``TRITON_INTERPRET=1`` also runs them on CPU tensors through Triton's interpreter (how the tests
check them without a GPU; slow, for tests only).
"""

import functools
import os

import torch
from torch import Tensor

__all__ = ["use_kernels", "ltc_fused_solve", "triton_available", "MAX_NEURONS"]

MAX_NEURONS = 64  # the [N, N] synapse tile lives in registers; larger networks use the TorchScript path


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    try:
        import triton  # optional dependency: triton ships with torch's CUDA builds only
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken triton install means: no kernels
        return False
    return True


def _interpreting() -> bool:
    return (
        os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
        and os.environ.get("DRIVE_TRITON") == "interpret"
    )


def use_kernels(x: Tensor, neurons: int) -> bool:
    """Whether the fused Triton kernels run this call: fp32 CUDA tensors (or CPU tensors under
    the interpreter switch), at most :data:`MAX_NEURONS` neurons, not switched off, not while
    ``torch.export`` / ``torch.compile`` trace (they see the TorchScript path), Triton importable."""
    if os.environ.get("DRIVE_TRITON", "1") == "0" or x.dtype != torch.float32 or neurons > MAX_NEURONS:
        return False
    if not (x.is_cuda or (x.device.type == "cpu" and _interpreting())):
        return False
    if torch.compiler.is_compiling() or getattr(torch.compiler, "is_exporting", lambda: False)():
        return False
    return triton_available()


def ltc_fused_solve(
    v: Tensor,
    nd0: Tensor,
    cm_t: Tensor,
    sigma: Tensor,
    mu: Tensor,
    w: Tensor,
    erev: Tensor,
    mask: Tensor,
    unfolds: int,
) -> Tensor:
    """The LTC's fused solver over a sequence with dense synapse tables (differentiable).

    v [B,N] initial state; nd0 [L,B,2N] = [gleak vleak + S_num | gleak + S_den + cm/h + eps];
    cm_t [L,B,N] = cm/h; sigma, mu, w (positive), erev, mask [N,N] (pre i, post j). Per unfold:
    x_ij = sigma_ij (v_i - mu_ij), s = sigmoid(x), n_j = nd0_n + sum_i s_ij w_ij erev_ij,
    d_j = nd0_d + sum_i s_ij w_ij, v <- (n + cm_t v) / d (absent synapses have w = 0 through the
    mask). Returns the state after each step [L,B,N] (the same as ``drive.nn.ltc_solver.fused_solver``).
    """
    from drive.nn.kernels.ltc_triton import LTCFusedSolve  # imports triton, an optional dependency

    sig = sigma * mask
    nsm = -(sigma * mu) * mask
    qd = w * mask
    qn = qd * erev
    return LTCFusedSolve.apply(v, nd0, cm_t, sig, nsm, qn, qd, int(unfolds))
