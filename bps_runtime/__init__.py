"""bps_runtime: async scene streaming, scene cache, batch renderer and batched PointNav.

Front door: ``make(manifest, ...)`` -> ``BatchPointNavEnv`` (``reset``, ``step``, ``send`` /
``recv``); ``observation_space(...)`` / ``action_space(...)`` from arguments alone;
``GymVectorEnv(env)`` for gymnasium.
"""
from .env.make import action_space, make, observation_space, single_action_space, single_observation_space
from .env.env import BatchPointNavEnv
from .tasks.pointnav import ACTION_NAMES, MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT, TaskOptions


def GymVectorEnv(env, as_torch: bool = False):
    """gymnasium ``VectorEnv`` adapter (see ``bps_runtime.env.gym_adapter``)."""
    from .env.gym_adapter import GymVectorEnv as _G
    return _G(env, as_torch)


__all__ = ["make", "observation_space", "action_space", "single_observation_space", "single_action_space",
           "BatchPointNavEnv", "GymVectorEnv", "TaskOptions", "ACTION_NAMES", "STOP", "MOVE_FORWARD",
           "TURN_LEFT", "TURN_RIGHT"]
