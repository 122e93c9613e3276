"""Sampled episodes drawn ahead in a per-scene reservoir on the field worker
(``SupplyOptions.reservoir``) are the same episodes as drawn inline in ``take``
(``reservoir=0``), and the reservoir's field-row references go back when its scene leaves."""
from __future__ import annotations

import threading

import numpy as np

from bps_runtime.nav.buffers import FieldWorker, NavBuffers, SceneNav
from bps_runtime.episodes.sampled import SampledEpisodes
from bps_runtime.episodes.supply import SupplyOptions
from inmemory_scenes import room

ROOMS = {"a": room("a")[4], "b": room("b", w=5.0, d=5.0, pillars=[(2.0, -3.0, 2.5, -2.0)])[4]}


def _supply(reservoir: int, seed: int = 7):
    worker = FieldWorker()
    sup = SampledEpisodes(seed, worker, options=SupplyOptions(goal_pool=6, reservoir=reservoir))
    return sup, worker, NavBuffers(capacity=8)


def _arrive(sup, bufs, key, name):
    """A scene arrives as the world makes it arrive: prepared, then registered under its index."""
    st = sup.prepare(name, SceneNav(ROOMS[name], bufs))
    sup.register(key, st)
    return st.fields


def _run(reservoir: int):
    """A fixed sequence of takes: growing and shrinking batches (some larger than the
    reservoir), scene b leaving and coming back under another key, a reseed."""
    sup, worker, bufs = _supply(reservoir)
    _arrive(sup, bufs, 0, "a")
    _arrive(sup, bufs, 1, "b")
    rng, pause = np.random.default_rng(3), np.random.default_rng(4)
    out, blocked = [], False

    def take(keys):
        e, _ = sup.take(np.asarray(keys, np.int64))
        out.append((e.start.copy(), e.yaw.copy(), e.goal.copy(), e.rows.copy(), list(e.episode_ids)))
        if reservoir and not blocked:   # let the background top-ups land sometimes, not always
            f = next(iter(sup.scenes.values())).res.fill
            if f is not None and pause.random() < 0.5:
                f.result()

    for n in [1, 3, 9, 2, 40, 5, 5, 17, 1, 30]:
        take(rng.integers(0, 2, n))
    # top-ups queued behind a busy worker: cancelled when the reservoir runs dry, drawn inline
    gate, blocked = threading.Event(), True
    worker.run(gate.wait)
    m0 = sup.misses
    for n in [6, 6, 30, 40, 2]:
        take(rng.integers(0, 2, n))
    assert sup.misses > m0 or not reservoir
    gate.set()
    blocked = False
    sup.scene_left(1)
    take([0] * 6)
    _arrive(sup, bufs, 3, "b")            # a new visit of b: its own random stream
    for n in [4, 25, 3]:
        take(rng.choice([0, 3], n))
    sup.reseed(11)
    for n in [7, 2, 50]:
        take(rng.choice([0, 3], n))
    worker.close()
    return out, sup


def test_reservoir_gives_the_inline_episodes():
    inline, s0 = _run(0)
    ahead, s1 = _run(16)
    assert len(inline) == len(ahead)
    for a, b in zip(inline, ahead):
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)
        assert a[4] == b[4]
    starts = np.concatenate([t[0] for t in ahead])
    assert len(np.unique(starts, axis=0)) == len(starts)   # every draw is a new episode
    assert s0.waits == 0
    # the takes larger than the reservoir (50 after the reseed, at least) were drawn inline
    assert s1.waits == 0 and s1.misses >= 1 and len(s1.miss_reasons) == s1.misses


def _refs(fields):
    return {int(r): int(c) for r, c in enumerate(fields.refs) if c}


def test_reservoir_rows_released_when_scene_leaves():
    sup, worker, bufs = _supply(16)
    fields = _arrive(sup, bufs, 0, "a")
    pool_rows = sup.scenes[0].ready_pool["rows"]
    held = sup.scenes[0].res
    assert held.size() == 16
    e, _ = sup.take(np.zeros(3, np.int64))
    # the pool holds one reference per row; each drawn episode (taken or waiting) one more
    expect = {int(r): 1 for r in pool_rows}
    for r in np.concatenate([e.rows, held.eps.rows[held.head:]]).tolist():
        expect[r] += 1
    assert _refs(fields) == expect

    # a top-up queued behind a busy worker when the scene leaves must not retain anything
    gate = threading.Event()
    worker.run(gate.wait)
    e2, _ = sup.take(np.zeros(8, np.int64))            # 5 left < 16 // 2: a top-up is queued
    fill = held.fill
    assert fill is not None and not fill.done()
    sup.scene_left(0)
    gate.set()
    fill.result(timeout=60)
    taken = np.concatenate([e.rows, e2.rows])
    expect = {int(r): 1 for r in pool_rows}
    for r in taken.tolist():
        expect[r] += 1
    assert _refs(fields) == expect                     # reservoir rows given back, the env's kept
    assert held.size() == 0
    fields.release_many(taken)
    assert _refs(fields) == {int(r): 1 for r in pool_rows}
    worker.close()


def _draw_one(sup, st, j):
    """Episode j of a scene visit, one attempt at a time (habitat's generator loop), from the
    same counter uniforms: the reference for the vectorized draw."""
    from bps_runtime.episodes.supply import counter_uniforms
    P, o, nm = st.ready_pool, sup.options, st.mesh.navmesh
    u = counter_uniforms(st.key_seed, np.array([j], np.uint64), 2 + 4 * o.retries)[0]
    g = min(int(u[0] * len(P["rows"])), len(P["rows"]) - 1)
    goal = P["goals"][g]
    for a in range(o.retries):
        ua = u[2 + 4 * a: 6 + 4 * a]
        span = P["cand"][P["offsets"][g] + min(int(ua[0] * P["sizes"][g]), P["sizes"][g] - 1)]
        c = nm.span_pos[span]
        q = np.array([c[0] + (ua[1] - 0.5) * nm.cell_size, c[1], c[2] + (ua[2] - 0.5) * nm.cell_size])
        d = float(P["fields"][g, span]) + np.hypot(q[0] - c[0], q[2] - c[2])
        ratio = d / max(np.linalg.norm(q - goal), 1e-9)
        if ratio >= o.min_ratio or ua[3] <= 20.0 * (ratio - 0.98) ** 2:
            break
    return q, goal, P["rows"][g], a


def test_vectorized_draw_matches_one_episode_at_a_time():
    sup, worker, bufs = _supply(16)
    _arrive(sup, bufs, 0, "b")
    st = sup.scenes[0]
    e = sup._draw(st, 100, 200)
    attempts = []
    for i in range(200):
        q, goal, row, a = _draw_one(sup, st, 100 + i)
        np.testing.assert_array_equal(e.start[i], q.astype(np.float32))
        np.testing.assert_array_equal(e.goal[i], goal.astype(np.float32))
        assert e.rows[i] == row and e.episode_ids[i] == f"b:{100 + i}"
        attempts.append(a)
    # near-straight candidates were rejected and redrawn, some up to the last attempt
    assert 0 < np.mean(np.array(attempts) > 0) < 1
    worker.close()


def test_env_stats_report_reservoir_misses():
    """A reset of more envs than a scene's reservoir holds draws the rest inline: the env's
    stats count it and say why (the supply's latest reasons), without calling it a wait."""
    from inmemory_scenes import make_env, room

    env = make_env([room("a", 3.0, 4.0)], num_envs=400, seed=0)
    try:
        env.reset()
        sup = env.world.episodes
        assert env.stats["episode_misses"] == sup.misses >= 1
        assert list(env.stats["episode_miss_reasons"]) == list(sup.miss_reasons)
        assert "reservoir had" in env.stats["episode_miss_reasons"][-1]
        assert env.stats["waited_steps"] == 0
    finally:
        env.close()
