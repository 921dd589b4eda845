"""What ``CfC`` and ``WiredCfC`` share besides the cell math: the recurrence's dispatch
(:class:`CfCModule`), configuration checks, Cf-S's parameters, the mixed-memory LSTM's parameters
and the eager cache of prepared weights."""

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from drive.nn.cfc.cell import MODES
from drive.nn.contract import RecurrentModule

__all__ = ["CfCModule", "check_config", "register_pure", "needs_grad", "MixedMemory", "PreparedCache"]


class CfCModule(RecurrentModule):
    """The recurrence both CfC modules run (the contract's ``_sequence``): TorchScript (and any
    scripted call) runs the subclass's autograd ``_loop`` on ``_prepare()``'s weights, eager calls its
    ``_eager`` dispatch (hand-written BPTT, cached weights); ``_outputs`` maps the loop's (states
    [B, L, n], h, c) to the outputs before the optional ``readout``; the hidden state is ``h`` or
    ``[h, c]`` with mixed memory."""

    mixed_memory: bool

    def _sequence(self, x: Tensor, hidden: Tensor, ts: Tensor) -> Tuple[Tensor, Tensor]:
        if torch.jit.is_scripting():
            seq, h, c = self._loop(x, hidden, ts, self._prepare())
        else:
            seq, h, c = self._eager(x, hidden, ts)
        y, h, c = self._outputs(seq, h, c)
        if self.readout is not None:
            y = self.readout(y)
        return y, (torch.cat([h, c], 1) if self.mixed_memory else h)


def check_config(mode: str, input_size: int) -> str:
    """``mode`` after validating it and input_size."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
    if input_size < 1:
        raise ValueError(f"input_size must be >= 1, got {input_size}")
    return mode


def register_pure(module: nn.Module, mode: str, units: int) -> None:
    """Cf-S's per-neuron ``w_tau`` (init 0) and ``A`` (init 1) as parameters in pure mode; empty
    non-persistent buffers otherwise, so the scripted code sees tensors either way."""
    for name, value in (("w_tau", 0.0), ("A", 1.0)):
        if mode == "pure":
            module.register_parameter(name, nn.Parameter(torch.full((units,), value)))
        else:
            module.register_buffer(name, torch.zeros(0), persistent=False)


def needs_grad(module: nn.Module, *inputs: Tensor) -> bool:
    """Whether a call will be differentiated (grad mode on and a parameter or input requires grad)."""
    return torch.is_grad_enabled() and (
        any(t.requires_grad for t in inputs) or any(p.requires_grad for p in module.parameters())
    )


class MixedMemory(nn.Module):
    """The LSTM memory of CfC-mmRNN (ncps's LSTMCell: xavier/orthogonal, biases U(-0.1, 0.1),
    forget-gate offset +1). Gate order: input activation, input gate, forget gate, output gate."""

    def __init__(self, input_size: int, units: int) -> None:
        super().__init__()
        self.input_map = nn.Linear(input_size, 4 * units)
        self.recurrent_map = nn.Linear(units, 4 * units, bias=False)
        nn.init.xavier_uniform_(self.input_map.weight)
        nn.init.uniform_(self.input_map.bias, -0.1, 0.1)
        nn.init.orthogonal_(self.recurrent_map.weight)
        self.register_buffer(
            "forget_offset",
            torch.cat([torch.zeros(2 * units), torch.ones(units), torch.zeros(units)]),
            persistent=False,
        )


class PreparedCache:
    """Eager-only cache of a module's prepared (masked, signed, scaled, reordered) weights for calls
    that need no gradient; keyed on every parameter's and buffer's storage, version and dtype, so an
    optimizer step, ``load_state_dict`` or ``.to()`` invalidates it. Holds several named forms."""

    def __init__(self) -> None:
        self.key: Optional[tuple] = None
        self.values: Dict[str, Any] = {}

    def __getstate__(self) -> dict:  # pickling / deepcopy of the module carries no cached tensors
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def get(self, module: nn.Module, name: str, build: Callable[[], Any]) -> Any:
        if torch.compiler.is_compiling() or torch.compiler.is_exporting():
            return build()  # traced by torch.export / torch.compile: no storage to key on
        key = tuple((v.data_ptr(), v._version, v.dtype) for v in _tensors(module, []))
        if key != self.key:
            self.values, self.key = {}, key
        if name not in self.values:
            self.values[name] = build()
        return self.values[name]


def _tensors(module: nn.Module, out: List[Tensor]) -> List[Tensor]:
    """Every parameter and buffer of module and its children (a cheap ``parameters()``/``buffers()``)."""
    out.extend(v for v in module._parameters.values() if v is not None)
    out.extend(v for v in module._buffers.values() if v is not None)
    for child in module._modules.values():
        if child is not None:
            _tensors(child, out)
    return out
