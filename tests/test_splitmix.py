"""One SplitMix64 mixer (bps_assets.hashing.splitmix64) for the synth vertex noise and the
runtime's noise keys: SplitMix64's published outputs, a pure-Python reference, and the values
both users gave before they shared it (pinned at 960c6ca), bit for bit."""
from __future__ import annotations

import hashlib

import numpy as np

from bps_assets.hashing import mix64, splitmix64
from bps_assets.synth.geometry import position_noise
from bps_runtime.episodes.supply import counter_uniforms
from bps_runtime.noise.rng import env_keys

GAMMA, M64 = 0x9E3779B97F4A7C15, (1 << 64) - 1


def _reference(x: int) -> int:
    z = (x + GAMMA) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def test_splitmix64_is_the_published_generator():
    # SplitMix64 seeded with 0: its first three outputs (state advanced by the gamma each time)
    states = np.array([0, GAMMA, (2 * GAMMA) & M64], np.uint64)
    assert splitmix64(states).tolist() == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    x = np.random.default_rng(0).integers(0, 2**64, 1000, dtype=np.uint64, endpoint=False)
    x[:3] = [0, M64, M64 - GAMMA + 1]   # the wrap-around edges
    got = splitmix64(x)
    assert got.dtype == np.uint64 and got.tolist() == [_reference(int(v)) for v in x]


def test_its_users_keep_their_values():
    """env_keys and the synth vertex noise give what they gave with their own copies."""
    assert env_keys(7, 5).tolist() == [2125188677, 1557333855, 1763878181, 446298517, -2033035742]
    assert env_keys(-3, 3).tolist() == [125414166, 643367148, 564331308]
    assert env_keys(2**64 + 5, 2).tolist() == [1898267189, 2107736794]
    p = np.random.default_rng(0).normal(size=(6, 3))
    digest = [hashlib.sha256(position_noise(p, s, 0.003).tobytes()).hexdigest() for s in (11, -11)]
    assert digest == ["ede045360785da39297118c44d10a32d6018a35ab147df5e4cf80434bd2e7b91",
                      "c2e788dbf7e5a291e28bf556ecee9e38ad9f621c85eb1e8c05829d7f09b101b3"]


def test_mix64_is_splitmix64_without_the_gamma():
    x = np.random.default_rng(1).integers(0, 2**64, 200, dtype=np.uint64, endpoint=False)
    with np.errstate(over="ignore"):
        assert mix64(x + np.uint64(GAMMA)).tolist() == splitmix64(x).tolist()


def test_counter_uniforms_keep_their_values():
    """counter_uniforms, which inlined the finalizer before mix64 existed (values pinned at 88e1d62)."""
    c = np.array([0, 1, 5, 2**40], np.int64)
    digest = [hashlib.sha256(counter_uniforms(k, c, 4).tobytes()).hexdigest() for k in (12345, -7)]
    assert digest == ["998d18f1525fe7e1b7b9deace181b95e056260f215490bbc01866a8a7564fe1a",
                      "dab756ed6e897df410d67f08ee8c1d3a35c4dcc6ffab3c87998594e3334c9b7e"]
    assert counter_uniforms(0, np.array([0, 3]), 2).tolist() == [[0.0, 0.8833108082136426],
                                                                 [0.32732576421812576, 0.17386786595968284]]
