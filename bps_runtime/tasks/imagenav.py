"""habitat-lab's ImageNav as one task module: PointNav episodes whose goal observation is the RGB
image seen from the goal position at the episode's goal heading (``bps_assets.nav.imagenav.
goal_heading(episode id)``; sampled episodes: one of their pool goal's ``goal_views``). When the
episode is queued the env puts it in the ring, from its goal-image cache or rendered by the batch
renderer (tasks/goal_images.py: the task's host hook, ``goal_cache_bytes``); the step kernel copies it to ``imagegoal``
when the episode starts (no render pass per step). Fields and kernels: ``tasks/goalnav.py``.

Defaults (habitat-lab's imagenav task; all settable): STOP, MOVE_FORWARD 0.25 m, TURN 10 deg,
sliding on, 1000 steps, success = STOP within 0.2 m of the goal (``success_distance=1.0``: the
published ImageNav benchmarks), SPL, soft SPL, PointNav's reward; habitat's default agent and
sensor (1.25 m, HFOV 90, depth 0-10 m). Observations: ``imagegoal`` [H, W, 3] uint8 + sensors.
"""
from __future__ import annotations

from . import goalnav
import math

import torch

from bps_assets.nav.imagenav import goal_heading

from .goal_encoders import ImageGoalEncoder
from .goal_images import DEFAULT_BUDGET_BYTES, GoalImages, check_budget
from .goalnav import (OUTCOME, SCHEMA, STAGING, Out, Params, State, apply_refills, begin_kernel, episode_info,
                      info, max_move, step_kernel)
from ..episodes.files import point_goal_supply
from .options import options_class
from .spec import HostContext, TaskSpec

NAME = "imagenav"
ACTION_NAMES = goalnav.ALL_ACTIONS[:4]
LOOK = False
BENCHMARK_SUCCESS_DISTANCE = 1.0   # the published ImageNav benchmarks' success distance


TaskOptions = options_class(
    NAME, __name__, fields=goalnav.OPTION_FIELDS,
    doc="habitat-lab's ImageNav defaults (tilt / pitch unused: no LOOK actions).",
    forward_step=0.25, turn_degrees=10.0, tilt_degrees=0.0, max_pitch_degrees=None, sliding=True,
    success_distance=0.2, max_episode_steps=1000, slack_reward=-0.01, success_reward=2.5,
    # goal images kept for reuse (tasks/goal_images.py; 0: none): a memory budget, not a task rule
    resources={"goal_cache_bytes": (int, DEFAULT_BUDGET_BYTES, check_budget)})


# the sensor geometry of habitat-lab's task config (SensorConfig's defaults for this task)
CAMERA = {"sensor_height": 1.25, "hfov_deg": 90.0, "min_depth": 0.0, "max_depth": 10.0}
DEFAULTS = TaskOptions()


def params(options: TaskOptions, win: int, **sizes) -> Params:
    """The kernels' ``Params``: the goal image is seen through the RGB sensor, with its noise
    (habitat-lab's ImageGoalSensor renders it with the agent's sensors)."""
    return goalnav.make_params(options, win, LOOK, True, noisy_goal=True, **sizes)


# the task's observation beside the sensors' frames (declared in goalnav.OBSERVATIONS)
OBSERVATIONS = (goalnav.OBSERVATIONS["imagegoal"],)


def host_hook(ctx: HostContext) -> GoalImages:
    """The goal image of each queued episode, from the goal-image cache or rendered when it is
    queued (tasks/goal_images.py), into the ring field ``r_goal_image``."""
    return GoalImages(ctx.ring["r_goal_image"], ctx.staging, ctx.render, ctx.scene_id, ctx.options.goal_cache_bytes)


def goal_record(_record: dict | None, episode_id: str, heading: float) -> dict:
    """ImageNav's entry of ``episode_goals()``: ``goal_heading``, the yaw its goal image was
    rendered at (the episode's goal view; NaN: habitat's ``goal_heading(episode id)``)."""
    return {"goal_heading": float(heading) if math.isfinite(heading) else float(goal_heading(episode_id))}


SPEC = TaskSpec(
    name=NAME, options=TaskOptions, actions=ACTION_NAMES, schema=SCHEMA, State=State, Out=Out, params=params,
    max_move=max_move, apply_refills=apply_refills, begin_kernel=begin_kernel, step_kernel=step_kernel,
    staging=STAGING, observations=OBSERVATIONS, info=info, episode_info=episode_info, outcome=OUTCOME,
    supply=point_goal_supply, host_hook=host_hook, goal_record=goal_record, camera=CAMERA,
    sizes=goalnav.sizes(image=True), goal_input=lambda obs: obs["imagegoal"],
    goal_input_spec=lambda resolution: ((*resolution, 3), torch.uint8), goal_encoder=ImageGoalEncoder,
    goal_headings=True)
