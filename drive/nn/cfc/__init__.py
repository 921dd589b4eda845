"""Closed-form continuous-time networks (CfC; Hasani et al., Nature Machine Intelligence 2022).

One package, read top-down:

- ``cell``: the math, once -- the update equation (Eq. 9/10) and its derivative, the backbone
  activations, the mixed-memory LSTM cell; modes and activations by name;
- ``base``: ``CfCModule``, the base both modules derive from (the recurrence's dispatch), and
  what they share -- config checks, Cf-S parameters, the LSTM's parameters, the weight cache;
- ``dense``: ``CfC``, a backbone over ``cat(I, x)`` then the fused heads, and the ``cfc`` family's
  options (``CfCOptions``; dense or wired);
- ``wired``: ``WiredCfC``, the neurons and synapses of a wiring (NCP, ...);
- ``loops``: the BPTT's per-step loops as TorchScript functions;
- ``forward_loop``: running a forward loop (specs, weights in loop layout, one forward run);
- ``sigmoid_form``: the default-mode rewrite onto sigmoids (fast path);
- ``bptt``: the hand-written backward (``DenseBPTT``, ``WiredBPTT``);
- ``ncps``: ``cfc_from_ncps``, an ``ncps.torch.CfC`` as the drive module.

Checkpoints name the modules ``"cfc"`` and ``"wired_cfc"`` (``drive.nn.registry``; the module
paths earlier files hold are aliases there).
"""

from drive.nn.cfc.cell import ACTIVATIONS, MODES
from drive.nn.cfc.dense import CfC, CfCOptions
from drive.nn.cfc.ncps import cfc_from_ncps
from drive.nn.cfc.wired import WiredCfC

__all__ = ["CfC", "WiredCfC", "CfCOptions", "cfc_from_ncps", "MODES", "ACTIVATIONS"]
