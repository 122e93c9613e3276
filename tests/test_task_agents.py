"""Each task's navmesh agent lives once, in ``bps_runtime.tasks.options.AGENTS``: the task's
options default to it, and the CLI's agent checks (``bps-assets episodes``' warning, ``synth
--semantic``'s preprocess hint) read it without importing torch or Warp."""
import subprocess
import sys
from pathlib import Path

import pytest

from bps_assets.errors import ConfigError
from bps_runtime.tasks import TASKS
from bps_runtime.tasks.options import AGENTS, TaskOptions, options_class, task_agent

ROOT = Path(__file__).resolve().parents[1]


def test_every_task_has_an_agent_and_its_options_default_to_it():
    from bps_runtime.tasks import task_spec

    assert set(AGENTS) == set(TASKS)
    for name in TASKS:
        d = task_spec(name).defaults
        assert (d.agent_radius, d.agent_height) == task_agent(name), name
    # habitat-lab's task configs: the values the task modules held before the table
    assert AGENTS == {"pointnav": (0.1, 1.5), "objectnav": (0.18, 0.88), "imagenav": (0.1, 1.5),
                      "instance_imagenav": (0.17, 1.41)}
    assert (TaskOptions().agent_radius, TaskOptions().agent_height) == AGENTS["pointnav"]


def test_the_agent_is_not_a_second_argument_and_an_unknown_task_has_none():
    with pytest.raises(ConfigError, match="from AGENTS"):
        options_class("pointnav", __name__, doc="x", agent_radius=0.2)
    with pytest.raises(ConfigError, match=r"task='nosuchtask': choose from \('pointnav'"):
        task_agent("nosuchtask")


def test_the_cli_agent_checks_load_neither_torch_nor_warp(tmp_path):
    code = f"""
import sys
from cli.cmd_episodes import _other_agent
from cli.cmd_synth import preprocess_command
rep = [{{"scene": "TwoRooms", "agent": {{"radius": 0.1, "height": 1.5}}}}]
print(_other_agent("objectnav", rep))
print(_other_agent("pointnav", rep) == "")
print(preprocess_command({str(tmp_path)!r}, "gibson", ["Allensville"], task="instance_imagenav"))
print(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "warp")))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True)
    warning, same, hint, heavy = out.stdout.splitlines()
    assert warning.startswith("warning: 1 navmesh(es) (TwoRooms) were built for another agent (radius 0.1 m, "
                              "height 1.5 m) than objectnav's (radius 0.18 m, height 0.88 m)"), warning
    assert same == "True"
    assert hint.endswith(" --agent-radius 0.17 --agent-height 1.41"), hint
    assert heavy == "[]"
