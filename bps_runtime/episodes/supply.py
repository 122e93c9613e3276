"""Where the batched PointNav env gets its episodes: prepared ahead, off the step path.

Two sources, both deterministic for a seed (the random streams are per scene and per visit of
that scene, drawn only on the simulator thread in env order; background threads compute
distance fields, whose values do not depend on timing):

- ``dataset``: habitat PointNav v1 episodes of each scene, in a seeded shuffled order, cycled.
  A background thread snaps each upcoming episode's start and computes its goal's distance
  field ``lookahead`` episodes ahead per scene; an episode whose field is not ready when an
  agent needs it is computed on the spot and counted as a wait.
- ``sample`` (no episode files, or ``episodes="sample"``): habitat-lab's generator rules on the
  fly, made cheap by a per-scene **goal pool**: when a scene arrives, ``goal_pool`` goals are
  drawn (islands with radius >= 1.5 m) and their distance fields computed in the background;
  each new episode picks a goal from the pool and a fresh start uniformly over the navigable
  area with geodesic distance in [1, 30] m, |dy| <= 0.5 m and habitat's rejection of
  straight-line episodes (ratio < 1.1 kept with p = 20 (ratio - 0.98)^2), and a random yaw.
  One Dijkstra per goal then serves thousands of episodes: with a random policy (episodes of a
  few steps) a per-episode Dijkstra would cost more than rendering. The draws themselves run
  ahead too: each scene keeps a reservoir of its next ``reservoir`` episodes, drawn in chunks
  on the field worker, and ``take`` only slices it (episode j still uses counter j's random
  numbers, so the episodes are those ``reservoir=0`` draws inline).

Measured (issue 11, 1,024 envs, 8 scenes, 2-core machine; docs/PERFORMANCE.md): drawing inline,
once per scene per step, cost the simulator thread ~8 ms per step, mostly numpy call overhead
of a loop over the rejection attempts; the reservoir leaves ~0.9 ms in ``EpisodeRing.refill``
and ~2-3 ms on the worker. A reservoir of 512 measured the same as 128.
"""
from __future__ import annotations

import threading
import zlib
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import torch

from bps_assets.errors import ConfigError, NavError
from bps_assets.nav.episodes import DEFAULTS as _GEN

from ..nav.buffers import SMALL_BATCH, FieldWorker, GoalFields, SceneNav
from .files import quat_to_yaw


@dataclass(frozen=True)
class SupplyOptions:
    """Episode supply settings: goal pool / lookahead sizes and habitat's generator limits."""
    goal_pool: int = 32              # sampled mode: goals (distance fields) per resident scene
    lookahead: int = 32              # dataset mode: episodes prepared ahead per scene
    memo_episodes: int = 256         # dataset mode: prepared episodes kept per resident scene
    reservoir: int = 128             # sampled mode: episodes drawn ahead per scene (0: draw in take)
    # habitat-lab's generator limits, as bps_assets.nav.episodes applies them to dataset files
    closest_dist: float = _GEN.closest_dist_limit
    furthest_dist: float = _GEN.furthest_dist_limit
    min_ratio: float = _GEN.geodesic_to_euclid_min_ratio
    max_dy: float = _GEN.max_height_difference
    island_radius_limit: float = _GEN.island_radius_limit
    retries: int = _GEN.number_retries_per_target


DEFAULTS = SupplyOptions()


@dataclass
class NewEpisodes:
    """New episodes for a list of envs: start, yaw, goal, goal-field rows, ids."""
    start: np.ndarray            # [n,3] float32
    yaw: np.ndarray              # [n] float32
    goal: np.ndarray             # [n,3] float32
    rows: np.ndarray             # [n] int64 rows of the scenes' GoalFields
    episode_ids: list = field(default_factory=list)


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def counter_uniforms(key: int, counters: np.ndarray, n: int) -> np.ndarray:
    """[len(counters), n] uniforms in [0, 1): splitmix64 of (key, counter, i). A counter-based
    stream: draw j does not depend on how many draws were made before it."""
    with np.errstate(over="ignore"):
        x = (counters.astype(np.uint64)[:, None] * np.uint64(n) + np.arange(n, dtype=np.uint64)[None, :])
        x = x * np.uint64(0x9E3779B97F4A7C15) + np.uint64(key & 0xFFFFFFFFFFFFFFFF)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _release_result(st, fut: Future):
    if fut.cancelled() or fut.exception() is not None:
        return
    res = fut.result()
    if res is not None:
        st.fields.release(res[3])


def _done(fn, *args) -> Future:
    f: Future = Future()
    try:
        f.set_result(fn(*args))
    except BaseException as e:  # noqa: BLE001 - re-raised by .result() where it is used
        f.set_exception(e)
    return f


def _seed_for(seed: int, name: str, visit: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed) & (2**63 - 1), zlib.crc32(name.encode()), visit]))


def _group_by_key(keys: np.ndarray) -> tuple[np.ndarray | None, list[tuple[int, int]]]:
    """Entries grouped by key, keys ascending, entries in their order within a key: (the stable
    argsort of ``keys`` -- None when it is the identity -- and the [a, b) bounds of each key's
    run in it). A handful of numpy calls, whatever the number of keys."""
    n = len(keys)
    if n == 0:
        return None, []
    if n == 1 or not (keys[1:] < keys[:-1]).any():
        order, sk = None, keys
    else:
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
    cuts = (np.flatnonzero(sk[1:] != sk[:-1]) + 1).tolist()
    return order, list(zip([0] + cuts, cuts + [n]))


class _SceneState:
    """One resident scene's episode source: its navigation, fields, random stream, pool/order."""

    def __init__(self, key, name, mesh: SceneNav, fields: GoalFields, rng):
        self.key, self.name, self.mesh, self.fields, self.rng = key, name, mesh, fields, rng
        self.key_seed = int(rng.integers(2**63))
        self.pool: list = []           # sampled: Futures of (row, candidate spans)
        self.ready_pool = None         # sampled: list of (row, cand spans)
        self.order = None              # dataset: episode order
        self.ptr = 0
        self.ahead: dict = {}          # dataset: sequence position -> Future
        self.memo: dict = {}           # dataset: episode index -> prepared episode (or None)
        self.count = 0
        self.res = _Reservoir()


class _Reservoir:
    """Sampled mode: the next episodes of one scene visit, drawn ahead in chunks on the field
    worker. ``next`` is the counter of the next episode to draw; every episode held keeps one
    reference to its field row, handed over to the env with the episode."""

    def __init__(self):
        self.lock = threading.Lock()
        self.eps: NewEpisodes | None = None   # held episodes, in counter order
        self.head = 0                         # first one not yet taken
        self.next = 0
        self.gen = 0                          # changes when the scene leaves or is reseeded
        self.fill: Future | None = None       # the chunk being drawn on the worker

    def size(self) -> int:
        return 0 if self.eps is None else len(self.eps.rows) - self.head

    def drop(self, fields: GoalFields):
        """Give back every held episode's field row; forget the chunk being drawn."""
        with self.lock:
            if self.eps is not None:
                fields.release_many(self.eps.rows[self.head:])
            self.eps, self.head, self.next, self.fill = None, 0, 0, None
            self.gen += 1


def _slice_reserved(r: _Reservoir, n: int) -> NewEpisodes:
    """The reservoir's next ``n`` episodes (views), consumed; call under ``r.lock``."""
    h, e = r.head, r.eps
    r.head = h + n
    return NewEpisodes(e.start[h:h + n], e.yaw[h:h + n], e.goal[h:h + n], e.rows[h:h + n], e.episode_ids[h:h + n])


class EpisodeSupply:
    """Episodes for the env, per resident scene, prepared ahead (see the module docstring)."""

    def __init__(self, mode: str, seed: int, worker: FieldWorker, episodes_by_scene: dict | None = None,
                 options: SupplyOptions = DEFAULTS):
        if mode not in ("sample", "dataset"):
            raise ConfigError(None, f"episodes mode {mode!r}: expected 'sample' or 'dataset'")
        self.mode, self.seed, self.worker, self.options = mode, int(seed), worker, options
        self.episodes_by_scene = episodes_by_scene or {}
        self.scenes: dict[int, _SceneState] = {}
        self.visits: dict[str, int] = {}
        self.waits = 0
        self.wait_reasons: list[str] = []   # one line per wait (the env's stats collect them)
        self.misses = 0                   # sampled mode: takes the reservoir could not serve
        self.miss_reasons: deque[str] = deque(maxlen=100)   # the latest misses, why

    def field_rows(self) -> int:
        """Goal distance-field rows a resident scene starts with."""
        o = self.options
        return o.goal_pool if self.mode == "sample" else 2 * o.lookahead + 16

    def take_wait_reasons(self) -> list[str]:
        """The supply's wait reasons since the last call (as the scene cache's)."""
        out, self.wait_reasons = self.wait_reasons, []
        return out

    # ------------------------------------------------------------------ scene arrival / leave
    def scene_arrived(self, key: int, name: str, mesh: SceneNav, inline: bool = True) -> GoalFields:
        """``prepare`` + ``register``."""
        st = self.prepare(name, mesh, inline)
        self.register(key, st)
        return st.fields

    def prepare(self, name: str, mesh: SceneNav, inline: bool = True) -> "_SceneState":
        """Prepare a scene's first episodes: the goal pool (sampled) or the first ``lookahead``
        episodes (dataset). ``inline``: compute them in the calling thread (the scene cache's
        loader thread, so the scene is ready when its load is) instead of the field worker.
        Thread-safe for different scenes."""
        visit = self.visits.get(name, 0)
        self.visits[name] = visit + 1
        o = self.options
        fields = GoalFields(mesh, capacity=self.field_rows())
        st = _SceneState(None, name, mesh, fields, _seed_for(self.seed, name, visit))
        if self.mode == "sample":
            goals = self._pool_goals(st)
            st.pool = [_done(self._pool_entry, st, g) if inline else self.worker.run(self._pool_entry, st, g)
                       for g in goals]
            if o.reservoir > 0:  # the first episodes with the pool (after it, on the worker)
                args = (self._fill, st, st.res.gen, o.reservoir)
                st.res.fill = _done(*args) if inline else self.worker.run(*args)
        else:
            eps = self.episodes_by_scene.get(name)
            if not eps:
                raise NavError(None, f"scene {name!r} has no episodes in the dataset")
            st.order = st.rng.permutation(len(eps))
            if inline:  # the first episodes now, in the loader thread (distinct: order is a permutation)
                for pos in range(min(o.lookahead, len(eps))):
                    st.ahead[pos] = _done(self._prepare_dataset_episode, st, eps[int(st.order[pos])])
            self._schedule(st)
        return st

    def register(self, key: int, st: "_SceneState"):
        """Make a prepared scene available under ``key`` (cheap: the step path may call it)."""
        st.key = key
        self.scenes[key] = st

    def scene_left(self, key: int):
        """Scene ``key`` is no longer resident: cancel its pending preparation."""
        st = self.scenes.pop(key, None)
        if st is not None:
            for f in st.pool + list(st.ahead.values()):
                f.cancel()
            st.res.drop(st.fields)

    def reseed(self, seed: int):
        """New random streams for every scene (resident ones now, later arrivals too)."""
        self.seed = int(seed)
        for st in self.scenes.values():
            st.rng = _seed_for(self.seed, st.name, self.visits.get(st.name, 1) + 1_000_003)
            st.key_seed = int(st.rng.integers(2**63))
            st.count = 0
            if self.mode == "sample" and self.options.reservoir > 0:
                st.res.drop(st.fields)
                st.res.fill = _done(self._fill, st, st.res.gen, self.options.reservoir)

    # ------------------------------------------------------------------ sampled mode
    def _pool_goals(self, st: _SceneState) -> np.ndarray:
        nm, o = st.mesh.navmesh, self.options
        seed = int(st.rng.integers(2**31))
        cand = np.asarray(nm.sample_navigable_point(8 * o.goal_pool, seed), np.float64).reshape(-1, 3)
        rad = np.asarray(nm.island_radius(cand), np.float64).reshape(-1)
        good = cand[rad >= o.island_radius_limit]
        if len(good) == 0:
            good = cand
        return good[: o.goal_pool]

    def _pool_entry(self, st: _SceneState, goal):
        o = self.options
        nm = st.mesh.navmesh
        flat = st.fields.compute(goal)
        dy = np.abs(nm.span_pos[:, 1] - goal[1])
        ok = np.isfinite(flat) & (flat >= o.closest_dist) & (flat <= o.furthest_dist) & (dy <= o.max_dy)
        cand = np.nonzero(ok)[0]
        if cand.size == 0:  # tiny scene: take whatever is reachable
            cand = np.nonzero(np.isfinite(flat) & (dy <= o.max_dy))[0]
        row = st.fields.add(goal, flat)
        return row, cand

    def _ready_pool(self, st: _SceneState):
        todo = sum(not f.done() for f in st.pool)
        self.waits += int(todo > 0)
        if todo:
            self.wait_reasons.append(f"scene {st.name!r}: {todo} of its {len(st.pool)} goal-pool distance "
                                     "fields were still being computed when its first episodes were taken")
        pool = [e for e in (f.result() for f in st.pool) if e[1].size]
        if not pool:
            raise NavError(None, f"scene {st.name!r}: no goal with a reachable start")
        rows = np.array([r for r, _ in pool], np.int64)
        sizes = np.array([c.size for _, c in pool], np.int64)
        st.ready_pool = {
            "rows": rows, "sizes": sizes, "offsets": np.r_[0, np.cumsum(sizes)[:-1]],
            "cand": np.concatenate([c for _, c in pool]),
            "fields": np.stack([st.fields.host[r] for r in rows]),          # [G, S] host copies
            "goals": np.stack([st.fields.goals[r] for r in rows]),
        }

    def _sample(self, st: _SceneState, k: int) -> NewEpisodes:
        """k episodes, vectorized: goal from the pool, start uniform over the goal's candidate
        spans (and inside the cell), habitat's rejection of near-straight episodes (up to
        ``retries`` redraws), random yaw. Episode j of a scene visit uses only the random
        numbers of counter j (``counter_uniforms``), so results do not depend on how agents
        are batched into groups."""
        e = self._draw(st, st.count, k)
        st.fields.retain_many(e.rows)
        st.count += k
        return e

    def _draw(self, st: _SceneState, c0: int, k: int) -> NewEpisodes:
        """Episodes ``c0 .. c0 + k - 1`` of the scene visit (``_sample``'s draw; retains nothing)."""
        if st.ready_pool is None:
            self._ready_pool(st)
        P, o, nm = st.ready_pool, self.options, st.mesh.navmesh
        cs = nm.cell_size
        U = counter_uniforms(st.key_seed, np.arange(c0, c0 + k, dtype=np.uint64), 2 + 4 * o.retries)
        g = np.minimum((U[:, 0] * len(P["rows"])).astype(np.int64), len(P["rows"]) - 1)
        goal = P["goals"][g]
        # every attempt of every episode at once (a loop over attempts cost ~0.4 ms per call in
        # numpy overhead: most candidates in open rooms are near-straight and redrawn); the
        # start is the first attempt kept, else the last, as habitat's loop has it
        A = o.retries
        gi = np.repeat(g, A)
        u = U[:, 2:2 + 4 * A].reshape(k * A, 4)
        size = P["sizes"][gi]
        span = P["cand"][P["offsets"][gi] + np.minimum((u[:, 0] * size).astype(np.int64), size - 1)]
        c = nm.span_pos[span]
        q = np.stack([c[:, 0] + (u[:, 1] - 0.5) * cs, c[:, 1], c[:, 2] + (u[:, 2] - 0.5) * cs], 1)
        d = P["fields"][gi, span] + np.hypot(q[:, 0] - c[:, 0], q[:, 2] - c[:, 2])
        ratio = d / np.maximum(np.linalg.norm(q - np.repeat(goal, A, 0), axis=1), 1e-9)
        keep = ((ratio >= o.min_ratio) | (u[:, 3] <= 20.0 * (ratio - 0.98) ** 2)).reshape(k, A)
        keep[:, -1] = True
        start = q.reshape(k, A, 3)[np.arange(k), keep.argmax(1)]
        yaw = U[:, 1] * 2 * np.pi
        yaw = np.arctan2(np.sin(yaw), np.cos(yaw))
        rows = P["rows"][g]
        ids = [f"{st.name}:{c0 + j}" for j in range(k)]
        return NewEpisodes(start.astype(np.float32), yaw.astype(np.float32), goal.astype(np.float32), rows, ids)

    def _fill(self, st: _SceneState, gen: int, k: int):
        """Draw the reservoir's next ``k`` episodes (field worker; inline when it ran dry).
        Counters are reserved under the lock, so one fill at a time keeps them in order."""
        r = st.res
        with r.lock:
            if r.gen != gen:
                return
            c0 = r.next
            r.next += k
        e = self._draw(st, c0, k)
        with r.lock:
            if r.gen != gen:   # the scene left or was reseeded meanwhile: nothing was retained
                return
            st.fields.retain_many(e.rows)
            if r.size() == 0:
                r.eps, r.head = e, 0
            else:
                h = r.head
                r.eps = NewEpisodes(*(np.concatenate([a[h:], b]) for a, b in
                                      ((r.eps.start, e.start), (r.eps.yaw, e.yaw), (r.eps.goal, e.goal),
                                       (r.eps.rows, e.rows))), r.eps.episode_ids[h:] + e.episode_ids)
                r.head = 0

    def _take_reserved(self, st: _SceneState, n: int) -> NewEpisodes:
        """The scene's next ``n`` episodes from its reservoir (slices), then a background top-up
        to ``max(reservoir, 2 n)`` when it is below half of that. Ran dry (a reset queues many
        episodes at once): cancel a queued fill or wait for the running one (its counters come
        first), then draw the rest inline; counted in ``misses``, not as a wait of the step
        (inline draws are what ``reservoir=0`` always does, and timing must not change
        ``waited_steps`` of a seeded run)."""
        r, R = st.res, self.options.reservoir
        with r.lock:   # the common case: enough held, sliced under the same lock
            out = _slice_reserved(r, n) if r.size() >= n else None
            have = r.size()
        if out is None:
            f, r.fill = r.fill, None
            if f is not None and not f.cancel():
                f.result()   # running or done; re-raises what the draw raised (no reachable start)
            with r.lock:
                have = r.size()
            if have < n:     # no fill is in flight now: this thread draws
                self.misses += 1
                self.miss_reasons.append(f"scene {st.name!r}: reservoir had {have} of {n} episodes, drew "
                                         f"{n - have + R} inline")
                self._fill(st, r.gen, n - have + R)
            with r.lock:
                out = _slice_reserved(r, n)
                have = r.size()
        st.count += n
        target = max(R, 2 * n)
        if have < target // 2 and (r.fill is None or r.fill.done()):
            if r.fill is not None:
                r.fill.result()   # a failed draw left a gap in the counters: raise it here
            r.fill = self.worker.run(self._fill, st, r.gen, target - have)
        return out

    # ------------------------------------------------------------------ dataset mode
    def _schedule(self, st: _SceneState):
        eps = self.episodes_by_scene[st.name]
        n = len(eps)
        pending = {int(st.order[p % n]) for p in st.ahead}
        for pos in range(st.ptr, st.ptr + min(self.options.lookahead, n)):
            k = int(st.order[pos % n])
            if pos not in st.ahead and k not in st.memo and k not in pending:
                st.ahead[pos] = self.worker.run(self._prepare_dataset_episode, st, eps[k])
                pending.add(k)

    def _prepare_dataset_episode(self, st: _SceneState, e: dict):
        nm = st.mesh.navmesh
        start = np.asarray(e["start_position"], np.float64).reshape(1, 3)
        goal = np.asarray(e["goals"][0]["position"], np.float64).reshape(3)
        snapped = np.asarray(nm.snap_point(start), np.float64).reshape(3)
        if not np.all(np.isfinite(snapped)):
            return None
        row = st.fields.add(goal)
        d = st.fields.distance_at_host(row, snapped[None])[0]
        if not np.isfinite(d):
            st.fields.release(row)
            return None
        q = torch.as_tensor(np.asarray(e.get("start_rotation", [0, 0, 0, 1]), np.float64).reshape(1, 4))
        yaw = float(quat_to_yaw(q)[0])
        return snapped, yaw, goal, row, str(e["episode_id"])

    def _next_dataset(self, st: _SceneState):
        eps = self.episodes_by_scene[st.name]
        for _ in range(len(eps) + 1):
            pos = st.ptr
            st.ptr += 1
            k = int(st.order[pos % len(eps)])
            fut = st.ahead.pop(pos, None)
            self._schedule(st)
            if k in st.memo:  # prepared on an earlier pass over the scene's episodes
                if fut is not None:  # a duplicate preparation: give its field row back
                    fut.add_done_callback(lambda f, st=st: _release_result(st, f))
                res = st.memo[k]
                if res is not None:
                    st.fields.retain(res[3])
                    return res, False
                continue
            if fut is None:
                e = eps[st.order[pos % len(eps)]]
                self.waits += 1
                self.wait_reasons.append(f"scene {st.name!r}: episode {e.get('episode_id')!r} was not prepared "
                                         f"ahead (computed on the simulator thread)")
                res = self._prepare_dataset_episode(st, e)
                waited = True
            else:
                waited = not fut.done()
                self.waits += int(waited)
                if waited:
                    self.wait_reasons.append(f"scene {st.name!r}: the distance field of its episode at position "
                                             f"{pos} was still being computed")
                res = fut.result()
            if len(st.memo) < self.options.memo_episodes:
                st.memo[k] = res            # the memo keeps its own reference to the row
                if res is not None:
                    st.fields.retain(res[3])
            if res is not None:
                return res, waited
        raise NavError(None, f"scene {st.name!r}: no episode of the dataset is valid on its navmesh")

    # ------------------------------------------------------------------ taking episodes
    def take(self, keys: np.ndarray) -> tuple[NewEpisodes, bool]:
        """One new episode per entry of ``keys`` (scene keys), in order."""
        keys = np.asarray(keys, np.int64)
        n = len(keys)
        w0 = self.waits
        if self.mode == "sample":
            # the scenes in key order, each serving its entries in env order (a stable sort);
            # one scatter per array back to the entries' order
            order, bounds = _group_by_key(keys)
            at = slice(None) if order is None else order
            first = keys if order is None else keys[order]
            take = self._take_reserved if self.options.reservoir > 0 else self._sample
            parts = [take(self.scenes[int(first[a])], b - a) for a, b in bounds]
            out = NewEpisodes(np.empty((n, 3), np.float32), np.empty(n, np.float32), np.empty((n, 3), np.float32),
                              np.empty(n, np.int64))
            if not parts:
                return out, False
            cat = (lambda a: a[0]) if len(parts) == 1 else np.concatenate
            out.start[at] = cat([e.start for e in parts])
            out.yaw[at] = cat([e.yaw for e in parts])
            out.goal[at] = cat([e.goal for e in parts])
            out.rows[at] = cat([e.rows for e in parts])
            ids = [i for e in parts for i in e.episode_ids]
            if order is not None:
                scattered = np.empty(n, object)
                scattered[order] = ids
                ids = scattered.tolist()
            out.episode_ids = ids
            return out, self.waits > w0
        out = NewEpisodes(np.zeros((n, 3), np.float32), np.zeros(n, np.float32), np.zeros((n, 3), np.float32),
                          np.zeros(n, np.int64), [""] * n)
        for key in np.unique(keys):
            st = self.scenes[int(key)]
            for i in np.nonzero(keys == key)[0]:
                (start, yaw, goal, row, eid), _ = self._next_dataset(st)
                out.start[i], out.yaw[i], out.goal[i], out.rows[i] = start, yaw, goal, row
                out.episode_ids[i] = eid
        return out, self.waits > w0

    def release(self, key: int, row: int):
        """An episode of scene ``key`` that used field ``row`` has ended."""
        self.release_many(np.array([key]), np.array([row]))

    def release_many(self, keys: np.ndarray, rows: np.ndarray):
        """``release`` for many (scene key, row) pairs at once."""
        keys, rows = np.asarray(keys, np.int64).reshape(-1), np.asarray(rows, np.int64).reshape(-1)
        if len(keys) <= SMALL_BATCH:     # a step's few ended episodes: group them in Python
            groups: dict[int, list] = {}
            for k, row in zip(keys.tolist(), rows.tolist()):
                groups.setdefault(k, []).append(row)
            for k in sorted(groups):
                st = self.scenes.get(k)
                if st is not None:
                    st.fields.release_many(groups[k])
            return
        order, bounds = _group_by_key(keys)
        for a, b in bounds:
            st = self.scenes.get(int(keys[a if order is None else order[a]]))
            if st is not None:
                st.fields.release_many(rows[a:b] if order is None else rows[order[a:b]])
