"""drive.nn: wirings (NCP), liquid recurrent modules (LTC, CfC), baselines (LSTM, CT-RNN), heads,
policies and the model families ``drive fit`` trains. See docs/nn.md.

Every recurrent module follows one contract, written in :mod:`drive.nn.contract`, and registers
the name checkpoints store (and its model family) in :mod:`drive.nn.registry`. Importing the
package imports every module in it and the plugins (:mod:`drive.plugins`), so each registers.
"""

from drive.nn.baselines import CTRNN, LSTM, Stateless
from drive.nn.cfc import CfC, WiredCfC
from drive.nn.contract import RecurrentModule
from drive.nn.ltc import LTC
from drive.nn.ncps_compat import from_ncps, wiring_from_ncps
from drive.nn.wiring import NCP, AutoNCP, FullyConnected, Random, Wiring, as_wiring, lane_keeping_ncp
from drive.plugins import import_all, load_plugins

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

import_all(__name__, __path__)  # every cell in this package registers: a new one is one module
load_plugins()  # and the cells (and readers) of DRIVE_PLUGINS and the drive.plugins entry points
