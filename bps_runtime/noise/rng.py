"""Counter-based random streams for the noise kernels: every draw is a pure function of (env
key, env counter, domain, index), so a seeded run repeats bit for bit on any device and in any
launch split, and no state is carried between steps.

``env_keys(seed, n)`` (host, once per run): one 32-bit key per env from (seed, env) through
splitmix64, so two envs of one run, or one env of two seeds, start from unrelated keys.
``stream(key, counter, domain, index)`` (Warp): the generator state for draw ``index`` of one
env's step ``counter`` in ``domain`` (DEPTH, RGB, ACTUATION, GOAL_IMAGE), then advanced by ``wp.randn`` /
``wp.randf``; the three inputs are mixed with a 32-bit finaliser before ``wp.rand_init``.
"""
from __future__ import annotations

import math

import numpy as np
import warp as wp

from bps_assets.hashing import splitmix64

DEPTH, RGB, ACTUATION = 1, 2, 3   # domains: a depth draw and an RGB draw never share a state
GOAL_IMAGE = 4                    # ImageNav's goal image (its RGB noise, once per episode)

def env_keys(seed: int, num_envs: int) -> np.ndarray:
    """int32 [num_envs]: env e's noise key under run seed ``seed``."""
    s = splitmix64(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    h = splitmix64(s ^ np.arange(num_envs, dtype=np.uint64))
    return (h & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)


_GOLDEN = wp.constant(wp.uint32(0x9E3779B9))
_M1 = wp.constant(wp.uint32(0x85EBCA6B))
_M2 = wp.constant(wp.uint32(0xC2B2AE35))
_S16 = wp.constant(wp.uint32(16))
_S13 = wp.constant(wp.uint32(13))


@wp.func
def mix32(a: wp.uint32, b: wp.uint32) -> wp.uint32:
    """A 32-bit avalanche of ``a`` combined with ``b`` (murmur3's finaliser)."""
    h = a ^ (b * _GOLDEN)
    h = h ^ (h >> _S16)
    h = h * _M1
    h = h ^ (h >> _S13)
    h = h * _M2
    return h ^ (h >> _S16)


@wp.func
def stream(key: int, counter: int, domain: int, index: int) -> wp.uint32:
    """The generator state of draw ``index`` of step ``counter`` of the env keyed ``key``."""
    h = mix32(mix32(wp.uint32(key), wp.uint32(counter)), wp.uint32(domain))
    return wp.rand_init(wp.int32(h), index)


@wp.func
def draw(rs: wp.uint32, n: int) -> wp.uint32:
    """Draw ``n`` of the stream whose state is ``rs``, independent of the draws before it (Warp's
    ``rand_init``: one hash of ``rs`` plus a hash of ``n``; the native Redwood pass hoists the latter)."""
    return wp.rand_init(wp.int32(rs), n)


ZIG_LAYERS = 128
ZIG_R = 3.442619855899            # start of the tail (ZIGNOR, 128 layers)
ZIG_V = 9.91256303526217e-3       # area of each layer


def zig_table() -> np.ndarray:
    """float32 [2 * 128 + 1]: the layers' right edges x[0..128] (x[1] = R, x[128] = 0), then the
    ratios x[i + 1] / x[i] below which a draw in layer i is accepted at once."""
    f = lambda x: math.exp(-0.5 * x * x)  # noqa: E731
    x = [0.0] * (ZIG_LAYERS + 1)
    x[0], x[1] = ZIG_V / f(ZIG_R), ZIG_R
    for i in range(2, ZIG_LAYERS):
        x[i] = math.sqrt(-2.0 * math.log(ZIG_V / x[i - 1] + f(x[i - 1])))
    ratios = [x[i + 1] / x[i] for i in range(ZIG_LAYERS)]
    return np.array(x + ratios, np.float32)


_LOW7 = wp.constant(wp.uint32(127))
_SHIFT8 = wp.constant(wp.uint32(8))
_TAIL = wp.constant(ZIG_R)


@wp.func
def normal_from(b: wp.uint32, s: wp.uint32, zig: wp.array(dtype=float)):
    """A standard normal, its first try from the 32-bit draw ``b``, any further draws (~1.5 % of
    normals) from state ``s`` -> (value, advanced state). Layer from the low 7 bits, the signed
    abscissa from the top 24 of a draw; the wedge and tail paths as ZIGNOR."""
    out = float(0.0)
    done = int(0)
    while done == 0:
        i = int(b & _LOW7)
        u = float(b >> _SHIFT8) * (1.0 / 8388608.0) - 1.0
        if wp.abs(u) < zig[ZIG_LAYERS + 1 + i]:
            out = u * zig[i]
            done = 1
        elif i == 0:
            x = float(0.0)
            y = float(0.0)
            xx = float(1.0)
            while -2.0 * y < xx:
                x = wp.log(wp.randf(s) + 5.96e-8) / _TAIL
                y = wp.log(wp.randf(s) + 5.96e-8)
                xx = x * x
            out = _TAIL - x
            if u < 0.0:
                out = x - _TAIL
            done = 1
        else:
            x = u * zig[i]
            f0 = wp.exp(-0.5 * (zig[i] * zig[i] - x * x))
            f1 = wp.exp(-0.5 * (zig[i + 1] * zig[i + 1] - x * x))
            if f1 + wp.randf(s) * (f0 - f1) < 1.0:
                out = x
                done = 1
        if done == 0:
            b = wp.randu(s)
    return out, s


@wp.func
def normal(s: wp.uint32, zig: wp.array(dtype=float)):
    """A standard normal from state ``s`` -> (value, advanced state): ``normal_from`` of the
    state's next draw."""
    b = wp.randu(s)
    return normal_from(b, s, zig)
