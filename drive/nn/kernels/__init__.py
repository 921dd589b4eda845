"""Fused GPU kernels for the liquid networks (Triton), chosen automatically on CUDA.

:func:`ltc_fused_solve` runs the LTC's fused semi-implicit solver (all unfolds of all steps of a
sequence) forward and backward as one Triton kernel each: one program per block of batch rows
runs the whole recurrence with the neuron state in registers (``drive/nn/kernels/ltc_triton.py``),
instead of ~2,000 launches of tiny matmuls. :class:`drive.nn.LTC` uses it when :func:`use_kernels`
says so; the TorchScript solver stays the path on CPU, in scripted modules and under
``torch.export`` / ``torch.compile``.

:func:`closed_form_solve` runs the closed-form LTC's exact method over a sequence in the same
forward kernel (inference: :class:`drive.nn.closed_form.ClosedFormLTC` uses it when no gradient is
needed), where the scripted kernels launch ~6 ops per step.

Switches: ``DRIVE_TRITON=0`` turns the kernels off; ``DRIVE_TRITON=interpret`` together with
``TRITON_INTERPRET=1`` also runs them on CPU tensors through Triton's interpreter (how the tests
check them without a GPU; slow, for tests only).
"""

import functools
import os
from typing import Tuple

import torch
from torch import Tensor

__all__ = ["use_kernels", "ltc_fused_solve", "closed_form_solve", "triton_available", "MAX_NEURONS"]

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

    sig, nsm, qn, qd = _dense_tables(sigma, mu, w, erev, mask)
    return LTCFusedSolve.apply(v, nd0, cm_t, sig, nsm, qn, qd, int(unfolds))


def _dense_tables(sigma: Tensor, mu: Tensor, w: Tensor, erev: Tensor, mask: Tensor) -> Tuple[Tensor, ...]:
    """The kernels' [N, N] synapse tables (pre i, post j): sigma, -sigma mu, w erev, w; absent
    synapses 0 through the mask."""
    qd = w * mask
    return sigma * mask, -(sigma * mu) * mask, qd * erev, qd


def closed_form_solve(
    v: Tensor,
    gi0: Tensor,
    neg_h_over_cm: Tensor,
    sigma: Tensor,
    mu: Tensor,
    w: Tensor,
    erev: Tensor,
    mask: Tensor,
    substeps: int,
) -> Tensor:
    """The closed-form LTC's exact method over a sequence (forward only: call it without autograd).

    v [B,N] initial state; gi0 [L,B,2N] = [G0 | I0] per step (leak + sensory conductance and
    current); neg_h_over_cm [L,B,N] = -h/cm with h = dt / substeps; sigma, mu, w, erev, mask [N,N]
    (pre i, post j; effective values). Per substep: s_ij = sigmoid(sigma_ij (v_i - mu_ij)),
    G = G0 + sum_i s w, I = I0 + sum_i s w erev, v <- I/G + exp(-G h/cm) (v - I/G). Returns the
    state after each step [L,B,N] (``drive.nn.closed_form.kernels.exact_sequence``)."""
    from drive.nn.kernels.ltc_triton import ltc_forward  # imports triton, an optional dependency

    n = v.size(1)
    sig, nsm, qi, qg = _dense_tables(sigma, mu, w, erev, mask)
    current_first = torch.cat([gi0[:, :, n:], gi0[:, :, :n]], 2)  # the kernel's [num | den] = [I | G]
    args = [t.float().contiguous() for t in (v, current_first, neg_h_over_cm, sig, nsm, qi, qg)]
    return ltc_forward(*args, unfolds=int(substeps), save=False, closed_form=True)[0]
