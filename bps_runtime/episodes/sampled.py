"""Sampled episodes: habitat-lab's generator rules on the fly, made cheap by a per-scene goal pool
(``goal_pool`` goals' distance fields, computed when the scene arrives) and a reservoir of the
next ``reservoir`` episodes drawn ahead on the field worker. Episode j of a scene visit uses only
counter j's random numbers (``counter_uniforms``), so the episodes do not depend on batching or
timing. Goals on the largest indoor island (``bps_assets.nav.indoor``) unless ``all_islands``.
Rules: a start uniform over the goal's reachable spans with geodesic distance in [1, 30] m,
|dy| <= 0.5 m, habitat's rejection of near-straight episodes, a random yaw; the goal
view's heading (ImageNav's goal image) one of ``goal_views`` random headings of its pool goal
(drawn per scene visit), so a visit has at most goal_pool x goal_views distinct goal images.
"""
from __future__ import annotations

import numpy as np

from bps_assets.errors import NavError
from bps_assets.nav.episodes import in_distance_range, ratio_kept
from bps_assets.nav.indoor import episode_islands

# keys of the goal-view streams (xor-ed into the visit's key): the pool's headings, each episode's pick
_VIEWS_KEY, _PICK_KEY = 0x5EED_0F_71E5, 0x5EED_0F_9AC4

from ..grouping import group_by_scene
from .supply import (EpisodeSupply, NewEpisodes, _SceneState, _done, _slice_reserved,
                     counter_uniforms)


class SampledEpisodes(EpisodeSupply):
    """Episodes drawn per resident scene from its goal pool (see the module docstring)."""

    def field_rows(self) -> int:
        """Goal distance-field rows a resident scene starts with: its goal pool."""
        return self.options.goal_pool

    def _start(self, st: _SceneState, inline: bool) -> None:
        o = self.options
        goals = self._pool_goals(st)
        st.pool = [_done(self._pool_entry, st, g) if inline else self.worker.run(self._pool_entry, st, g)
                   for g in goals]
        if o.reservoir > 0:  # the first episodes with the pool (after it, on the worker)
            args = (self._fill, st, st.res.gen, o.reservoir)
            st.res.fill = _done(*args) if inline else self.worker.run(*args)

    def _release_held(self, st: _SceneState) -> None:
        for f in st.pool:   # one reference per pool goal (``ready_pool`` holds the same rows)
            if not f.cancelled() and f.exception() is None:
                st.fields.release(f.result()[0])

    def _pool_goals(self, st: _SceneState) -> np.ndarray:
        nm, o = st.mesh.navmesh, self.options
        seed = int(st.rng.integers(2**31))
        isl = episode_islands(nm, o.all_islands)   # starts follow: they must reach the goal
        on = {} if isl is None else {"island": isl[0]}
        cand = np.asarray(nm.sample_navigable_point(8 * o.goal_pool, seed, **on), np.float64).reshape(-1, 3)
        rad = np.asarray(nm.island_radius(cand), np.float64).reshape(-1)
        good = cand[rad >= o.island_radius_limit]
        if len(good) == 0:
            good = cand
        return good[: o.goal_pool]

    def _pool_entry(self, st: _SceneState, goal):
        o = self.options
        nm = st.mesh.navmesh
        flat, near = st.fields.field(goal)
        dy = np.abs(nm.span_pos[:, 1] - goal[1])
        ok = in_distance_range(flat, o.closest_dist, o.furthest_dist) & (dy <= o.max_dy)
        cand = np.nonzero(ok)[0]
        if cand.size == 0:  # tiny scene: take whatever is reachable
            cand = np.nonzero(np.isfinite(flat) & (dy <= o.max_dy))[0]
        row = st.fields.add(goal, flat, near)
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
        V = self.options.goal_views
        if V > 0:   # [G, V] headings in [0, 2 pi): the goal views of this scene visit
            st.ready_pool["views"] = 2 * np.pi * counter_uniforms(
                st.key_seed ^ _VIEWS_KEY, np.arange(len(rows), dtype=np.uint64), V)

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
        euclid = np.linalg.norm(q - np.repeat(goal, A, 0), axis=1)
        keep = ratio_kept(d, euclid, u[:, 3], o.min_ratio).reshape(k, A)
        keep[:, -1] = True
        start = q.reshape(k, A, 3)[np.arange(k), keep.argmax(1)]
        yaw = U[:, 1] * 2 * np.pi
        yaw = np.arctan2(np.sin(yaw), np.cos(yaw))
        rows = P["rows"][g]
        prefix = f"{st.name}:"
        ids = [f"{prefix}{j}" for j in range(c0, c0 + k)]
        heading = None
        if "views" in P:   # the goal view: one of the goal's, by a stream of its own (the draws above unchanged)
            V = P["views"].shape[1]
            pick = counter_uniforms(st.key_seed ^ _PICK_KEY, np.arange(c0, c0 + k, dtype=np.uint64), 1)[:, 0]
            heading = P["views"][g, np.minimum((pick * V).astype(np.int64), V - 1)]
        return NewEpisodes(start.astype(np.float32), yaw.astype(np.float32), goal.astype(np.float32), rows, ids,
                           heading=heading)

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
                                       (r.eps.rows, e.rows))), r.eps.episode_ids[h:] + e.episode_ids,
                                    heading=None if e.heading is None else np.concatenate([r.eps.heading[h:], e.heading]))
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

    def take(self, scene_indices: np.ndarray) -> tuple[NewEpisodes, bool]:
        """One new episode per entry of ``scene_indices``, in order."""
        scene_indices = np.asarray(scene_indices, np.int64)
        n = len(scene_indices)
        w0 = self.waits
        # the scenes in key order, each serving its entries in env order (a stable sort);
        # one scatter per array back to the entries' order
        order, bounds = group_by_scene(scene_indices)
        at = slice(None) if order is None else order
        first = scene_indices if order is None else scene_indices[order]
        take = self._take_reserved if self.options.reservoir > 0 else self._sample
        parts = [take(self._state(int(first[a])), b - a) for a, b in bounds]
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
        if order is not None:   # a list scatter: an object array's costs more at a step's few entries
            scattered = [""] * n
            for at_j, i in zip(order.tolist(), ids):
                scattered[at_j] = i
            ids = scattered
        out.episode_ids = ids
        if parts[0].heading is not None:
            out.heading = np.empty(n, np.float64)
            out.heading[at] = cat([e.heading for e in parts])
        return out, self.waits > w0
