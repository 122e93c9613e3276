"""The scene cache's glue between the slot policy, the loader, the budget and the listeners.

It starts loads (a load's scene index is fixed when it starts), takes them in only at points
fixed by the step count (a due swap, start-up: waiting for the load, a reported wait), counts
each scene index's references (queued and running episodes), lets a scene leave once nothing
uses it (releasing its bytes) and tells the residency listeners of every arrival and departure.
A failed load quarantines its scene; a slot without a scene shares another slot's. Single
threaded (the simulator thread); the loads run on the loader threads.
"""
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import wait

import numpy as np

from bps_assets.errors import ConfigError, DatasetError

from .budget import BudgetLedger, LoadCancelled, NoRoom, Skipped
from .footprint import ResidentFootprint
from .loader import LoadedScene, LoadFailure
from .policy import Slot, SlotPolicy
from .report import CacheReport, load_state
from .residency import Residency


class SlotScheduler:
    """Loads, waits, references and departures of ``policy``'s slots (see the module docstring)."""

    def __init__(self, policy: SlotPolicy, loader, ledger: BudgetLedger, residency: Residency, *,
                 capacity: int, scenes_per_slot: int, prefetch: bool, clock):
        self.policy, self.loader, self.ledger, self.residency = policy, loader, ledger, residency
        self.sources = policy.sources
        self.slots = [Slot(i) for i in range(policy.num_slots)]
        self.capacity, self.scenes_per_slot, self.prefetch = capacity, scenes_per_slot, prefetch
        self.clock = clock                      # labels the moments named in wait reasons
        self.refs = np.zeros(capacity, np.int64)
        self.scenes: dict[int, LoadedScene] = {}
        self.footprint = ResidentFootprint()   # ``scenes``' footprints summed, kept as they come and go
        self.owner: dict[int, int] = {}         # scene index -> the slot that loaded it
        self.swapped_out: dict[int, str] = {}   # scene index -> clock label of its swap out
        self.free_indices = deque(range(capacity))
        self.quarantined: dict[str, str] = {}
        self.in_use: set[str] = set()           # scene ids resident or loading
        self.short: dict[str, NoRoom] = {}      # start-up loads the budget had no room for: their need
        self.start_error: BaseException | None = None   # a refused start-up load's error
        self.report = CacheReport()

    # ------------------------------------------------------------------ loads
    def claimed(self, scene_index: int) -> bool:
        """True while a slot holds ``scene_index`` as its active or its ready (next) scene."""
        return any(s.active == scene_index or s.ready == scene_index for s in self.slots)

    def start_load(self, slot: Slot, why: str) -> bool:
        """Give the slot its next scene if it has none (a load, or a draining resident scene
        taken back); True if a next scene is pending or ready. ``why``: for wait reasons."""
        if slot.pending is not None or slot.ready is not None:
            return True
        if sum(1 for o in self.owner.values() if o == slot.index) >= self.scenes_per_slot:
            return False  # active + two previous scenes still draining: the next one waits
        draining = {sc.scene_id: i for i, sc in self.scenes.items() if not self.claimed(i)}
        pick = self.policy.next_source(self.quarantined, self.in_use, draining)
        if pick is None:
            return False
        src, scene_index = pick
        if scene_index is not None:   # still resident: no load, it is this slot's next (or first) scene
            self.owner[scene_index] = slot.index
            self._give(slot, scene_index)
            self.report.reused += 1
            return True
        self.in_use.add(src.scene_id)
        # the scene index is fixed when the load starts (the simulator thread, at a point fixed by
        # the step count), never by which load finishes first
        slot.loading_index = self.free_indices.popleft()
        self.owner[slot.loading_index] = slot.index
        slot.loading = src
        slot.load_note = f"started at {self.clock()} ({why})"
        slot.pending = self.loader.submit(src, self.ledger.reserve, quiet=self.ledger.refuse)
        return True

    @staticmethod
    def _give(slot: Slot, scene_index: int) -> None:
        if slot.active is None:
            slot.active, slot.episodes = scene_index, 0
        else:
            slot.ready = scene_index

    def integrate(self, slot: Slot, res) -> None:
        """Take in the slot's finished load: an arrival, or a quarantine / refusal."""
        scene_index = slot.loading_index
        slot.pending = slot.loading = slot.loading_index = slot.gave_up = None
        if isinstance(res, LoadFailure):
            self.in_use.discard(res.scene_id)
            self.owner.pop(scene_index, None)
            self.free_indices.appendleft(scene_index)
            if isinstance(res.error, NoRoom):
                self.short[res.scene_id] = res.error
            elif isinstance(res.error, Skipped):
                self.report.reasons.append(f"slot {slot.index}: {res.scene_id!r} {res.error.detail}")
            elif self.ledger.starting and self.ledger.refuse and not isinstance(res.error, LoadCancelled):
                self.start_error = self.start_error or res.error
            elif not isinstance(res.error, LoadCancelled):
                self.quarantined[res.scene_id] = res.message
                self.report.quarantined.append(res.scene_id)
            return
        self.scenes[scene_index] = res
        self.footprint.arrived(res)
        self.residency.arrived(scene_index, res)
        self.report.loads_completed += 1
        self._give(slot, scene_index)

    def held_back(self, slot: Slot) -> bool:
        """The slot's load waits for room in the budget (only this thread's releases make any)."""
        return slot.loading is not None and self.ledger.is_held(slot.loading.scene_id)

    def finish(self, slot: Slot) -> bool:
        """Wait for the slot's load and take it in; False (not taken in) if it waits for room in
        the budget."""
        while not slot.pending.done():
            if self.held_back(slot):
                return False
            wait([slot.pending], timeout=0.02)
        self.integrate(slot, slot.pending.result())
        return True

    def take_pending(self, slot: Slot, what: str) -> bool:
        """Take in the slot's in-flight load, waiting for it if it has not finished (a wait,
        reported); after a failure the slot's next load starts. Called only at points fixed by
        the step count (a due swap, start-up), so which scene a slot has next never depends on
        when a load finished. True if it had to block."""
        if slot.pending is None:
            return False
        blocked = not slot.pending.done()
        t0 = time.perf_counter()
        state = load_state(slot, self.loader)
        if not self.finish(slot):
            # a load held back by the budget waits for a scene to leave, which only this thread
            # can make happen: give up (no swap now; with a binding budget runs may not repeat)
            if slot.gave_up == slot.loading.scene_id:   # reported once per load, not at every step
                return False
            slot.gave_up = slot.loading.scene_id
            self.report.note_wait(slot.index, what + " (given up: the load waits for room in the cache budget)",
                                  state, time.perf_counter() - t0)
            return True
        if blocked:
            self.report.note_wait(slot.index, what, state, time.perf_counter() - t0)
        if slot.active is None or (self.prefetch and slot.ready is None):
            self.start_load(slot, "when the slot's previous load ended")
        return blocked

    # ------------------------------------------------------------------ waiting for a scene
    def wait_for_active(self, slot: Slot) -> None:
        """Block until ``slot`` has an active scene (loading one if it has none), reporting the wait."""
        t0 = time.perf_counter()
        state = load_state(slot, self.loader)
        while slot.active is None:
            self.raise_if_stuck()
            if slot.pending is None and not self.start_load(slot, "the slot had no scene"):
                # every remaining scene is loading in (or used by) another slot: wait for those,
                # then share another slot's scene until this slot's own next load lands
                others = [s for s in self.slots if s.pending is not None and not self.held_back(s)]
                if others:
                    self.finish(others[0])
                    continue
                self.share(slot)
                break
            if slot.pending is not None and not self.finish(slot):   # held back by the budget
                self.share(slot)
                break
        self.report.note_wait(slot.index, "had no loaded scene (start-up, or its loads failed) and", state,
                              time.perf_counter() - t0)

    def share(self, slot: Slot) -> None:
        """The slot takes another slot's active scene until its own next one lands; the run stops
        (one line saying why) only when no slot has a scene."""
        donor = next((s.active for s in self.slots if s.active is not None), None)
        if donor is None:
            q = list(self.quarantined.items())
            raise DatasetError(None, f"no usable scene is left: {len(q)} of {len(self.sources)} quarantined ("
                                     + "; ".join(f"{k}: {v}" for k, v in q[:3]) + (", ..." if len(q) > 3 else "")
                                     + ")" if q else "no usable scene could be loaded")
        slot.active, slot.episodes = donor, 0

    def raise_if_stuck(self) -> None:
        """In ``wait_for_active``: stop instead of trying scene after scene when the cache was
        closed, or a start-up load was refused (``start(refuse=True)``) or found no room."""
        if self.ledger.closed:
            raise LoadCancelled(None, "the scene cache was closed while waiting for a scene")
        if self.start_error is not None or self.short:
            for s in self.slots:       # let the other start-up loads end (none of them blocks)
                if s.pending is not None:
                    self.integrate(s, s.pending.result())
            if self.start_error is not None:
                raise self.start_error
            self.check_start_budget()

    # ------------------------------------------------------------------ budget at start-up
    def budget_needed(self) -> int:
        """Bytes the policy needs resident: the slots' active scenes (and the start-up loads that
        found no room), every shared asset of theirs counted once, plus the largest scene's own
        bytes once more when there are more live scenes than slots, so a swap can load its next
        (a composed scene's next shares the asset library: its assets are not counted again)."""
        own: dict[str, int] = {}
        assets: dict[str, int] = {}
        for i in {s.active for s in self.slots} & set(self.scenes):
            sc = self.scenes[i]
            own[sc.scene_id] = sc.nbytes
            assets.update(sc.asset_bytes or {})
        for scene_id, e in self.short.items():
            own[scene_id] = e.nbytes - sum(e.assets.values())
            assets.update(e.assets)
        need = sum(own.values()) + sum(assets.values())
        live = sum(1 for s in self.sources if s.scene_id not in self.quarantined)
        if live > len(self.slots) and own:
            need += max(own.values())
        return need

    def check_start_budget(self) -> None:
        """After the start-up loads: refuse a budget that cannot hold what the policy needs (no
        swap could ever load its next scene, or the slots' first scenes do not fit)."""
        budget = self.ledger.budget_bytes
        if budget is None:
            return
        need = self.budget_needed()
        if self.short or need > budget:
            raise ConfigError(None, f"cache budget_bytes={budget} cannot hold what {len(self.slots)} "
                                    f"slot(s) need: their first scenes plus one to swap in take {need} bytes "
                                    f"(measured at start-up; larger scenes need more): give budget_bytes >= "
                                    f"{need}, or fewer slots")

    def unstick(self) -> None:
        """When every load waits for room and nothing will make any (no slot has a next scene to
        swap to, no scene is draining), give those loads up: each slot then loads the next scene
        of the order at its next due swap (a scene larger than the start-up ones may never fit
        next to the active scenes; the run goes on, it is tried again on the next pass)."""
        if self.ledger.budget_bytes is None:
            return
        held = self.ledger.held()
        pending = [s for s in self.slots if s.pending is not None]
        if not held or not pending or any(s.loading.scene_id not in held for s in pending):
            return
        if any(s.ready is not None for s in self.slots) or any(not self.claimed(i) for i in self.scenes):
            return
        self.ledger.give_up(held)

    # ------------------------------------------------------------------ swaps, references, departures
    def maybe_swap(self, slot: Slot) -> None:
        """Swap ``slot`` to its next scene when the policy says a swap is due and that scene is ready."""
        if not self.policy.swap_due(slot):
            return
        if slot.ready is None:   # a due swap waits for the slot's next scene (reported)
            self.take_pending(slot, "swap")
            if slot.ready is None:
                return
        old = slot.active
        slot.active, slot.ready, slot.episodes, slot.swap_requested = slot.ready, None, 0, False
        self.report.swaps += 1
        if old is not None:
            self.swapped_out[old] = self.clock()
            self.maybe_evict(old)
        if self.prefetch:
            self.start_load(slot, "at the slot's swap")

    def maybe_evict(self, scene_index: int) -> None:
        """Evict ``scene_index``'s scene once no env references it and no slot claims it (listeners told)."""
        if self.refs[scene_index] > 0 or scene_index not in self.scenes or self.claimed(scene_index):
            return
        sc = self.scenes.pop(scene_index)
        self.footprint.left(sc)
        self.residency.left(scene_index)
        self.in_use.discard(sc.scene_id)
        self.free_indices.append(scene_index)
        self.forget(sc)
        self.report.evictions += 1
        owner = self.owner.pop(scene_index, None)
        out = self.swapped_out.pop(scene_index, "?")
        if owner is not None and self.prefetch:
            self.start_load(self.slots[owner], f"when {sc.scene_id!r} left, swapped out at {out}")

    def forget(self, sc: LoadedScene) -> None:
        """Give back a scene's bytes and (a composed scene) its shared assets' references."""
        self.ledger.release(sc.ticket)
        if sc.release_assets is not None:
            sc.release_assets()

    def close(self) -> None:
        """The cache closes (its loader has stopped): forget every resident scene and every
        finished load not taken in, giving back their bytes and asset references."""
        for sc in self.scenes.values():
            self.forget(sc)
        self.scenes.clear()
        self.footprint = ResidentFootprint()
        for s in self.slots:
            fut, s.pending = s.pending, None
            if fut is not None and fut.done() and not fut.cancelled() and isinstance(fut.result(), LoadedScene):
                self.forget(fut.result())

    def pick(self, envs: np.ndarray) -> np.ndarray:
        """The scene index of one more episode per env (its slot's active scene, after a due
        swap), one reference each."""
        slots = self.policy.env_slot[envs]
        counts = np.bincount(slots, minlength=len(self.slots))
        active = np.zeros(len(self.slots), np.int64)
        for k in np.flatnonzero(counts).tolist():    # the slots in use, in order
            slot = self.slots[k]
            self.maybe_swap(slot)
            if slot.active is None:
                self.wait_for_active(slot)
            active[k] = slot.active
            slot.episodes += int(counts[k])
        out = active[slots]
        np.add.at(self.refs, out, 1)
        return out

    def release(self, scene_indices: np.ndarray) -> None:
        """Give back one reference per entry; scenes nothing uses leave."""
        r = scene_indices
        if r.min() < 0 or r.max() >= self.capacity:
            raise ConfigError(None, f"scene indices must be in [0, {self.capacity}), "
                                    f"got {int(r.min())}..{int(r.max())}")
        np.subtract.at(self.refs, r, 1)
        if (self.refs < 0).any():
            np.maximum(self.refs, 0, out=self.refs)
            raise ConfigError(None, "release_scenes: more releases than references taken")
        gone = r[self.refs[r] == 0]    # only scenes without references can leave
        for scene_index in (np.unique(gone).tolist() if gone.size else ()):
            self.maybe_evict(scene_index)
