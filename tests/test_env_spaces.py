"""The batched spaces (``observation_space(...)``, ``env.observation_space``): gymnasium's
``batch_space`` of the single space, built once at the batched shape (a gymnasium Box holds
arrays of its whole shape: rebuilt on every property access they cost seconds and GBs at
1,024 envs x 256^2), and their arguments checked as ``make()``'s."""
from __future__ import annotations

import numpy as np
import pytest

import gymnasium  # the test extra installs it: missing is a failure, not a skip

import bps_runtime  # noqa: E402
from bps_assets.errors import ConfigError  # noqa: E402

from inmemory_scenes import make_env, room  # noqa: E402


@pytest.mark.parametrize("kw", [
    dict(sensors=("depth",)), dict(sensors=("depth", "rgb", "semantic"), resolution=(8, 12)),
    dict(normalize_depth=False, depth_range=(0.5, 5.0)), dict(task="objectnav", max_goal_id=20),
    dict(task="imagenav", sensors=("rgb",)), dict(task="instance_imagenav", sensors=("depth", "rgb"))])
def test_batched_space_is_gymnasiums_batch_of_the_single_one(kw):
    from gymnasium.vector.utils import batch_space

    single = bps_runtime.single_observation_space(**kw)
    got = bps_runtime.observation_space(num_envs=6, batch_size=3, **kw)
    assert got == batch_space(single, 3)
    assert list(got.keys()) == list(batch_space(single, 3).keys())


def test_env_spaces_are_built_once():
    env = make_env([room()], num_envs=2, threads=1)
    try:
        for name in ("observation_space", "single_observation_space", "action_space", "single_action_space"):
            assert getattr(env, name) is getattr(env, name), name
        assert env.observation_space == bps_runtime.observation_space(2, resolution=(16, 16))
    finally:
        env.close()


@pytest.mark.parametrize("depth_range", [(5, 1), (1, 1), (-1, 2), "ab", (0, float("inf")), (0, 1, 2), (True, 2)])
def test_depth_range_is_checked(depth_range):
    """(5, 1) was gymnasium's ValueError with a dump of the whole low array; "ab" numpy's."""
    with pytest.raises(ConfigError, match="depth_range"):
        bps_runtime.observation_space(4, normalize_depth=False, depth_range=depth_range)


def test_normalize_depth_is_a_bool_here_too():
    with pytest.raises(ConfigError, match="normalize_depth"):
        bps_runtime.observation_space(4, normalize_depth="no")
    assert bps_runtime.observation_space(4, normalize_depth=np.bool_(False))["depth"].high.max() == 10.0
