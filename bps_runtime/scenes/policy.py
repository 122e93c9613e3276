"""The scene cache's slot policy (bps-nav's scheme): which scene comes next and which slot swaps.

K slots; env e belongs to slot e % K. A slot is the per-env-group scene holder: an active
scene index (new episodes start there), at most one next scene (loading or loaded) and the
episodes started on the active one. Scene order is a seeded permutation of the scenes not
quarantined, reshuffled on each pass; a swap is due when requested, after
``swap_after_episodes`` episodes, or (``swap_every``) every that many rounds for the next slot,
round robin, that has a next scene. Every decision here follows from the seed and the step
count only, never from when a load finished (the scheduler asks only at such points).
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future

import numpy as np


class Slot:
    """One slot's state: scene indices (``active``, ``ready``), its load in flight, counters."""
    __slots__ = ("index", "active", "pending", "ready", "episodes", "swap_requested", "loading", "load_note",
                 "loading_index", "gave_up")

    def __init__(self, index: int):
        self.index = index
        self.active: int | None = None          # scene index new episodes start in
        self.pending: Future | None = None      # load in flight
        self.ready: int | None = None           # scene index, loaded, waiting for its swap
        self.episodes = 0                       # episodes started on the active scene
        self.swap_requested = False
        self.loading = None                     # SceneSource of the pending load
        self.load_note = ""                     # when / why the pending load started (wait reasons)
        self.gave_up: str | None = None         # the load whose due swap was given up (reported once)
        self.loading_index: int | None = None   # the scene index the pending load will have (fixed at its start)


class SlotPolicy:
    """Deterministic decisions of a cache with ``num_slots`` slots over ``sources``."""

    def __init__(self, sources, num_slots: int, num_envs: int, *, seed, swap_after_episodes, swap_every):
        self.sources = sources
        self.num_slots = num_slots
        self.env_slot = np.arange(num_envs) % num_slots
        self.swap_after_episodes = swap_after_episodes
        self.swap_every = swap_every
        self._rng = np.random.default_rng(seed)
        self._order: deque[int] = deque()
        self._next_swap_slot = 0

    def next_source(self, quarantined, in_use, draining: dict):
        """The next scene in the order that is neither quarantined nor in use (``in_use``:
        scene ids resident or loading) unless draining (``draining``: scene id -> its resident
        scene index): (source, None) to load, (source, scene index) to take back, or None."""
        for _ in range(2):
            while self._order:
                s = self.sources[self._order.popleft()]
                if s.scene_id in quarantined:
                    continue
                if s.scene_id not in in_use:
                    return s, None
                if s.scene_id in draining:
                    return s, draining[s.scene_id]
            live = [i for i, s in enumerate(self.sources) if s.scene_id not in quarantined]
            self._order.extend(self._rng.permutation(live).tolist() if live else [])
        return None

    def swap_due(self, slot: Slot) -> bool:
        """The slot's new episodes should move to its next scene."""
        return slot.swap_requested or (self.swap_after_episodes is not None
                                       and slot.episodes >= self.swap_after_episodes)

    def scheduled_swap(self, rounds: int, has_next) -> int | None:
        """With ``swap_every``: the slot to swap after round ``rounds`` (round robin over the slots
        for which ``has_next(k)``), or None."""
        every = self.swap_every
        if not every or rounds % every:
            return None
        order = [(self._next_swap_slot + i) % self.num_slots for i in range(self.num_slots)]
        k = next((i for i in order if has_next(i)), None)
        if k is not None:   # with few spare scenes not every slot has a next one
            self._next_swap_slot = (k + 1) % self.num_slots
        return k
