"""bps_runtime: async scene streaming, scene cache, batch renderer and batched navigation tasks
(PointNav, ObjectNav, ImageNav).

Front door: ``make(manifest, ...)`` -> ``BatchNavEnv`` (``reset``, ``step``, ``send`` /
``recv``); ``observation_space(...)`` / ``action_space(...)`` from arguments alone;
``GymVectorEnv(env)`` for gymnasium. Names load on first use, so importing a room
(``bps_runtime.render``) does not import torch and Warp.
"""
import importlib

_EXPORTS = {
    "make": "env.make", "observation_space": "env.make", "action_space": "env.make",
    "single_observation_space": "env.make", "single_action_space": "env.make", "EnvConfig": "env.config",
    "BatchNavEnv": "env.env", "GymVectorEnv": "env.gym_adapter",
    "TaskOptions": "tasks.pointnav", "ACTION_NAMES": "tasks.pointnav", "STOP": "tasks.pointnav",
    "MOVE_FORWARD": "tasks.pointnav", "TURN_LEFT": "tasks.pointnav", "TURN_RIGHT": "tasks.pointnav",
}


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'bps_runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


__all__ = list(_EXPORTS)
