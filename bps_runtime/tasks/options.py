"""One base for every task's options: ``TaskOptions`` (what every navigation task has, with
habitat-lab's PointNav defaults: pointnav.yaml / DD-PPO) and ``options_class`` (a task's frozen
``TaskOptions`` subclass: its own rules and defaults, ``TASK`` = its name for
``tasks.spec_for``, ``RESOURCES`` = settings that are not rules, which a resumed run may change).
Checked when built (``check_rules``; ConfigError): every float option finite (None where allowed),
every bool option a bool, ``max_episode_steps`` an int in 0..2^31-1 (0: no step limit, as habitat-lab's
``Env._past_limit``; the kernels hold it in int32), ``max_pitch_degrees`` None or >= 0.
Sensor geometry is not a task option: ``SensorConfig`` holds it, ``TaskSpec.camera`` its defaults.
``AGENTS``: each task's navmesh agent, its options' default and the CLI's torch-free agent checks.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import ClassVar

from bps_assets.errors import ConfigError, did_you_mean, is_bool, is_int, is_real

# each task's default navmesh agent (habitat-lab's task configs), (radius, height) in metres: the
# one copy, read by options_class and by `bps-assets episodes` / `synth --semantic` (no torch)
AGENTS = {"pointnav": (0.1, 1.5), "objectnav": (0.18, 0.88), "imagenav": (0.1, 1.5),
          "instance_imagenav": (0.17, 1.41)}


def forward_reach(options) -> float:
    """The longest move of one step (metres) of a task whose one move is MOVE_FORWARD by
    ``forward_step`` (its ``TaskSpec.max_move``: sizes the try_step window; a negative
    ``forward_step`` moves backwards, as habitat-sim's move_forward by a negative amount)."""
    return abs(float(options.forward_step))


def task_agent(task: str) -> tuple[float, float]:
    """The default navmesh agent (radius, height) in metres of the task called ``task``
    (ConfigError naming the choices otherwise); importing it loads neither torch nor Warp."""
    if task not in AGENTS:
        raise ConfigError(None, f"task={task!r}: choose from {tuple(AGENTS)}")
    return AGENTS[task]


@dataclass(frozen=True)
class TaskOptions:
    """The options every navigation task has (habitat-lab's PointNav defaults)."""

    TASK: ClassVar[str] = ""              # the task these options belong to (tasks.spec_for)
    RESOURCES: ClassVar[tuple] = ()       # fields that are budgets, not rules
    forward_step: float = 0.25            # metres per MOVE_FORWARD
    turn_degrees: float = 10.0            # degrees per TURN_LEFT / TURN_RIGHT
    success_distance: float = 0.2         # metres, geodesic, strict '<'
    max_episode_steps: int = 500          # 0: no limit (habitat-lab's Env._past_limit)
    slack_reward: float = -0.01
    success_reward: float = 2.5
    agent_radius: float = AGENTS["pointnav"][0]   # metres: the agent the dataset's navmeshes must be
    agent_height: float = AGENTS["pointnav"][1]   # built for (make() refuses another agent's dataset)

    def __post_init__(self):
        check_rules(self)


MAX_STEPS = 2**31 - 1   # the kernels' int32 step limit (a larger one wrapped: 2^32 + 1 read as 1)


def check_rules(options) -> None:
    """ConfigError unless every float field of ``options`` (a dataclass) is a finite number
    (``is_real``: numpy scalars too, stored as Python's; None where its type allows it), every
    bool field a bool (numpy's too; ``"False"`` or 0 would read as the kernels' truth value),
    ``max_episode_steps`` an int in 0..MAX_STEPS (0: no limit) and ``max_pitch_degrees``, where
    the task has it, None (no limit) or >= 0 (a negative one read as no limit)."""
    for f in dataclasses.fields(options):
        v = getattr(options, f.name)
        what = f"{type(options).__qualname__} of task {options.TASK or '?'!r}: {f.name}={v!r}"
        if f.name == "max_episode_steps":
            if not is_int(v) or not 0 <= v <= MAX_STEPS:
                raise ConfigError(None, f"{what}: expected an int in 0..{MAX_STEPS} (0: no step limit)")
            if type(v) is not int:   # a numpy integer: stored as Python's (the config is plain data)
                object.__setattr__(options, f.name, int(v))
        elif f.type in (bool, "bool"):
            if not is_bool(v):
                raise ConfigError(None, f"{what}: expected True or False")
            if type(v) is not bool:   # numpy's bool: stored as Python's
                object.__setattr__(options, f.name, bool(v))
        elif f.type in (float, "float") or (v is not None and f.type in (float | None, "float | None")):
            if not is_real(v) or not math.isfinite(v):
                raise ConfigError(None, f"{what}: expected a finite number")
            if type(v) not in (int, float):   # a numpy scalar: stored as Python's float
                object.__setattr__(options, f.name, float(v))
            if f.name == "max_pitch_degrees" and v is not None and v < 0:
                raise ConfigError(None, f"{what}: expected None (no limit) or a limit >= 0 degrees")


def options_class(name: str, module: str, doc: str, fields: tuple = (), resources: dict | None = None,
                  **defaults) -> type:
    """A task's frozen ``TaskOptions`` subclass defined as ``module.TaskOptions``: the base's fields
    and ``fields`` ((name, type) pairs), ``defaults`` for any of them (every one of ``fields``
    needs one; the agent's come from ``AGENTS[name]``), plus ``resources`` ({name: (type, default)
    or (type, default, check)}: ``check(value)`` raises ``ConfigError`` for a bad value when the
    options are built, not when an env uses them)."""
    base = {f.name for f in dataclasses.fields(TaskOptions)}
    if "agent_radius" in defaults or "agent_height" in defaults:
        raise ConfigError(None, f"options_class({name!r}): the agent's defaults come from AGENTS, not arguments")
    radius, height = task_agent(name)
    defaults = {**defaults, "agent_radius": radius, "agent_height": height}
    own = dict(fields)
    unknown = set(defaults) - base - set(own)
    if unknown or set(own) - set(defaults):
        raise ConfigError(None, f"options_class({name!r}): unknown options {sorted(unknown)} or no default "
                                f"for {sorted(set(own) - set(defaults))}")
    hints = {f.name: f.type for f in dataclasses.fields(TaskOptions)} | own
    spec = [(n, hints[n], dataclasses.field(default=d)) for n, d in defaults.items()]
    resources = resources or {}
    spec += [(n, r[0], dataclasses.field(default=r[1])) for n, r in resources.items()]
    checks = {n: r[2] for n, r in resources.items() if len(r) > 2}

    def __post_init__(self):
        check_rules(self)
        for n, check in checks.items():
            check(getattr(self, n))

    cls = dataclasses.make_dataclass("TaskOptions", spec, bases=(TaskOptions,), frozen=True,
                                     namespace={"TASK": name, "RESOURCES": tuple(resources),
                                                "__post_init__": __post_init__})
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):   # an unknown option: a ConfigError, not the dataclass' TypeError
        check_names(cls, kwargs)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    cls.__module__, cls.__doc__ = module, doc
    return cls


# habitat-lab config keys a port may pass as they are named there (docs/TASKS.md, "habitat-lab config keys")
HABITAT_KEYS = {"forward_step_size": "forward_step", "turn_angle": "turn_degrees", "tilt_angle": "tilt_degrees",
                "allow_sliding": "sliding", "height": "agent_height", "radius": "agent_radius"}


def check_names(cls, kwargs: dict) -> None:
    """A ConfigError naming each keyword of ``kwargs`` that is no field of the options class ``cls``,
    with the bps name of a habitat-lab config key or the close matches."""
    names = [f.name for f in dataclasses.fields(cls)]
    bad = [k for k in kwargs if k not in names]
    if not bad:
        return
    hints = []
    for k in bad:
        hint = (f"habitat-lab's {k} is {HABITAT_KEYS[k]!r} here" if HABITAT_KEYS.get(k) in names
                else did_you_mean(k, names))
        hints.append(f"{k!r}: {hint}" if hint else repr(k))
    raise ConfigError(None, f"{cls.__qualname__} of task {cls.TASK!r}: unknown option(s) {'; '.join(hints)}; "
                            f"it takes {', '.join(names)}")
