"""habitat-lab's ObjectNav (the ``objectnav_hm3d`` benchmark) as one task module: its options
and actions, and what it adds to a step's observations and info; the step's fields and kernels
are ``tasks/goalnav.py``'s (shared with ImageNav), its episodes ``tasks/objectnav_episodes.py``'s.

Defaults (objectnav_hm3d.yaml; all settable): STOP, MOVE_FORWARD 0.25 m, TURN_LEFT / TURN_RIGHT
30 deg, LOOK_UP / LOOK_DOWN 30 deg (the camera's pitch, rendered; clamped at +-30 deg, None: no
limit as habitat-lab); sliding off; 500 steps; agent 0.88 m tall, radius 0.18 m; sensors at
0.88 m, HFOV 79, depth 0.5-5 m; distance to goal = geodesic to the nearest view point of any
object of the goal category; success = STOP within 0.1 m; reward = -(d - d_prev) - 0.01 + 2.5
success. Observations: ``objectgoal`` [1] int64 (category_to_task_category_id), ``compass`` [1],
``gps`` [2] (relative to the episode's start pose), plus the visual sensors.
"""
from __future__ import annotations

import torch

from bps_assets.pipeline.habitat_episodes import map_habitat_objectnav

from . import goalnav
from .goal_encoders import ObjectGoalEncoder
from .goalnav import (OUTCOME, SCHEMA, STAGING, Out, Params, State, apply_refills, begin_kernel, episode_info,
                      info, max_move, step_kernel)
from .objectnav_episodes import annotated_scenes, objectnav_supply
from .options import options_class
from .spec import TaskSpec

NAME = "objectnav"
ACTION_NAMES = goalnav.ALL_ACTIONS
LOOK = True


TaskOptions = options_class(
    NAME, __name__, fields=goalnav.OPTION_FIELDS, doc="habitat-lab's objectnav_hm3d defaults.",
    forward_step=0.25, turn_degrees=30.0, tilt_degrees=30.0, max_pitch_degrees=30.0, sliding=False,
    success_distance=0.1, max_episode_steps=500, slack_reward=-0.01, success_reward=2.5)


# the sensor geometry of habitat-lab's task config (SensorConfig's defaults for this task)
CAMERA = {"sensor_height": 0.88, "hfov_deg": 79.0, "min_depth": 0.5, "max_depth": 5.0}
DEFAULTS = TaskOptions()


def params(options: TaskOptions, win: int, **sizes) -> Params:
    """The kernels' ``Params``."""
    return goalnav.make_params(options, win, LOOK, False, **sizes)


# the task's observations beside the sensors' frames (declared in goalnav.OBSERVATIONS)
OBSERVATIONS = tuple(goalnav.OBSERVATIONS[k] for k in ("objectgoal", "compass", "gps"))


def goal_record(record: dict | None, _episode_id: str, _heading: float) -> dict:
    """ObjectNav's entries of ``episode_goals()``: the episode's ``object_category``."""
    return {} if record is None or "object_category" not in record else {"object_category": record["object_category"]}


def goal_input(obs) -> torch.Tensor:
    """The policy's goal input: (objectgoal, compass, gps) [B, 4] float."""
    return torch.cat([obs["objectgoal"].float(), obs["compass"], obs["gps"]], 1)


SPEC = TaskSpec(
    name=NAME, options=TaskOptions, actions=ACTION_NAMES, schema=SCHEMA, State=State, Out=Out, params=params,
    max_move=max_move, apply_refills=apply_refills, begin_kernel=begin_kernel, step_kernel=step_kernel,
    staging=STAGING, observations=OBSERVATIONS, info=info, episode_info=episode_info, outcome=OUTCOME,
    supply=objectnav_supply, scenes=annotated_scenes, goal_record=goal_record, camera=CAMERA,
    sizes=goalnav.sizes(image=False), goal_input=goal_input,
    goal_input_spec=lambda resolution: ((4,), torch.float32), goal_encoder=ObjectGoalEncoder,
    eval_episodes="sample", categories=True, episode_file=map_habitat_objectnav)
