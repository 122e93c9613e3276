"""Where the env gets its episodes: prepared ahead, off the step path, per resident scene.

``EpisodeSupply`` is the protocol the world calls (``prepare`` on the loader thread, ``register``
/ ``scene_left`` as scenes arrive and leave, ``take(scene indices)`` -> ``NewEpisodes``,
``release_many`` when episodes end); two sources implement it: ``SampledEpisodes``
(episodes/sampled.py) and ``DatasetEpisodes`` (episodes/dataset.py); ``bps_runtime.episodes.make_supply`` picks one.
Both are deterministic for a seed: the random streams are per scene and per visit of that
scene (``reseed`` restarts them as a new supply's), drawn on the simulator thread in env
order; background threads compute distance fields, whose values do not depend on timing. Shared here: options, ``NewEpisodes``, the counter-based
random stream and the per-scene state.
"""
from __future__ import annotations

import abc
import threading
import zlib
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from bps_assets.errors import ConfigError, is_int
from bps_assets.hashing import GAMMA, mix64
from bps_assets.nav.episodes import DEFAULTS as _GEN
from bps_assets.nav.geodesic import NEAR_EXACT

from ..grouping import SMALL, group_list, groups
from ..nav.buffers import FieldWorker, GoalFields, SceneNav


@dataclass(frozen=True)
class SupplyOptions:
    """Episode supply settings: goal pool / lookahead sizes and habitat's generator limits."""
    goal_pool: int = 32              # sampled mode: goals (distance fields) per resident scene
    lookahead: int = 32              # dataset mode: episodes prepared ahead per scene
    memo_episodes: int = 256         # dataset mode: prepared episodes kept per resident scene
    reservoir: int = 128             # sampled mode: episodes drawn ahead per scene (0: draw in take)
    # sampled mode: goal-view headings per pool goal (ImageNav's goal image: an episode views its
    # goal at one of them, so a scene visit has goal_pool x goal_views goal images to render);
    # 0: a heading per episode, habitat's goal_heading(episode id) (a goal image per episode)
    goal_views: int = 4
    # habitat-lab's generator limits, as bps_assets.nav.episodes applies them to dataset files
    closest_dist: float = _GEN.closest_dist_limit
    furthest_dist: float = _GEN.furthest_dist_limit
    min_ratio: float = _GEN.geodesic_to_euclid_min_ratio
    max_dy: float = _GEN.max_height_difference
    island_radius_limit: float = _GEN.island_radius_limit
    retries: int = _GEN.number_retries_per_target
    all_islands: bool = _GEN.all_islands   # False: the largest indoor island (bps_assets.nav.indoor)

    def __post_init__(self):
        for name, least in (("goal_pool", 1), ("lookahead", 1), ("memo_episodes", 1), ("reservoir", 0),
                            ("goal_views", 0), ("retries", 1)):
            v = getattr(self, name)
            if not is_int(v) or v < least:
                raise ConfigError(None, f"{name}={v!r}: expected an int >= {least}"
                                        + (" (0: a heading per episode)" if name == "goal_views" else ""))
            object.__setattr__(self, name, int(v))   # a numpy int stored as Python's (to_dict is JSON)


DEFAULTS = SupplyOptions()


@dataclass
class NewEpisodes:
    """New episodes for a list of envs: start, yaw, goal, goal-field rows, ids (and goal ids)."""
    start: np.ndarray            # [n,3] float32
    yaw: np.ndarray              # [n] float32
    goal: np.ndarray             # [n,3] float32
    rows: np.ndarray             # [n] int64 rows of the scenes' GoalFields
    episode_ids: list = field(default_factory=list)
    goal_id: np.ndarray | None = None   # [n] int32 the task's goal id (ObjectNav's category), or None
    heading: np.ndarray | None = None   # [n] float64 the goal view's yaw (ImageNav), or None: goal_heading(id)


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def counter_uniforms(key: int, counters: np.ndarray, n: int) -> np.ndarray:
    """[len(counters), n] uniforms in [0, 1): splitmix64 of (key, counter, i). A counter-based
    stream: draw j does not depend on how many draws were made before it."""
    with np.errstate(over="ignore"):
        x = (counters.astype(np.uint64)[:, None] * np.uint64(n) + np.arange(n, dtype=np.uint64)[None, :])
        x = mix64(x * GAMMA + np.uint64(key & 0xFFFFFFFFFFFFFFFF))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _release_result(st, fut: Future):
    if fut.cancelled() or fut.exception() is not None:
        return
    res = fut.result()
    if res is not None:
        st.fields.release(res.row)


def _done(fn, *args) -> Future:
    f: Future = Future()
    try:
        f.set_result(fn(*args))
    except BaseException as e:  # noqa: BLE001 - re-raised by .result() where it is used
        f.set_exception(e)
    return f


# Why the seed state has these pieces (each needed for "a seed reproduces a run"; tests/test_reseed.py,
# test_seeded_swaps.py, test_trace_stable.py hold them):
# - a scene's stream is ``_seed_for(seed, name, visit)``, ``visit`` counted per name at ``prepare``:
#   it depends on the seed, the scene and its visits alone, not on the slot, the loader's timing
#   or which scene loaded first;
# - ``epoch`` (the supply's and each state's): a scene prepared on a loader thread before a
#   reseed but registered after it holds the old streams; ``register`` restarts it. A seed
#   compare would not do: a reseed to the same seed restarts the visits too (visit 0 again);
# - ``_restarts``: that restart runs on the field worker (``register`` is on the step path); its
#   new state, and so its stream, is made in ``register``, so its episodes do not depend on when
#   the worker runs; the first ``_state`` lookup joins it, ``scene_left`` retires it;
# - ``_Reservoir.gen``: a fill running on the worker when its scene leaves or is reseeded finds
#   the generation moved and keeps nothing;
# - ``reseed`` saves (seed, epoch, visits) and ``_per_scene_tables``: all or nothing.
def _seed_for(seed: int, name: str, visit: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed) & (2**63 - 1), zlib.crc32(name.encode()), visit]))


class _SceneState:
    """One resident scene's episode source: its navigation, fields, random stream, pool/order."""

    def __init__(self, scene_index, name, mesh: SceneNav, fields: GoalFields, rng):
        self.scene_index, self.name, self.mesh, self.fields, self.rng = scene_index, name, mesh, fields, rng
        self.key_seed = int(rng.integers(2**63))
        self.epoch = 0                 # the supply's reseeds when its streams were made
        self.pool: list = []           # sampled: Futures of (row, candidate spans)
        self.ready_pool = None         # sampled: list of (row, cand spans)
        self.order = None              # dataset: episode order
        self.ptr = 0
        self.ahead: dict = {}          # dataset: sequence position -> Future
        self.memo: dict = {}           # dataset: episode index -> prepared episode (or None)
        self.shared_rows: dict = {}    # dataset: field key -> field row shared by its episodes
        self.strays: list = []         # dataset: duplicate preparations taken off ``ahead``, maybe running
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
    return NewEpisodes(e.start[h:h + n], e.yaw[h:h + n], e.goal[h:h + n], e.rows[h:h + n], e.episode_ids[h:h + n],
                       heading=None if e.heading is None else e.heading[h:h + n])


class EpisodeSupply(abc.ABC):
    """Episodes for the env, per resident scene, prepared ahead: the protocol and what the two
    sources share (``SampledEpisodes`` in episodes/sampled.py, ``DatasetEpisodes`` in
    episodes/dataset.py; ``bps_runtime.episodes.make_supply`` picks one)."""

    max_goal_id: int | None = None   # the largest goal id it can stage (None: it stages none)
    goal_categories: dict | None = None   # goal category -> goal id, where goal ids are categories

    def __init__(self, seed: int, worker: FieldWorker, options: SupplyOptions = DEFAULTS,
                 near_gate: float = NEAR_EXACT):
        self.seed, self.worker, self.options = int(seed), worker, options
        # m: the field rows' near-goal gate (GoalFields), the task's: bps_assets.nav.geodesic.near_gate
        # of its success distance (``SupplyRequest.near_gate``)
        self.near_gate = float(near_gate)
        self.scenes: dict[int, _SceneState] = {}
        self.visits: dict[str, int] = {}    # visits of each scene under the current seed
        self.epoch = 0                      # reseeds so far
        self._visits_lock = threading.Lock()   # prepare runs on the loader threads
        self._restarts: dict[int, tuple] = {}   # scene index -> (its new state, Future of its restart)
        self.waits = 0
        self.wait_reasons: list[str] = []   # one line per wait (the env's stats collect them)
        self.misses = 0                   # sampled episodes: takes the reservoir could not serve
        self.miss_reasons: deque[str] = deque(maxlen=100)   # the latest misses, why

    @abc.abstractmethod
    def field_rows(self) -> int:
        """Goal distance-field rows a resident scene starts with."""

    @abc.abstractmethod
    def take(self, scene_indices: np.ndarray) -> tuple[NewEpisodes, bool]:
        """One new episode per entry of ``scene_indices``, in order; and whether that
        waited for an episode's preparation."""

    @abc.abstractmethod
    def _start(self, st: "_SceneState", inline: bool) -> None:
        """Begin preparing a new scene's first episodes."""

    @abc.abstractmethod
    def _release_held(self, st: "_SceneState") -> None:
        """Give back the field rows ``st``'s own episode state holds (its goal pool, prepared
        episodes), its preparations having ended."""

    def episode_record(self, scene_index: int, episode_id: str) -> dict | None:
        """The episode dict (habitat's fields: ``goals``, ObjectNav's ``object_category``...) of
        episode ``episode_id`` of resident scene ``scene_index``, or None (sampled PointNav episodes have
        none). On demand, not for the step path."""
        return None

    def take_wait_reasons(self) -> list[str]:
        """The supply's wait reasons since the last call (as the scene cache's)."""
        out, self.wait_reasons = self.wait_reasons, []
        return out

    # ------------------------------------------------------------------ scene arrival / leave
    def prepare(self, name: str, mesh: SceneNav, inline: bool = True) -> "_SceneState":
        """Prepare a scene's first episodes. ``inline``: compute them in the calling thread (the
        scene cache's loader thread, so the scene is ready when its load is) instead of the
        field worker. Thread-safe for different scenes."""
        fields = GoalFields(mesh, capacity=self.field_rows(), gate=self.near_gate)
        st = self._new_state(name, mesh, fields)
        try:
            self._start(st, inline)
        except BaseException:   # e.g. no valid episode: the load fails, its rows go back
            for f in list(st.ahead.values()):
                f.cancel()
            fields.free()
            raise
        return st

    def _new_state(self, name: str, mesh: SceneNav, fields: GoalFields) -> "_SceneState":
        """A scene's state for its next visit under the current seed (its random stream)."""
        with self._visits_lock:
            visit = self.visits.get(name, 0)
            self.visits[name] = visit + 1
            st = _SceneState(None, name, mesh, fields, _seed_for(self.seed, name, visit))
            st.epoch = self.epoch
        return st

    def register(self, scene_index: int, st: "_SceneState"):
        """Make a prepared scene available under ``scene_index`` (cheap: the step path may
        call it). A scene prepared before a reseed restarts under the new seed on the field
        worker (its stream is fixed here, so its episodes do not depend on timing; its first
        take waits for the restart if it has not ended)."""
        if st.epoch != self.epoch:
            fresh = self._new_state(st.name, st.mesh, st.fields)
            fresh.scene_index = scene_index
            self._restarts[scene_index] = (fresh, self.worker.run(self._restart, st, fresh))
            return
        st.scene_index = scene_index
        self.scenes[scene_index] = st

    def _restart(self, old: "_SceneState", fresh: "_SceneState") -> None:
        self._retire(old)
        self._start(fresh, inline=True)

    def _state(self, scene_index: int) -> "_SceneState | None":
        """Scene ``scene_index``'s state, its restart (``register``) ended first: a wait if it had
        not; its failure is raised here, the new state's rows given back."""
        pending = self._restarts.pop(scene_index, None)
        if pending is not None:
            fresh, fut = pending
            if not fut.done():
                self.waits += 1
                self.wait_reasons.append(f"scene {fresh.name!r}: its restart under the new seed was still "
                                         f"being prepared")
            if fut.exception() is not None:
                self._retire(fresh)
                raise fut.exception()
            self.scenes[scene_index] = fresh
        return self.scenes.get(scene_index)

    def scene_left(self, scene_index: int):
        """Scene ``scene_index`` is no longer resident: cancel its pending preparation."""
        pending = self._restarts.pop(scene_index, None)
        if pending is not None:   # its restart ends on the worker, then its preparations are cancelled
            pending[1].add_done_callback(lambda _f, st=pending[0]: self._retire(st, wait=False))
        st = self.scenes.pop(scene_index, None)
        if st is not None:
            self._retire(st, wait=False)

    def reseed(self, seed: int):
        """Restart the episode streams as if the supply had been made with ``seed``: visits are
        counted afresh and every resident scene starts its first visit again (random stream,
        goal pool or episode order, counters; prepared here, on the calling thread). Call it
        with no episode of the old streams held (the env's reset releases them first); what
        was prepared under the old seed is dropped. All or nothing: every scene's new state is
        made before any old one is dropped; if one fails, the supply is left as it was."""
        for scene_index, (fresh, fut) in list(self._restarts.items()):   # restarts in flight end first
            del self._restarts[scene_index]
            fut.exception()
            self.scenes[scene_index] = fresh   # (a failed one: retired below, as the others)
        with self._visits_lock:
            saved = self.seed, self.epoch, self.visits
            self.seed, self.epoch, self.visits = int(seed), self.epoch + 1, {}
        tables = [(t, dict(t)) for t in self._per_scene_tables()]
        fresh: dict[int, _SceneState] = {}
        try:
            for scene_index in sorted(self.scenes):
                old = self.scenes[scene_index]
                st = fresh[scene_index] = self._new_state(old.name, old.mesh, old.fields)
                st.scene_index = scene_index
                self._start(st, inline=True)
        except BaseException:
            for st in fresh.values():
                self._retire(st)
            for t, kept in tables:
                t.clear()
                t.update(kept)
            with self._visits_lock:
                self.seed, self.epoch, self.visits = saved
            raise
        for scene_index, st in fresh.items():
            self._retire(self.scenes[scene_index])
            self.scenes[scene_index] = st

    def _per_scene_tables(self) -> list[dict]:
        """The supply's tables by scene name that ``_start`` may rewrite (a generated visit's
        episodes): a failed reseed puts them back."""
        return []

    def _retire(self, st: "_SceneState", wait: bool = True) -> None:
        """End ``st``'s preparations and drop its reservoir. ``wait``: its reservoir's fill is
        cancelled too, those running are waited for, and the field rows its episode state holds
        are given back (the episodes handed out keep theirs); else (the scene left, its fields
        go with it) they are only cancelled."""
        futs = st.pool + list(st.ahead.values()) + st.strays
        if wait and st.res.fill is not None:
            futs.append(st.res.fill)
        for f in futs:
            f.cancel()
        st.res.drop(st.fields)      # a fill still running retains nothing after this
        if not wait:
            return
        for f in futs:
            if not f.cancelled():
                f.exception()       # waits for a running one
        self._release_held(st)

    def release_many(self, scene_indices: np.ndarray, rows: np.ndarray):
        """Episodes that used field ``rows`` of scenes ``scene_indices`` have ended: their rows are
        released, scene by scene (``grouping``'s list path or ``groups``)."""
        scene_indices, rows = np.asarray(scene_indices, np.int64).reshape(-1), np.asarray(rows, np.int64).reshape(-1)
        if len(rows) <= SMALL:   # a step's few ended episodes: lists (GoalFields' list path)
            parts = group_list(scene_indices.tolist(), rows.tolist())
        else:
            parts = [(s, rows[at]) for s, at in groups(scene_indices)]
        for scene_index, part in parts:
            st = self._state(scene_index)
            if st is not None:
                st.fields.release_many(part)