"""habitat-lab's ObjectNav (the ``objectnav_hm3d`` benchmark) as one task module: its options
and actions, and what it adds to a step's observations and info; the step's fields and kernels
are ``tasks/goalnav.py``'s (shared with ImageNav), its episodes ``episodes/objectnav.py``'s.

Defaults (objectnav_hm3d.yaml; all settable): STOP, MOVE_FORWARD 0.25 m, TURN_LEFT / TURN_RIGHT
30 deg, LOOK_UP / LOOK_DOWN 30 deg (the camera's pitch, rendered; clamped at +-30 deg, None: no
limit as habitat-lab); sliding off; 500 steps; agent 0.88 m tall, radius 0.18 m; sensors at
0.88 m, HFOV 79, depth 0.5-5 m; distance to goal = geodesic to the nearest view point of any
object of the goal category; success = STOP within 0.1 m; reward = -(d - d_prev) - 0.01 + 2.5
success. Observations: ``objectgoal`` [1] int64 (category_to_task_category_id), ``compass`` [1],
``gps`` [2] (relative to the episode's start pose), plus the visual sensors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from . import goalnav
from .goalnav import (OUTCOME, SCHEMA, Out, Params, State, apply_refills, begin_kernel, episode_info,  # noqa: F401
                      info, max_move, stage, step_kernel, STAGE_FLOATS, STAGE_INTS)

NAME = "objectnav"
ACTION_NAMES = goalnav.ALL_ACTIONS
NUM_ACTIONS = len(ACTION_NAMES)
LOOK, IMAGE = True, False


@dataclass(frozen=True)
class TaskOptions:
    """habitat-lab's objectnav_hm3d defaults."""

    TASK: ClassVar[str] = NAME        # the task module these options belong to
    forward_step: float = 0.25
    turn_degrees: float = 30.0
    tilt_degrees: float = 30.0
    max_pitch_degrees: float | None = 30.0
    sliding: bool = False
    success_distance: float = 0.1
    max_episode_steps: int = 500
    slack_reward: float = -0.01
    success_reward: float = 2.5
    agent_height: float = 0.88
    agent_radius: float = 0.18
    sensor_height: float = 0.88
    hfov_deg: float = 79.0
    min_depth: float = 0.5
    max_depth: float = 5.0


DEFAULTS = TaskOptions()


def params(options: TaskOptions, win: int, **sizes) -> Params:
    """The kernels' ``Params``."""
    return goalnav.make_params(options, win, LOOK, IMAGE, **sizes)


# the task's observations beside the sensors' frames: name -> (shape, dtype, low, high)
_BIG = float(3.4028234663852886e38)
OBSERVATIONS = {"objectgoal": ((1,), "int64", (0,), (2**63 - 1,)), "compass": ((1,), "float32", (-math.pi,), (math.pi,)),
                "gps": ((2,), "float32", (-_BIG, -_BIG), (_BIG, _BIG))}


def observations(v) -> dict:
    """The task's observations of a group (``v``: its output views)."""
    return {"objectgoal": v.objectgoal, "compass": v.compass, "gps": v.gps}
