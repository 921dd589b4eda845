"""The closed-form LTC (Hasani et al. 2022, Appendix): a trained LTC without an ODE solver.

- :class:`ClosedFormLTC` -- the recurrent module, its equations and methods (:mod:`drive.nn.closed_form.ltc`);
- :func:`convert` -- an LTC or an LTC policy into its closed form, the one conversion
  (:mod:`drive.nn.closed_form.conversion`);
- the TorchScript functions (:mod:`drive.nn.closed_form.scripted`); on CUDA the exact method runs in the
  LTC's Triton kernel (:mod:`drive.nn.ltc.kernels`).
"""

from drive.nn.closed_form.conversion import convert
from drive.nn.closed_form.ltc import METHODS, ClosedFormLTC

__all__ = ["ClosedFormLTC", "convert", "METHODS"]
