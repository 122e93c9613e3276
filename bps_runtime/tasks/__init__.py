"""Tasks, one module each: its options, actions, state fields (declared in the step schema),
observations, reward, success and metrics. ``pointnav``: habitat-lab's PointNav; ``objectnav`` and
``imagenav``: habitat-lab's ObjectNav and ImageNav (their step: ``goalnav``). ``task_module(name)``
imports one; ``module_of(options)`` finds the module of a task's options."""
from __future__ import annotations

import importlib

from bps_assets.errors import ConfigError

TASKS = ("pointnav", "objectnav", "imagenav")


def task_module(name: str):
    """The task module called ``name`` (ConfigError naming the choices otherwise)."""
    if name not in TASKS:
        raise ConfigError(None, f"task={name!r}: choose from {TASKS}")
    return importlib.import_module(f"{__name__}.{name}")


def module_of(options):
    """The task module whose ``TaskOptions`` ``options`` is."""
    for name in TASKS:
        m = task_module(name)
        if isinstance(options, m.TaskOptions):
            return m
    raise ConfigError(None, f"task={options!r}: expected a task name {TASKS} or a task's TaskOptions")
