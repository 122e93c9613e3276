"""The host's bookkeeping between fused steps does no work that is not due (issue 11: on CUDA
the step is a few asynchronous launches, so this Python work bounds its speed).

Structural, not timed: calls are counted with wrappers.
- A step in which no episode started since the host last looked (TURN_LEFT only: nothing ends
  within 500 steps) asks the scene cache and the episode supply for nothing, releases nothing,
  and uploads no staging rows (no torch op).
- With the scene cache, a step whose episode ends change no resident scene does not re-read
  the cache's resident set.
- The info tensors of a group are the same views every step (made once, not per step).
- Episodes taken for mixed scene keys are, per scene, the ones that scene gives alone (the
  grouped take scatters them back to the right entries).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from bps_runtime.nav.buffers import FieldWorker, NavBuffers, SceneNav
from bps_runtime.episodes.sampled import SampledEpisodes
from bps_runtime.episodes.supply import SupplyOptions
from inmemory_scenes import make_env, room
from cli.step_profile import count_ops

TURN_LEFT = 2


def _counting(monkeypatch, calls: Counter, owner, name):
    orig = getattr(owner, name)

    def wrapped(*args, **kw):
        calls[name] += 1
        return orig(*args, **kw)
    monkeypatch.setattr(owner, name, wrapped)


def test_steady_step_asks_for_nothing_when_no_episode_started(monkeypatch):
    scenes = [room(f"r{i}", 3.0 + 0.5 * i, 4.0, pillars=[(1.0, -2.0, 1.5, -1.5)]) for i in range(3)]
    env = make_env(scenes, num_envs=32, batch_size=16, seed=0, threads=2)
    try:
        env.reset()
        g = torch.Generator().manual_seed(0)
        for _ in range(6):                         # episodes end (STOP) and restart
            env.step(torch.randint(0, 4, (16,), generator=g))
        assert env.stats["episodes"] > 32
        turn = torch.full((16,), TURN_LEFT, dtype=torch.int64)
        for _ in range(8):                         # the lagged head snapshots catch up
            env.step(turn)
        w, calls = env.world, Counter()
        for owner, name in ((w, "next_scenes"), (w, "release_scenes"), (w.episodes, "take"),
                            (w.episodes, "release_many"), (w.scenes, "assign_next"), (w.scenes, "release_scenes")):
            _counting(monkeypatch, calls, owner, name)
        f = env.fused
        episodes, version = env.stats["episodes"], (f.count._version, f.stage_i._version, f.stage_f._version)
        steady = []    # per group: the round's first group step also snapshots the heads (one copy)
        for _ in range(2):
            with count_ops() as c:
                env.step(turn)
            steady.append(c)
        for _ in range(8):
            _, _, done, info = env.step(turn)
            assert not done.any()
        assert calls == Counter(), calls
        assert env.stats["episodes"] == episodes
        # no staging upload (the in-place copies would bump the tensors' versions)
        assert (f.count._version, f.stage_i._version, f.stage_f._version) == version
        # steps that start episodes upload their staging rows (the step after them, a row
        # count of 0): three copies more than a step of the same group with nothing to upload,
        # no other change
        monkeypatch.undo()
        env.step(torch.zeros(16, dtype=torch.int64))          # STOP everywhere
        env.step(torch.zeros(16, dtype=torch.int64))
        uploads = 0
        for i in range(8):   # groups 0, 1, 0, ...
            version = f.count._version
            with count_ops() as c:
                env.step(turn)
            uploaded = f.count._version != version
            uploads += uploaded
            extra = c.torch_ops["step"]["copy_"] - steady[i % 2].torch_ops["step"]["copy_"]
            assert extra == (3 if uploaded else 0), (uploaded, c.summary(), steady[i % 2].summary())
        assert uploads >= 2
    finally:
        env.close()


def test_info_views_are_made_once_per_group():
    env = make_env([room("a", 3.0, 4.0)], num_envs=8, batch_size=4, seed=0, threads=1)
    try:
        env.reset()
        a = torch.full((4,), TURN_LEFT, dtype=torch.int64)
        infos = [env.step(a)[3] for _ in range(4)]       # groups 0, 1, 0, 1
        for k in ("position", "rotation", "scene_index", "distance_to_goal", "success", "spl", "truncated"):
            assert infos[0][k] is infos[2][k] and infos[1][k] is infos[3][k], k
            assert infos[0][k] is not infos[1][k], k
        assert infos[0]["episode"]["return"] is infos[2]["episode"]["return"]
        # the views still read the group's current outputs
        assert torch.equal(infos[2]["position"], env.fused.out["position"][0:4])
        assert torch.equal(infos[3]["position"], env.fused.out["position"][4:8])
        # the names are a snapshot of that step, not views
        assert infos[0]["scene_id"] == ["a"] * 4 and infos[0]["episode"]["episode_id"] == [""] * 4
    finally:
        env.close()


def test_cached_scenes_are_not_resynced_while_residents_stay(monkeypatch, tmp_path):
    from bps_runtime import make
    from bps_runtime.scenes.cache import SceneCache
    from bps_runtime.scenes.residency import Listener

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from test_runtime_api import _glb_rooms

    _glb_rooms(tmp_path / "src", ["Allensville", "Beechwood", "Coffeen"])
    res = preprocess(tmp_path / "src", tmp_path / "out", "gibson", "tiny",
                     PreprocessOptions(episodes=0, workers=1, subsets=("train",)), log=lambda s: None)
    env = make(res.manifest_path, split="train", num_envs=16, resolution=(8, 8), seed=0, episodes="sample",
               cache={"slots": 3, "swap_every": None})
    try:
        env.reset()
        cache = env.world.scenes
        g = torch.Generator().manual_seed(0)
        env.step(torch.randint(0, 4, (16,), generator=g))
        assert not cache.loading
        calls = Counter()
        orig = SceneCache.resident_scene_indices.fget

        def counted(self):
            calls["resident_scene_indices"] += 1
            return orig(self)
        monkeypatch.setattr(SceneCache, "resident_scene_indices", property(counted))
        _counting(monkeypatch, calls, env.world, "next_scenes")
        changes = []   # arrivals and departures: none while the residents stay
        cache.add_listener(Listener(lambda i, scene: changes.append(i), changes.append))
        ended0 = env.stats["episodes"]
        for _ in range(12):
            env.step(torch.randint(0, 4, (16,), generator=g))
        assert env.stats["episodes"] > ended0 and calls["next_scenes"] >= 10
        assert changes == [] and calls["resident_scene_indices"] == 0, calls
    finally:
        env.close()


def test_grouped_take_gives_each_scene_its_own_episodes():
    rooms = {"a": room("a")[4], "b": room("b", w=5.0, d=5.0, pillars=[(2.0, -3.0, 2.5, -2.0)])[4]}

    def supply():
        worker = FieldWorker()
        sup = SampledEpisodes(5, worker, options=SupplyOptions(goal_pool=6, reservoir=16))
        bufs = NavBuffers(capacity=8)
        for key, name in ((2, "a"), (0, "b")):
            sup.register(key, sup.prepare(name, SceneNav(rooms[name], bufs)))   # what the world does
        return sup, worker

    keys = np.array([2, 0, 0, 2, 2, 0, 2, 2, 0, 0, 0, 2, 2, 2], np.int64)
    mixed, w1 = supply()
    alone, w2 = supply()
    try:
        e, _ = mixed.take(keys)
        for k in (0, 2):
            idx = np.flatnonzero(keys == k)
            ref, _ = alone.take(np.full(idx.size, k, np.int64))
            np.testing.assert_array_equal(e.start[idx], ref.start)
            np.testing.assert_array_equal(e.yaw[idx], ref.yaw)
            np.testing.assert_array_equal(e.goal[idx], ref.goal)
            np.testing.assert_array_equal(e.rows[idx], ref.rows)
            assert [e.episode_ids[i] for i in idx] == ref.episode_ids
        assert e.episode_ids[0].startswith("a:") and e.episode_ids[1].startswith("b:")
        # releasing mixed keys gives every row back to its own scene
        before = {k: mixed.scenes[k].fields.refs.copy() for k in (0, 2)}
        mixed.release_many(keys, e.rows)
        for k in (0, 2):
            expect = before[k].copy()
            np.subtract.at(expect, e.rows[keys == k], 1)
            np.testing.assert_array_equal(mixed.scenes[k].fields.refs, expect)
    finally:
        w1.close()
        w2.close()


def test_small_reference_batches_match_the_numpy_path(monkeypatch):
    """Field-row references released a few at a time (a Python loop) end as numpy's
    ``subtract.at`` path leaves them: counts, rows freed and the order they are reused in."""
    import bps_runtime.nav.buffers as bn

    nm = room("a")[4]

    def table():
        f = bn.GoalFields(SceneNav(nm, NavBuffers(capacity=2)), capacity=8)
        goal = nm.span_pos[0]
        flat, near = f.field(goal)
        rows = [f.add(goal, flat, near) for _ in range(8)]
        f.retain_many(np.repeat(rows, 5))
        return f

    small, ref = table(), table()
    rng = np.random.default_rng(0)
    for n in [1, 2, 3, 5, 8, 13, 2, 1, 30, 4]:
        held = np.repeat(np.arange(len(ref.refs)), ref.refs)     # one entry per reference
        batch = rng.choice(held, min(n, held.size), replace=False).tolist()
        small.release_many(batch)
        monkeypatch.setattr(bn, "SMALL", 0)
        ref.release_many(np.asarray(batch, np.int64))
        monkeypatch.undo()
        np.testing.assert_array_equal(small.refs, ref.refs)
        assert small._free == ref._free and sorted(small.host) == sorted(ref.host)
    assert len(ref._free) >= 2 and len(set(ref._free)) == len(ref._free)   # rows were freed, once each
