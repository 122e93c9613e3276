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
from . import goalnav
from .goalnav import (OUTCOME, SCHEMA, Out, Params, State, apply_refills, begin_kernel, episode_info,  # noqa: F401
                      info, max_move, stage, step_kernel, STAGE_FLOATS, STAGE_INTS)

NAME = "objectnav"
ACTION_NAMES = goalnav.ALL_ACTIONS
NUM_ACTIONS = len(ACTION_NAMES)
LOOK, IMAGE = True, False


TaskOptions = goalnav.options_class(
    NAME, __name__, "habitat-lab's objectnav_hm3d defaults.",
    forward_step=0.25, turn_degrees=30.0, tilt_degrees=30.0, max_pitch_degrees=30.0, sliding=False,
    success_distance=0.1, max_episode_steps=500, slack_reward=-0.01, success_reward=2.5,
    agent_height=0.88, agent_radius=0.18, sensor_height=0.88, hfov_deg=79.0, min_depth=0.5, max_depth=5.0)


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
