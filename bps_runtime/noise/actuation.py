"""habitat-sim's PyRobot noisy controls as Warp functions a step kernel calls before its
sliding / collision move: ``noisy_motion(model, key, counter, action, step, turn)`` ->
vec3(along, across, yaw change) of one MOVE_FORWARD (action 1), TURN_LEFT (2) or
TURN_RIGHT (3); any other action: zeros.

Semantics (habitat-sim ``_noisy_action_impl``): a forward move of ``step`` m goes
``step + n0`` along the heading and ``n1`` to the right, then turns by ``r`` (positive: left);
a turn by +-``turn`` rad also translates by (n0, n1) and turns by +-(``turn`` + r). Each n is
``multiplier`` times a draw of a Gaussian (the model's mean and variance for that motion)
truncated at +-3 standard deviations, and the along-motion draw of a move, the rotation draw
of a turn, further to >= -0.95 x the commanded amount (before the multiplier, as habitat).
``actuation_model(options)`` builds the ``ActuationModel`` struct (``on`` 0: no noise).
Draws come from ``rng.stream(key, counter, ACTUATION, k)``: repeatable, one stream per env step.
"""
from __future__ import annotations

import math

import warp as wp

from . import rng
from .options import NoiseOptions, actuation_params

wp.set_module_options({"enable_backward": False}, module=__name__)

MAX_TRIES = 64   # rejection sampling of a +-3 sigma truncation accepts 99.7 % per try


@wp.struct
class ActuationModel:
    """One PyRobot model as the step kernels see it: means and standard deviations (along,
    across, rotation) of a forward move and of a turn, the multiplier; ``on`` 0: no noise."""
    on: int
    mult: float
    move_mean: wp.vec3      # forward move: along, across, rotation
    move_std: wp.vec3
    turn_mean: wp.vec3      # turn: along, across, rotation
    turn_std: wp.vec3


def actuation_model(options: NoiseOptions) -> ActuationModel:
    """The struct of ``options.actuation`` (``on`` 0 for "none")."""
    m = ActuationModel()
    m.on = int(options.actuation != "none")
    m.mult = float(options.actuation_mult)
    z = wp.vec3(0.0, 0.0, 0.0)
    m.move_mean = m.move_std = m.turn_mean = m.turn_std = z
    if m.on:
        move, turn = actuation_params(options.actuation)
        for (tm, tv, rm, rv), mean_name, std_name in ((move, "move_mean", "move_std"), (turn, "turn_mean", "turn_std")):
            setattr(m, mean_name, wp.vec3(tm[0], tm[1], rm))
            setattr(m, std_name, wp.vec3(math.sqrt(tv[0]), math.sqrt(tv[1]), math.sqrt(rv)))
    return m


@wp.func
def truncated_normal(seed: int, k: int, mean: float, std: float, lower: float, has_lower: int) -> float:
    """A draw of N(mean, std^2) truncated to +-3 std (and to >= ``lower`` when ``has_lower``)."""
    out = mean
    if std > 0.0:
        a = float(-3.0)
        b = float(3.0)
        if has_lower != 0:
            a = wp.max(a, (lower - mean) / std)
        s = wp.rand_init(seed, k)
        z = wp.randn(s)
        tries = int(1)
        while (z < a or z > b) and tries < MAX_TRIES:
            z = wp.randn(s)
            tries += 1
        out = mean + std * wp.clamp(z, a, b)
    return out


@wp.func
def noisy_motion(m: ActuationModel, key: int, counter: int, action: int, step: float,
                 turn: float) -> wp.vec3:
    """(along, across, yaw change) of ``action`` (1 forward ``step`` m, 2 / 3 turn by
    +-``turn`` rad) with the model's noise; without noise (``m.on`` 0) the exact motion."""
    along = float(0.0)
    across = float(0.0)
    dyaw = float(0.0)
    if action == 1:
        along = step
    if action == 2:
        dyaw = turn
    if action == 3:
        dyaw = -turn
    if m.on != 0 and action >= 1 and action <= 3:
        seed = wp.int32(rng.mix32(rng.mix32(wp.uint32(key), wp.uint32(counter)), wp.uint32(rng.ACTUATION)))
        if action == 1:
            n0 = truncated_normal(seed, 0, m.move_mean[0], m.move_std[0], -0.95 * wp.abs(step), 1)
            n1 = truncated_normal(seed, 1, m.move_mean[1], m.move_std[1], 0.0, 0)
            r = truncated_normal(seed, 2, m.move_mean[2], m.move_std[2], 0.0, 0)
            along = step + m.mult * n0
            across = m.mult * n1
            dyaw = m.mult * r
        else:
            n0 = truncated_normal(seed, 0, m.turn_mean[0], m.turn_std[0], 0.0, 0)
            n1 = truncated_normal(seed, 1, m.turn_mean[1], m.turn_std[1], 0.0, 0)
            r = truncated_normal(seed, 2, m.turn_mean[2], m.turn_std[2], -0.95 * wp.abs(turn), 1)
            along = m.mult * n0
            across = m.mult * n1
            sign = float(1.0)
            if action == 3:
                sign = -1.0
            dyaw = sign * (turn + m.mult * r)
    return wp.vec3(along, across, dyaw)


@wp.func
def displaced(p: wp.vec3, yaw: float, motion: wp.vec3) -> wp.vec3:
    """Where ``motion``'s (along, across) takes a body at ``p`` facing yaw (habitat frame:
    forward -Z turned by yaw, right +X turned by yaw)."""
    fwd = wp.vec3(-wp.sin(yaw), 0.0, -wp.cos(yaw))
    right = wp.vec3(wp.cos(yaw), 0.0, -wp.sin(yaw))
    return p + fwd * motion[0] + right * motion[1]


@wp.kernel
def motion_query(m: ActuationModel, keys: wp.array(dtype=wp.int32), counters: wp.array(dtype=wp.int32),
                 actions: wp.array(dtype=wp.int32), step: float, turn: float, out: wp.array(dtype=wp.vec3)):
    """``noisy_motion`` for a batch (tests and tools; the step calls the function inline)."""
    e = wp.tid()
    out[e] = noisy_motion(m, keys[e], counters[e], actions[e], step, turn)
