"""Composed scenes' assets, each resident once: reference-counted across scenes and instances.

``AssetStore.acquire(path, reserve, source)`` returns the asset of ``path`` (a plain packed
scene of the dataset's asset library, docs/FORMAT.md 5.7): read (``expand=False``), shading
tables built and the renderer's accel prepared on the first acquire only, its bytes reserved in
the cache's budget then (``reserve(nbytes, source)``, the loader's; it may wait for room); later
acquires, by any scene, take one more reference. ``release(asset)`` drops one; the last one
gives the bytes back (``release_bytes``) and forgets the asset. Two loads that want the same
asset at once load it once (the second waits for the first). Thread-safe (loader threads
acquire, the simulator thread releases when a scene leaves).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Asset:
    """One resident asset: its packed scene (positions only: the boxes), shading, accel, bytes."""

    path: str
    scene: Any
    shading: Any
    accel: Any
    nbytes: int
    refs: int = 0


class AssetStore:
    """See the module docstring. ``renderer``: its ``prepare`` / ``accel_bytes``;
    ``release_bytes(n)``: gives budget bytes back (None: no budget)."""

    def __init__(self, renderer, release_bytes: Callable[[int], None] | None = None):
        self.renderer = renderer
        self.release_bytes = release_bytes
        self._lock = threading.Lock()
        self._assets: dict[str, Future] = {}

    def acquire(self, path, reserve=None, source=None) -> Asset:
        """One more reference to the asset at ``path``, loading it if it is not resident."""
        key = os.path.realpath(path)
        with self._lock:
            fut = self._assets.get(key)
            mine = fut is None
            if mine:
                fut = self._assets[key] = Future()
        if not mine:
            asset = fut.result()          # raises the first loader's error too
            with self._lock:
                if self._assets.get(key) is fut and asset.refs > 0:
                    asset.refs += 1
                    return asset
            return self.acquire(path, reserve, source)   # it left meanwhile: load it again
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

    def _load(self, path: str, reserve, source) -> Asset:
        from bps_assets.packed_scene import read_packed_scene

        from ..render.shading_data import build_shading_data

        ps = read_packed_scene(path, expand=False)
        sd = build_shading_data(ps, path)
        # charged: the shading tables, the accel and the vertices kept for each scene's object boxes
        nbytes = sd.nbytes + int(self.renderer.accel_bytes(len(ps.positions), len(ps.indices))) + ps.positions.nbytes
        if reserve is not None:
            reserve(nbytes, source)
        try:
            accel = self.renderer.prepare(sd, ps.positions, ps.indices)
        except BaseException:
            if reserve is not None and self.release_bytes is not None:
                self.release_bytes(nbytes)
            raise
        ps.indices = ps.uvs = ps.colors = ps.tex_blocks = ps.tex_levels = None   # in the tables and the accel
        return Asset(path, ps, sd, accel, nbytes if reserve is not None else 0)

    def release(self, asset: Asset) -> None:
        """Drop one reference; the last one forgets the asset and gives its bytes back."""
        with self._lock:
            asset.refs -= 1
            if asset.refs > 0:
                return
            if self._assets.get(asset.path) is not None and self._assets[asset.path].done() \
                    and self._assets[asset.path].result() is asset:
                del self._assets[asset.path]
        if asset.nbytes and self.release_bytes is not None:
            self.release_bytes(asset.nbytes)

    @property
    def resident(self) -> dict[str, int]:
        """{asset path: references} of the assets now resident."""
        with self._lock:
            return {k: f.result().refs for k, f in self._assets.items() if f.done() and f.exception() is None}

    @property
    def nbytes(self) -> int:
        """Bytes charged for the resident assets."""
        with self._lock:
            return sum(f.result().nbytes for f in self._assets.values() if f.done() and f.exception() is None)
