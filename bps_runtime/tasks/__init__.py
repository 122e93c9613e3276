"""Tasks, one module each: its options, actions, state fields (declared in the step schema),
kernels, observations, reward, success and metrics. ``pointnav``: habitat-lab's PointNav;
``objectnav`` and ``imagenav``: habitat-lab's ObjectNav and ImageNav (their step: ``goalnav``).
``task_module(name)`` imports one; ``module_for(options)`` is the task module of an options
object (its class's ``TASK``)."""
from __future__ import annotations

import importlib

from bps_assets.errors import ConfigError

TASKS = ("pointnav", "objectnav", "imagenav")


def task_module(name: str):
    """The task module called ``name`` (ConfigError naming the choices otherwise)."""
    if name not in TASKS:
        raise ConfigError(None, f"task={name!r}: choose from {TASKS}")
    return importlib.import_module(f"{__name__}.{name}")


def module_for(options):
    """The task module (``bps_runtime.tasks.<options.TASK>``) whose options ``options`` are;
    ConfigError for anything that is not a task's options."""
    name = getattr(type(options), "TASK", None)
    if name not in TASKS:
        raise ConfigError(None, f"task={options!r}: expected a task name {TASKS} or a task's TaskOptions")
    return task_module(name)
