"""Gymnasium: ``import drive.gym`` registers ``drive/LaneKeeping-v0`` (the built-in world).

    import gymnasium, drive.gym
    env = gymnasium.make("drive/LaneKeeping-v0", seed=0, conditions="winter", fps=10, speed_kmh=40)

or, without the import, ``gymnasium.make("drive.gym:drive/LaneKeeping-v0", ...)``. See
:mod:`drive.sim.gym_env` for spaces, episodes and ``info``, and :mod:`drive.sim.gym_eval` for
driving a drive policy closed loop in any Gymnasium driving environment (``drive evaluate --env``).
"""

from drive.sim.gym_env import ENV_ID, LaneKeepingEnv, register

__all__ = ["ENV_ID", "LaneKeepingEnv", "register"]
