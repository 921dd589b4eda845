"""drive.nn: wirings (NCP), liquid recurrent modules (LTC, CfC), baselines (LSTM, CT-RNN).

Every recurrent module derives from :class:`~drive.nn.contract.RecurrentModule`: ``forward(x[B,L,F],
hidden=None, timespans=None[B,L]) -> (y[B,L,M], hidden[B,H])``, ``step(x[B,F], hidden[B,H], dt[B])``,
``initial_state(batch)``, ``config()``; all script with ``torch.jit.script``. Checkpoints name them
by their registered names (:mod:`drive.nn.registry`). See docs/nn.md.
"""

from drive.nn.baselines import CTRNN, LSTM, Stateless
from drive.nn.cfc import CfC, WiredCfC
from drive.nn.contract import RecurrentModule
from drive.nn.ltc import LTC
from drive.nn.ncps_compat import from_ncps, wiring_from_ncps
from drive.nn.wiring import NCP, AutoNCP, FullyConnected, Random, Wiring, as_wiring, lane_keeping_ncp

__all__ = [
    "Wiring",
    "NCP",
    "AutoNCP",
    "FullyConnected",
    "Random",
    "lane_keeping_ncp",
    "as_wiring",
    "RecurrentModule",
    "LTC",
    "CfC",
    "WiredCfC",
    "LSTM",
    "CTRNN",
    "Stateless",
    "from_ncps",
    "wiring_from_ncps",
]
