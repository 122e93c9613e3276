"""Composed scenes' assets, each resident once: reference-counted across scenes and instances.

``AssetStore.acquire(path, reserve, source)`` returns the asset of ``path`` (a plain packed
scene of the dataset's asset library, docs/FORMAT.md 5.7): read (``expand=False``), shading
tables built and the renderer's accel prepared on the first acquire only, its bytes reserved in
the cache's budget then (``reserve(nbytes, source)``, the loader's; it may wait for room); later
acquires, by any scene, take one more reference. ``release(asset)`` drops one; the last one
gives the bytes back (``release_bytes``) and forgets the asset. Two loads that want the same
asset at once load it once: the second waits for the first, in ``waiting(source, on)`` (the
budget ledger's: it counts as held while the first waits for room, and its short polls end it
when the load is given up or the cache closes); when the first fails for want of room, the
second loads it itself. ``Asset.footprint``: its bytes by part (``scenes.footprint``, as a
scene's). Thread-safe (loader threads acquire, the simulator thread releases).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable

from bps_assets.errors import ConfigError

from .budget import LoadCancelled
from .footprint import scene_footprint

POLL_SECONDS = 0.05   # a second loader's wait for the first: how often it checks for give-up / close


@dataclass
class Asset:
    """One resident asset: its packed scene (positions only: the boxes), shading, accel, and its
    bytes by part (``footprint``; ``nbytes`` their sum; ``reserved``: charged to the budget)."""

    path: str
    scene: Any
    shading: Any
    accel: Any
    footprint: dict = field(default_factory=dict)
    reserved: bool = False
    refs: int = 0

    @property
    def nbytes(self) -> int:
        """The asset's resident bytes (the sum of ``footprint``)."""
        return sum(self.footprint.values())


class AssetStore:
    """See the module docstring. ``renderer``: its ``prepare`` / ``accel_breakdown``;
    ``release_bytes(n)``: gives budget bytes back (None: no budget); ``waiting``: the ledger's."""

    def __init__(self, renderer, release_bytes: Callable[[int], None] | None = None, waiting=None):
        self.renderer = renderer
        self.release_bytes = release_bytes
        self.waiting = waiting            # the budget ledger's ``waiting`` (None: wait plainly)
        self._lock = threading.Lock()
        # asset path -> (its load's future, the scene id of the load reading it)
        self._assets: dict[str, tuple[Future, str | None]] = {}

    def acquire(self, path, reserve=None, source=None) -> Asset:
        """One more reference to the asset at ``path``, loading it if it is not resident
        (``source``: the scene whose load asks; its waits and errors name it)."""
        key = os.path.realpath(path)
        while True:
            with self._lock:
                held = self._assets.get(key)
                mine = held is None
                if mine:
                    held = self._assets[key] = (Future(), None if source is None else source.scene_id)
                fut, on = held
            if mine:
                return self._load_mine(key, fut, reserve, source)
            try:
                asset = self._wait(fut, source, on)
            except LoadCancelled as e:
                if fut.done() and fut.exception() is e:   # the first load found no room or was given up
                    continue                               # (not ours): load it as ours
                raise                # ours was given up (or the cache closed) while we waited
            with self._lock:
                if self._assets.get(key) is held and asset.refs > 0:
                    asset.refs += 1
                    return asset
            # it left meanwhile: load it again

    def _wait(self, fut: Future, source, on) -> Asset:
        """The result of another load's ``fut`` (its error too), waiting visibly to the ledger."""
        if self.waiting is None or source is None or on is None:
            return fut.result()
        with self.waiting(source, on) as poll:
            while True:
                try:
                    return fut.result(timeout=POLL_SECONDS)
                except FutureTimeout:
                    poll()

    def _load_mine(self, key: str, fut: Future, reserve, source) -> Asset:
        try:
            asset = self._load(key, reserve, source)
        except BaseException as e:
            with self._lock:
                self._assets.pop(key, None)
            fut.set_exception(e)
            raise
        with self._lock:
            asset.refs = 1
        fut.set_result(asset)
        return asset

    def _read(self, path: str):
        """The asset file's packed scene (``expand=False``), its shading tables and footprint."""
        from bps_assets.packed_scene import read_packed_scene

        from ..render.shading_data import build_shading_data

        ps = read_packed_scene(path, expand=False)
        sd = build_shading_data(ps, path)
        return ps, sd, asset_footprint(sd, self.renderer, ps.positions, len(ps.indices))

    def _load(self, path: str, reserve, source) -> Asset:
        ps, sd, footprint = self._read(path)
        if reserve is not None:
            try:
                reserve(sum(footprint.values()), source)
            except ConfigError as e:   # the budget's "more than the whole budget": the asset's, not
                raise ConfigError(path, e.detail) from None   # the scene's (a waiting load gets it too)
        try:
            accel = self.renderer.prepare(sd, ps.positions, ps.indices)
        except BaseException:
            if reserve is not None and self.release_bytes is not None:
                self.release_bytes(sum(footprint.values()))
            raise
        ps.indices = ps.uvs = ps.colors = ps.tex_blocks = ps.tex_levels = None   # in the tables and the accel
        return Asset(path, ps, sd, accel, footprint, reserved=reserve is not None)

    def measure(self, path) -> dict:
        """The footprint ``path``'s asset would have (read, not prepared; nothing charged)."""
        return self._read(path)[2]

    def release(self, asset: Asset) -> None:
        """Drop one reference; the last one forgets the asset and gives its bytes back."""
        with self._lock:
            asset.refs -= 1
            if asset.refs > 0:
                return
            held = self._assets.get(asset.path)
            if held is not None and held[0].done() and held[0].result() is asset:
                del self._assets[asset.path]
        if asset.reserved and self.release_bytes is not None:
            self.release_bytes(asset.nbytes)

    @property
    def resident(self) -> dict[str, int]:
        """{asset path: references} of the assets now resident."""
        return {a.path: a.refs for a in self.held_assets()}

    def held_assets(self) -> list[Asset]:
        """The resident assets (loads in flight not included)."""
        with self._lock:
            return [f.result() for f, _ in self._assets.values() if f.done() and f.exception() is None]

    @property
    def nbytes(self) -> int:
        """Bytes charged for the resident assets."""
        return sum(a.nbytes for a in self.held_assets() if a.reserved)


def asset_footprint(shading, renderer, positions, num_triangles: int) -> dict[str, int]:
    """An asset's bytes by part: ``scene_footprint`` of its mesh, plus (geometry) the vertices
    kept for each scene's object boxes."""
    f = scene_footprint(shading, renderer, len(positions), num_triangles)
    f["geometry"] += positions.nbytes
    return f
