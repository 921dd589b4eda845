"""drive.nn: wirings (NCP), liquid recurrent cells (LTC, CfC), baselines (LSTM, CT-RNN)."""
from drive.nn.wiring import NCP, AutoNCP, FullyConnected, Random, Wiring, as_wiring, lane_keeping_ncp

__all__ = ["Wiring", "NCP", "AutoNCP", "FullyConnected", "Random", "lane_keeping_ncp", "as_wiring"]
