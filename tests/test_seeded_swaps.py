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
    from bps_runtime import make

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
    env = make(manifest, threads=1, **SWAPS)
    try:
        env.reset()
        acts = pt.actions_for(SWAPS["seed"], 300, env.batch_size)
        seen = set()
        for t in range(300):
            _, _, done, info = env.step(acts[t])
            seen |= {(s, int(i)) for s, i in zip(info["scene_id"], info["scene_index"])}
        assert len({s for s, _ in seen}) == 3, seen
    finally:
        env.close()
