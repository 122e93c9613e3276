"""The gymnasium adapter (``bps_runtime.GymVectorEnv``) keeps gymnasium's vector-env contract:
new data on every call (gymnasium's env_checker ``check_returned_data_not_reused``; SyncVectorEnv
copies), infos of one row per env with a ``_key`` mask where only some rows carry a value (so
gymnasium's own vector wrappers run over it), and seeds as ``BatchNavEnv.seed`` takes them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import gymnasium  # the test extra installs it: missing is a failure, not a skip

from bps_assets.errors import ConfigError  # noqa: E402
from bps_runtime.env.gym_adapter import GymVectorEnv  # noqa: E402
from bps_runtime.tasks.pointnav import STOP  # noqa: E402

from inmemory_scenes import make_env, room  # noqa: E402


@pytest.fixture
def env():
    e = GymVectorEnv(make_env([room()], num_envs=4, seed=0, threads=1))
    yield e
    e.close()


def _arrays(x, path=""):
    """(path, ndarray) of every array in a nested dict."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _arrays(v, f"{path}/{k}")
    elif isinstance(x, np.ndarray):
        yield path, x


def test_returned_arrays_are_new_on_every_call(env):
    """A later step never rewrites what an earlier call returned (the env's own tensors are
    buffers rewritten in place: the adapter hands out copies, as SyncVectorEnv does)."""
    calls = [env.reset(seed=3)]
    kept = []
    for _ in range(3):
        obs, rew, term, trunc, info = env.step(env.action_space.sample())
        calls.append((obs, info, rew, term, trunc))
        kept.append({p: a.copy() for p, a in _arrays({"obs": obs, "info": info, "rew": rew})})
    for i, a in enumerate(calls):
        for b in calls[i + 1:]:
            for pa, x in _arrays(a):
                for pb, y in _arrays(b):
                    assert not np.shares_memory(x, y), f"{pa} of call {i} shares memory with {pb} of a later call"
    for got, want in zip(calls[1:], kept):
        for p, a in _arrays({"obs": got[0], "info": got[1], "rew": got[2]}):
            np.testing.assert_array_equal(a, want[p], err_msg=f"{p} changed after a later step")


def test_infos_have_one_row_per_env_and_an_episode_mask(env):
    """Every info value has num_envs rows (``waited_for_load`` too); ``_episode`` says which rows
    of ``infos["episode"]`` hold a finished episode: gymnasium's DictInfoToList then gives
    ``episode`` to those envs only."""
    obs, info = env.reset(seed=0)
    assert info["_episode"].dtype == bool and not info["_episode"].any()
    actions = np.array([STOP, 1, 1, STOP])
    obs, rew, term, trunc, info = env.step(actions)
    for p, a in _arrays(info):
        assert a.shape[:1] == (4,), f"{p}: shape {a.shape}, expected a row per env"
    np.testing.assert_array_equal(info["_episode"], term | trunc)
    assert info["_episode"].tolist() == [True, False, False, True]
    listed = gymnasium.wrappers.vector.DictInfoToList(env)
    listed.reset(seed=0)
    _, _, term, trunc, infos = listed.step(actions)
    assert [("episode" in i) for i in infos] == [True, False, False, True]
    assert infos[0]["episode"]["length"] == 1 and isinstance(infos[1]["waited_for_load"], np.bool_)


def test_gymnasium_record_episode_statistics_runs_with_its_own_key(env):
    """infos["episode"] is the env's own statistics: gymnasium's RecordEpisodeStatistics takes
    another ``stats_key`` (docs/ENV.md) and agrees with them."""
    rec = gymnasium.wrappers.vector.RecordEpisodeStatistics(env, stats_key="stats")
    rec.reset(seed=0)
    for _ in range(3):
        _, _, _, _, info = rec.step(np.array([1, 1, 1, 1]))
    _, rew, term, _, info = rec.step(np.full(4, STOP))
    assert term.all() and info["_stats"].all()
    np.testing.assert_array_equal(info["stats"]["l"], info["episode"]["length"])
    np.testing.assert_allclose(info["stats"]["r"], info["episode"]["return"], atol=1e-5)


@pytest.mark.parametrize("seed", [1.5, "3", True, -1, [1, 2], np.array([1, 2, 3, 4])])
def test_reset_refuses_seeds_the_env_refuses(env, seed):
    """``reset(seed=...)`` takes one int (numpy ints too), as ``BatchNavEnv.seed``: a float,
    text or bool is a ConfigError, not truncated; per-env seeds (gymnasium's list form) cannot
    be honoured by one batched env and are refused, not cut to the first."""
    with pytest.raises(ConfigError, match="seed"):
        env.reset(seed=seed)


def test_reset_takes_a_numpy_int_seed(env):
    a = env.reset(seed=np.int64(5))[1]["position"]
    b = env.reset(seed=5)[1]["position"]
    np.testing.assert_array_equal(a, b)


def test_as_torch_passes_the_env_tensors_through(env):
    t = GymVectorEnv(env.env, as_torch=True)
    obs, info = t.reset(seed=0)
    obs, rew, term, trunc, info = t.step(torch.ones(4, dtype=torch.long))
    assert isinstance(obs["depth"], torch.Tensor) and isinstance(rew, torch.Tensor)
    assert isinstance(info["_episode"], torch.Tensor) and info["waited_for_load"].shape == (4,)


@pytest.mark.parametrize("what", ["out/manifest.json", None])
def test_wraps_a_batch_env_only(what):
    """``GymVectorEnv("out/manifest.json")`` was an AttributeError ('str' object has no attribute 'batch_size')."""
    with pytest.raises(ConfigError, match="bps_runtime.make"):
        GymVectorEnv(what)
