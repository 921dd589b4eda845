"""The recurrent-module contract, written once (other docs point here): :class:`RecurrentModule`.

Every recurrent compartment of a policy (LTC, CfC, WiredCfC, LSTM, CT-RNN, ClosedFormLTC, the
``cnn`` family's :class:`~drive.nn.baselines.Stateless`, and any cell a plugin registers) derives
from it and shares:

- ``forward(x[B, L, F], hidden[B, H] = None, timespans[B, L] = None) -> (y[B, L, M], hidden[B, H])``;
  ``timespans`` are the elapsed seconds of each step (None: 1.0 each; ``[B, L, 1]`` is squeezed, the
  shape ncps takes); ``hidden=None`` starts from zeros in x's dtype;
- ``step(x[B, F], hidden[B, H], dt[B]) -> (y[B, M], hidden[B, H])``: one step of ``forward``;
- ``initial_state(batch)``: zeros ``[batch, H]``, one flat float32 tensor on the module's device
  (whatever the default dtype; H = ``state_size``, 0 for ``Stateless``; the LSTM packs ``[h, c]``,
  mixed-memory CfCs ``[x, c]``);
- the checks of :mod:`drive.nn.checks` (one validator, the same wording everywhere): shapes always,
  values (finite x and hidden, finite dt > 0) unless ``check_values`` is off
  (:func:`~drive.nn.checks.skip_value_checks`, for wrappers that guarantee them); a failure is a
  ``ValueError`` (inside TorchScript a ``torch.jit.Error`` with the same message); the happy path
  reads one float64 sum back to the host;
- under autocast (mixed-precision training, export) the cell runs in float32 with autocast off and
  returns float32, bitwise the result without autocast for fp32 inputs: conductance sums and small
  time constants underflow in fp16 / bf16;
- ``config()``: JSON-able constructor kwargs (a wiring as its dict), ``type(m)(**m.config())``
  rebuilds the architecture; with the registered name (:mod:`drive.nn.registry`) it is what
  checkpoints store (``rnn_spec`` / ``build_rnn`` in :mod:`drive.nn.policy`).

A subclass calls ``super().__init__(input_size, output_size, state_size)``, implements
``_sequence(x, hidden, ts)`` (validated x ``[B, L, F]``, hidden ``[B, H]`` in x's dtype, elapsed
time ``ts [B, L, 1]``) and ``config()``, and registers a name (and, to be trained by ``drive fit``,
a family; docs/architecture.md, "Where a change goes"). A subclass whose kernel validates the
values itself in the same call (the closed form) passes ``kernel_checks=True``: the base then
checks shapes only. Everything scripts with ``torch.jit.script``: TorchScript compiles the methods
of the instance's class, so the inherited ``forward`` / ``step`` / ``initial_state`` call the
subclass's ``_sequence`` (no ``super()`` calls in scripted code). ``tests/test_nn_contract.py``
checks all of this on every registered class.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from drive.nn.checks import check_hidden, check_sequence, check_step

__all__ = ["RecurrentModule"]


class RecurrentModule(nn.Module):
    """Base class of drive's recurrent modules (module docstring for the contract).

    Args:
        input_size: F, features per step.
        output_size: M, outputs per step.
        state_size: H, width of the flat hidden state.
        kernel_checks: the subclass's kernel checks the values itself (base: shapes only).
    """

    def __init__(
        self, input_size: int, output_size: int, state_size: int, kernel_checks: bool = False
    ) -> None:
        super().__init__()
        self.input_size: int = int(input_size)
        self.output_size: int = int(output_size)
        self.state_size: int = int(state_size)
        self.check_values: bool = True  # value checks on inputs (drive.nn.checks.skip_value_checks)
        self.kernel_checks: bool = bool(kernel_checks)
        # follows .to(device): initial_state's device, also for modules without parameters (not saved)
        self.register_buffer("_device_anchor", torch.zeros(0), persistent=False)

    def config(self) -> Dict[str, Any]:
        """JSON-able constructor kwargs: ``type(m)(**m.config())`` rebuilds the architecture."""
        raise NotImplementedError(type(self).__name__ + " must implement config()")

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        """Zeros ``[batch, state_size]``, float32, on the module's device."""
        return torch.zeros(batch, self.state_size, dtype=torch.float32, device=self._device_anchor.device)

    def forward(
        self, x: Tensor, hidden: Optional[Tensor] = None, timespans: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """x ``[B, L, F]``, hidden ``[B, H]`` or None (zeros), timespans ``[B, L]`` seconds or None
        (1.0) -> (y ``[B, L, M]``, hidden ``[B, H]``)."""
        if not torch.jit.is_scripting():
            if torch.is_autocast_enabled(x.device.type):
                return self._forward_fp32(x, hidden, timespans)
        if timespans is not None and timespans.dim() == 3 and timespans.size(2) == 1:
            timespans = timespans.squeeze(2)
        values = self.check_values and not self.kernel_checks
        ts = check_sequence(x, timespans, self.input_size, values, hidden)
        state = check_hidden(hidden, x, self.state_size)
        return self._sequence(x, state, ts)

    @torch.jit.export
    def step(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """One step: x ``[B, F]``, hidden ``[B, H]``, dt ``[B]`` seconds -> (y ``[B, M]``, hidden)."""
        check_step(x, dt, self.input_size)
        y, h = self.forward(x.unsqueeze(1), hidden, dt.reshape(-1, 1))
        return y.squeeze(1), h

    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        """The recurrence on validated inputs: x ``[B, L, F]``, hidden ``[B, H]``, ts ``[B, L, 1]``."""
        raise NotImplementedError(type(self).__name__ + " must implement _sequence()")

    @torch.jit.unused
    def _forward_fp32(
        self, x: Tensor, hidden: Optional[Tensor], timespans: Optional[Tensor]
    ) -> Tuple[Tensor, Tensor]:
        """``forward`` in float32 with autocast off (the contract's mixed-precision rule)."""
        with torch.autocast(x.device.type, enabled=False):
            return self.forward(
                x.float(),
                None if hidden is None else hidden.float(),
                None if timespans is None else timespans.float(),
            )

    @torch.jit.unused
    def _step_fp32(self, x: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """``step`` in float32 with autocast off, for subclasses with their own ``step``."""
        with torch.autocast(x.device.type, enabled=False):
            return self.step(x.float(), hidden.float(), dt.float())
