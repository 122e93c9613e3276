"""Counter-based random streams for the noise kernels: every draw is a pure function of (env
key, env counter, domain, index), so a seeded run repeats bit for bit on any device and in any
launch split, and no state is carried between steps.

``env_keys(seed, n)`` (host, once per run): one 32-bit key per env from (seed, env) through
splitmix64, so two envs of one run, or one env of two seeds, start from unrelated keys.
``stream(key, counter, domain, index)`` (Warp): the generator state for draw ``index`` of one
env's step ``counter`` in ``domain`` (DEPTH, RGB, ACTUATION), then advanced by ``wp.randn`` /
``wp.randf``; the three inputs are mixed with a 32-bit finaliser before ``wp.rand_init``.
"""
from __future__ import annotations

import numpy as np
import warp as wp

DEPTH, RGB, ACTUATION = 1, 2, 3   # domains: a depth draw and an RGB draw never share a state

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
        return x ^ (x >> np.uint64(31))


def env_keys(seed: int, num_envs: int) -> np.ndarray:
    """int32 [num_envs]: env e's noise key under run seed ``seed``."""
    s = _splitmix64(np.array([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    with np.errstate(over="ignore"):
        h = _splitmix64(s ^ np.arange(num_envs, dtype=np.uint64))
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
