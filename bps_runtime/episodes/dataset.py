"""Dataset episodes: a habitat PointNav v1 file's episodes of each scene, in a seeded shuffled order,
cycled. The field worker snaps each upcoming episode's start and computes its goal's distance
field ``lookahead`` episodes ahead per scene; an episode not ready when an agent needs it is
prepared on the spot and counted as a wait. Episodes invalid on the navmesh are skipped; a scene
with no valid episode fails its load (on the loader thread: the scene is quarantined).
An episode may have an ``EpisodeGoal`` (``goals``: scene name -> episode id -> goal): the points
its field measures to (the nearest of them: e.g. goal objects' view points; without one, every
``goals[i].position`` of the episode, as habitat's DistanceToGoal), a key shared by
the episodes that share one field row per scene visit, and the task's goal id (staged as
``goal_id``). A prepared episode is a ``PreparedEpisode``; its id is the reader's (an
``IntEpisodeId`` for a JSON integer: ImageNav's ``goal_heading`` draws habitat's heading from it).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
import numpy as np

from bps_assets.errors import NavError
from bps_assets.nav.episode_table import text_id
from bps_assets.nav.geodesic import NEAR_EXACT
from bps_assets.nav.pose import quaternion_yaw

from ..grouping import groups
from ..nav.kernels import host_distance, load_for_host
from .supply import DEFAULTS, EpisodeSupply, NewEpisodes, SupplyOptions, _SceneState, _done, _release_result


def episode_ids(eps) -> list:
    """The episode ids (str) of one scene's episodes, in order: an ``EpisodeTable``'s own ids
    (no dicts made) or habitat episode dicts' ``episode_id``."""
    ids = getattr(eps, "ids", None)   # a table: no dicts made
    return ids if ids is not None else [str(e["episode_id"]) for e in eps]   # a table's ids are str


@dataclass(frozen=True)
class EpisodeGoal:
    """What an episode's distance field measures to instead of its goal position: the nearest of
    ``points`` [V, 3]; one field row per scene visit for every episode of ``key`` (None: its own);
    ``goal_id``: the task's goal id (0: none)."""
    points: np.ndarray
    key: str | None = None
    goal_id: int = 0


@dataclass(frozen=True)
class PreparedEpisode:
    """One dataset episode ready to queue: snapped start, yaw, goal point, its field row (one
    reference), id (``text_id``: an integer's marked) and the task's goal id."""
    start: np.ndarray
    yaw: float
    goal: np.ndarray
    row: int
    episode_id: str
    goal_id: int = 0


class DatasetEpisodes(EpisodeSupply):
    """Episodes of a dataset file per resident scene (see the module docstring); ``goals``: scene
    name -> {episode id: EpisodeGoal} for episodes that have one. ``max_goal_id``: the largest
    goal id it can stage (a task's supply sets it: the high of the goal-id observation).
    What it leaves out, counted: ``unmatched`` (scene_id -> episodes of scenes the manifest lacks,
    set by whoever resolved the file, ``source``) and ``dropped`` (scene name -> {reason:
    distinct episodes}: "start_off_navmesh", "goal_unreachable"; the first of each logged)."""

    source: str | None = None

    def __init__(self, episodes_by_scene: dict, seed: int, worker, options: SupplyOptions = DEFAULTS,
                 goals: dict | None = None, near_gate: float = NEAR_EXACT):
        super().__init__(seed, worker, options, near_gate)
        self.episodes_by_scene = episodes_by_scene
        self.goals: dict = {} if goals is None else goals
        self._shared_lock = threading.Lock()
        load_for_host()   # before the loader and field threads check episode starts
        self._by_id: dict = {}   # scene name -> (its episode list, {episode id: dict}), made on demand
        self.unmatched: dict = {}
        self._dropped_ids: dict = {}   # (scene name, reason) -> episode ids counted (an episode is prepared again per visit)

    @property
    def dropped(self) -> dict:
        """Scene name -> {reason: distinct episodes of the scene left out for it}."""
        with self._shared_lock:
            out: dict = {}
            for (scene, reason), ids in self._dropped_ids.items():
                out.setdefault(scene, {})[reason] = len(ids)
            return out

    def episode_record(self, scene_index: int, episode_id: str) -> dict | None:
        """The dataset's dict of episode ``episode_id`` of resident scene ``scene_index`` (an index of the
        scene's episodes by id is built on the first query of each scene visit's list)."""
        st = self._state(int(scene_index))
        eps = None if st is None else self.episodes_by_scene.get(st.name)
        if not eps:
            return None
        kept = self._by_id.get(st.name)
        if kept is None or kept[0] is not eps:
            kept = self._by_id[st.name] = (eps, {eid: k for k, eid in enumerate(episode_ids(eps))})
        k = kept[1].get(str(episode_id))
        return None if k is None else eps[k]

    def field_rows(self) -> int:
        """Goal distance-field rows a resident scene starts with: the episodes prepared ahead."""
        return 2 * self.options.lookahead + 16

    def _start(self, st: _SceneState, inline: bool) -> None:
        eps = self.episodes_by_scene.get(st.name)
        if not eps:
            raise NavError(None, f"scene {st.name!r} has no episodes in the dataset")
        st.order = st.rng.permutation(len(eps))
        if inline:  # the first episodes now, in the loader thread (distinct: order is a permutation)
            valid = False
            for pos in range(len(eps)):   # on until one is valid: a scene with none fails its load
                if pos >= self.options.lookahead and valid:
                    break
                st.ahead[pos] = _done(self._prepare_dataset_episode, st, eps[int(st.order[pos])])
                valid = valid or st.ahead[pos].result() is not None
            if not valid:
                raise NavError(None, f"scene {st.name!r}: no episode of the dataset is valid on its navmesh "
                                     f"(all {len(eps)} start or goal off it)")
        self._schedule(st)

    def _per_scene_tables(self) -> list[dict]:
        return [self.episodes_by_scene, self.goals, self._by_id]

    def _release_held(self, st: _SceneState) -> None:
        for f in st.ahead.values():
            _release_result(st, f)
        for res in st.memo.values():
            if res is not None:
                st.fields.release(res.row)
        for row in st.shared_rows.values():
            st.fields.release(row)

    def _schedule(self, st: _SceneState):
        eps = self.episodes_by_scene[st.name]
        n = len(eps)
        pending = {int(st.order[p % n]) for p in st.ahead}
        for pos in range(st.ptr, st.ptr + min(self.options.lookahead, n)):
            k = int(st.order[pos % n])
            if pos not in st.ahead and k not in st.memo and k not in pending:
                st.ahead[pos] = self.worker.run(self._prepare_dataset_episode, st, eps[k])
                pending.add(k)

    def _prepare_dataset_episode(self, st: _SceneState, e: dict) -> PreparedEpisode | None:
        nm = st.mesh.navmesh
        start = np.asarray(e["start_position"], np.float64).reshape(1, 3)
        goal = np.asarray(e["goals"][0]["position"], np.float64).reshape(3)
        snapped = np.asarray(nm.snap_point(start), np.float64).reshape(3)
        eid = text_id(e["episode_id"])   # an integer id stays marked, through the ring (ImageNav's heading)
        if not np.all(np.isfinite(snapped)):
            self._count_drop(st.name, "start_off_navmesh", eid)
            return None
        target = self.goals.get(st.name, {}).get(eid)
        if target is None and len(e["goals"]) > 1:
            # habitat's DistanceToGoal (distance_to POINT) measures to the nearest of every
            # goal's position (so do success, SPL and the reward); its PointGoalSensor, the
            # ``goal`` here, points at goals[0]
            target = EpisodeGoal(np.asarray([g["position"] for g in e["goals"]], np.float64).reshape(-1, 3))
        row = self._field_row(st, target, goal)
        d = host_distance(st.mesh, st.fields.host[row], snapped[None])[0]
        if not np.isfinite(d):
            st.fields.release(row)
            self._count_drop(st.name, "goal_unreachable", eid)
            return None
        yaw = quaternion_yaw(e.get("start_rotation", [0, 0, 0, 1]))
        return PreparedEpisode(snapped, yaw, goal, row, eid, 0 if target is None else int(target.goal_id))

    def _count_drop(self, scene: str, reason: str, eid: str) -> None:
        """Count episode ``eid`` of ``scene`` left out for ``reason`` once; log the scene's first."""
        with self._shared_lock:
            ids = self._dropped_ids.setdefault((scene, reason), set())
            if eid in ids:
                return
            ids.add(eid)
            first = len(ids) == 1
        if first:
            import logging

            what = "its start is off the navmesh" if reason == "start_off_navmesh" else \
                "no goal is reachable from its start"
            logging.getLogger(__name__).warning(
                "%s: scene %s: episode %r left out (%s); such episodes are counted in the supply's "
                "dropped[%r][%r] (env.world.episodes)", self.source or "episodes", scene, eid, what, scene, reason)

    def _field_row(self, st: _SceneState, target: EpisodeGoal | None, goal: np.ndarray) -> int:
        """The episode's field row (one new reference): its goal's, or its ``EpisodeGoal``'s points',
        shared by every episode of its key in this scene visit."""
        key = None if target is None else target.key
        if key is None:
            return st.fields.add(goal if target is None else target.points)
        with self._shared_lock:
            row = st.shared_rows.get(key)
            if row is not None:
                st.fields.retain(row)
                return row
        row = st.fields.add(target.points)
        with self._shared_lock:
            if key in st.shared_rows:    # computed twice side by side: keep the first
                st.fields.release(row)
                row = st.shared_rows[key]
            else:
                st.shared_rows[key] = row   # the table's own reference, for the scene's visit
            st.fields.retain(row)
        return row

    def _next_dataset(self, st: _SceneState):
        eps = self.episodes_by_scene[st.name]
        for _ in range(len(eps) + 1):
            pos = st.ptr
            st.ptr += 1
            k = int(st.order[pos % len(eps)])
            fut = st.ahead.pop(pos, None)
            self._schedule(st)
            if k in st.memo:  # prepared on an earlier pass over the scene's episodes
                if fut is not None:  # a duplicate preparation: give its field row back; kept
                    # on the state until it ends, so a retire waits for it (it may add to shared_rows)
                    st.strays = [f for f in st.strays if not f.done()] + [fut]
                    fut.add_done_callback(lambda f, st=st: _release_result(st, f))
                res = st.memo[k]
                if res is not None:
                    st.fields.retain(res.row)
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
                    st.fields.retain(res.row)
            if res is not None:
                return res, waited
        raise NavError(None, f"scene {st.name!r}: no episode of the dataset is valid on its navmesh")

    def take(self, scene_indices: np.ndarray) -> tuple[NewEpisodes, bool]:
        """One new episode per entry of ``scene_indices``, in order."""
        scene_indices = np.asarray(scene_indices, np.int64)
        n = len(scene_indices)
        w0 = self.waits
        out = NewEpisodes(np.zeros((n, 3), np.float32), np.zeros(n, np.float32), np.zeros((n, 3), np.float32),
                          np.zeros(n, np.int64), [""] * n, np.zeros(n, np.int32))   # no heading: goal_heading(id)
        for scene_index, entries in groups(scene_indices):
            st = self._state(scene_index)
            for i in entries.tolist():
                p, _ = self._next_dataset(st)
                out.start[i], out.yaw[i], out.goal[i], out.rows[i] = p.start, p.yaw, p.goal, p.row
                out.episode_ids[i], out.goal_id[i] = p.episode_id, p.goal_id
        return out, self.waits > w0
