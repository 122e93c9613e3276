"""The scene cache's byte budget: a ledger of reservations (loader threads) and releases.

``reserve(nbytes, source)`` charges a load's exact cost before its BVH build / upload and
waits, in the one budget-wait loop, until it fits; ``release(ticket)`` gives bytes back (a
scene left, or a load failed after reserving). Without a budget nothing waits. The simulator
thread never waits here: it asks ``is_held(scene_id)`` (a load waits for room) and gives such
loads up (``give_up``) when no scene would ever make room. A load that waits for another
load's shared asset (``waiting``) counts as held while that load is. A start-up load never
waits (nothing leaves before the first step: ``NoRoom``); ``cancel()`` (any thread; close and
interpreter exit) ends every wait and refuses new reservations.
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager

from bps_assets.errors import BpsError, ConfigError


class LoadCancelled(BpsError):
    """The cache closed while a load waited for budget."""


class NoRoom(LoadCancelled):
    """A start-up load the budget has no room for. ``nbytes``: the scene's whole need, of which
    ``assets`` ({asset path: bytes}) are a composed scene's shared assets (each counted once by
    ``budget_needed``)."""

    def __init__(self, path, detail: str, nbytes: int, assets: dict | None = None):
        super().__init__(path, detail)
        self.nbytes = nbytes
        self.assets = dict(assets or {})


class Skipped(LoadCancelled):
    """A load given up because no scene would ever make room for it (``give_up``)."""


class BudgetLedger:
    """Bytes reserved by resident scenes and loads in flight, against ``budget_bytes`` (None:
    unlimited). Thread-safe; every wait for room is in ``reserve``."""

    def __init__(self, budget_bytes: int | None):
        self.budget_bytes = budget_bytes
        self._cv = threading.Condition()
        self._used = 0
        self.peak_bytes = 0
        self._held: set[str] = set()   # scene ids whose loads wait for room
        self._skip: set[str] = set()   # held loads to give up
        self._waits: dict[str, str] = {}   # scene id -> the scene id whose asset load it waits for
        self._closed = False
        self.starting = False          # start-up: a load that does not fit raises NoRoom
        self.refuse = False            # start(refuse=True): errors are the caller's, not quarantine
        _LIVE.add(self)

    def reserve(self, nbytes: int, source) -> int:
        """Charge ``nbytes`` for ``source``'s load (loader thread), waiting until it fits; -> the
        ticket for ``release``. Raises ConfigError (larger than the whole budget), NoRoom,
        Skipped or LoadCancelled."""
        limit = self.budget_bytes
        with self._cv:
            if limit is not None and nbytes > limit and not self.refuse:
                raise ConfigError(source.scene_path, f"needs {nbytes} bytes, more than the whole cache "
                                                     f"budget of {limit} bytes")
            if self.starting and limit is not None and self._used + nbytes > limit:
                raise NoRoom(source.scene_path, f"needs {nbytes} bytes at start-up", nbytes)
            scene_id = source.scene_id
            while limit is not None and self._used + nbytes > limit:
                if self._closed or scene_id in self._skip:
                    self._held.discard(scene_id)
                    if scene_id in self._skip:
                        self._skip.discard(scene_id)
                        raise Skipped(source.scene_path, f"skipped this pass: its {nbytes} bytes do not fit "
                                                         f"next to the scenes that stay")
                    raise LoadCancelled(source.scene_path, "cache closed")
                self._held.add(scene_id)
                self._cv.wait(0.5)
            self._held.discard(scene_id)
            self._skip.discard(scene_id)   # it got room: a give_up that came too late is void
            if self._closed:
                raise LoadCancelled(source.scene_path, "cache closed")
            self._used += nbytes
            self.peak_bytes = max(self.peak_bytes, self._used)
            return nbytes

    def release(self, ticket) -> None:
        """Give a reservation back (None: nothing was reserved)."""
        with self._cv:
            self._used -= int(ticket or 0)
            self._cv.notify_all()

    @property
    def used(self) -> int:
        """Bytes reserved by resident scenes and loads in flight."""
        with self._cv:
            return self._used

    @contextmanager
    def waiting(self, source, on: str):
        """The load of ``source`` waits for the load of scene ``on`` (an asset both use, that
        load reads it): while ``on``'s load is held, so is this one (``is_held``, ``held``,
        ``give_up``). Yields ``poll()``: call it between short waits; it raises Skipped once
        the load was given up and LoadCancelled once the cache closed."""
        scene_id = source.scene_id
        with self._cv:
            self._waits[scene_id] = on

        def poll() -> None:
            with self._cv:
                if scene_id in self._skip:
                    self._skip.discard(scene_id)
                    raise Skipped(source.scene_path, f"skipped this pass: it waits for the load of {on!r}, "
                                                     f"which waits for room in the cache budget")
                if self._closed:
                    raise LoadCancelled(source.scene_path, "cache closed")
        try:
            yield poll
        finally:
            with self._cv:
                self._waits.pop(scene_id, None)

    def _held_now(self) -> set[str]:
        """The loads waiting for room, and those waiting for them (lock held)."""
        held = set(self._held)
        while True:
            more = {w for w, on in self._waits.items() if on in held and w not in held}
            if not more:
                return held
            held |= more

    def is_held(self, scene_id: str) -> bool:
        """True while the load of ``scene_id`` waits for room (itself, or the load it waits for)."""
        with self._cv:
            return scene_id in self._held_now()

    def held(self) -> set[str]:
        """Scene ids whose loads wait for room now (``is_held``)."""
        with self._cv:
            return self._held_now()

    def give_up(self, scene_ids) -> None:
        """End the waits of these loads (``Skipped``): no scene would ever make room for them."""
        with self._cv:
            self._skip |= set(scene_ids)
            self._cv.notify_all()

    @property
    def closed(self) -> bool:
        """``cancel()`` was called."""
        return self._closed

    def cancel(self) -> None:
        """End every wait for room and refuse new reservations (any thread)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()


# a load waiting for room would keep the interpreter from exiting (its pool's threads are joined
# at exit): every live ledger is cancelled first (threading's exit hooks run in reverse order of
# registration, so this one before concurrent.futures' join)
_LIVE: "weakref.WeakSet[BudgetLedger]" = weakref.WeakSet()


def _cancel_all() -> None:
    for ledger in list(_LIVE):
        ledger.cancel()


threading._register_atexit(_cancel_all)
