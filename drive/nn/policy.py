"""Policy = perception head -> recurrent compartment -> readout: camera frames in, curvature out.

The NCP lane-keeping pipeline (Lechner et al. 2020; docs/references.md): a conv head turns every frame
into features, a recurrent module (LTC/NCP, CfC, LSTM, CT-RNN) integrates them over time, and its
output is the steering curvature. The network works in the papers' units, 1/km (curvature x 1000);
:meth:`Policy.forward` and :meth:`Policy.step` return 1/m, the units of the recordings and the world.

The feed-forward PilotNet baseline (family ``cnn``) has no memory: its recurrent compartment is a
:class:`Stateless` pass-through with ``state_size == 0`` (hidden ``[B, 0]``), so every policy runs
through the same ``step`` / ``forward`` and the same driver code.

Time: the recurrent modules take elapsed time per step. A policy divides elapsed seconds by its
``frame_period_s`` (the recording's nominal 1/fps), so a regularly sampled stream feeds the cell
``timespan = 1`` per frame (as in the papers' training) and a dropped frame feeds 2.

Everything scripts with ``torch.jit.script`` (the export helper does that); the config is JSON::

    policy = Policy.from_config(cfg)
    assert Policy.from_config(policy.config()).config() == policy.config()
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from drive.nn.baselines import Stateless
from drive.nn.heads import build_head
from drive.nn.registry import lookup, name_of

__all__ = ["Policy", "Readout", "build_rnn", "rnn_spec", "KM_PER_M"]

KM_PER_M = 1000.0  # network output (1/km) = curvature (1/m) x 1000


def rnn_spec(rnn: nn.Module) -> Dict[str, Any]:
    """JSON-able spec ``{"class": <registered name>, "kwargs": rnn.config()}`` (:mod:`drive.nn.registry`)."""
    return {"class": name_of(type(rnn)), "kwargs": rnn.config()}


def build_rnn(spec: Mapping[str, Any]) -> nn.Module:
    """Rebuild a recurrent module from :func:`rnn_spec`. ``spec["class"]`` is a registered name or an
    alias (the module paths files written before the registry hold); anything else is refused with a
    ValueError naming it: nothing named in a file is imported. (Every class is registered once
    ``drive.nn`` is imported, which importing this module does.)"""
    cls = lookup(str(spec["class"]))
    return cls(**dict(spec.get("kwargs", {})))


class Readout(nn.Module):
    """Recurrent output ``[..., M]`` -> curvature in 1/km ``[...]``: optional Linear(M, 1), then
    times ``scale_km``.

    ``scale_km`` (a buffer, saved with the weights) is the label scale the trainer sets from the
    training data (std of the labels in 1/km): recurrent outputs live on a unit scale (an LTC's
    motor neuron is bounded by its reversal potentials, +-1), curvature labels on tens of 1/km.
    """

    def __init__(self, in_features: int, linear: bool, scale_km: float = 1.0) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, 1) if linear else nn.Identity()
        self.register_buffer("scale_km", torch.tensor(float(scale_km)))

    def forward(self, y: Tensor) -> Tensor:
        return self.linear(y).squeeze(-1) * self.scale_km


class Policy(nn.Module):
    """Steering policy: frames ``[B, L, 3, H, W]`` float in [0, 1] -> curvature ``[B, L]`` in 1/m.

    Args:
        head: perception head, frames ``[N, 3, H, W]`` -> features ``[N, F]`` (``drive.nn.heads``).
        rnn: recurrent module following the drive.nn contract with ``input_size == F``, or
            ``None`` for a feed-forward policy (a :class:`Stateless` pass-through is used).
        frame_period_s: nominal seconds between frames; elapsed time is divided by it before it
            reaches the cell (see the module docstring).
        head_name: the head's name in :data:`drive.nn.heads.HEADS`, recorded in :meth:`config`.

    The :class:`Readout` maps the recurrent output to 1/km: a Linear when the output has more than
    one channel (or ``readout=True``), then the label scale; NCP wirings end in one motor neuron.
    """

    def __init__(
        self,
        head: nn.Module,
        rnn: Optional[nn.Module] = None,
        frame_period_s: float = 1.0,
        head_name: str = "ncp_conv",
        readout: bool = False,
    ) -> None:
        super().__init__()
        head_out = int(head.output_size)
        if rnn is None:
            rnn = Stateless(head_out)
        if int(rnn.input_size) != head_out:
            raise ValueError(
                f"head gives {head_out} features but the recurrent module takes {rnn.input_size}"
            )
        if frame_period_s <= 0:
            raise ValueError(f"frame_period_s must be positive, got {frame_period_s}")
        self.head = head
        self.rnn = rnn
        self.head_name: str = head_name
        self.frame_period_s: float = float(frame_period_s)
        self.km_per_m: float = KM_PER_M
        self.state_size: int = int(rnn.state_size)
        self.has_readout: bool = bool(readout) or int(rnn.output_size) != 1
        self.readout = Readout(int(rnn.output_size), self.has_readout)
        self.input_size: Tuple[int, int] = (int(head.input_size[0]), int(head.input_size[1]))

    # -- construction ------------------------------------------------------------------------
    def config(self) -> Dict[str, Any]:
        """JSON-able description: ``Policy.from_config(p.config())`` rebuilds the architecture."""
        return {
            "head": {"name": self.head_name, "kwargs": self.head.config()},
            "rnn": rnn_spec(self.rnn),
            "frame_period_s": self.frame_period_s,
            "readout": self.has_readout,
        }

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "Policy":
        """Build from :meth:`config` output (untrained weights)."""
        head_cfg = cfg["head"]
        head = build_head(str(head_cfg["name"]), **dict(head_cfg.get("kwargs", {})))
        rnn = build_rnn(cfg["rnn"])
        return cls(
            head,
            rnn,
            frame_period_s=float(cfg.get("frame_period_s", 1.0)),
            head_name=str(head_cfg["name"]),
            readout=bool(cfg.get("readout", False)),
        )

    # -- the two halves (the trainer runs the head under autocast, the cell in fp32) ------------
    def encode(self, frames: Tensor) -> Tensor:
        """Head per frame: ``[B, L, 3, H, W]`` -> features ``[B, L, F]``."""
        torch._assert(frames.dim() == 5, "Policy: frames must be [B, L, 3, H, W]")
        b, length = frames.shape[0], frames.shape[1]
        features = self.head(frames.reshape(b * length, frames.shape[2], frames.shape[3], frames.shape[4]))
        return features.reshape(b, length, features.shape[-1])

    def decode(
        self, features: Tensor, hidden: Optional[Tensor] = None, timespans: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """Recurrent part: features ``[B, L, F]`` -> (curvature in 1/km ``[B, L]``, hidden ``[B, H]``).

        timespans: ``[B, L]`` elapsed seconds per frame (None: one frame period each).
        """
        features = features.float()
        if hidden is None:
            hidden = self.initial_state(features.shape[0])
        steps: Optional[Tensor] = None
        if timespans is not None:
            steps = timespans.to(features.dtype) / self.frame_period_s
        y, hidden = self.rnn(features, hidden, steps)
        return self.readout(y), hidden

    def forward_per_km(
        self, frames: Tensor, hidden: Optional[Tensor] = None, timespans: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """As :meth:`forward` but in the network's units, 1/km (losses are computed here)."""
        return self.decode(self.encode(frames), hidden, timespans)

    # -- the public contract -----------------------------------------------------------------
    def forward(
        self, frames: Tensor, hidden: Optional[Tensor] = None, timespans: Optional[Tensor] = None
    ) -> Tuple[Tensor, Tensor]:
        """frames ``[B, L, 3, H, W]`` in [0, 1] -> (curvature ``[B, L]`` in 1/m, hidden ``[B, H]``)."""
        y, hidden = self.forward_per_km(frames, hidden, timespans)
        return y / self.km_per_m, hidden

    @torch.jit.export
    def step(self, frame: Tensor, hidden: Tensor, dt: Tensor) -> Tuple[Tensor, Tensor]:
        """One frame ``[B, 3, H, W]`` in [0, 1], hidden ``[B, H]``, dt ``[B]`` seconds
        -> (1/m ``[B]``, hidden)."""
        torch._assert(frame.dim() == 4, "Policy.step: frame must be [B, 3, H, W]")
        features = self.head(frame).float()
        y, hidden = self.rnn.step(features, hidden, dt.to(features.dtype) / self.frame_period_s)
        return self.readout(y) / self.km_per_m, hidden

    @torch.jit.export
    def initial_state(self, batch: int) -> Tensor:
        """Zero hidden state ``[batch, state_size]`` fp32 on the policy's device."""
        return self.rnn.initial_state(batch)
