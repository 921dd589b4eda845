"""drive: end-to-end lane-keeping policies with liquid (continuous-time) recurrent networks."""

__version__ = "0.1.0"
