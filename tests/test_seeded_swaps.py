"""A seed reproduces a run with scene swaps, whatever the loader timing and the thread count
(issue 21): which scene comes next, its resident id and the episodes it brings follow from the
seed and the step count, never from which load finished first.

The configuration of the issue's report (3 scenes, 32 envs, 2 cache slots, a swap after 16
episodes per slot, seed 3, 300 seeded actions) runs three times: 1 thread; 2 threads with every
loader stage delayed at random (a ``SceneLoader`` subclass); 1 thread with other random delays.
Every observable of every step is compared (``pointnav_trace.step_digest``), except
``waited_for_load``, which says whether the step had to wait: timing, by definition.
"""
from __future__ import annotations

import random
import time

import pytest

import pointnav_trace as pt

SWAPS = dict(split=None, num_envs=32, resolution=(12, 12), sensors=("depth",), seed=3, episodes="sample",
             cache={"slots": 2, "swap_after_episodes": 16})


@pytest.fixture(scope="module")
def manifest(box_rooms_manifest):   # conftest.py's, shared with test_trace_stable
    return box_rooms_manifest


def _slowed(monkeypatch, seed: int):
    """Every cache built from now on loads with a loader that sleeps at random as each stage begins."""
    from bps_runtime.scenes import cache
    from bps_runtime.scenes.loader import SceneLoader

    rng = random.Random(seed)

    class SlowLoader(SceneLoader):
        def _enter_stage(self, scene_id, stage):
            super()._enter_stage(scene_id, stage)
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0.0, 0.15))

    monkeypatch.setattr(cache, "SceneLoader", SlowLoader)


def _run(manifest, threads, stats=None):
    return pt.run_trace(manifest, steps=300, skip=("waited_for_load",), threads=threads, **SWAPS)


def test_swapping_run_repeats_under_any_loader_timing_and_threads(manifest, monkeypatch):
    base = _run(manifest, 1)
    _slowed(monkeypatch, 1)
    slow2 = _run(manifest, 2)
    _slowed(monkeypatch, 2)
    slow1 = _run(manifest, 1)
    for name, got in (("2 threads, slowed loads", slow2), ("1 thread, other slowed loads", slow1)):
        first = next((i for i, (a, b) in enumerate(zip(got, base)) if a != b), None)
        assert first is None, f"{name}: diverges from the unslowed 1-thread run at step {first}"
    # the configuration does swap: scenes change within the run
    monkeypatch.undo()
    seen, _ = _scenes_seen(manifest, SWAPS, 300)
    assert len(seen) == 3, seen


def _scenes_seen(manifest, kw, steps):
    """(scene ids seen in ``steps`` seeded steps of make(manifest, **kw), the env's assets held at the end)."""
    from bps_runtime import make

    env = make(str(manifest), threads=1, **kw)
    try:
        env.reset()
        acts = pt.actions_for(kw["seed"], steps, env.batch_size)
        seen = set()
        for t in range(steps):
            _, _, _, info = env.step(acts[t])
            seen |= set(info["scene_id"])
        held = (env.world.scenes.loader.assets.resident, len(env.world.scenes.resident_scene_ids()))
    finally:
        env.close()
    return seen, held


@pytest.fixture(scope="module")
def composed_manifest(tmp_path_factory):
    """3 generated composed scenes sharing one asset library (tests/test_composed_runtime.py)."""
    from test_composed_runtime import build_composed_rooms

    return build_composed_rooms(tmp_path_factory.mktemp("composed_swaps"))


def test_swapping_run_on_composed_scenes_repeats_under_any_loader_timing(composed_manifest, monkeypatch):
    """The same on a composed dataset (issue 31): scenes rendered as instances of shared assets,
    whose references come and go with the swaps; depth and semantic in every digest."""
    kw = dict(SWAPS, sensors=("depth", "semantic"))
    base = pt.run_trace(composed_manifest, steps=150, skip=("waited_for_load",), threads=1, **kw)
    _slowed(monkeypatch, 4)
    slow2 = pt.run_trace(composed_manifest, steps=150, skip=("waited_for_load",), threads=2, **kw)
    first = next((i for i, (a, b) in enumerate(zip(slow2, base)) if a != b), None)
    assert first is None, f"2 threads, slowed loads: diverges from the unslowed run at step {first}"
    monkeypatch.undo()
    seen, (assets, resident) = _scenes_seen(composed_manifest, kw, 150)
    assert len(seen) == 3, seen        # the run swaps scenes
    # one reference per resident scene on each shared asset (scenes in flight may add theirs)
    assert assets and all(refs >= resident for refs in assets.values())


def _per_env_trace(manifest, steps, batch_size, **kw):
    """make(batch_size=..., **kw) -> reset -> ``steps`` rounds of the same per-env seeded actions,
    each group stepped in turn: per env, one digest of its rows of everything each step returns
    (``waited_for_load``, one bool per group, left out), and the scene ids seen."""
    import hashlib

    import numpy as np
    import torch

    from bps_runtime import make

    env = make(str(manifest), threads=1, batch_size=batch_size, **kw)
    n, b = env.num_envs, env.batch_size
    digests = [hashlib.sha256() for _ in range(n)]
    seen = set()

    def record(obs, reward, done, info):
        ids = info["env_id"].tolist()
        rows = {**{f"obs.{k}": v for k, v in obs.items()}, "reward": reward, "done": done,
                **{k: v for k, v in info.items() if k not in ("episode", "waited_for_load")},
                **{f"episode.{k}": v for k, v in info["episode"].items()}}
        cols = {k: (v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(list(v), object))
                for k, v in sorted(rows.items())}
        seen.update(info["scene_id"])
        for row, e in enumerate(ids):
            for k, v in cols.items():
                x = v[row]
                digests[e].update(k.encode() + (str(x).encode() if v.dtype == object
                                                else np.ascontiguousarray(x).tobytes()))

    try:
        obs = env.reset()
        record(obs, torch.zeros(n), torch.zeros(n, dtype=torch.bool), env.last_info)
        acts = pt.actions_for(kw["seed"], steps, n)
        for t in range(steps):
            for j in range(n // b):
                record(*env.step(acts[t, j * b:(j + 1) * b]))
    finally:
        env.close()
    return [d.hexdigest() for d in digests], seen


@pytest.mark.parametrize("cache", [{"slots": 2, "swap_after_episodes": 16}, {"slots": 1, "swap_every": 7}],
                         ids=["swap_after_episodes", "swap_every"])
def test_swapping_run_repeats_whatever_the_batch_size(manifest, cache):
    """A seed gives every env the same steps whatever ``batch_size`` (None, two halves, four
    quarters), scene swaps included: scene picks, swaps and episode draws follow the rounds,
    not the order in which groups learn that their episodes ended."""
    kw = dict(SWAPS, cache=cache)
    base, seen = _per_env_trace(manifest, 150, None, **kw)
    assert len(seen) == 3, seen   # the run swaps scenes
    for b in (16, 8):
        got, _ = _per_env_trace(manifest, 150, b, **kw)
        differ = [e for e in range(len(base)) if got[e] != base[e]]
        assert not differ, f"batch_size={b}: envs {differ} differ from batch_size=None"
