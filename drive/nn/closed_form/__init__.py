"""The closed-form LTC (Hasani et al. 2022, Appendix): a trained LTC without an ODE solver.

- :class:`ClosedFormLTC` -- the recurrent module (:mod:`drive.nn.closed_form.ltc`);
- :class:`Constants` and the exact kernel (:mod:`drive.nn.closed_form.kernels`).
"""

from drive.nn.closed_form.kernels import Constants
from drive.nn.closed_form.ltc import ClosedFormLTC

__all__ = ["ClosedFormLTC", "Constants"]
