"""The scene manager: which scenes are resident, which env uses which, swaps (bps-nav's scheme).

``slots`` = K; env e belongs to slot e % K. Each slot has an active scene (new episodes start
there) and at most one next scene, loaded in the background; when a swap is due
(``swap_after_episodes``, ``swap_every`` rounds, ``request_swap``) new episodes of its envs
start on the next scene; envs mid-episode keep the old one until their episode ends. A scene
leaves once no episode uses it. A seed fixes the run: scene order is a seeded shuffle, a load's
scene index is fixed when it starts, and loads are taken in only at a due swap (which waits for
its load: a reported wait) or at start-up, never by which load finished first.
Budget: ``budget_bytes`` is a ledger; a load reserves its exact cost and blocks until it fits
(a due swap whose load waits for room gives up instead; with a binding budget runs may differ);
``start`` refuses a budget below K active scenes plus one (``budget_needed``) and, with
``refuse``, a failing start-up load; ``cancel`` ends every wait for room (close, exit).
Calls go one way: the cache calls the loader and the renderer; arrivals / departures are
``take_events()``; the caller's per-scene ``prepare`` runs on the loader threads."""
from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from bps_assets.errors import ConfigError, DatasetError

from .footprint import add_footprints
from .loader import LoadCancelled, LoadedScene, LoadFailure, SceneLoader, SceneSource

log = logging.getLogger("bps_runtime.scenes.cache")


@dataclass(frozen=True)
class CacheOptions:
    """Scene cache settings (see the module docstring)."""
    slots: int = 8                          # K: scenes in use at once (each with <= 1 pending)
    budget_bytes: int | None = None         # ledger for all resident scenes; None: 2K scenes
    loader_threads: int = 2
    swap_after_episodes: int | None = None  # per slot: swap once its active scene started this many episodes
    prefetch: bool = True                   # keep one pending scene per slot when scenes > slots
    seed: int | None = 0                    # scene order (a seeded shuffle, reshuffled per pass)
    swap_every: int | None = None           # every this many rounds one slot (round robin) swaps

    def __post_init__(self):
        if not (isinstance(self.slots, int) and self.slots >= 1):
            raise ConfigError(None, f"cache slots must be an int >= 1, got {self.slots!r}")
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            raise ConfigError(None, f"budget_bytes must be positive, got {self.budget_bytes}")
        if self.swap_after_episodes is not None and self.swap_after_episodes < 1:
            raise ConfigError(None, "swap_after_episodes must be >= 1 or None")
        if self.swap_every is not None and (not isinstance(self.swap_every, int) or self.swap_every < 1):
            raise ConfigError(None, f"cache swap_every={self.swap_every!r}: expected an int >= 1 or None")


DEFAULTS = CacheOptions()

# scene indices per slot: its active scene, its next one (loading or loaded) and one previous
# scene still draining (the next load starts at the swap, not when the previous scene leaves)
SCENES_PER_SLOT = 3


def capacity_for(options: CacheOptions, num_sources: int, num_envs: int) -> int:
    """Resident scene indices a cache of ``options`` hands out: [0, capacity)."""
    return SCENES_PER_SLOT * min(options.slots, num_sources, num_envs)


@dataclass(frozen=True)
class SceneEvent:
    """A resident scene index changed: ``"arrived"`` (``scene``: the LoadedScene, its
    ``prepared`` state included) or ``"left"``."""
    kind: str
    scene_index: int
    scene: Any = None


@dataclass
class CacheReport:
    """What happened since the previous ``take_report()`` (call it once per step)."""

    waited: bool = False          # some call blocked on a scene load
    wait_seconds: float = 0.0
    loads_completed: int = 0
    swaps: int = 0
    evictions: int = 0
    quarantined: list = field(default_factory=list)  # scene ids that failed since last report
    reasons: list = field(default_factory=list)      # one line per wait: slot, scene, why, loader stage
    reused: int = 0               # next scenes taken from draining resident ones (no load)
    resident_scenes: int = 0
    resident_bytes: int = 0
    # the resident scenes' bytes by part (scenes.footprint.PARTS; loads in flight not included)
    resident_footprint: dict = field(default_factory=dict)


class _Slot:
    __slots__ = ("index", "active", "pending", "ready", "episodes", "swap_requested", "loading", "load_note",
                 "loading_id", "gave_up")

    def __init__(self, index):
        self.index = index
        self.active: int | None = None      # scene index
        self.pending: Future | None = None  # load in flight
        self.ready: int | None = None       # scene index, loaded, waiting for its swap
        self.episodes = 0                   # episodes started on the active scene
        self.swap_requested = False
        self.loading = None                 # SceneSource of the pending load
        self.load_note = ""                 # when / why the pending load started (for wait reasons)
        self.gave_up: str | None = None     # the load whose due swap was given up (reported once)
        self.loading_id: int | None = None  # the scene index the pending load will have (fixed at its start)


class SceneCache:
    """See the module docstring. Single-threaded API (the env's thread); loads run in threads."""

    def __init__(self, sources: Sequence[SceneSource], renderer, num_envs: int,
                 options: CacheOptions = DEFAULTS, device: str = "cpu",
                 reader: Callable | None = None, navmesh_loader: Callable | None = None):
        if not sources:
            raise DatasetError(None, "the scene cache needs at least one scene")
        if num_envs < 1:
            raise ConfigError(None, f"num_envs must be >= 1, got {num_envs}")
        self.options = options
        self.renderer = renderer
        self.num_envs = int(num_envs)
        self.sources = list(sources)
        k = min(options.slots, len(self.sources), self.num_envs)
        self.num_slots = k
        self.capacity = capacity_for(options, len(self.sources), self.num_envs)
        self.budget_bytes = options.budget_bytes
        self._slots = [_Slot(i) for i in range(k)]
        self.env_slot = np.arange(self.num_envs) % k
        self._refs = np.zeros(self.capacity, np.int64)
        self._scenes: dict[int, LoadedScene] = {}
        self._owner: dict[int, int] = {}  # scene index -> the slot that loaded it
        self._swapped_out: dict[int, str] = {}  # scene index -> clock label of its swap out
        self._free_ids = deque(range(self.capacity))
        self.quarantined: dict[str, str] = {}
        self._rng = np.random.default_rng(options.seed)
        self._order: deque[int] = deque()
        self._in_use: set[str] = set()  # scene ids resident or loading
        self._cv = threading.Condition()
        self._used = 0       # bytes reserved (resident + reserved by loads in flight)
        self._held: set[str] = set()   # scene ids whose loads wait for room in the budget
        self.peak_bytes = 0
        self._closed = False
        self._starting = self._refuse = False
        self._skip: set[str] = set()        # held loads to give up (no scene would ever make room)
        self._short: dict[str, int] = {}    # start-up loads the budget had no room for: their bytes
        self._start_error: BaseException | None = None   # a refused start-up load's error
        self._report = CacheReport()
        self.generation = 0   # bumped whenever the set of resident scenes changes (users re-sync)
        t0 = time.perf_counter()
        # labels the moments named in wait reasons; the env sets it to its step counter
        self.clock: Callable[[], str] = lambda: f"t={time.perf_counter() - t0:.1f} s"
        self.loader = SceneLoader(renderer, options.loader_threads, device, reader, navmesh_loader,
                                  release=self._unreserve)
        self._events: list[SceneEvent] = []
        self.rounds = 0            # every group stepped once: the clock of swaps and wait reasons
        self._next_swap_slot = 0
        self.swaps_requested = 0
        self._started = False
        _LIVE.add(self)

    def start(self, prepare: Callable | None = None, refuse: bool = False) -> None:
        """Start the first loads and wait for every slot's first scene (not counted as a wait).
        ``prepare(scene_id, navmesh)``, when given, ends every load on its loader thread; its
        result is the ``prepared`` of the scene's "arrived" event. ``refuse``: a start-up load
        that fails raises its error here instead of quarantining the scene (``make()``: nothing
        has run yet, so a bad scene is cheapest to fix now). A ``budget_bytes`` that cannot hold
        the slots' first scenes, plus one more to swap in when there are more scenes than slots,
        is a ConfigError naming the bytes they need (measured on those loads)."""
        if self._started:
            return
        self._started = True
        self.loader.prepare = prepare
        self._starting, self._refuse = True, refuse   # refused: not quarantined, the caller raises it
        try:
            for s in self._slots:
                self._start_load(s, "at start-up")
            self._wait_ready()
        finally:
            self._starting = self._refuse = False
        self.clock = lambda: f"step {self.rounds}"
        if self.options.prefetch:
            for s in self._slots:
                self._start_load(s, "at start-up")

    def budget_needed(self) -> int:
        """Bytes the policy needs resident (the slots' active scenes, plus the largest of them
        once more when there are more live scenes than slots, so a swap can load its next)."""
        active = {s.active for s in self._slots} & set(self._scenes)
        costs = {self._scenes[i].scene_id: self._scenes[i].nbytes for i in active}
        costs.update(self._short)
        need = sum(costs.values())
        live = sum(1 for s in self.sources if s.scene_id not in self.quarantined)
        if live > self.num_slots and costs:
            need += max(costs.values())
        return need

    def _check_start_budget(self) -> None:
        """After the start-up loads: refuse a budget that cannot hold what the policy needs (no
        swap could ever load its next scene, or the slots' first scenes do not fit)."""
        if self.budget_bytes is None:
            return
        need = self.budget_needed()
        if self._short or need > self.budget_bytes:
            raise ConfigError(None, f"cache budget_bytes={self.budget_bytes} cannot hold what {self.num_slots} "
                                    f"slot(s) need: their first scenes plus one to swap in take {need} bytes "
                                    f"(measured at start-up; larger scenes need more): give budget_bytes >= "
                                    f"{need}, or fewer slots")

    def cancel(self) -> None:
        """Cancel every load that waits for room in the budget and refuse new reservations (any
        thread; ``close()`` and interpreter exit call it), so no thread waits on the budget."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def take_events(self) -> list[SceneEvent]:
        """Scene indices that arrived or left since the last call, in order (the caller publishes
        and drops per-scene state with them; the cache calls nobody back)."""
        out, self._events = self._events, []
        return out

    # ------------------------------------------------------------------ budget (loader threads)
    def _reserve(self, nbytes: int, source: SceneSource):
        with self._cv:
            if self.budget_bytes is not None and nbytes > self.budget_bytes and not self._refuse:
                raise ConfigError(source.scene_path, f"needs {nbytes} bytes, more than the whole cache "
                                                     f"budget of {self.budget_bytes} bytes")
            if self._starting and self.budget_bytes is not None and self._used + nbytes > self.budget_bytes:
                # nothing leaves before the first step: waiting would never end
                raise _NoRoom(source.scene_path, f"needs {nbytes} bytes at start-up", nbytes)
            while self.budget_bytes is not None and self._used + nbytes > self.budget_bytes:
                if self._closed or source.scene_id in self._skip:
                    self._held.discard(source.scene_id)
                    if source.scene_id in self._skip:
                        self._skip.discard(source.scene_id)
                        raise _Skipped(source.scene_path, f"skipped this pass: its {nbytes} bytes do not fit "
                                                          f"next to the scenes that stay")
                    raise LoadCancelled(source.scene_path, "cache closed")
                self._held.add(source.scene_id)
                self._cv.wait(0.5)
            self._held.discard(source.scene_id)
            if self._closed:
                raise LoadCancelled(source.scene_path, "cache closed")
            self._used += nbytes
            self.peak_bytes = max(self.peak_bytes, self._used)
            return nbytes

    def _unreserve(self, ticket):
        with self._cv:
            self._used -= int(ticket)
            self._cv.notify_all()

    @property
    def resident_bytes(self) -> int:
        """Bytes reserved by resident scenes and loads in flight."""
        with self._cv:
            return self._used

    # ------------------------------------------------------------------ scene order / loads
    def _claimed(self, idx: int) -> bool:
        return any(s.active == idx or s.ready == idx for s in self._slots)

    def _next_source(self) -> tuple[SceneSource, int | None] | None:
        """The next scene in the order that is neither quarantined nor another slot's active /
        next / loading scene: (source, None) to load, or (source, scene index) when it is still
        resident, draining."""
        draining = {sc.scene_id: idx for idx, sc in self._scenes.items() if not self._claimed(idx)}
        for _ in range(2):
            while self._order:
                i = self._order.popleft()
                s = self.sources[i]
                if s.scene_id in self.quarantined:
                    continue
                if s.scene_id not in self._in_use:
                    return s, None
                if s.scene_id in draining:
                    return s, draining[s.scene_id]
            live = [i for i, s in enumerate(self.sources) if s.scene_id not in self.quarantined]
            self._order.extend(self._rng.permutation(live).tolist() if live else [])
        return None

    def _start_load(self, slot: _Slot, why: str) -> bool:
        """Give the slot its next scene if it has none (a load, or a draining resident scene
        taken back); True if a next scene is pending or ready. ``why``: for wait reasons."""
        if slot.pending is not None or slot.ready is not None:
            return True
        if sum(1 for o in self._owner.values() if o == slot.index) >= SCENES_PER_SLOT:
            return False  # active + two previous scenes still draining: the next one waits
        pick = self._next_source()
        if pick is None:
            return False
        src, idx = pick
        if idx is not None:      # still resident: no load, it is this slot's next (or first) scene
            self._owner[idx] = slot.index
            if slot.active is None:
                slot.active, slot.episodes = idx, 0
            else:
                slot.ready = idx
            self._report.reused += 1
            return True
        self._in_use.add(src.scene_id)
        # the scene index is fixed when the load starts (the simulator thread, at a point fixed by
        # the step count), never by which load finishes first
        slot.loading_id = self._free_ids.popleft()
        self._owner[slot.loading_id] = slot.index
        slot.loading = src
        slot.load_note = f"started at {self.clock()} ({why})"
        slot.pending = self.loader.submit(src, self._reserve, quiet=self._refuse)
        return True

    def _load_state(self, slot: _Slot) -> tuple[str, str, str]:
        """(scene loading, when / why it started, what the loader is doing with it) - taken
        before a wait, for its reason."""
        src = slot.loading
        if src is None:
            return "?", "no load started", "idle"
        return src.scene_id, slot.load_note, self.loader.stage.get(src.scene_id, "finishing")

    def _note_wait(self, slot: _Slot, what: str, state: tuple[str, str, str], seconds: float) -> None:
        name, note, stage = state
        self._report.waited = True
        self._report.wait_seconds += seconds
        self._report.reasons.append(f"slot {slot.index} {what} waited {seconds:.2f} s for "
                                    f"the load of {name!r} ({note}; the loader was {stage})")

    def _integrate(self, slot: _Slot, res) -> None:
        idx = slot.loading_id
        slot.pending = slot.loading = slot.loading_id = slot.gave_up = None
        if isinstance(res, LoadFailure):
            self._in_use.discard(res.scene_id)
            self._owner.pop(idx, None)
            self._free_ids.appendleft(idx)
            if isinstance(res.error, _NoRoom):
                self._short[res.scene_id] = res.error.nbytes
            elif isinstance(res.error, _Skipped):
                self._report.reasons.append(f"slot {slot.index}: {res.scene_id!r} {res.error.detail}")
            elif self._starting and self._refuse and not isinstance(res.error, LoadCancelled):
                self._start_error = self._start_error or res.error
            elif not isinstance(res.error, LoadCancelled):
                self.quarantined[res.scene_id] = res.message
                self._report.quarantined.append(res.scene_id)
            return
        self._scenes[idx] = res
        self.generation += 1
        self._events.append(SceneEvent("arrived", idx, res))
        self.renderer.attach(idx, res.shading, res.accel)
        self._report.loads_completed += 1
        if slot.active is None:
            slot.active, slot.episodes = idx, 0
        else:
            slot.ready = idx

    def _take_pending(self, slot: _Slot, what: str) -> bool:
        """Integrate the slot's in-flight load, waiting for it if it has not finished (a wait,
        reported); after a failure the slot's next load starts. Called only at points fixed by
        the step count (a due swap, start-up), so which scene a slot has next never depends on
        when a load finished. True if it had to block."""
        if slot.pending is None:
            return False
        blocked = not slot.pending.done()
        t0 = time.perf_counter()
        state = self._load_state(slot)
        while not slot.pending.done():
            # a load held back by the budget waits for a scene to leave, which only this thread
            # can make happen: give up (no swap now; with a binding budget runs may not repeat)
            with self._cv:
                held = slot.loading.scene_id in self._held
            if held:    # reported once per load, not at every step until it fits
                if slot.gave_up == slot.loading.scene_id:
                    return False
                slot.gave_up = slot.loading.scene_id
                self._note_wait(slot, what + " (given up: the load waits for room in the cache budget)",
                                state, time.perf_counter() - t0)
                return True
            wait([slot.pending], timeout=0.02)
        self._integrate(slot, slot.pending.result())
        if blocked:
            self._note_wait(slot, what, state, time.perf_counter() - t0)
        if slot.active is None or (self.options.prefetch and slot.ready is None):
            self._start_load(slot, "when the slot's previous load ended")
        return blocked

    def _wait_for_active(self, slot: _Slot) -> None:
        t0 = time.perf_counter()
        state = self._load_state(slot)
        while slot.active is None:
            self._raise_if_stuck()
            if slot.pending is None and not self._start_load(slot, "the slot had no scene"):
                # every remaining scene is loading in (or used by) another slot: wait for those,
                # then share another slot's scene until this slot's own next load lands
                others = [s for s in self._slots if s.pending is not None and not self._held_back(s)]
                if others:
                    self._finish(others[0])
                    continue
                self._share(slot)
                break
            if slot.pending is not None and not self._finish(slot):   # held back by the budget
                self._share(slot)
                break
        self._note_wait(slot, "had no loaded scene (start-up, or its loads failed) and", state,
                        time.perf_counter() - t0)

    def _held_back(self, slot: _Slot) -> bool:
        with self._cv:
            return slot.loading is not None and slot.loading.scene_id in self._held

    def _finish(self, slot: _Slot) -> bool:
        """Wait for the slot's load and integrate it; False (not integrated) if it waits for room
        in the budget, which only this thread's releases can make."""
        while not slot.pending.done():
            if self._held_back(slot):
                return False
            wait([slot.pending], timeout=0.02)
        self._integrate(slot, slot.pending.result())
        return True

    def _share(self, slot: _Slot) -> None:
        """The slot takes another slot's active scene until its own next one lands; the run stops
        (one line saying why) only when no slot has a scene."""
        donor = next((s.active for s in self._slots if s.active is not None), None)
        if donor is None:
            q = list(self.quarantined.items())
            raise DatasetError(None, f"no usable scene is left: {len(q)} of {len(self.sources)} quarantined ("
                                     + "; ".join(f"{k}: {v}" for k, v in q[:3]) + (", ..." if len(q) > 3 else "")
                                     + ")" if q else "no usable scene could be loaded")
        slot.active, slot.episodes = donor, 0

    def _raise_if_stuck(self) -> None:
        """In ``_wait_for_active``: stop instead of trying scene after scene when the cache was
        closed, or a start-up load was refused (``start(refuse=True)``) or found no room."""
        if self._closed:
            raise LoadCancelled(None, "the scene cache was closed while waiting for a scene")
        if self._start_error is not None or self._short:
            for s in self._slots:       # let the other start-up loads end (none of them blocks)
                if s.pending is not None:
                    self._integrate(s, s.pending.result())
            if self._start_error is not None:
                raise self._start_error
            self._check_start_budget()

    def _wait_ready(self) -> None:
        """Block until every slot has an active scene (the initial load; not counted as a wait)."""
        for s in self._slots:
            if s.active is None:
                self._wait_for_active(s)
        self._raise_if_stuck()
        self._check_start_budget()
        self._report.waited, self._report.wait_seconds, self._report.reasons = False, 0.0, []

    # ------------------------------------------------------------------ the env's API
    def _maybe_swap(self, slot: _Slot) -> None:
        due = slot.swap_requested or (self.options.swap_after_episodes is not None
                                      and slot.episodes >= self.options.swap_after_episodes)
        if not due:
            return
        if slot.ready is None:   # a due swap waits for the slot's next scene (reported)
            self._take_pending(slot, "swap")
            if slot.ready is None:
                return
        old = slot.active
        slot.active, slot.ready, slot.episodes, slot.swap_requested = slot.ready, None, 0, False
        self._report.swaps += 1
        if old is not None:
            self._swapped_out[old] = self.clock()
            self._maybe_evict(old)
        if self.options.prefetch:
            self._start_load(slot, "at the slot's swap")

    def _maybe_evict(self, idx: int) -> None:
        if self._refs[idx] > 0 or idx not in self._scenes:
            return
        if any(s.active == idx or s.ready == idx for s in self._slots):
            return
        sc = self._scenes.pop(idx)
        self.generation += 1
        self._events.append(SceneEvent("left", idx))
        self.renderer.detach(idx)
        self._in_use.discard(sc.scene_id)
        self._free_ids.append(idx)
        self._unreserve(sc.ticket if sc.ticket is not None else 0)
        self._report.evictions += 1
        owner = self._owner.pop(idx, None)
        out = self._swapped_out.pop(idx, "?")
        if owner is not None and self.options.prefetch:
            self._start_load(self._slots[owner], f"when {sc.scene_id!r} left, swapped out at {out}")

    def _pick(self, envs: np.ndarray) -> np.ndarray:
        slots = self.env_slot[envs]
        counts = np.bincount(slots, minlength=self.num_slots)
        active = np.zeros(self.num_slots, np.int64)
        for k in np.flatnonzero(counts).tolist():    # the slots in use, in order
            slot = self._slots[k]
            self._maybe_swap(slot)
            if slot.active is None:
                self._wait_for_active(slot)
            active[k] = slot.active
            slot.episodes += int(counts[k])
        out = active[slots]
        np.add.at(self._refs, out, 1)
        return out

    def assign_next(self, env_ids) -> np.ndarray:
        """For a runtime that queues episodes ahead: the scene index of one more *upcoming*
        episode per env (its slot's active scene, after a due swap), holding one reference per
        entry until ``release_scenes`` gives it back (when that episode has ended). Nothing is
        released here, so an env may hold its current scene and queued ones at once."""
        envs = _as_env_ids(env_ids, self.num_envs)
        return self._pick(envs)

    def release_scenes(self, idxs) -> None:
        """Give back references taken by ``assign_next``; unused scenes leave."""
        r = np.asarray(idxs, np.int64).reshape(-1)
        if r.size == 0:
            return
        if r.min() < 0 or r.max() >= self.capacity:
            raise ConfigError(None, f"scene indices must be in [0, {self.capacity}), got {int(r.min())}..{int(r.max())}")
        np.subtract.at(self._refs, r, 1)
        if (self._refs < 0).any():
            np.maximum(self._refs, 0, out=self._refs)
            raise ConfigError(None, "release_scenes: more releases than references taken")
        gone = r[self._refs[r] == 0]    # only scenes without references can leave
        for idx in (np.unique(gone).tolist() if gone.size else ()):
            self._maybe_evict(idx)

    def after_round(self) -> None:
        """Every group has stepped once more: with ``swap_every``, every that many rounds the next
        slot (round robin) that has a scene loading or loaded swaps, waiting for its load if
        needed (a wait, reported), so swaps happen at a fixed step."""
        self.rounds += 1
        self._unstick()
        every = self.options.swap_every
        if not every or self.rounds % every:
            return
        order = [(self._next_swap_slot + i) % self.num_slots for i in range(self.num_slots)]
        k = next((i for i in order if self.has_pending(i)), None)
        if k is None:   # with few spare scenes not every slot has a next one
            return
        self._next_swap_slot = (k + 1) % self.num_slots
        self.wait_pending(k)
        self.request_swap([k])
        self.swaps_requested += 1

    def _unstick(self) -> None:
        """When every load waits for room and nothing will make any (no slot has a next scene to
        swap to, no scene is draining), give those loads up: each slot then loads the next scene
        of the order at its next due swap (a scene larger than the start-up ones may never fit
        next to the active scenes; the run goes on, it is tried again on the next pass)."""
        if self.budget_bytes is None:
            return
        with self._cv:
            held = set(self._held)
        pending = [s for s in self._slots if s.pending is not None]
        if not held or not pending or any(s.loading.scene_id not in held for s in pending):
            return
        if any(s.ready is not None for s in self._slots) or any(not self._claimed(i) for i in self._scenes):
            return
        with self._cv:
            self._skip |= held
            self._cv.notify_all()

    def scene_id(self, scene_index: int) -> str:
        """The scene id (manifest name) of a resident scene index."""
        return self.scene(scene_index).scene_id

    def resident_scene_ids(self) -> list[str]:
        """Scene ids now resident."""
        return [self._scenes[r].scene_id for r in sorted(self._scenes)]

    def request_swap(self, slots=None) -> None:
        """Ask ``slots`` (default: all) to move new episodes to their pending scene once ready."""
        for k in (range(self.num_slots) if slots is None else np.atleast_1d(slots).tolist()):
            self._slots[int(k)].swap_requested = True

    @property
    def loading(self) -> bool:
        """True while any slot's load is still in flight."""
        return any(s.pending is not None and not s.pending.done() for s in self._slots)

    def has_pending(self, slot: int) -> bool:
        """Slot ``slot`` has a next scene loading or loaded (a swap request will take effect)."""
        s = self._slots[int(slot)]
        return s.pending is not None or s.ready is not None

    def wait_pending(self, slot: int) -> bool:
        """Block until slot ``slot``'s in-flight load (if any) has finished and is integrated
        (ready for a swap, or quarantined). Returns True if it had to block; that time is also
        reported as a wait by ``take_report``. For deterministic swap schedules."""
        return self._take_pending(self._slots[int(slot)], "swap")

    def scene(self, idx: int) -> LoadedScene:
        """The resident scene ``idx`` (navmesh, header, source)."""
        try:
            return self._scenes[int(idx)]
        except KeyError:
            raise ConfigError(None, f"scene index {idx} is not resident") from None

    @property
    def resident_ids(self) -> list[int]:
        """Scene indices now in use (sorted)."""
        return sorted(self._scenes)

    def take_report(self) -> CacheReport:
        """Counters since the previous call (call once per step)."""
        r = self._report
        r.resident_scenes = len(self._scenes)
        r.resident_bytes = self.resident_bytes
        r.resident_footprint = add_footprints(s.footprint or {} for s in list(self._scenes.values()))
        self._report = CacheReport()
        return r

    def close(self) -> None:
        """Stop the loads and detach every resident scene from the renderer."""
        self.cancel()
        self.loader.close()
        for idx in list(self._scenes):
            self.renderer.detach(idx)
        self._scenes.clear()
        self.generation += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _NoRoom(LoadCancelled):
    """A start-up load the budget has no room for (``nbytes``: what it needed)."""

    def __init__(self, path, detail: str, nbytes: int):
        super().__init__(path, detail)
        self.nbytes = nbytes


class _Skipped(LoadCancelled):
    """A load given up because no scene would ever make room for it (``_unstick``)."""


# a load waiting for budget would keep the interpreter from exiting (its pool's threads are
# joined at exit): every live cache is cancelled first (threading's exit hooks run in reverse
# order of registration, so this one before concurrent.futures' join)
_LIVE: "weakref.WeakSet[SceneCache]" = weakref.WeakSet()


def _cancel_all() -> None:
    for c in list(_LIVE):
        c.cancel()


getattr(threading, "_register_atexit", lambda f: None)(_cancel_all)


def _as_env_ids(env_ids, num_envs: int) -> np.ndarray:
    if isinstance(env_ids, np.ndarray) and env_ids.dtype == np.int64 and env_ids.ndim == 1:
        # the step path's case (sorted env ids from flatnonzero): no sort, no copy
        e = env_ids
        if e.size == 0 or ((e.size == 1 or (e[1:] > e[:-1]).all()) and e[0] >= 0 and e[-1] < num_envs):
            return e
    import torch

    if isinstance(env_ids, torch.Tensor):
        env_ids = env_ids.detach().cpu().numpy()
    e = np.asarray(env_ids)
    if e.dtype == bool:
        if e.shape != (num_envs,):
            raise ConfigError(None, f"env mask must have shape [{num_envs}], got {e.shape}")
        return np.flatnonzero(e)
    e = e.astype(np.int64).reshape(-1)
    if e.size and (e.min() < 0 or e.max() >= num_envs):
        raise ConfigError(None, f"env ids must be in [0, {num_envs}), got {int(e.min())}..{int(e.max())}")
    if np.unique(e).size != e.size:
        raise ConfigError(None, "env ids contain duplicates")
    return e
