"""Scene cache: budget ledger never exceeded, quarantine, swaps only at episode boundaries,
waits reported, arrival / departure events."""
from __future__ import annotations

import contextlib
import itertools
import time

import numpy as np
import pytest

from bps_assets.errors import ConfigError, DatasetError
from bps_runtime.scenes.cache import CacheOptions, SceneCache
from bps_runtime.scenes.footprint import accel_bytes
from bps_runtime.scenes.loader import SceneSource
from bps_runtime.scenes.residency import Listener, renderer_listener
from bps_runtime.render import make_renderer
from runtime_scenes import MemoryReader, room_scene


def _world(n_scenes=6, bad=(), sizes=None):
    scenes, sources = {}, []
    for i in range(n_scenes):
        sx = sizes[i] if sizes else 4.0 + i
        scenes[f"mem/{i}"] = room_scene((sx, 3.0, 5.0), scene_id=f"s{i}")
        sources.append(SceneSource(f"s{i}", f"mem/{i}"))
    for b in bad:
        sources.append(SceneSource(b, f"bad/{b}"))
    return MemoryReader(scenes), sources


def _scene_cost(reader, renderer):
    from bps_runtime.render import build_shading_data
    s = next(iter(reader.scenes.values()))
    return build_shading_data(s).nbytes + accel_bytes(renderer, len(s.positions), len(s.indices))


def _next_episode(cache, envs_scene, envs):
    """Envs ``envs`` start a new episode: the scene of the one that ended is given back."""
    new = cache.assign_next(envs)
    old = envs_scene[envs]
    envs_scene[envs] = new
    cache.release_scenes(old[old >= 0])
    return new


def _run_episodes(cache, renderer, num_envs, steps, rng, check, until=None, max_seconds=60.0):
    """``steps`` steps, then on (up to ``max_seconds``) until ``until()``: the loader threads run
    at a lower priority, so on a busy machine their loads finish later in steps."""
    envs_scene = np.full(num_envs, -1, np.int64)
    _next_episode(cache, envs_scene, np.arange(num_envs))
    deadline = time.monotonic() + max_seconds
    for step in itertools.count():
        if step >= steps and (until is None or until() or time.monotonic() > deadline):
            break
        done = rng.random(num_envs) < 0.3
        before = envs_scene.copy()
        if done.any():
            _next_episode(cache, envs_scene, np.flatnonzero(done))
        # only envs at an episode boundary may change scene, and every scene in use is resident
        assert np.array_equal(envs_scene[~done], before[~done])
        assert set(envs_scene.tolist()) <= set(cache.resident_scene_indices)
        if step % 5 == 4:
            cache.request_swap()
        out = renderer.render(envs_scene, np.tile([[2.0, 0, -2.5]], (num_envs, 1)), np.zeros(num_envs))
        assert out["depth"].shape[0] == num_envs and (out["depth"] > 0).all()
        check(cache.take_report())
    return envs_scene


def test_budget_is_never_exceeded_and_scenes_rotate():
    reader, sources = _world(6)
    r = make_renderer("embree")
    cost = _scene_cost(reader, r)  # same triangle count for every room
    budget = int(cost * 3.5)       # 2 active + 1 pending at a time
    num_envs = 16
    seen = set()
    reports = []
    with SceneCache(sources, r, num_envs, CacheOptions(slots=2, budget_bytes=budget, seed=1),
                    reader=reader, listeners=[renderer_listener(r)]) as cache:
        cache.start()

        def check(rep):
            reports.append(rep)
            assert cache.resident_bytes <= budget and cache.peak_bytes <= budget
            assert rep.resident_scenes <= 3
            seen.update(cache.scene(i).scene_id for i in cache.resident_scene_indices)

        def rotated():
            return sum(x.swaps for x in reports) >= 3 and sum(x.evictions for x in reports) >= 3 and len(seen) >= 4

        _run_episodes(cache, r, num_envs, 60, np.random.default_rng(0), check, until=rotated)
    assert sum(x.swaps for x in reports) >= 3 and sum(x.evictions for x in reports) >= 3
    assert len(seen) >= 4  # scenes really streamed through the cache
    assert cache.peak_bytes <= budget


def test_failing_scenes_are_quarantined_and_others_go_on(caplog):
    reader, sources = _world(3, bad=("broken1", "broken2"))
    r = make_renderer("embree")
    with SceneCache(sources, r, 6, CacheOptions(slots=2, seed=0), reader=reader,
                    listeners=[renderer_listener(r)]) as cache:
        cache.start()
        rep = []
        _run_episodes(cache, r, 6, 40, np.random.default_rng(1), rep.append)
        assert set(cache.quarantined) == {"broken1", "broken2"}
        assert "checksum mismatch" in cache.quarantined["broken1"]
        used = {cache.scene(i).scene_id for i in cache.resident_scene_indices}
        assert not used & {"broken1", "broken2"}
    reported = [q for x in rep for q in x.quarantined]
    assert len(reported) == len(set(reported))  # each failure reported once


def test_all_scenes_failing_is_a_clear_error():
    reader, sources = _world(0, bad=("a", "b"))
    with SceneCache(sources, make_renderer("embree"), 2, CacheOptions(slots=2), reader=reader) as cache:
        with pytest.raises(DatasetError, match="no usable scene is left: 2 of 2 quarantined"):
            cache.start()
        assert set(cache.quarantined) == {"a", "b"}


def test_scene_larger_than_budget_is_quarantined():
    reader, sources = _world(2)
    r = make_renderer("embree")
    big = room_scene((9.0, 3.0, 5.0))
    big.indices = np.tile(big.indices, (200, 1))  # same room, 200x the triangles
    big.tri_material = np.tile(big.tri_material, 200)
    reader.scenes["mem/big"] = big
    sources.append(SceneSource("big", "mem/big"))
    budget = _scene_cost(reader, r) * 4
    with SceneCache(sources, r, 4, CacheOptions(slots=3, budget_bytes=budget), reader=reader,
                    listeners=[renderer_listener(r)]) as cache:
        cache.start()
        assert "big" in cache.quarantined and "budget" in cache.quarantined["big"]
        assert cache.peak_bytes <= budget


def test_old_scene_stays_until_its_last_env_leaves():
    reader, sources = _world(3)
    r = make_renderer("embree")
    with SceneCache(sources, r, 4, CacheOptions(slots=1, seed=0), reader=reader,
                    listeners=[renderer_listener(r)]) as cache:
        cache.start()
        envs_scene = np.full(4, -1, np.int64)
        first = _next_episode(cache, envs_scene, np.arange(4))
        assert len(set(first.tolist())) == 1
        old = int(first[0])
        cache.wait_pending(0)  # let the prefetch finish
        cache.take_report()
        cache.request_swap()
        new = _next_episode(cache, envs_scene, np.array([0]))  # env 0 at its boundary: moves over
        assert int(new[0]) != old
        assert old in cache.resident_scene_indices  # envs 1..3 are still mid-episode in the old scene
        r.render([old, int(new[0])], [[2.0, 0, -2], [2.0, 0, -2]], [0.0, 0.0])
        _next_episode(cache, envs_scene, np.array([1, 2]))
        assert old in cache.resident_scene_indices
        cache.release_scenes([old])   # env 3's episode ends without a next one
        assert old not in cache.resident_scene_indices  # last user gone: evicted, renderer detached
        with pytest.raises(ConfigError, match="not resident"):
            r.render([old], [[2.0, 0, -2]], [0.0])
        rep = cache.take_report()
        assert rep.swaps == 1 and rep.evictions == 1 and not rep.waited


def test_a_due_swap_waits_for_its_load_and_reports_why():
    reader, sources = _world(3)
    r = make_renderer("embree")
    import time

    def slow(path):  # loads take 0.2 s, so the prefetched scene is surely not loaded yet
        time.sleep(0.2)
        return reader(path)

    with SceneCache(sources, r, 2, CacheOptions(slots=2, swap_after_episodes=1), reader=slow,
                    listeners=[renderer_listener(r)]) as cache:
        cache.start()
        assert not cache.take_report().waited     # start-up loads are not waits
        cache.assign_next([0, 1])
        assert not cache.take_report().waited
        cache.assign_next([0, 1])   # a swap is due: the slot's next load (0.2 s) is not done
        rep = cache.take_report()
        assert rep.waited and rep.wait_seconds > 0 and "swap" in rep.reasons[0]


def test_bad_env_ids():
    reader, sources = _world(1)
    with SceneCache(sources, make_renderer("embree"), 3, reader=reader) as cache:
        cache.start()
        with pytest.raises(ConfigError, match=r"\[0, 3\)"):
            cache.assign_next([3])
        with pytest.raises(ConfigError, match="duplicates"):
            cache.assign_next([1, 1])


@contextlib.contextmanager
def _started(n_scenes: int, num_envs: int, **options):
    """A started cache over ``n_scenes`` in-memory rooms (Embree, the renderer told of arrivals)."""
    reader, sources = _world(n_scenes)
    r = make_renderer("embree")
    with SceneCache(sources, r, num_envs, CacheOptions(**options), reader=reader,
                    listeners=[renderer_listener(r)]) as cache:
        cache.start()
        yield cache


def test_wait_pending_makes_the_next_swap_deterministic():
    with _started(4, 4, slots=2, seed=3) as cache:
        first = cache.assign_next(np.arange(4)).copy()
        assert cache.has_pending(0)
        cache.wait_pending(0)
        assert not cache.slots[0].pending and cache.slots[0].ready is not None
        cache.request_swap([0])
        again = cache.assign_next(np.arange(4))
        slot0 = cache.env_slot == 0
        assert np.all(again[slot0] != first[slot0]) and np.all(again[~slot0] == first[~slot0])
        cache.take_report()
        blocked = cache.wait_pending(1)
        assert cache.take_report().waited == blocked


def test_request_swap_from_moves_only_the_slot_still_on_that_scene():
    """An eval's env started a repeat in its scene: its slot moves on only while that scene is
    the slot's active one and a next scene exists; other slots keep theirs."""
    with _started(3, 2, slots=2, seed=1) as cache:
        first = cache.assign_next(np.arange(2)).copy()
        cache.release_scenes(first)
        on0, on1 = cache.scene_id(int(first[0])), cache.scene_id(int(first[1]))
        assert not cache.request_swap_from(0, on1)   # env 0's slot is not on that scene
        assert cache.has_pending(0) and cache.request_swap_from(0, on0)
        again = cache.assign_next(np.arange(2))
        assert again[0] != first[0] and again[1] == first[1]
        assert cache.scene_id(int(again[0])) not in (on0, on1)   # the third scene
    with _started(2, 2, slots=2, seed=1) as cache:   # as many scenes as slots: no next scene to move to
        first = cache.assign_next(np.arange(2)).copy()
        assert not cache.has_pending(0) and not cache.request_swap_from(0, cache.scene_id(int(first[0])))
        assert not cache.slots[0].swap_requested


def test_listeners_are_told_every_arrival_and_departure_in_order():
    reader, sources = _world(4)
    r = make_renderer("embree")
    events = []
    told = Listener(lambda i, scene: events.append(("arrived", i, scene)), lambda i: events.append(("left", i, None)))
    with SceneCache(sources, r, 4, CacheOptions(slots=2, seed=0), reader=reader,
                    listeners=[renderer_listener(r), told]) as cache:
        cache.start()
        live = set()
        envs_scene = np.full(4, -1, np.int64)
        rng = np.random.default_rng(2)
        for step in range(40):
            done = np.flatnonzero(rng.random(4) < 0.4) if step else np.arange(4)
            if done.size:
                _next_episode(cache, envs_scene, done)
            if step % 4 == 3:
                cache.request_swap()
            for kind, scene_index, scene in events:
                if kind == "arrived":
                    assert scene_index not in live and scene.scene_id == cache.scene_id(scene_index)
                    live.add(scene_index)
                else:
                    live.remove(scene_index)
            events.clear()
            assert live == set(cache.resident_scene_indices)
