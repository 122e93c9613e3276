"""The step of habitat-lab's goal-navigation tasks, ObjectNav and ImageNav, declared once: their
step-state fields and Warp kernels (episode start, step: action -> move / turn / look -> distance
to goal, re-measured only when the agent moved -> reward, success, SPL, soft SPL, truncation (0
steps: none) -> next episode from the ring -> observations), under tasks/objectnav.py, imagenav.py.

Rules (habitat-lab's nav.py / object_nav_task.py; tests/nav_task_reference.py is the numpy
reference the kernels equal within 1e-5): actions STOP 0, MOVE_FORWARD 1, TURN_LEFT 2,
TURN_RIGHT 3, LOOK_UP 4, LOOK_DOWN 5 (pitch, clamped at +-max_pitch when >= 0); distance =
the episode's field row (ObjectNav: multi-source over the category's view points; ImageNav: the
goal point), kept when np.allclose(measured_at, pos, atol=1e-4); success = STOP and d <
success_distance; spl = S d0 / max(d0, path); soft_spl = max(0, 1 - d / d0) d0 / max(d0, path);
reward = -(d - d_prev) + slack + success_reward S. Observations: objectgoal, compass and gps
(habitat's episodic sensors: relative to the start pose), the goal image and its camera's HFOV
(host-written when it queued the episode, copied from the ring at the start; ImageNav's with
the RGB sensor's noise), yaw x pitch.
"""
from __future__ import annotations

import math

import warp as wp


from ..step import kernels as sk
from ..nav.kernels import Nav, geodesic
from ..noise import rng
from ..noise.actuation import ActuationModel
from ..noise.sensors import SensorParams, rgb_value
from ..step.kernels import (act, begin_from_ring, keep_going, ring_entry, soft_success, spl_ratio, turn_sign,
                            wrap_angle, write_outcome)
from ..step.schema import CORE, STAGE, Column, Field, Observation, Schema, warp_struct
from .options import forward_reach

STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT, LOOK_UP, LOOK_DOWN = range(6)
ALL_ACTIONS = ("STOP", "MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT", "LOOK_UP", "LOOK_DOWN")
OWNER = "goalnav"
GOAL_PIXELS = "goal_pixels"   # the named size of the goal image (H * W * 3; 1 without one)

# the observations the step writes (each task module returns some of them), declared once
_BIG = float(3.4028234663852886e38)
# objectgoal's high is the dataset's largest task category id (habitat's ObjectGoalSensor space:
# max(category_to_task_category_id.values()), so habitat-baselines' nn.Embedding(high + 1, 32)
# fits); without a dataset: that of habitat's objectnav_hm3d map (6 categories, ids 0-5)
DEFAULT_MAX_CATEGORY_ID = 5
OBSERVATIONS = {o.name: o for o in (
    Observation("objectgoal", (1,), "int64", (0,), (DEFAULT_MAX_CATEGORY_ID,), goal_id_bound=True),
    Observation("compass", (1,), "float32", (-math.pi,), (math.pi,)),
    Observation("gps", (2,), "float32", (-_BIG, -_BIG), (_BIG, _BIG)),
    Observation("imagegoal", ("H", "W", 3), "uint8", (0,), (255,), flat=GOAL_PIXELS),
    # habitat's InstanceImageGoalHFOVSensor: the goal camera's HFOV in degrees (its space: 0-360)
    Observation("instance_imagegoal_hfov", (1,), "float32", (0.0,), (360.0,)),
)}
FIELDS = (
    Field("goal_id", "int32", owner=OWNER), Field("start_pos", "vec3", owner=OWNER),
    Field("start_yaw", "float32", owner=OWNER), Field("pitch", "float32", owner=OWNER),
    Field("measured_at", "vec3", owner=OWNER, doc="where the distance was last measured"),
    Field("r_goal_id", "int32", per="ring", owner=OWNER),
    Field("r_goal_image", "uint8", per="ring", shape=(GOAL_PIXELS,), owner=OWNER),
    Field("r_goal_hfov", "float32", per="ring", owner=OWNER, doc="the goal camera's HFOV (degrees; host-written)"),
    Field("soft_spl", "float32", "out", owner=OWNER),
    *(o.field(OWNER) for o in OBSERVATIONS.values()),
    Field("ep_soft_spl", "float32", "out", owner=OWNER),
)
SCHEMA = Schema(CORE).extend(FIELDS)
sk.set_module_options(__name__)
State = warp_struct(wp, "State", SCHEMA.of("state"), __name__, "Per-env state [N] and the ring [RING_SIZE, N].")
Out = warp_struct(wp, "Out", SCHEMA.of("out"), __name__, "Per-env outputs of the latest step [N].")


# the options a goal-navigation task adds to every task's (tasks/options.py): LOOK (tilt per
# action; max pitch, None: no limit) and sliding; each task module gives its own defaults
OPTION_FIELDS = (("tilt_degrees", float), ("max_pitch_degrees", float | None), ("sliding", bool))


@wp.struct
class Params:
    """The task's constants and the scratch row length of the try_step window."""
    forward_step: float
    turn: float                 # radians
    tilt: float                 # radians per LOOK_UP / LOOK_DOWN
    max_pitch: float            # radians; < 0: no limit
    sliding: int
    success_distance: float
    max_steps: int
    slack: float
    success_reward: float
    win: int
    actuation: ActuationModel   # habitat-sim's actuation noise (set by the fused step; on 0: none)
    pixels: int                 # goal image bytes copied at an episode start (0: none)
    noisy_goal: int             # 1: the goal image gets the RGB sensor's noise (ImageNav)
    goal_noise: SensorParams    # that noise (set by the fused step; rgb_kind 0: none)


def make_params(o, win: int, look: bool, image: bool, goal_pixels: int = 1, noisy_goal: bool = False,
                **_sizes) -> Params:
    """``Params`` of task options ``o`` (forward_step, turn_degrees, tilt_degrees, max_pitch_degrees,
    sliding, success_distance, max_episode_steps, slack_reward, success_reward); ``noisy_goal``:
    the goal image is seen through the RGB sensor, its noise too (ImageNav, not InstanceImageNav)."""
    s = Params()
    s.forward_step, s.turn = float(o.forward_step), math.radians(o.turn_degrees)
    s.tilt = math.radians(o.tilt_degrees) if look else 0.0
    s.max_pitch = -1.0 if (not look or o.max_pitch_degrees is None) else math.radians(o.max_pitch_degrees)
    s.sliding = int(bool(o.sliding))
    s.success_distance, s.max_steps = float(o.success_distance), int(o.max_episode_steps)
    s.slack, s.success_reward = float(o.slack_reward), float(o.success_reward)
    s.win = int(win)
    s.pixels = int(goal_pixels) if image else 0
    s.noisy_goal = int(bool(noisy_goal and image))
    s.goal_noise = SensorParams()
    s.goal_noise.rgb_kind = 0
    return s


# the staging columns of a queued episode: the generic ones (``STAGE``), then the goal id
# (ObjectNav's task category id, 0 where the supply gives none), which ``apply_refills`` writes
STAGING = STAGE.extend((Column("goal_id", ring="r_goal_id"),))
_GOAL_ID = wp.constant(STAGING.col("goal_id"))


def sizes(image: bool):
    """The named sizes of the fields for a task with (``image``) or without a goal image:
    resolution (h, w) -> {GOAL_PIXELS: h * w * 3, or 1}."""
    def of(resolution) -> dict:
        h, w = resolution
        return {GOAL_PIXELS: h * w * 3 if image else 1}
    return of


max_move = forward_reach   # TaskSpec.max_move: MOVE_FORWARD is its only move (turns and looks stay)


def episode_info(v) -> dict:
    """The finished episodes' statistics (0 where not done), habitat-lab's metric names."""
    return {"return": v.ep_return, "length": v.ep_length, "success": v.success, "spl": v.spl,
            "soft_spl": v.ep_soft_spl, "distance_to_goal": v.ep_dist, "start_distance": v.ep_d0,
            "path_length": v.ep_path}


def info(v) -> dict:
    """Info entries that hold at a reset too: the running episode's distance and soft SPL."""
    return {"distance_to_goal": v.distance_to_goal, "soft_spl": v.soft_spl}


OUTCOME = ("success", "spl")


@wp.func
def observe(st: State, out: Out, e: int):
    """objectgoal, compass / gps (relative to the start pose), the camera quaternion (yaw then
    pitch about the camera's x), position, distance."""
    p = st.pos[e]
    y = st.yaw[e]
    sy0 = st.start_yaw[e]
    d = p - st.start_pos[e]
    c = wp.cos(sy0)
    s = wp.sin(sy0)
    xr = c * d[0] - s * d[2]
    zr = s * d[0] + c * d[2]
    out.gps[e, 0] = -zr
    out.gps[e, 1] = xr
    out.compass[e, 0] = wrap_angle(y - sy0)
    out.objectgoal[e, 0] = wp.int64(st.goal_id[e])
    hy = wp.float32(0.5) * y
    hp = wp.float32(0.5) * st.pitch[e]
    cy = wp.cos(hy)
    syh = wp.sin(hy)
    cp = wp.cos(hp)
    sp = wp.sin(hp)
    out.rotation[e, 0] = cy * sp
    out.rotation[e, 1] = syh * cp
    out.rotation[e, 2] = -syh * sp
    out.rotation[e, 3] = cy * cp
    out.position[e] = p
    out.distance_to_goal[e] = st.d_prev[e]
    out.scene_index[e] = wp.int64(st.scene_index[e])
    out.epno[e] = st.head[e] - 1


@wp.func
def begin_episode(nav: Nav, params: Params, st: State, out: Out, e: int, depth: int):
    """Start the env's next episode from its ring (the host filled it ahead of time): the start
    pose is the episode's reference for compass / gps, the camera level, the goal image (with
    the RGB sensor's noise when ``noisy_goal``; its camera's HFOV) copied."""
    k = begin_from_ring(nav, st, e, depth)
    st.start_pos[e] = st.pos[e]
    st.start_yaw[e] = st.yaw[e]
    st.pitch[e] = wp.float32(0.0)
    st.measured_at[e] = st.pos[e]
    st.goal_id[e] = st.r_goal_id[k, e]
    if params.noisy_goal != 0 and params.goal_noise.rgb_kind != 0:
        # the RGB sensor's noise, drawn as the episode starts (habitat renders the goal through
        # the sensor); its own stream: (env key, step counter, GOAL_IMAGE), one per episode
        s = rng.stream(int(st.noise_key[e]), int(st.noise_t[e]), rng.GOAL_IMAGE, 0)
        for i in range(params.pixels):
            v, s = rgb_value(params.goal_noise, st.r_goal_image[k, e, i], s)
            out.imagegoal[e, i] = v
    else:
        for i in range(params.pixels):
            out.imagegoal[e, i] = st.r_goal_image[k, e, i]
    out.instance_imagegoal_hfov[e, 0] = st.r_goal_hfov[k, e]


@wp.kernel
def begin_kernel(nav: Nav, params: Params, st: State, out: Out, env0: int, depth: int):
    """Every env of the range starts the episode at its ring's head (reset)."""
    e = env0 + wp.tid()
    begin_episode(nav, params, st, out, e, depth)
    out.soft_spl[e] = wp.float32(0.0)
    observe(st, out, e)


@wp.func
def close_to(a: wp.vec3, b: wp.vec3) -> bool:
    """numpy's allclose(a, b, rtol=1e-5, atol=1e-4)."""
    ok = True
    for i in range(3):
        if wp.abs(a[i] - b[i]) > wp.float32(1.0e-4) + wp.float32(1.0e-5) * wp.abs(b[i]):
            ok = False
    return ok


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
    pitch = st.pitch[e] + wp.float32(params.tilt) * turn_sign(a, 4, 5)
    if params.max_pitch >= 0.0:
        lim = wp.float32(params.max_pitch)
        pitch = wp.min(wp.max(pitch, -lim), lim)
    d_prev = st.d_prev[e]
    d_now = d_prev
    measured = st.measured_at[e]
    if not close_to(measured, newp):
        d_now = geodesic(nav, scene_i, int(st.row[e]), newp)
        measured = newp
    stop = a == 0
    succ = stop and d_now < wp.float32(params.success_distance)
    sf = wp.float32(0.0)
    if succ:
        sf = wp.float32(1.0)
    reward = -(d_now - d_prev) + wp.float32(params.slack) + wp.float32(params.success_reward) * sf
    path = st.path_len[e] + wp.length(newp - p)
    steps = st.steps[e] + 1
    trunc = (not stop) and params.max_steps > 0 and steps >= params.max_steps   # 0: no limit
    done = stop or trunc
    d0 = st.d0[e]
    ratio = spl_ratio(d0, path)
    soft = soft_success(d0, d_now)
    ret = st.total[e] + reward
    write_outcome(out, e, done, trunc, succ, reward, sf * ratio, ret, steps, d_now, d0, path)
    out.soft_spl[e] = soft * ratio
    out.ep_soft_spl[e] = wp.float32(0.0)
    if done:
        out.ep_soft_spl[e] = soft * ratio
        begin_episode(nav, params, st, out, e, depth)
    else:
        keep_going(st, e, newp, newy, d_now, path, steps, ret)
        st.pitch[e] = pitch
        st.measured_at[e] = measured
    observe(st, out, e)


@wp.kernel
def apply_refills(st: State, stage_i: wp.array2d(dtype=wp.int32), stage_f: wp.array2d(dtype=wp.float32),
                  count: wp.array(dtype=wp.int32)):
    """Row t < count of the staging table -> that env's ring entry (``ring_entry``) + its goal id
    (its ``goal_id`` column; the goal image: written by the host)."""
    t = wp.tid()
    if t < count[0]:
        e, k = ring_entry(st, stage_i, stage_f, t)
        st.r_goal_id[k, e] = stage_i[t, _GOAL_ID]
