"""docs/TASKS.md's table of habitat-lab config keys against both sides: every bps name it gives is
a real task option, camera field or ``make()`` keyword, and (when habitat-lab is installed) each
habitat key is a field of the config dataclass it names in habitat-lab's own
``default_structured_configs.py``, with the default the table states (read with ``ast``)."""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from bps_runtime.env.config import CAMERA_FIELDS, EnvConfig
from habitat_lab_stub import PIN
from bps_runtime.tasks import TASKS, task_spec

DOC = Path(__file__).resolve().parents[1] / "docs" / "TASKS.md"

# habitat key of the table -> (its dataclass in default_structured_configs.py, field, the bps name)
KEYS = {
    "environment.max_episode_steps": ("EnvironmentConfig", "max_episode_steps", "max_episode_steps"),
    "simulator.forward_step_size": ("SimulatorConfig", "forward_step_size", "forward_step"),
    "simulator.turn_angle": ("SimulatorConfig", "turn_angle", "turn_degrees"),
    "task.actions.look_up.tilt_angle": ("DiscreteNavigationActionConfig", "tilt_angle", "tilt_degrees"),
    "simulator.habitat_sim_v0.allow_sliding": ("HabitatSimV0Config", "allow_sliding", "sliding"),
    "task.measurements.success.success_distance": ("SuccessMeasurementConfig", "success_distance",
                                                   "success_distance"),
    "task.slack_reward": ("TaskConfig", "slack_reward", "slack_reward"),
    "task.success_reward": ("TaskConfig", "success_reward", "success_reward"),
    "simulator.agents.main_agent.height": ("AgentConfig", "height", "agent_height"),
    "depth_sensor.min_depth": ("HabitatSimDepthSensorConfig", "min_depth", "min_depth"),
    "depth_sensor.normalize_depth": ("HabitatSimDepthSensorConfig", "normalize_depth", "normalize_depth"),
    "sim_sensors.*.hfov": ("SimulatorCameraSensorConfig", "hfov", "hfov_deg"),
}


# rows stating several defaults, "(A / B)", "(W x H)" or "([x, y, z])": every one, in order
ALL_DEFAULTS = {
    "simulator.agents.main_agent.height": [("AgentConfig", "height"), ("AgentConfig", "radius")],
    "depth_sensor.min_depth": [("HabitatSimDepthSensorConfig", "min_depth"),
                               ("HabitatSimDepthSensorConfig", "max_depth")],
    "sim_sensors.*.width": [("SimulatorSensorConfig", "width"), ("SimulatorSensorConfig", "height")],
    "sim_sensors.*.position": [("SimulatorSensorConfig", "position")],
    "sim_sensors.*.hfov": [("SimulatorCameraSensorConfig", "hfov")],
}


def _rows() -> list[str]:
    text = DOC.read_text().split("### habitat-lab config keys", 1)[1].split("\n## ", 1)[0]
    return [ln for ln in text.splitlines() if ln.startswith("| `") or ln.startswith("| (")]


def _row(key: str) -> str:
    rows = [r for r in _rows() if f"`{key}`" in r.split(" | ")[0]]
    assert rows, f"TASKS.md's habitat-lab table has no row for {key}"
    return rows[0]


def _bps_names() -> set[str]:
    fields = {f.name for t in TASKS for f in dataclasses.fields(task_spec(t).options)}
    return fields | set(CAMERA_FIELDS) | set(inspect.signature(EnvConfig.from_kwargs).parameters)


def test_every_bps_name_of_the_table_exists():
    names = _bps_names()
    for row in _rows():
        bps = row.split(" | ")[1]
        for name in re.findall(r"`([a-z_]+)(?:=[^`]*)?`", bps) + re.findall(r'"([a-z_]+)"', bps):
            assert name in names or name in {"info", "episode", "length"}, f"{name!r} in {row}"
    for key, (_, _, name) in KEYS.items():
        assert name in _row(key).split(" | ")[1], key


def _defaults(source: str) -> dict:
    """(class, field) -> its default as written in habitat-lab's config dataclasses."""
    out = {}
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for n in cls.body:
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
                value = n.value
                if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
                    # field(default_factory=lambda: [...]): the lambda's literal
                    value = next((k.value.body for k in value.keywords if k.arg == "default_factory"
                                  and isinstance(k.value, ast.Lambda)), value)
                try:
                    out[cls.name, n.target.id] = ast.literal_eval(value)
                except ValueError:
                    pass   # a default computed by code (MISSING, a call): the table states none of those
    return out


def _habitat_defaults() -> dict:
    """``_defaults`` of the installed habitat-lab's default_structured_configs.py (skips without it)."""
    spec = importlib.util.find_spec("habitat")
    if spec is None or spec.origin is None:
        pytest.skip(f"habitat-lab is not installed (pip install --no-deps {PIN})")
    return _defaults((Path(spec.origin).parent / "config" / "default_structured_configs.py").read_text())


def test_habitat_keys_and_defaults_are_habitat_labs():
    defaults = _habitat_defaults()
    for key, (cls, field, _) in KEYS.items():
        assert (cls, field) in defaults, f"habitat-lab has no {cls}.{field}"
        head = _row(key).split(" | ")[0]
        after = head[head.index(f"`{key}`") + len(key) + 2:]   # the first "(default ...)" after the key
        stated = re.search(r"\(\s*([-\d.]+|True|False)", after)
        assert stated is not None, head
        value = stated.group(1)
        want = defaults[cls, field]
        got = {"True": True, "False": False}.get(value, None)
        got = got if got is not None else float(value)
        assert got == want, f"{key}: the table says {value}, habitat-lab's {cls}.{field} = {want!r}"


def _stated(key: str) -> list:
    """Every default the row of ``key`` states in its first parentheses, as Python values."""
    head = _row(key).split(" | ")[0]
    inside = re.match(r"[^(]*\(([^)]*)\)", head[head.index(f"`{key}`"):])
    assert inside is not None, head
    parts = re.split(r"\s+/\s+|\s+x\s+", inside.group(1))
    return [ast.literal_eval(re.match(r"\[[^\]]*\]|[-\d.]+|True|False", p.strip()).group(0)) for p in parts]


def test_every_default_a_row_states_is_habitat_labs():
    """Not only a row's first number: max_depth, the agent radius, the sensor height (pixels)
    and the sensor position were never compared."""
    defaults = _habitat_defaults()
    for key, fields in ALL_DEFAULTS.items():
        stated = _stated(key)
        assert len(stated) == len(fields), f"{key}: the table states {stated}, want one per {fields}"
        for value, (cls, field) in zip(stated, fields):
            assert (cls, field) in defaults, f"habitat-lab has no {cls}.{field}"
            assert value == defaults[cls, field], f"{key}: the table says {value}, habitat-lab's {cls}.{field} = " \
                                                  f"{defaults[cls, field]!r}"

