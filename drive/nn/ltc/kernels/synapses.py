"""Triton helpers the LTC kernels share: positivity, and the synapse tables built from the raw
parameters on load (and their gradients taken back through that construction)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _softplus(x):
    """log(1 + e^x) as torch's softplus, accurate for very negative x (log1p by Goldberg's trick)."""
    z = tl.exp(-tl.abs(x))
    w = 1.0 + z
    return tl.maximum(x, 0.0) + tl.where(w == 1.0, z, tl.log(w) * z / (w - 1.0))


@triton.jit
def _positive(p, SOFTPLUS: tl.constexpr):
    """(value, d value / d p) of the positivity map (softplus, or identity for 'clip')."""
    if SOFTPLUS:
        return _softplus(p), tl.sigmoid(p)
    else:
        return p, tl.full(p.shape, 1.0, tl.float32)


@triton.jit
def _synapses(offs, mask_, sigma_ptr, mu_ptr, w_ptr, erev_ptr, smask_ptr, SOFTPLUS: tl.constexpr):
    """The synapse tables at ``offs`` from the raw parameters: sig = sigma m, nsm = -sigma mu m,
    qd = w+ m, qn = qd erev (m: the 0/1 wiring mask; padding 0, inert); also what their gradients
    need: (sig, nsm, qn, qd, sigma, mu, erev, m, w+, d w+ / d w)."""
    sigma = tl.load(sigma_ptr + offs, mask=mask_, other=0.0)
    mu = tl.load(mu_ptr + offs, mask=mask_, other=0.0)
    erev = tl.load(erev_ptr + offs, mask=mask_, other=0.0)
    m = tl.load(smask_ptr + offs, mask=mask_, other=0.0)
    wp, dwp = _positive(tl.load(w_ptr + offs, mask=mask_, other=0.0), SOFTPLUS)
    qd = wp * m
    return sigma * m, -(sigma * mu) * m, qd * erev, qd, sigma, mu, erev, m, wp, dwp


@triton.jit
def _store_synapse_grads(part_ptr, size, offs, mask_, g_sig, g_nsm, g_qn, g_qd, sigma, mu, erev, m, wp, dwp):
    """Write the raw parameters' gradients (sigma, mu, w, erev at 0, size, 2 size, 3 size) from
    those of the tables (:func:`_synapses`)."""
    tl.store(part_ptr + offs, (g_sig - g_nsm * mu) * m, mask=mask_)
    tl.store(part_ptr + size + offs, -g_nsm * sigma * m, mask=mask_)
    tl.store(part_ptr + 2 * size + offs, (g_qn * erev + g_qd) * m * dwp, mask=mask_)
    tl.store(part_ptr + 3 * size + offs, g_qn * wp * m, mask=mask_)
