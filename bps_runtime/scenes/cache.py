"""The scene manager's public face: which scenes are resident, which env uses which, swaps.

``SceneCache`` puts together the slot policy (``policy``: bps-nav's scheme; which scene comes
next and which slot swaps follow from the seed and the step count), the budget ledger
(``budget``: a load reserves its exact cost and waits until it fits), the scheduler
(``scheduler``: loads, references, departures; loads taken in only at a due swap or at
start-up, never by which load finished first), the residency listeners (``residency``: told of
every arrival and departure) and the per-step ``report``. ``start`` builds the loader with the
caller's per-scene ``prepare`` (run on the loader threads), refuses a budget below K active
scenes plus one (``budget_needed``) and, with ``refuse``, a failing start-up load; ``cancel``
ends every wait for room (close, exit). Calls go one way: the cache calls the loader, the
ledger and the listeners; nobody calls it back.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from bps_assets.errors import ConfigError, DatasetError, is_bool, is_int

from .budget import BudgetLedger
from .loader import LoadedScene, SceneLoader, SceneSource
from .policy import SlotPolicy
from .report import CacheReport
from .residency import Residency, ResidencyListener
from .scheduler import SlotScheduler


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
        # (field, value, lowest, None allowed): bools and floats are refused, not rounded (max(1, 2.5))
        for name, value, low, optional in (
                ("slots", self.slots, 1, False), ("budget_bytes", self.budget_bytes, 1, True),
                ("loader_threads", self.loader_threads, 1, False),
                ("swap_after_episodes", self.swap_after_episodes, 1, True), ("seed", self.seed, 0, True),
                ("swap_every", self.swap_every, 1, True)):
            if not ((optional and value is None) or (is_int(value) and value >= low)):
                none = " or None" if optional else ""
                raise ConfigError(None, f"cache {name}={value!r}: expected an int >= {low}{none}")
            if value is not None:   # a numpy int stored as Python's: the env's config.to_dict() is JSON
                object.__setattr__(self, name, int(value))
        if not is_bool(self.prefetch):
            raise ConfigError(None, f"cache prefetch={self.prefetch!r}: expected True or False")
        object.__setattr__(self, "prefetch", bool(self.prefetch))


DEFAULTS = CacheOptions()

# scene indices per slot: its active scene, its next one (loading or loaded) and one previous
# scene still draining (the next load starts at the swap, not when the previous scene leaves)
SCENES_PER_SLOT = 3


def capacity_for(options: CacheOptions, num_sources: int, num_envs: int) -> int:
    """Resident scene indices a cache of ``options`` hands out: [0, capacity)."""
    return SCENES_PER_SLOT * min(options.slots, num_sources, num_envs)


class SceneCache:
    """See the module docstring. Single-threaded API (the env's thread); loads run in threads."""

    def __init__(self, sources: Sequence[SceneSource], renderer, num_envs: int,
                 options: CacheOptions = DEFAULTS, device: str = "cpu",
                 reader: Callable | None = None, navmesh_loader: Callable | None = None,
                 listeners: Sequence[ResidencyListener] = ()):
        if not sources:
            raise DatasetError(None, "the scene cache needs at least one scene")
        if num_envs < 1:
            raise ConfigError(None, f"num_envs must be >= 1, got {num_envs}")
        self.options = options
        self.num_envs = int(num_envs)
        self.sources = list(sources)
        self.num_slots = min(options.slots, len(self.sources), self.num_envs)
        self.capacity = capacity_for(options, len(self.sources), self.num_envs)
        self.residency = Residency(listeners)
        self._ledger = BudgetLedger(options.budget_bytes)
        # the loader is built by start(), which is given the per-scene ``prepare``
        self._loader_args = (renderer, options.loader_threads, device, reader, navmesh_loader)
        self.loader: SceneLoader | None = None
        self.policy = SlotPolicy(self.sources, self.num_slots, self.num_envs, seed=options.seed,
                                 swap_after_episodes=options.swap_after_episodes, swap_every=options.swap_every)
        self.env_slot = self.policy.env_slot
        t0 = time.perf_counter()
        self._sched = SlotScheduler(self.policy, None, self._ledger, self.residency,
                                    capacity=self.capacity, scenes_per_slot=SCENES_PER_SLOT,
                                    prefetch=options.prefetch,
                                    clock=lambda: f"t={time.perf_counter() - t0:.1f} s")
        self.rounds = 0            # every group stepped once: the clock of swaps and wait reasons
        self.swaps_requested = 0
        self._started = False

    def add_listener(self, listener: ResidencyListener) -> None:
        """Tell ``listener`` of every later arrival and departure (``scenes.residency``)."""
        self.residency.add(listener)

    def start(self, prepare: Callable | None = None, refuse: bool = False) -> None:
        """Build the loader, start the first loads and wait for every slot's first scene (not
        counted as a wait). ``prepare(scene_id, navmesh)``, when given, ends every load on its
        loader thread; its result is the arriving scene's ``prepared``. ``refuse``: a start-up
        load that fails raises its error here instead of quarantining the scene (``make()``:
        nothing has run yet, so a bad scene is cheapest to fix now). A ``budget_bytes`` that
        cannot hold the slots' first scenes, plus one more to swap in when there are more scenes
        than slots, is a ConfigError naming the bytes they need (measured on those loads)."""
        if self._started:
            return
        self._started = True
        sched, ledger = self._sched, self._ledger
        self.loader = sched.loader = SceneLoader(*self._loader_args, release=ledger.release, prepare=prepare,
                                                 waiting=ledger.waiting)
        ledger.starting, ledger.refuse = True, refuse   # refused: not quarantined, the caller raises it
        try:
            for s in sched.slots:
                sched.start_load(s, "at start-up")
            for s in sched.slots:
                if s.active is None:
                    sched.wait_for_active(s)
            sched.raise_if_stuck()
            sched.check_start_budget()
            sched.report.waited, sched.report.wait_seconds, sched.report.reasons = False, 0.0, []
        finally:
            ledger.starting = ledger.refuse = False
        sched.clock = lambda: f"step {self.rounds}"
        if self.options.prefetch:
            for s in sched.slots:
                sched.start_load(s, "at start-up")

    def budget_needed(self) -> int:
        """Bytes the policy needs resident (the slots' active scenes, plus the largest of them
        once more when there are more live scenes than slots, so a swap can load its next)."""
        return self._sched.budget_needed()

    def cancel(self) -> None:
        """Cancel every load that waits for room in the budget and refuse new reservations (any
        thread; ``close()`` and interpreter exit call it), so no thread waits on the budget."""
        self._ledger.cancel()

    @property
    def resident_bytes(self) -> int:
        """Bytes reserved by resident scenes and loads in flight."""
        return self._ledger.used

    @property
    def peak_bytes(self) -> int:
        """The most bytes ever reserved at once (<= ``budget_bytes``)."""
        return self._ledger.peak_bytes

    @property
    def quarantined(self) -> dict[str, str]:
        """{scene id: why its load failed}: never scheduled again."""
        return self._sched.quarantined

    @property
    def slots(self) -> list:
        """The slots (``scenes.policy.Slot``): scene indices ``active`` / ``ready``, load ``pending``."""
        return self._sched.slots

    # ------------------------------------------------------------------ the env's API
    def assign_next(self, env_ids) -> np.ndarray:
        """For a runtime that queues episodes ahead: the scene index of one more *upcoming*
        episode per env (its slot's active scene, after a due swap), holding one reference per
        entry until ``release_scenes`` gives it back (when that episode has ended). Nothing is
        released here, so an env may hold its current scene and queued ones at once."""
        return self._sched.pick(_as_env_ids(env_ids, self.num_envs))

    def release_scenes(self, scene_indices) -> None:
        """Give back references taken by ``assign_next``; unused scenes leave."""
        r = np.asarray(scene_indices, np.int64).reshape(-1)
        if r.size:
            self._sched.release(r)

    def after_round(self) -> None:
        """Every group has stepped once more: with ``swap_every``, every that many rounds the next
        slot (round robin) that has a scene loading or loaded swaps, waiting for its load if
        needed (a wait, reported), so swaps happen at a fixed step."""
        self.rounds += 1
        self._sched.unstick()
        k = self.policy.scheduled_swap(self.rounds, self.has_pending)
        if k is None:
            return
        self.wait_pending(k)
        self.request_swap([k])
        self.swaps_requested += 1

    def request_swap(self, slots=None) -> None:
        """Ask ``slots`` (default: all) to move new episodes to their pending scene once ready."""
        for k in (range(self.num_slots) if slots is None else np.atleast_1d(slots).tolist()):
            self._sched.slots[int(k)].swap_requested = True

    def request_swap_from(self, env_id: int, scene_id: str) -> bool:
        """Ask env ``env_id``'s slot to swap away from scene ``scene_id``: if that scene is still
        the slot's active one and the slot has a next scene, the slot's new episodes move there
        (``request_swap``). True if a swap was asked. The eval calls it when an env starts a
        repeat there (each of the scene's episodes has started), so a pass over more scenes than
        slots reaches every scene; repeats follow from the seed and the steps, so the swaps do too."""
        k = int(self.env_slot[int(env_id)])
        active = self._sched.slots[k].active
        if active is None or self.scene_id(active) != scene_id or not self.has_pending(k):
            return False
        self.request_swap([k])
        return True

    @property
    def loading(self) -> bool:
        """True while any slot's load is still in flight."""
        return any(s.pending is not None and not s.pending.done() for s in self._sched.slots)

    def has_pending(self, slot: int) -> bool:
        """Slot ``slot`` has a next scene loading or loaded (a swap request will take effect)."""
        s = self._sched.slots[int(slot)]
        return s.pending is not None or s.ready is not None

    def wait_pending(self, slot: int) -> bool:
        """Block until slot ``slot``'s in-flight load (if any) has finished and is taken in
        (ready for a swap, or quarantined). Returns True if it had to block; that time is also
        reported as a wait by ``take_report``. For deterministic swap schedules."""
        return self._sched.take_pending(self._sched.slots[int(slot)], "swap")

    # ------------------------------------------------------------------ what is resident
    def scene(self, scene_index: int) -> LoadedScene:
        """The resident scene ``scene_index`` (navmesh, header, source)."""
        try:
            return self._sched.scenes[int(scene_index)]
        except KeyError:
            raise ConfigError(None, f"scene index {scene_index} is not resident") from None

    def scene_id(self, scene_index: int) -> str:
        """The scene id (manifest name) of a resident scene index."""
        return self.scene(scene_index).scene_id

    @property
    def resident_scene_indices(self) -> list[int]:
        """Scene indices now in use (sorted)."""
        return sorted(self._sched.scenes)

    def resident_scene_ids(self) -> list[str]:
        """Scene ids now resident."""
        scenes = self._sched.scenes
        return [scenes[i].scene_id for i in sorted(scenes)]

    def resident_levels(self) -> dict[str, dict]:
        """Per resident scene id: the converter LOD level it holds (``level``, -1: the full mesh),
        why (``reason``: ``lod_levels.choice``), its ``triangles`` and the ``bytes`` charged."""
        scenes = self._sched.scenes
        return {sc.scene_id: {"level": sc.lod, "reason": sc.lod_reason, "triangles": sc.num_triangles,
                              "bytes": sc.nbytes} for sc in (scenes[i] for i in sorted(scenes))}

    def take_report(self) -> CacheReport:
        """Counters since the previous call (call once per step)."""
        sched = self._sched
        r = sched.report
        r.resident_scenes = len(sched.scenes)
        r.resident_bytes = self.resident_bytes
        r.resident_footprint = dict(sched.footprint.total)   # kept up to date at arrivals / departures
        sched.report = CacheReport()
        return r

    def close(self) -> None:
        """Stop the loads and forget the resident scenes and finished loads, giving back their
        bytes and shared assets (the listeners are not told: their owners close too)."""
        self.cancel()
        if self.loader is not None:
            self.loader.close()
        self._sched.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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
