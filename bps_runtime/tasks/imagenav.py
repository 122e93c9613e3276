"""habitat-lab's ImageNav as one task module: PointNav episodes whose goal observation is the RGB
image seen from the goal position at the episode's goal heading (``bps_assets.nav.imagenav.
goal_heading(episode id)``; sampled episodes: one of their pool goal's ``goal_views``). When the
episode is queued the env puts it in the ring, from its goal-image cache or rendered by the batch
renderer (env/goal_images.py, ``goal_cache_bytes``); the step kernel copies it to ``imagegoal``
when the episode starts (no render pass per step). Fields and kernels: ``tasks/goalnav.py``.

Defaults (habitat-lab's imagenav task; all settable): STOP, MOVE_FORWARD 0.25 m, TURN 10 deg,
sliding on, 1000 steps, success = STOP within 0.2 m of the goal (``success_distance=1.0``: the
published ImageNav benchmarks), SPL, soft SPL, PointNav's reward; habitat's default agent and
sensor (1.25 m, HFOV 90, depth 0-10 m). Observations: ``imagegoal`` [H, W, 3] uint8 + sensors.
"""
from __future__ import annotations

from . import goalnav
from .goalnav import (OUTCOME, SCHEMA, Out, Params, State, apply_refills, begin_kernel, episode_info,  # noqa: F401
                      info, max_move, stage, step_kernel, STAGE_FLOATS, STAGE_INTS)

NAME = "imagenav"
ACTION_NAMES = goalnav.ALL_ACTIONS[:4]
NUM_ACTIONS = len(ACTION_NAMES)
LOOK, IMAGE = False, True
BENCHMARK_SUCCESS_DISTANCE = 1.0   # the published ImageNav benchmarks' success distance


TaskOptions = goalnav.options_class(
    NAME, __name__, "habitat-lab's ImageNav defaults (tilt / pitch unused: no LOOK actions).",
    forward_step=0.25, turn_degrees=10.0, tilt_degrees=0.0, max_pitch_degrees=None, sliding=True,
    success_distance=0.2, max_episode_steps=1000, slack_reward=-0.01, success_reward=2.5,
    agent_height=1.5, agent_radius=0.1, sensor_height=1.25, hfov_deg=90.0, min_depth=0.0, max_depth=10.0,
    # goal images kept for reuse (env/goal_images.py; 0: none): a memory budget, not a task rule
    resources={"goal_cache_bytes": (int, 256 * 2**20)})


DEFAULTS = TaskOptions()


def params(options: TaskOptions, win: int, **sizes) -> Params:
    """The kernels' ``Params``."""
    return goalnav.make_params(options, win, LOOK, IMAGE, **sizes)


# the task's observations beside the sensors' frames: name -> (shape ("H", "W": the sensors'
# height and width), dtype, low, high)
OBSERVATIONS = {"imagegoal": (("H", "W", 3), "uint8", (0,), (255,))}


def observations(v) -> dict:
    """The task's observations of a group: the goal image [B, H, W, 3] (``v.goal_shape``)."""
    return {"imagegoal": v.imagegoal.view(v.imagegoal.shape[0], *v.goal_shape)}
