"""A reseed restarts the run's streams (gymnasium's contract for ``reset(seed=...)``): after
``env.seed(s)`` the next ``reset()`` starts the episodes (and the noise) exactly as an env made
with seed ``s`` starts them, in the scenes already resident; the scene cache itself is not reset
(docs/ENV.md, "Episodes and determinism"). Sampled and dataset episodes, the gymnasium adapter,
actuation and sensor noise.
"""
from __future__ import annotations

import numpy as np
import pytest

import pointnav_trace as pt

# every scene resident (3 slots for 3 scenes): which scenes are resident does not change
KW = dict(split=None, num_envs=6, resolution=(12, 12), sensors=("depth",), threads=1, cache={"slots": 3, "seed": 0})


@pytest.fixture(scope="module")
def manifest(box_rooms_manifest):   # conftest.py's
    return str(box_rooms_manifest)


def _first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


@pytest.mark.parametrize("episodes", ["sample", "dataset"])
def test_reseeded_reset_repeats_the_run_and_matches_an_env_made_with_that_seed(manifest, episodes):
    from bps_runtime import make

    made = make(manifest, seed=1, episodes=episodes, **KW)
    try:
        want = pt.step_trace(made, 40, made.reset(), made.last_info)
    finally:
        made.close()
    env = make(manifest, seed=0, episodes=episodes, **KW)
    try:
        env.reset()
        pt.step_trace(env, 25, env.reset(), env.last_info)   # some episodes of seed 0 first
        got = []
        for s in (1, 2, 1):
            env.seed(s)
            got.append(pt.step_trace(env, 40, env.reset(), env.last_info))
    finally:
        env.close()
    assert _first_difference(got[0], want) is None, f"seed(1) + reset() differs from make(seed=1) at step " \
                                                     f"{_first_difference(got[0], want)} (0 = reset)"
    assert got[2] == got[0], f"the second seed(1) + reset() differs at step {_first_difference(got[2], got[0])}"
    assert got[1][0] != got[0][0]   # another seed: other episodes


@pytest.mark.parametrize("episodes", ["sample", "dataset"])
def test_gym_reset_seed_restarts_the_episodes(manifest, episodes):
    """reset(seed=1), reset(seed=2), reset(seed=1): the first and the third start alike (a
    dataset's episode order used to go on where it was)."""
    from bps_runtime import GymVectorEnv, make

    env = GymVectorEnv(make(manifest, seed=0, episodes=episodes, **KW))
    try:
        starts = []
        for s in (1, 2, 1):
            obs, info = env.reset(seed=s)
            starts.append((obs["depth"].copy(), info["position"].copy(), info["rotation"].copy()))
            for _ in range(15):
                env.step(env.action_space.sample())
        for x, y in zip(starts[0], starts[2]):
            np.testing.assert_array_equal(x, y)
        assert not np.array_equal(starts[0][1], starts[1][1])
    finally:
        env.close()


def test_reseed_restarts_the_noise_streams(manifest):
    """With habitat's challenge noise (actuation and sensors): ``seed(s)`` + ``reset()`` gives
    the steps of ``make(seed=s)``; the noise keys and counters restart with the episodes."""
    from bps_runtime import make

    kw = dict(KW, noise="challenge2021", sensors=("depth", "rgb"))
    made = make(manifest, seed=4, **kw)
    try:
        want = pt.step_trace(made, 20, made.reset(), made.last_info)
    finally:
        made.close()
    env = make(manifest, seed=0, **kw)
    try:
        env.reset()
        pt.step_trace(env, 10, env.reset(), env.last_info)
        env.seed(4)
        got = pt.step_trace(env, 20, env.reset(), env.last_info)
    finally:
        env.close()
    assert _first_difference(got, want) is None, f"differs at step {_first_difference(got, want)}"


@pytest.mark.parametrize("reservoir", [0, 16])
def test_a_scene_prepared_before_a_reseed_arrives_on_the_new_streams(reservoir):
    """A load in flight at the reseed (prepared on the old seed) restarts when it arrives: its
    episodes, and a resident scene's, are those of a supply made with the new seed; the field
    rows the old preparations held go back."""
    from bps_runtime.episodes.sampled import SampledEpisodes
    from bps_runtime.episodes.supply import SupplyOptions
    from bps_runtime.nav.buffers import FieldWorker, NavBuffers, SceneNav
    from inmemory_scenes import room

    rooms = {"a": room("a")[4], "b": room("b", w=5.0, d=5.0, pillars=[(2.0, -3.0, 2.5, -2.0)])[4]}

    def supply(seed):
        worker = FieldWorker()
        return SampledEpisodes(seed, worker, SupplyOptions(goal_pool=6, reservoir=reservoir)), worker, NavBuffers(capacity=8)

    def episodes(sup, keys):
        e, _ = sup.take(np.asarray(keys, np.int64))
        return e.start.copy(), e.yaw.copy(), e.goal.copy(), list(e.episode_ids), e.rows.copy()

    fresh, w1, bufs1 = supply(5)
    for key, name in ((0, "a"), (1, "b")):
        fresh.register(key, fresh.prepare(name, SceneNav(rooms[name], bufs1)))
    want = episodes(fresh, [0, 1, 1, 0, 1])
    w1.close()

    sup, w2, bufs2 = supply(3)
    sup.register(0, sup.prepare("a", SceneNav(rooms["a"], bufs2)))
    episodes(sup, [0, 0, 0])
    sup.scene_left(0)
    sup.register(2, sup.prepare("a", SceneNav(rooms["a"], bufs2)))    # a's second visit
    held = episodes(sup, [2, 2])[4]
    late = sup.prepare("b", SceneNav(rooms["b"], bufs2))               # loading while we reseed
    sup.release_many(np.full(2, 2), held)     # as the env's reset does: the episodes end first
    sup.reseed(5)
    sup.register(1, late)
    got = episodes(sup, [2, 1, 1, 2, 1])
    for x, y in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(x, y)
    assert got[3] == want[3]
    # what the supply holds of "a" now: its new pool (one reference per goal) and the episodes
    # just taken (and, with a reservoir, those drawn ahead): none of the old visit's rows
    st = sup.scenes[2]
    if st.res.fill is not None:
        st.res.fill.result()    # a top-up drawing on the worker: let it land first
    expect = {int(r): 1 for r in st.ready_pool["rows"]}
    ahead = [] if st.res.eps is None else st.res.eps.rows[st.res.head:].tolist()
    for r in [r for k, r in zip([2, 1, 1, 2, 1], got[4]) if k == 2] + ahead:
        expect[int(r)] += 1
    assert {int(r): int(c) for r, c in enumerate(st.fields.refs) if c} == expect
    w2.close()


def test_a_reseed_that_fails_leaves_the_supply_as_it_was():
    """A scene whose preparation raises under the new seed: ``reseed`` raises and the supply
    goes on exactly as if it had not been called (streams, counters, field rows)."""
    from bps_runtime.episodes.sampled import SampledEpisodes
    from bps_runtime.episodes.supply import SupplyOptions
    from bps_runtime.nav.buffers import FieldWorker, NavBuffers, SceneNav
    from inmemory_scenes import room

    rooms = {"a": room("a")[4], "b": room("b", w=5.0, d=5.0, pillars=[(2.0, -3.0, 2.5, -2.0)])[4]}

    class Failing(SampledEpisodes):
        def _pool_goals(self, st):
            if self.seed == 7 and st.name == "b":
                raise RuntimeError("no goal under seed 7")
            return super()._pool_goals(st)

    def run(try_reseed):
        worker = FieldWorker()
        sup, bufs = Failing(3, worker, SupplyOptions(goal_pool=6, reservoir=8)), NavBuffers(capacity=8)
        for key, name in ((0, "a"), (1, "b")):
            sup.register(key, sup.prepare(name, SceneNav(rooms[name], bufs)))
        e, _ = sup.take(np.asarray([0, 1, 0], np.int64))
        sup.release_many(np.asarray([0, 1, 0]), e.rows)
        before = (sup.seed, sup.epoch, dict(sup.visits), dict(sup.scenes),
                  {k: st.fields.refs.copy() for k, st in sup.scenes.items()})
        if try_reseed:
            with pytest.raises(RuntimeError, match="seed 7"):
                sup.reseed(7)
            after = (sup.seed, sup.epoch, dict(sup.visits), dict(sup.scenes))
            assert after == before[:4]
            for k, st in sup.scenes.items():   # (the fields may have grown: the new rows unused)
                refs = before[4][k]
                np.testing.assert_array_equal(st.fields.refs[:len(refs)], refs)
                assert not st.fields.refs[len(refs):].any()
        e, _ = sup.take(np.asarray([1, 0, 1, 1, 0] * 4, np.int64))
        worker.close()
        return e.start.copy(), e.goal.copy(), list(e.episode_ids)

    want, got = run(False), run(True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2]


@pytest.mark.parametrize("episodes", ["sample", "dataset"])
def test_a_load_ready_at_the_reseed_restarts_off_the_simulator_thread(manifest, episodes, monkeypatch):
    """2 slots for 3 scenes: the next scene's load (prepared under the old seed) has finished
    before ``seed(1)`` + ``reset()`` and is taken in during the steps after them. Its restart
    runs on the field worker, never on the simulator thread (a stall of a step), and the run
    equals that of an env made with seed 1 that went through the same reseed."""
    import threading
    import time

    from bps_runtime import make
    from bps_runtime.episodes.dataset import DatasetEpisodes
    from bps_runtime.episodes.sampled import SampledEpisodes
    from bps_runtime.episodes.supply import EpisodeSupply

    cls = SampledEpisodes if episodes == "sample" else DatasetEpisodes
    starts, in_reseed = [], [False]
    start, reseed = cls._start, EpisodeSupply.reseed

    def recorded_start(self, st, inline):
        starts.append((st.name, st.epoch, threading.current_thread().name, in_reseed[0]))
        return start(self, st, inline)

    def recorded_reseed(self, seed):
        in_reseed[0] = True
        try:
            return reseed(self, seed)
        finally:
            in_reseed[0] = False

    # the third scene's load (the first two fill the slots) finishes only after the first reset:
    # it cannot be taken in before the reseed
    prepare, gate, prepared = EpisodeSupply.prepare, threading.Event(), []

    def gated_prepare(self, name, mesh, inline=True):
        prepared.append(name)
        if len(prepared) > 2:
            gate.wait(60)
        return prepare(self, name, mesh, inline)

    monkeypatch.setattr(cls, "_start", recorded_start)
    monkeypatch.setattr(EpisodeSupply, "reseed", recorded_reseed)
    monkeypatch.setattr(EpisodeSupply, "prepare", gated_prepare)
    kw = dict(KW, episodes=episodes, cache={"slots": 2, "swap_every": 6, "seed": 0})

    def run(seed):
        gate.clear()
        del prepared[:]
        env = make(manifest, seed=seed, **kw)
        try:
            env.reset()
            gate.set()
            slots = env.world.scenes.slots
            assert any(s.pending is not None for s in slots)   # the third scene is loading
            for s in slots:
                while s.pending is not None and not s.pending.done():
                    time.sleep(0.01)
            env.seed(1)
            del starts[:]
            return pt.step_trace(env, 40, env.reset(), env.last_info), list(starts)
        finally:
            env.close()

    want, _ = run(1)
    got, calls = run(0)
    restarts = [c for c in calls if c[1] == 1 and not c[3]]   # new-seed starts outside reseed()
    assert restarts, "no scene prepared before the reseed was taken in after it"
    assert all(not thread.startswith("bps-sim") for _n, _e, thread, _r in restarts), restarts
    assert _first_difference(got, want) is None, f"differs from the seed-1 env at step {_first_difference(got, want)}"


class _ManualWorker:
    """A field worker that runs its queue only when told (``drain``): what is still queued when
    a state is retired is what a busy worker would run later."""

    def __init__(self):
        self.queue = []

    def run(self, fn, *args):
        from concurrent.futures import Future

        f = Future()
        self.queue.append((f, fn, args))
        return f

    def submit(self, fields, goal):
        return self.run(fields.add, goal)

    def drain(self):
        while self.queue:
            f, fn, args = self.queue.pop(0)
            if f.set_running_or_notify_cancel():
                try:
                    f.set_result(fn(*args))
                except BaseException as e:  # noqa: BLE001 - the Future carries it
                    f.set_exception(e)


def test_a_duplicate_preparation_does_not_outlive_its_retired_scene_visit(monkeypatch):
    """Dataset episodes sharing a goal key, fewer than the lookahead: the second pass over the
    scene's episodes finds one already prepared and drops the duplicate preparation queued for
    it. A reseed then retires the visit: that duplicate must end with it (cancelled or waited
    for), not run later on the retired state (it would take a reference to a shared field row
    the retire gave back)."""
    from bps_runtime.episodes.dataset import DatasetEpisodes, EpisodeGoal
    from bps_runtime.episodes.supply import SupplyOptions
    from bps_runtime.nav.buffers import NavBuffers, SceneNav
    from inmemory_scenes import room

    bufs = NavBuffers(capacity=4)
    nav = SceneNav(room("a")[4], bufs)
    pts = np.asarray(nav.navmesh.sample_navigable_point(4, 0), np.float64).reshape(-1, 3)
    eps = [{"episode_id": str(i), "start_position": pts[i].tolist(), "start_rotation": [0, 0, 0, 1],
            "goals": [{"position": pts[3].tolist()}]} for i in range(3)]
    goals = {"a": {str(i): EpisodeGoal(pts[3:4], key="obj", goal_id=1) for i in range(3)}}
    worker = _ManualWorker()
    sup = DatasetEpisodes({"a": eps}, 0, worker, SupplyOptions(lookahead=3), goals=goals)
    ran_on = []
    prepare = DatasetEpisodes._prepare_dataset_episode
    monkeypatch.setattr(DatasetEpisodes, "_prepare_dataset_episode",
                        lambda self, st, e: ran_on.append(st) or prepare(self, st, e))
    sup.register(0, sup.prepare("a", nav))
    old = sup.scenes[0]
    rows = []
    for _ in range(4):   # the 4th is the first episode again: its queued preparation is a duplicate
        e, _w = sup.take(np.zeros(1, np.int64))
        rows.append(int(e.rows[0]))
    queued = [f for f, _fn, _a in worker.queue if not f.done()]
    assert any(f not in old.ahead.values() for f in queued), "no duplicate preparation left queued"
    sup.release_many(np.zeros(4, np.int64), np.asarray(rows))
    sup.reseed(1)
    del ran_on[:]
    worker.drain()
    assert not any(st is old for st in ran_on), "a preparation of the retired visit ran after the reseed"
    assert sup.scenes[0] is not old
