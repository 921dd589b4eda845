"""Fused GPU kernels of the LTC (Triton), chosen automatically on CUDA.

:func:`ltc_sequence` runs the LTC over a sequence -- the input map, the sensory synapses and the
fused semi-implicit solver (all unfolds of all steps), the output map -- in two Triton launches
forward and four backward, whatever the sequence length: one program per block of batch rows runs
the whole recurrence with the neuron state and the synapse tables in registers
(:mod:`drive.nn.ltc.kernels.recurrence`; the input side: :mod:`drive.nn.ltc.kernels.inputs`),
instead of ~2,000 launches of tiny matmuls for the solver and ~100 around it. :class:`drive.nn.LTC`
uses it when :func:`use_kernels` says so; the TorchScript solver (:mod:`drive.nn.ltc.solver`) stays
the path on CPU, in scripted modules and under ``torch.export`` / ``torch.compile``.

:func:`closed_form_solve` runs the closed-form LTC's exact method over a sequence in the same
forward kernel (inference: :class:`drive.nn.closed_form.ClosedFormLTC` uses it when no gradient is
needed), where the scripted kernels launch ~6 ops per step.

Switches: ``DRIVE_TRITON=0`` turns the kernels off; ``DRIVE_TRITON=interpret`` together with
``TRITON_INTERPRET=1`` also runs them on CPU tensors through Triton's interpreter (how the tests
check them without a GPU; slow, for tests only).
"""

import functools
import os
from typing import Sequence, Tuple

import torch
from torch import Tensor

__all__ = ["use_kernels", "ltc_sequence", "closed_form_solve", "triton_available", "MAX_NEURONS"]

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


def ltc_sequence(
    x: Tensor,
    hidden: Tensor,
    ts: Tensor,
    inputs: Sequence[Tensor],
    synapses: Sequence[Tensor],
    output_map: Sequence[Tensor],
    unfolds: int,
    epsilon: float,
    softplus: bool,
) -> Tuple[Tensor, Tensor]:
    """The LTC over a sequence, differentiable: (y [B,L,M], last state [B,N]) from x [B,L,F],
    hidden [B,N], elapsed seconds ts [B,L,1] and the module's raw parameters -- ``inputs`` = (input_w,
    input_b, sensory_sigma, sensory_mu, sensory_w, sensory_erev, sensory_mask, gleak, vleak, cm),
    ``synapses`` = (sigma, mu, w, erev, mask), ``output_map`` = (output_w, output_b). ``softplus``:
    w, sensory_w, gleak and cm pass through softplus (else they are used as they are). Two kernel
    launches forward and four backward (:mod:`drive.nn.ltc.kernels.recurrence`), the same values as
    the TorchScript path of :class:`drive.nn.LTC`."""
    from drive.nn.ltc.kernels.recurrence import LTCSequence, sequence_forward  # imports triton (optional)

    config = (int(unfolds), float(epsilon), bool(softplus))
    if not torch.is_grad_enabled():  # inference: no per-unfold states kept for a backward
        y, h, _ = sequence_forward(x, hidden, ts, *config, (*inputs, *synapses, *output_map), save=False)
        return y.to(x.dtype), h.to(x.dtype)
    return LTCSequence.apply(x, hidden, ts, *config, *inputs, *synapses, *output_map)


def closed_form_solve(
    v: Tensor,
    gi0: Tensor,
    neg_h_over_cm: Tensor,
    synapses: Sequence[Tensor],
    output_map: Sequence[Tensor],
    substeps: int,
) -> Tuple[Tensor, Tensor]:
    """The closed-form LTC's exact method over a sequence (forward only: call it without autograd).

    v [B,N] initial state; gi0 [L,B,2N] = [G0 | I0] per step (leak + sensory conductance and
    current); neg_h_over_cm [L,B,N] = -h/cm with h = dt / substeps; ``synapses`` = the effective
    (sigma, mu, w, erev, mask) [N,N] (pre i, post j); ``output_map`` = (output_w, output_b). Each
    substep is the exact update of :mod:`drive.nn.closed_form.ltc` (Corollary 1) with G and I
    summed over the leak, sensory and recurrent synapses. Returns (y [B,L,M], last state [B,N])
    (``drive.nn.closed_form.scripted.exact_sequence`` and the output map)."""
    from drive.nn.ltc.kernels.recurrence import ltc_forward  # imports triton, an optional dependency

    n = v.size(1)
    current_first = torch.cat([gi0[:, :, n:], gi0[:, :, :n]], 2)  # the kernel's [num | den] = [I | G]
    args = [t.float().contiguous() for t in (v, current_first, neg_h_over_cm, *synapses, *output_map)]
    y, h, _ = ltc_forward(
        *args[:3], args[3:8], args[8:], int(substeps), save=False, softplus=False, closed_form=True
    )
    return y, h
