"""Misuse of a BatchNavEnv is a one-line ConfigError naming the problem (docs/ENV.md, "Actions" and
"What make() refuses"): every call after ``close()``, queries before ``reset()``, actions or env
ids of the wrong kind (they were numpy / torch tracebacks, a wrapped value in the message, a
silent success on a closed env, or float ids truncated)."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from bps_assets.errors import ConfigError

from inmemory_scenes import make_env, room


@pytest.fixture
def env():
    e = make_env([room()], num_envs=4, batch_size=2, threads=1)
    yield e
    e.close()


def test_every_call_after_close_says_closed(env):
    env.async_reset()
    obs, r, d, info = env.recv()
    env.send(torch.zeros(2, dtype=torch.long), info["env_id"])   # a group in flight when closed
    env.close()
    calls = {"recv": env.recv, "seed": lambda: env.seed(3), "episode_ids": lambda: env.episode_ids,
             "task": lambda: setattr(env, "task", env.task), "step": lambda: env.step([0, 0]),
             "reset": env.reset, "async_reset": env.async_reset, "episode_goals": env.episode_goals}
    for name, call in calls.items():
        with pytest.raises(ConfigError, match="closed environment"):
            call()
        print(name)


def test_episode_ids_before_reset(env):
    with pytest.raises(ConfigError, match="before reset"):
        env.episode_ids


@pytest.mark.parametrize("actions, match", [
    ([[0], [1, 2]], "shape"),                                       # ragged: numpy's ValueError
    (np.array([2**63, 2**63], np.uint64), r"got 9223372036854775808\.\.9223372036854775808"),
    (np.array([2**64 - 1, 0], np.uint64), r"got 0\.\.18446744073709551615"),
    ([0, 2**70], "0..3"),                                           # a Python int beyond int64: OverflowError
])
def test_bad_actions_are_config_errors(env, actions, match):
    env.reset()
    with pytest.raises(ConfigError, match=match):
        env.step(actions)


@pytest.mark.parametrize("env_id", ["ab", [0.5, 1.0], [True, False], [[0, 1]], None])
def test_env_ids_must_be_a_group_of_ints(env, env_id):
    env.reset()
    if env_id is None:
        env.step([1, 1], env_id=np.array([0, 1], np.int32))   # integer ids of a whole group: taken
        return
    with pytest.raises(ConfigError, match="env_id"):
        env.step([1, 1], env_id=env_id)


@pytest.mark.parametrize("ids", [[4], [-5], [0.5], ["a"]])
def test_episode_goals_ids_are_checked(env, ids):
    env.reset()
    with pytest.raises(ConfigError, match="env_ids"):
        env.episode_goals(ids)


def test_episode_goals_takes_ids_in_range(env):
    env.reset()
    assert [g["env_id"] for g in env.episode_goals([3, 0])] == [3, 0]


def test_close_from_another_thread_between_the_checks_and_the_submit(env, monkeypatch):
    """close() (documented to return from any thread) landing after send()'s open check: the
    submit to the shut-down simulator was a RuntimeError "cannot schedule new futures after shutdown"."""
    env.reset()
    check = env._check_actions

    def close_then_check(actions):
        out = check(actions)
        env.close()
        return out
    monkeypatch.setattr(env, "_check_actions", close_then_check)
    with pytest.raises(ConfigError, match="closed environment"):
        env.send([1, 1])


def _slow_steps(env, monkeypatch, seconds):
    step = env.sim.step_group

    def slow(*a):
        time.sleep(seconds)
        return step(*a)
    monkeypatch.setattr(env.sim, "step_group", slow)


@pytest.fixture
def env1():
    e = make_env([room()], num_envs=2, threads=1)
    yield e
    e.close()


def test_a_step_interrupted_while_waiting_can_be_received_again(env1, monkeypatch):
    """Ctrl-C during step(): the group's step runs on; the next step() said "no group is waiting
    for actions (each group's results must be recv()'d ...)" and only reset() got out."""
    import _thread
    import threading

    env = env1
    env.reset()
    _slow_steps(env, monkeypatch, 0.5)
    threading.Timer(0.1, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        env.step([1, 1])
    with pytest.raises(ConfigError, match=r"group 0's step is in flight: recv\(\) it first"):
        env.step([1, 1])
    obs, r, d, info = env.recv()
    assert info["env_id"].tolist() == [0, 1]
    env.step([1, 1])


def test_after_a_failed_step_send_says_so(env1, monkeypatch):
    """A step that raised lost its group: the next step() said "(each group's results must be
    recv()'d before its next send)"; now it names the error and the way out."""
    env = env1
    env.reset()

    def boom(*a):
        raise RuntimeError("boom")
    monkeypatch.setattr(env.sim, "step_group", boom)
    with pytest.raises(RuntimeError, match="boom"):
        env.step([1, 1])
    monkeypatch.undo()
    with pytest.raises(ConfigError, match=r"group 0's last step raised RuntimeError: boom; reset\(\)"):
        env.step([1, 1])
    with pytest.raises(ConfigError, match=r"group 0's last step raised RuntimeError: boom; reset\(\)"):
        env.step([1, 1], env_id=[0, 1])   # named by its ids: it said "still being simulated: recv() it first"
    env.reset()
    env.step([1, 1])
