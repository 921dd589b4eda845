"""Deprecated name of :mod:`drive.policy_drivers` (every kind of policy as a world ``Driver``).

Kept only while drive/evaluate/log_replay.py, tools/bench_replay.py and tools/bench_onpolicy.py
(changed on another branch) still import ``drive.drivers``; it goes once they import
``drive.policy_drivers``. New code imports :mod:`drive.policy_drivers`.
"""

from __future__ import annotations

import warnings

from drive.policy_drivers import PolicyDriver, camera_size, load_driver, make_driver

__all__ = ["PolicyDriver", "load_driver", "make_driver", "camera_size"]

warnings.warn(
    "drive.drivers is drive.policy_drivers now; import from there", DeprecationWarning, stacklevel=2
)
