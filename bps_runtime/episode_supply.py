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
  few steps) a per-episode Dijkstra would cost more than rendering.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import torch

from bps_assets.errors import ConfigError, NavError

from .nav import DeviceNavMesh, FieldWorker, GoalFields
from .task import quat_to_yaw


@dataclass(frozen=True)
class SupplyOptions:
    goal_pool: int = 32              # sampled mode: goals (distance fields) per resident scene
    lookahead: int = 4               # dataset mode: episodes prepared ahead per scene
    closest_dist: float = 1.0        # habitat-lab generator limits
    furthest_dist: float = 30.0
    min_ratio: float = 1.1
    max_dy: float = 0.5
    island_radius_limit: float = 1.5
    retries: int = 10


DEFAULTS = SupplyOptions()


@dataclass
class NewEpisodes:
    start: np.ndarray            # [n,3] float32
    yaw: np.ndarray              # [n] float32
    goal: np.ndarray             # [n,3] float32
    rows: np.ndarray             # [n] int64 rows of the scenes' GoalFields
    episode_ids: list = field(default_factory=list)


def _seed_for(seed: int, name: str, visit: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed) & (2**63 - 1), zlib.crc32(name.encode()), visit]))


class _SceneState:
    def __init__(self, key, name, mesh: DeviceNavMesh, fields: GoalFields, rng):
        self.key, self.name, self.mesh, self.fields, self.rng = key, name, mesh, fields, rng
        self.pool: list = []           # sampled: Futures of (row, candidate spans)
        self.ready_pool = None         # sampled: list of (row, cand spans)
        self.order = None              # dataset: episode order
        self.ptr = 0
        self.ahead: dict = {}          # dataset: sequence position -> Future
        self.count = 0


class EpisodeSupply:
    def __init__(self, mode: str, seed: int, worker: FieldWorker, episodes_by_scene: dict | None = None,
                 options: SupplyOptions = DEFAULTS):
        if mode not in ("sample", "dataset"):
            raise ConfigError(None, f"episodes mode {mode!r}: expected 'sample' or 'dataset'")
        self.mode, self.seed, self.worker, self.options = mode, int(seed), worker, options
        self.episodes_by_scene = episodes_by_scene or {}
        self.scenes: dict[int, _SceneState] = {}
        self.visits: dict[str, int] = {}
        self.waits = 0

    # ------------------------------------------------------------------ scene arrival / leave
    def scene_arrived(self, key: int, name: str, mesh: DeviceNavMesh) -> GoalFields:
        """Start preparing episodes of a scene (called when its load begins or ends)."""
        visit = self.visits.get(name, 0)
        self.visits[name] = visit + 1
        o = self.options
        cap = o.goal_pool if self.mode == "sample" else 2 * o.lookahead + 8
        fields = GoalFields(mesh, capacity=cap)
        st = _SceneState(key, name, mesh, fields, _seed_for(self.seed, name, visit))
        self.scenes[key] = st
        if self.mode == "sample":
            goals = self._pool_goals(st)
            st.pool = [self.worker.run(self._pool_entry, st, g) for g in goals]
        else:
            eps = self.episodes_by_scene.get(name)
            if not eps:
                raise NavError(None, f"scene {name!r} has no episodes in the dataset")
            st.order = st.rng.permutation(len(eps))
            self._schedule(st)
        return fields

    def scene_left(self, key: int):
        st = self.scenes.pop(key, None)
        if st is not None:
            for f in st.pool + list(st.ahead.values()):
                f.cancel()

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

    def _sample(self, st: _SceneState, k: int) -> NewEpisodes:
        if st.ready_pool is None:
            waited = any(not f.done() for f in st.pool)
            self.waits += int(waited)
            st.ready_pool = [e for e in (f.result() for f in st.pool) if e[1].size]
            if not st.ready_pool:
                raise NavError(None, f"scene {st.name!r}: no goal with a reachable start")
        o, rng, nm = self.options, st.rng, st.mesh.navmesh
        cs = nm.cell_size
        starts = np.zeros((k, 3), np.float32)
        goals = np.zeros((k, 3), np.float32)
        rows = np.zeros(k, np.int64)
        yaws = np.zeros(k, np.float32)
        ids = []
        for j in range(k):
            row, cand = st.ready_pool[int(rng.integers(len(st.ready_pool)))]
            goal = st.fields.goals[row]
            p = None
            for _ in range(o.retries):
                s = int(cand[rng.integers(cand.size)])
                c = nm.span_pos[s]
                u = rng.random(2)
                q = np.array([c[0] + (u[0] - 0.5) * cs, c[1], c[2] + (u[1] - 0.5) * cs])
                d = float(st.fields.host[row][s] + math.hypot(q[0] - c[0], q[2] - c[2]))
                eu = float(np.linalg.norm(q - goal))
                ratio = d / max(eu, 1e-9)
                p = q
                if ratio >= o.min_ratio or rng.random() <= 20.0 * (ratio - 0.98) ** 2:
                    break
            yaw = rng.uniform(0, 2 * np.pi)
            starts[j], goals[j], rows[j] = p, goal, row
            yaws[j] = math.atan2(math.sin(yaw), math.cos(yaw))
            st.fields.retain(row)
            ids.append(f"{st.name}:{st.count}")
            st.count += 1
        return NewEpisodes(starts, yaws, goals, rows, ids)

    # ------------------------------------------------------------------ dataset mode
    def _schedule(self, st: _SceneState):
        eps = self.episodes_by_scene[st.name]
        for pos in range(st.ptr, st.ptr + self.options.lookahead):
            if pos not in st.ahead:
                e = eps[st.order[pos % len(eps)]]
                st.ahead[pos] = self.worker.run(self._prepare_dataset_episode, st, e)

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
            fut = st.ahead.pop(pos, None)
            self._schedule(st)
            if fut is None:
                e = eps[st.order[pos % len(eps)]]
                self.waits += 1
                res = self._prepare_dataset_episode(st, e)
                waited = True
            else:
                waited = not fut.done()
                self.waits += int(waited)
                res = fut.result()
            if res is not None:
                return res, waited
        raise NavError(None, f"scene {st.name!r}: no episode of the dataset is valid on its navmesh")

    # ------------------------------------------------------------------ taking episodes
    def take(self, keys: np.ndarray) -> tuple[NewEpisodes, bool]:
        """One new episode per entry of ``keys`` (scene keys), in order."""
        n = len(keys)
        out = NewEpisodes(np.zeros((n, 3), np.float32), np.zeros(n, np.float32), np.zeros((n, 3), np.float32),
                          np.zeros(n, np.int64), [""] * n)
        w0 = self.waits
        for key in np.unique(keys):
            idx = np.nonzero(keys == key)[0]
            st = self.scenes[int(key)]
            if self.mode == "sample":
                e = self._sample(st, len(idx))
                out.start[idx], out.yaw[idx], out.goal[idx], out.rows[idx] = e.start, e.yaw, e.goal, e.rows
                for j, i in enumerate(idx):
                    out.episode_ids[i] = e.episode_ids[j]
            else:
                for i in idx:
                    (start, yaw, goal, row, eid), _ = self._next_dataset(st)
                    out.start[i], out.yaw[i], out.goal[i], out.rows[i] = start, yaw, goal, row
                    out.episode_ids[i] = eid
        return out, self.waits > w0

    def release(self, key: int, row: int):
        st = self.scenes.get(int(key))
        if st is not None:
            st.fields.release(int(row))

    def pending(self, key: int) -> bool:
        """Whether the scene's episode preparation is still running (not ready to switch to)."""
        st = self.scenes.get(int(key))
        if st is None:
            return True
        if self.mode == "sample":
            return any(not f.done() for f in st.pool)
        return any(not f.done() for f in st.ahead.values())
