"""CPU threads: ``make(threads=N)`` reaches the renderer (and the world the step reads it from);
the default is the number of cores this process may use; bad values are ConfigErrors."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from bps_assets.errors import ConfigError
from bps_runtime.render import RenderOptions
from bps_runtime.threads import available_cores, check_threads
from test_runtime_api import _make   # the manifest fixture: conftest.py


def test_default_is_the_affinity_count():
    assert available_cores() == len(os.sched_getaffinity(0))
    assert check_threads(None) == len(os.sched_getaffinity(0))
    assert RenderOptions().threads == len(os.sched_getaffinity(0))
    assert check_threads(np.int64(3)) == 3 and isinstance(check_threads(np.int64(3)), int)


def test_narrowed_affinity_is_what_counts():
    """A process pinned to one core (taskset, a cpuset) gets one thread by default."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        assert available_cores() == 1 and RenderOptions().threads == 1
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("bad", [0, -2, 1.5, 2.0, "4", True, [2]])
def test_bad_thread_counts_are_config_errors(bad):
    with pytest.raises(ConfigError, match="threads"):
        check_threads(bad)
    with pytest.raises(ConfigError, match="threads"):
        RenderOptions(threads=bad)


def test_make_threads_reaches_the_renderer(manifest):
    env = _make(manifest, threads=3)
    try:
        r = env.world.renderer
        assert r.options.threads == 3 and env.world.threads == 3
        assert r._pool is not None and r._pool._max_workers == 3
        env.reset()
        env.step(torch.full((4,), 2))
    finally:
        env.close()
    env = _make(manifest, threads=1)
    try:
        assert env.world.renderer.options.threads == 1 and env.world.renderer._pool is None
    finally:
        env.close()
    env = _make(manifest)
    try:
        assert env.world.threads == env.world.renderer.options.threads == len(os.sched_getaffinity(0))
    finally:
        env.close()


def test_make_rejects_bad_threads_before_building(manifest):
    for bad in (0, -1, "2", 2.5):
        with pytest.raises(ConfigError, match="threads"):
            _make(manifest, threads=bad)
