"""Input validation shared by the recurrent modules (LTC, CfC, wired CfC, LSTM, CT-RNN).

One interface, one set of errors: ``x [B, L, F]``, ``timespans [B, L]`` elapsed seconds (finite and
> 0), ``hidden [B, H]`` (finite). On the happy path the value checks are one float64 sum read back to
the host (``sum(x) + sum(hidden) + sum(log t)`` is finite exactly when every x and every hidden
value is finite and every t finite and > 0; a float64 sum of finite fp32 values cannot overflow):
at batch 1 a step is a few dozen microsecond-sized ops, and this keeps validation to five of them.
Everything scripts with TorchScript.

Each recurrent module has a ``check_values`` attribute (True). :func:`skip_value_checks` turns it off
inside a wrapper that guarantees the values itself (the deployed policy: finite features and state,
dt > 0): its step then has no data-dependent read, so no host sync mid-step on a GPU and a graph
that ``torch.export`` captures whole. Shape checks always run.
"""

import math
from typing import Optional

import torch
from torch import Tensor, nn

__all__ = ["check_sequence", "check_step", "check_hidden", "skip_value_checks"]


def _finite_sum(x: Tensor) -> bool:
    return math.isfinite(float(x.detach().sum(dtype=torch.float64)))


def _raise_non_finite(x: Tensor, hidden: Optional[Tensor]) -> None:
    """After a non-finite total: raise for x or hidden when one of them is the cause (the error path,
    where a second read-back costs nothing that matters)."""
    if not _finite_sum(x):
        raise ValueError("input contains NaN or infinite values")
    if hidden is not None:
        if not _finite_sum(hidden):
            raise ValueError(
                "hidden state contains NaN or infinite values (start from initial_state, "
                "or reset the rows that diverged)"
            )


def check_sequence(
    x: Tensor,
    timespans: Optional[Tensor],
    input_size: int,
    values: bool = True,
    hidden: Optional[Tensor] = None,
) -> Tensor:
    """Validate x ``[B, L, F]`` and timespans ``[B, L]`` (their values too unless ``values`` is
    False, and then the values of ``hidden`` as well, in the same one read-back; its shape is
    :func:`check_hidden`'s); return the elapsed time as ``[B, L, 1]`` in x's dtype (None: ones, an
    expanded view)."""
    if x.dim() != 3 or x.size(2) != input_size:
        raise ValueError(
            "expected x [B, L, F] with F = "
            + str(input_size)
            + " input features, got shape "
            + str(list(x.shape))
        )
    b, steps = x.size(0), x.size(1)
    if timespans is None:
        if values:
            total = x.detach().sum(dtype=torch.float64)
            if hidden is not None:
                total = total + hidden.detach().sum(dtype=torch.float64)
            if not math.isfinite(float(total)):
                _raise_non_finite(x, hidden)
        return torch.ones(1, 1, 1, dtype=x.dtype, device=x.device).expand(b, steps, 1)
    if timespans.dim() != 2 or timespans.size(0) != b or timespans.size(1) != steps:
        raise ValueError(
            "expected timespans [B, L] = ["
            + str(b)
            + ", "
            + str(steps)
            + "], got shape "
            + str(list(timespans.shape))
        )
    if not values:
        return timespans.to(x.dtype).unsqueeze(2)
    # detached: a check is not part of the graph (and reading a grad-requiring scalar warns)
    total = x.detach().sum(dtype=torch.float64) + torch.log(timespans.detach()).sum(dtype=torch.float64)
    if hidden is not None:
        total = total + hidden.detach().sum(dtype=torch.float64)
    if not math.isfinite(float(total)):
        _raise_non_finite(x, hidden)
        raise ValueError("elapsed time (timespans / dt) must be finite and > 0")
    return timespans.to(x.dtype).unsqueeze(2)


def check_step(x: Tensor, dt: Tensor, input_size: int) -> None:
    """Validate the shapes of one step: x ``[B, F]`` with F = ``input_size`` and dt ``[B]`` (the values
    are checked with the sequence the step runs as)."""
    if x.dim() != 2 or x.size(1) != input_size:
        raise ValueError(
            "expected x [B, F] with F = "
            + str(input_size)
            + " input features in a step, "
            + "got shape "
            + str(list(x.shape))
        )
    if dt.dim() != 1 or dt.size(0) != x.size(0):
        raise ValueError(
            "expected dt [B] with B = " + str(x.size(0)) + " in a step, got shape " + str(list(dt.shape))
        )


def check_hidden(hidden: Optional[Tensor], x: Tensor, state_size: int) -> Tensor:
    """Validate hidden ``[B, H]`` against x's batch (None: zeros in x's dtype and device)."""
    if hidden is None:
        return torch.zeros(x.size(0), state_size, dtype=x.dtype, device=x.device)
    if hidden.dim() != 2 or hidden.size(0) != x.size(0) or hidden.size(1) != state_size:
        raise ValueError(
            "expected hidden [B, "
            + str(state_size)
            + "] with B = "
            + str(x.size(0))
            + ", got shape "
            + str(list(hidden.shape))
        )
    return hidden


def skip_value_checks(module: nn.Module) -> int:
    """Set ``check_values = False`` on every recurrent module inside ``module`` (module docstring);
    return how many. For wrappers that validate the values themselves, never for user input."""
    found = 0
    for m in module.modules():
        if hasattr(m, "check_values"):
            m.check_values = False
            found += 1
    return found
