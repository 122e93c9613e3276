"""habitat-lab's PointNav as one task module: its options and actions, its step-state fields (the
schema declares them once; ``SCHEMA`` is the core fields plus these), its Warp kernels (episode
start, step: action -> move with sliding -> geodesic distance -> reward, success, SPL, soft
SPL, truncation -> next episode from the ring -> pointgoal), and what it adds to a step's
observations and info. The template for the next tasks: copy, change the fields and kernels.

Conventions (habitat-lab's ``tasks/nav/nav.py``): actions STOP=0, MOVE_FORWARD=1, TURN_LEFT=2,
TURN_RIGHT=3; Y up, -Z forward, yaw about +Y (TURN_LEFT adds), quaternions [x, y, z, w];
pointgoal_with_gps_compass POLAR ``[rho, -phi]`` (a goal on the left has a positive angle);
success = STOP with geodesic distance < 0.2 m; SPL = S * d0 / max(d0, path length); soft SPL =
max(0, 1 - d / d0) * d0 / max(d0, path) (habitat's SoftSPL); reward = -0.01 + (d_prev - d_now) +
2.5 * success; max_episode_steps 0: no limit. tests/pointnav_reference.py is the torch reference.
"""
from __future__ import annotations

import math

import torch
import warp as wp

from ..step import kernels as sk
from ..nav.kernels import Nav, geodesic
from ..episodes.files import point_goal_supply
from ..noise.actuation import ActuationModel
from ..step.kernels import act, begin_from_ring, keep_going, ring_entry, soft_success, spl_ratio, write_outcome
from .goal_encoders import PointGoalEncoder
from .options import forward_reach, options_class
from .spec import TaskSpec
from ..step.schema import CORE, STAGE, Field, Observation, Schema, warp_struct

NAME = "pointnav"
STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT = 0, 1, 2, 3
ACTION_NAMES = ("STOP", "MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT")


TaskOptions = options_class(NAME, __name__, doc="habitat-lab's PointNav defaults (pointnav.yaml / DD-PPO): "
                                                 "every task's options (tasks/options.py) as they are; sliding "
                                                 "on; gps_compass: the pointgoal from the current pose each step "
                                                 "(False: from the episode's start, fixed, as the challenge's "
                                                 "POINTGOAL_SENSOR).",
                            fields=(("sliding", bool), ("gps_compass", bool)), sliding=True, gps_compass=True)
DEFAULTS = TaskOptions()

# the observation beside the sensors' frames, declared once (its output field, space and value)
POINTGOAL = Observation("pointgoal", (2,), "float32", (0.0, -math.pi), (float(3.4028234663852886e38), math.pi))
OBSERVATIONS = (POINTGOAL,)
FIELDS = (Field("goal", "vec3", owner=NAME), POINTGOAL.field(NAME),
          Field("soft_spl", "float32", "out", owner=NAME, doc="the running episode's soft SPL"),
          Field("ep_soft_spl", "float32", "out", owner=NAME, doc="a finished episode's soft SPL (0 elsewhere)"))
SCHEMA = Schema(CORE).extend(FIELDS)
sk.set_module_options(__name__)
State = warp_struct(wp, "State", SCHEMA.of("state"), __name__, "Per-env state [N] and the ring [RING_SIZE, N].")
Out = warp_struct(wp, "Out", SCHEMA.of("out"), __name__, "Per-env outputs of the latest step [N].")


@wp.struct
class Params:
    """The task's constants (TaskOptions) and the scratch row length of the try_step window."""
    forward_step: float
    turn: float                 # radians
    success_distance: float
    max_steps: int
    slack: float
    success_reward: float
    win: int
    sliding: int
    gps: int                    # 1: pointgoal from the current pose; 0: from the episode start
    actuation: ActuationModel   # habitat-sim's actuation noise (set by the fused step; on 0: none)


def params(options: TaskOptions, win: int, **_sizes) -> Params:
    """The kernels' ``Params`` for ``options`` and a scratch row of ``win`` cells."""
    s = Params()
    s.forward_step, s.turn = float(options.forward_step), math.radians(options.turn_degrees)
    s.success_distance, s.max_steps = float(options.success_distance), int(options.max_episode_steps)
    s.slack, s.success_reward = float(options.slack_reward), float(options.success_reward)
    s.win = int(win)
    s.sliding, s.gps = int(bool(options.sliding)), int(bool(options.gps_compass))
    return s


max_move = forward_reach   # TaskSpec.max_move: MOVE_FORWARD is its only move


def info(v) -> dict:
    """The task's info entries of a group that hold at a reset too (``v``: its output views): the
    running episode's distance and soft SPL."""
    return {"distance_to_goal": v.distance_to_goal, "soft_spl": v.soft_spl}


# output fields that say how the step ended (info entries; zeros at a reset)
OUTCOME = ("success", "spl")


def episode_info(v) -> dict:
    """The finished episodes' statistics (0 where not done), habitat-lab's metric names."""
    return {"return": v.ep_return, "length": v.ep_length, "success": v.success, "spl": v.spl,
            "soft_spl": v.ep_soft_spl, "distance_to_goal": v.ep_dist, "start_distance": v.ep_d0,
            "path_length": v.ep_path}


@wp.func
def observe(st: State, out: Out, e: int, goal: bool):
    """Pointgoal (habitat's polar pointgoal_with_gps_compass; written when ``goal``), rotation,
    position, distance."""
    p = st.pos[e]
    y = st.yaw[e]
    if goal:
        d = st.goal[e] - p
        c = wp.cos(y)
        s = wp.sin(y)
        xa = c * d[0] - s * d[2]
        za = s * d[0] + c * d[2]
        fwd = -za
        right = xa
        out.pointgoal[e, 0] = wp.sqrt(fwd * fwd + right * right)
        out.pointgoal[e, 1] = -wp.atan2(right, fwd)
    hy = wp.float32(0.5) * y
    out.rotation[e, 0] = wp.float32(0.0)
    out.rotation[e, 1] = wp.sin(hy)
    out.rotation[e, 2] = wp.float32(0.0)
    out.rotation[e, 3] = wp.cos(hy)
    out.position[e] = p
    out.distance_to_goal[e] = st.d_prev[e]
    out.scene_index[e] = wp.int64(st.scene_index[e])
    out.epno[e] = st.head[e] - 1


@wp.func
def begin_episode(nav: Nav, st: State, e: int, depth: int):
    """Start the env's next episode from its ring (the host filled it ahead of time)."""
    k = begin_from_ring(nav, st, e, depth)
    st.goal[e] = st.r_goal[k, e]


@wp.kernel
def begin_kernel(nav: Nav, params: Params, st: State, out: Out, env0: int, depth: int):
    """Every env of the range starts the episode at its ring's head (reset)."""
    e = env0 + wp.tid()
    begin_episode(nav, st, e, depth)
    out.soft_spl[e] = wp.float32(0.0)
    observe(st, out, e, True)


@wp.kernel
def step_kernel(nav: Nav, params: Params, st: State, out: Out, actions: wp.array(dtype=wp.int64),
                scratch: wp.array2d(dtype=wp.int32), env0: int, act0: int, depth: int):
    """One env per thread: envs env0.., actions act0.. of the group's action buffer."""
    t = wp.tid()
    e = env0 + act0 + t
    a = int(actions[act0 + t])
    scene_i = int(st.scene_index[e])
    p, newp, newy = act(nav, st, scratch, e, a, params.win, wp.float32(params.forward_step), wp.float32(params.turn),
                        params.sliding != 0, params.actuation)
    d_now = geodesic(nav, scene_i, int(st.row[e]), newp)
    stop = a == 0
    succ = stop and d_now < wp.float32(params.success_distance)
    sf = wp.float32(0.0)
    if succ:
        sf = wp.float32(1.0)
    reward = (wp.float32(params.slack) + (st.d_prev[e] - d_now)) + wp.float32(params.success_reward) * sf
    path = st.path_len[e] + wp.length(newp - p)
    steps = st.steps[e] + 1
    trunc = (not stop) and params.max_steps > 0 and steps >= params.max_steps   # 0: no limit
    done = stop or trunc
    d0 = st.d0[e]
    ratio = spl_ratio(d0, path)
    ret = st.total[e] + reward
    write_outcome(out, e, done, trunc, succ, reward, sf * ratio, ret, steps, d_now, d0, path)
    soft = soft_success(d0, d_now) * ratio
    out.soft_spl[e] = soft
    out.ep_soft_spl[e] = wp.where(done, soft, wp.float32(0.0))
    if done:
        begin_episode(nav, st, e, depth)
    else:
        keep_going(st, e, newp, newy, d_now, path, steps, ret)
    observe(st, out, e, params.gps != 0 or done)


@wp.kernel
def apply_refills(st: State, stage_i: wp.array2d(dtype=wp.int32), stage_f: wp.array2d(dtype=wp.float32),
                  count: wp.array(dtype=wp.int32)):
    """Row t < count of the staging table -> that env's ring entry (``ring_entry``)."""
    t = wp.tid()
    if t < count[0]:
        ring_entry(st, stage_i, stage_f, t)


SPEC = TaskSpec(
    name=NAME, options=TaskOptions, actions=ACTION_NAMES, schema=SCHEMA, State=State, Out=Out, params=params,
    max_move=max_move, apply_refills=apply_refills, begin_kernel=begin_kernel, step_kernel=step_kernel,
    staging=STAGE, observations=OBSERVATIONS, info=info, episode_info=episode_info, outcome=OUTCOME,
    supply=point_goal_supply, goal_input=lambda obs: obs["pointgoal"],
    goal_input_spec=lambda resolution: ((2,), torch.float32), goal_encoder=PointGoalEncoder)
