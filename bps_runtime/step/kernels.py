"""What every task's step kernels share (``bps_runtime.tasks``): angle, SPL and soft SPL helpers,
``forward`` (MOVE_FORWARD through the navigation's ``move``), ``act`` (an action's pose, with
habitat-sim's actuation noise when it is on: ``bps_runtime.noise.actuation``); generic functions (any task's
``State`` / ``Out``: the fields every navigation task declares) for the ring entry of a queued
episode, an episode's start, the outcome outputs and the kept state of a step; ``CpuLaunches`` (a launch over
``n`` envs as ``threads`` contiguous ranges side by side: bit for bit the one-launch result; 1 +
threads launches a step on the CPU). The navigation functions themselves: ``bps_runtime.nav.kernels``.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import warp as wp

from ..nav.kernels import PARALLEL_CPU_LAUNCHES, Nav, geodesic, move, set_module_options
from .schema import STAGE
from ..noise.actuation import ActuationModel, displaced, noisy_motion
from ..warp_init import init_warp  # noqa: F401 - the one Warp initialisation, used through this module

set_module_options(__name__)


# ---------------------------------------------------------------------------------- task helpers
@wp.func
def wrap_angle(a: wp.float32) -> wp.float32:
    """Angles into (-pi, pi] (float32)."""
    two_pi = wp.float32(2.0 * math.pi)
    return a - two_pi * wp.ceil((a - wp.float32(math.pi)) / two_pi)


@wp.func
def move_to(nav: Nav, win: int, scratch: wp.array2d(dtype=wp.int32), e: int, scene_i: int, p: wp.vec3,
            target: wp.vec3, sliding: bool) -> wp.vec3:
    """Where a move from ``p`` towards ``target`` ends (the navigation's ``move``, float64 inside)."""
    ps = wp.vec3d(wp.float64(p[0]), wp.float64(p[1]), wp.float64(p[2]))
    pe = wp.vec3d(wp.float64(target[0]), wp.float64(target[1]), wp.float64(target[2]))
    r = move(nav, win, scratch, e, scene_i, ps, pe, sliding)
    return wp.vec3(wp.float32(r[0]), wp.float32(r[1]), wp.float32(r[2]))


@wp.func
def forward(nav: Nav, win: int, scratch: wp.array2d(dtype=wp.int32), e: int, scene_i: int, p: wp.vec3,
            y: wp.float32, step: wp.float32, sliding: bool) -> wp.vec3:
    """Where MOVE_FORWARD (``step`` m along -Z turned by yaw ``y``) from ``p`` ends (``move``)."""
    target = p + wp.vec3(step * -wp.sin(y), wp.float32(0.0), step * -wp.cos(y))
    return move_to(nav, win, scratch, e, scene_i, p, target, sliding)


@wp.func
def act(nav: Nav, st: Any, scratch: wp.array2d(dtype=wp.int32), e: int, a: int, win: int, step: wp.float32,
        turn: wp.float32, sliding: bool, noise: ActuationModel):
    """Env e's pose after action ``a`` (MOVE_FORWARD 1: ``forward``; TURN_LEFT 2 / TURN_RIGHT 3:
    yaw +- ``turn``): (position before, position after, yaw after). With actuation noise
    (``noise.on``) the move and the turn are habitat-sim's PyRobot noisy ones (``noisy_motion``:
    a turn translates a little too), the move still through ``move`` (sliding or not); without,
    the exact motion as always. Counts the env's steps (``noise_t``: the noise streams' counter)."""
    p = st.pos[e]
    y = st.yaw[e]
    c = st.noise_t[e]
    st.noise_t[e] = c + 1
    newp = p
    if noise.on == 0:
        if a == 1:
            newp = forward(nav, win, scratch, e, int(st.scene_index[e]), p, y, step, sliding)
        return p, newp, wrap_angle(y + turn * turn_sign(a, 2, 3))
    m = noisy_motion(noise, st.noise_key[e], c, a, step, turn)
    if a >= 1 and a <= 3:
        newp = move_to(nav, win, scratch, e, int(st.scene_index[e]), p, displaced(p, y, m), sliding)
    return p, newp, wrap_angle(y + m[2])


@wp.func
def turn_sign(a: int, left: int, right: int) -> wp.float32:
    """+1 for action ``left``, -1 for ``right``, else 0."""
    d = wp.float32(0.0)
    if a == left:
        d = wp.float32(1.0)
    if a == right:
        d = wp.float32(-1.0)
    return d


@wp.func
def spl_ratio(d0: wp.float32, path: wp.float32) -> wp.float32:
    """d0 / max(d0, path) (1 when both are 0): SPL's and soft SPL's factor."""
    denom = wp.max(d0, path)
    ratio = wp.float32(1.0)
    if denom > wp.float32(0.0):
        ratio = d0 / wp.max(denom, wp.float32(1.0e-12))
    return ratio


@wp.func
def soft_success(d0: wp.float32, d_now: wp.float32) -> wp.float32:
    """Soft SPL's soft success max(0, 1 - d_now / d0) (habitat-lab's SoftSPL; at d0 = 0, where
    habitat divides by zero: 1 at d_now = 0, else 0). Soft SPL = this * ``spl_ratio``."""
    soft = wp.float32(0.0)
    if d0 > wp.float32(0.0):
        soft = wp.max(wp.float32(0.0), wp.float32(1.0) - d_now / d0)
    elif d_now <= wp.float32(0.0):
        soft = wp.float32(1.0)
    return soft


# ---------------------------------------------------------------------------------- episodes
# the positions of the columns every task stages first (``schema.STAGE``, by name)
_ENV, _RING = wp.constant(STAGE.col("env")), wp.constant(STAGE.col("ring"))
_SCENE, _ROW = wp.constant(STAGE.col("scene_index")), wp.constant(STAGE.col("row"))
_START, _YAW, _GOAL = wp.constant(STAGE.col("start")), wp.constant(STAGE.col("yaw")), wp.constant(STAGE.col("goal"))


@wp.func
def ring_entry(st: Any, stage_i: wp.array2d(dtype=wp.int32), stage_f: wp.array2d(dtype=wp.float32), t: int):
    """Staging row t -> its env's ring entry: the columns of ``schema.STAGE`` (scene index, field
    row, start, yaw, goal) into their ring fields; returns (env, ring index)."""
    e = int(stage_i[t, _ENV])
    k = int(stage_i[t, _RING])
    st.r_scene_index[k, e] = stage_i[t, _SCENE]
    st.r_row[k, e] = stage_i[t, _ROW]
    st.r_pos[k, e] = wp.vec3(stage_f[t, _START], stage_f[t, _START + 1], stage_f[t, _START + 2])
    st.r_yaw[k, e] = stage_f[t, _YAW]
    st.r_goal[k, e] = wp.vec3(stage_f[t, _GOAL], stage_f[t, _GOAL + 1], stage_f[t, _GOAL + 2])
    return e, k


@wp.func
def begin_from_ring(nav: Nav, st: Any, e: int, depth: int) -> int:
    """Env e starts the episode at its ring's head (scene, pose, field row, start distance,
    zeroed counters); returns the ring index, for the task's own fields."""
    h = st.head[e]
    k = int(h) % depth
    scene_i = st.r_scene_index[k, e]
    st.scene_index[e] = scene_i
    st.pos[e] = st.r_pos[k, e]
    st.yaw[e] = st.r_yaw[k, e]
    st.row[e] = st.r_row[k, e]
    d0 = geodesic(nav, int(scene_i), int(st.r_row[k, e]), st.r_pos[k, e])
    st.d0[e] = d0
    st.d_prev[e] = d0
    st.path_len[e] = wp.float32(0.0)
    st.total[e] = wp.float32(0.0)
    st.steps[e] = 0
    st.head[e] = h + 1
    return k


@wp.func
def write_outcome(out: Any, e: int, done: bool, trunc: bool, succ: bool, reward: wp.float32, spl: wp.float32,
                  ret: wp.float32, steps: int, d_now: wp.float32, d0: wp.float32, path: wp.float32):
    """A step's reward and end flags, and the finished episode's statistics (zeros unless done)."""
    zero = wp.float32(0.0)
    out.reward[e] = reward
    out.done[e] = wp.where(done, wp.uint8(1), wp.uint8(0))
    out.success[e] = wp.where(done and succ, wp.uint8(1), wp.uint8(0))
    out.truncated[e] = wp.where(trunc, wp.uint8(1), wp.uint8(0))
    out.spl[e] = wp.where(done, spl, zero)
    out.ep_return[e] = wp.where(done, ret, zero)
    out.ep_length[e] = wp.where(done, steps, 0)
    out.ep_dist[e] = wp.where(done, d_now, zero)
    out.ep_d0[e] = wp.where(done, d0, zero)
    out.ep_path[e] = wp.where(done, path, zero)


@wp.func
def keep_going(st: Any, e: int, p: wp.vec3, yaw: wp.float32, d_now: wp.float32, path: wp.float32, steps: int,
               ret: wp.float32):
    """The episode goes on: the step's pose, distance, path length, step count and return."""
    st.pos[e] = p
    st.yaw[e] = yaw
    st.d_prev[e] = d_now
    st.path_len[e] = path
    st.steps[e] = steps
    st.total[e] = ret


# ---------------------------------------------------------------------------------- CPU threads
class CpuLaunches:
    """A launch over ``n`` envs cut into ``threads`` disjoint contiguous env ranges, launched side
    by side on ``threads`` CPU threads (the calling thread runs the first range). Warp's CPU
    launch calls the kernel through ctypes, which releases the GIL, so the ranges run in
    parallel; each env's work touches only that env's state, outputs and scratch row, so the
    result is bit for bit the one-launch result. One range (one thread) is one plain launch.

    Kept safe: the first launch of each kernel runs its ranges one after another on the calling
    thread (Warp loads the module and looks up the kernel's entry point on first use, and neither
    is locked), and later launches are side by side (pool threads are named ``bps-step``): a step
    is 1 + ``threads`` launches on the CPU.
    """

    def __init__(self, threads: int):
        self.threads = max(1, int(threads)) if PARALLEL_CPU_LAUNCHES else 1
        self._pool = (ThreadPoolExecutor(self.threads - 1, thread_name_prefix="bps-step")
                      if self.threads > 1 else None)
        self._seen: set = set()

    def ranges(self, n: int) -> list[tuple[int, int]]:
        """``min(threads, n)`` contiguous (start, stop) ranges covering 0..n, sizes within one."""
        k = max(1, min(self.threads, n))
        cuts = [n * i // k for i in range(k + 1)]
        return [(cuts[i], cuts[i + 1]) for i in range(k)]

    def run(self, key, launch, n: int):
        """``launch(start, stop)`` for every range of ``n`` envs; returns when all have finished
        (the first error is raised after every range has stopped writing)."""
        parts = self.ranges(n)
        if self._pool is None or len(parts) == 1 or key not in self._seen:
            for lo, hi in parts:
                launch(lo, hi)
            self._seen.add(key)
            return
        futs = [self._pool.submit(launch, lo, hi) for lo, hi in parts[1:]]
        err = None
        try:
            launch(*parts[0])
        except BaseException as e:  # noqa: BLE001 - re-raised once the other ranges have stopped
            err = e
        for f in futs:
            try:
                f.result()
            except BaseException as e:  # noqa: BLE001
                err = err or e
        if err is not None:
            raise err

    def close(self):
        """Stop the pool threads (idempotent)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

