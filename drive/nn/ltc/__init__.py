"""Liquid time-constant networks (Hasani et al., AAAI 2021) in conductance form, with the fused
solver. The LTC's equations are written here, once; the modules below point to them.

Each neuron j (state v_j, motor neurons first) follows (LTC Eq. 1 in conductance form)

    cm_j dv_j/dt = gleak_j (vleak_j - v_j)
                   + sum_i w_ij s(sigma_ij (v_i - mu_ij)) (erev_ij - v_j)           (neurons i -> j)
                   + sum_f sw_fj s(ssigma_fj (u_f - smu_fj)) (serev_fj - v_j)        (inputs f -> j)

with u = input_w * x + input_b and s the logistic sigmoid. One RNN step of elapsed time dt runs
``ode_unfolds`` steps of the fused semi-implicit Euler solver (LTC Eq. 3, Algorithm 1) with
h = dt / ode_unfolds and the input held constant during the step:

    v <- (cm/h v + gleak vleak + sum_i W_ij(v) erev_ij + S_num) / (cm/h + gleak + sum_i W_ij(v) + S_den + eps)

where W_ij(v) = w_ij s(sigma_ij (v_i - mu_ij)) and S_num, S_den the sensory synapses' sums of
sw s erev and sw s. With w, cm, gleak >= 0 each update is a convex combination of v, vleak and the
reversal potentials, so min(v0, vleak_j, erev_.j) <= v_j <= max(v0, vleak_j, erev_.j) for any input
(LTC Theorem 2 for this discretisation). Outputs y = output_w * v[:, :M] + output_b.

The package:

- ``module``: :class:`LTC`, the recurrent module -- parameters, initialisation, positivity,
  everything that depends only on the inputs computed for all steps at once;
- ``solver``: the fused solver over a sequence on the list of present synapses (a TorchScript
  function) and its hand-written backward, the CPU and TorchScript path;
- ``kernels/``: the same sequence in fused Triton kernels on CUDA (``use_kernels`` decides), also
  running the closed-form LTC's exact method (:mod:`drive.nn.closed_form`).

Checkpoints name the module ``"ltc"``; it is the cell of the ``ncp_ltc`` family
(:class:`NCPLTCOptions`; :mod:`drive.nn.registry`).
"""

from drive.nn.ltc.module import (
    CELL_PARAMETERS,
    INIT_RANGES,
    LTC,
    MAPPING_PARAMETERS,
    NCPLTCOptions,
    register_synapses,
)

__all__ = [
    "LTC",
    "NCPLTCOptions",
    "INIT_RANGES",
    "CELL_PARAMETERS",
    "MAPPING_PARAMETERS",
    "register_synapses",
]
