"""Model families: the named policies ``drive fit`` trains (the NCP paper's networks; docs/references.md).

| family    | head                | recurrent compartment                                     |
|-----------|---------------------|-----------------------------------------------------------|
| ``ncp_ltc`` | NCP conv head (32) | LTC on the 19-neuron lane-keeping NCP (1 motor neuron)    |
| ``cfc``     | NCP conv head (32) | CfC (default / no_gate / pure, mixed memory), dense ``units`` with its readout, or NCP-wired |
| ``lstm``    | NCP conv head (32) | LSTM, ``units`` (64) + linear readout                    |
| ``ctrnn``   | NCP conv head (32) | CT-RNN, ``units`` (64), Euler 6 unfolds + linear readout |
| ``cnn``     | PilotNet CNN       | none (single frames; hidden ``[B, 0]``)                  |
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence

from torch import nn

from drive.nn.heads import NCPConvHead, PilotNetCNN
from drive.nn.policy import Policy

__all__ = ["FAMILIES", "build_policy"]


def _ncp_ltc(features: int, opts: Dict[str, Any]) -> nn.Module:
    from drive.nn.ltc import LTC
    from drive.nn.wiring import lane_keeping_ncp

    return LTC(
        lane_keeping_ncp(seed=opts["wiring_seed"], input_dim=features),
        input_size=features,
        ode_unfolds=opts["ode_unfolds"],
        positivity=opts["positivity"],
    )


def _cfc(features: int, opts: Dict[str, Any]) -> nn.Module:
    from drive.nn import cfc

    if opts["cfc_wired"]:
        from drive.nn.wiring import lane_keeping_ncp

        wiring = lane_keeping_ncp(seed=opts["wiring_seed"], input_dim=features)
        return cfc.WiredCfC(wiring=wiring, input_size=features, mode=opts["cfc_mode"],
                            mixed_memory=opts["cfc_mixed_memory"])
    return cfc.CfC(features, opts["units"], output_size=1, mode=opts["cfc_mode"],
                   mixed_memory=opts["cfc_mixed_memory"])


def _lstm(features: int, opts: Dict[str, Any]) -> nn.Module:
    from drive.nn.baselines import LSTM

    return LSTM(features, opts["units"])


def _ctrnn(features: int, opts: Dict[str, Any]) -> nn.Module:
    from drive.nn.baselines import CTRNN

    return CTRNN(features, opts["units"])


def _feed_forward(features: int, opts: Dict[str, Any]) -> None:
    return None


FAMILIES: Dict[str, Callable[[int, Dict[str, Any]], Optional[nn.Module]]] = {
    "ncp_ltc": _ncp_ltc,
    "cfc": _cfc,
    "lstm": _lstm,
    "ctrnn": _ctrnn,
    "cnn": _feed_forward,
}


def build_policy(family: str, input_hw: Sequence[int] = (78, 200), frame_period_s: float = 1.0, **opts: Any) -> Policy:
    """An untrained policy of ``family`` for frames of size ``input_hw``.

    opts: ``units``, ``cfc_mode``, ``cfc_mixed_memory``, ``cfc_wired``, ``ode_unfolds``,
    ``positivity``, ``wiring_seed``, ``feature_norm`` (the NCP head's ``norm``; see :class:`drive.train.module.PolicyModule`).
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {sorted(FAMILIES)}")
    defaults = {"units": 64, "cfc_mode": "default", "cfc_mixed_memory": False, "cfc_wired": False,
                "ode_unfolds": 6, "positivity": "clip", "wiring_seed": 22222, "feature_norm": "none"}
    opts = {**defaults, **opts}
    if family == "cnn":
        return Policy(PilotNetCNN(input_hw), None, frame_period_s=frame_period_s, head_name="pilotnet")
    head = NCPConvHead(input_hw, norm=opts["feature_norm"])
    rnn = FAMILIES[family](head.output_size, opts)
    return Policy(head, rnn, frame_period_s=frame_period_s, head_name="ncp_conv")
