"""Tasks, one module each, each described by one ``TaskSpec`` (tasks/spec.py): options, actions,
step-state fields (declared in the step schema), kernels, observations, reward, success and
metrics, its episode supply and dataset check, host hook, ``episode_goals()`` entries and the
trainer's goal encoder. ``pointnav``: habitat-lab's PointNav; ``objectnav`` and ``imagenav``:
habitat-lab's ObjectNav and ImageNav (their step: ``goalnav``). Nothing outside ``tasks/`` (and
the trainer, through the spec) names a task.

Adding a task: write ``tasks/<name>.py`` defining ``NAME``, a ``TaskOptions`` class whose
``TASK`` is ``NAME`` (``options.options_class`` makes one on the one base, ``options.TaskOptions``;
its navmesh agent: ``options.AGENTS[NAME]``), and ``SPEC = TaskSpec(...)`` (tasks/spec.py lists
its members; docs/ARCHITECTURE.md "How to add a task" walks through one); add ``<name>`` to
``TASKS`` below. ``task_spec(name)`` imports and returns a spec; ``spec_for(options)`` is the
spec of an options object (its class's ``TASK``). tests/test_task_seam.py checks every task of
``TASKS`` against the protocol.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from bps_assets.errors import ConfigError

from .options import TaskOptions

if TYPE_CHECKING:   # the spec imports the step schema (torch): the task names must not
    from .spec import TaskSpec

TASKS = ("pointnav", "objectnav", "imagenav", "instance_imagenav")


def task_spec(name: str) -> TaskSpec:
    """The ``TaskSpec`` of the task called ``name`` (ConfigError naming the choices otherwise)."""
    if name not in TASKS:
        raise ConfigError(None, f"task={name!r}: choose from {TASKS}")
    return importlib.import_module(f"{__name__}.{name}").SPEC


def spec_for(options) -> TaskSpec:
    """The ``TaskSpec`` of the task whose options ``options`` are; ConfigError for anything that
    is not a task's options."""
    name = options.TASK if isinstance(options, TaskOptions) else None
    if name not in TASKS:
        raise ConfigError(None, f"task={options!r}: expected a task name {TASKS} or a task's TaskOptions")
    return task_spec(name)
