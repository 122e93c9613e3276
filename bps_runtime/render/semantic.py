"""The semantic sensor's data outside the ray loop: instance ids of traced hits, and the
per-scene id -> category table a trainer uses to turn semantic frames into categories on
the device.

Contract (bps_assets.semantics): a semantic pixel is ``tri_object[hit triangle]`` (int32, 0 = no
hit or no object; an MP3D scene's faces of no object read habitat's 65535 too, the header's
``no_object_id``, in no table: UNKNOWN); a scene without ``tri_object`` renders 0 everywhere. The
renderers read the ids from ``ShadingData.tri_object`` (``build_shading_data`` takes a packed scene's
``tri_object``), so they need nothing else. ``CategoryTable`` is the env's side: per scene
index a segment of sorted (scene index, id) keys and their categories, rewritten when a scene
is attached or leaves (memory: by the objects of the largest scene, whatever the ids), so
``lookup(scene_index, frames)`` is a binary search and two gathers with no host work and no
synchronisation.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from bps_assets.errors import ConfigError
from bps_assets.semantics import object_ids  # noqa: F401 - the sensor's id rule, re-exported

UNKNOWN = -1  # the category of "no object", of an id the scene does not list, and of an unmapped name
# the largest instance id (the format's cap, bps_assets.composed_section.MAX_SEMANTIC_ID, and the
# observation space's bound); the table's memory follows the objects, not this
MAX_INSTANCE_ID = 1 << 20
_KEY_SHIFT = 32   # key = scene index << 32 | id: one sorted array serves every scene index
_PAD_ID = (1 << 32) - 1   # a segment's unused entries: above its ids, below the next segment's keys


def category_pairs(semantics, vocabulary: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One scene's id -> category table as (ids int64 [O] increasing, categories int32 [O]):
    ``semantics`` is a ``bps_assets.semantics.SemanticTable`` (or None: no objects). With
    ``vocabulary`` (the task's category names), categories are indices into it (names not in
    it are UNKNOWN), so scenes with different category lists share one numbering; without,
    they are the scene's own ``category`` values (UNKNOWN where the scene has none)."""
    if semantics is None or len(semantics) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int32)
    ids = np.asarray(semantics.ids, np.int64)
    if ids.min() < 1 or ids.max() > MAX_INSTANCE_ID:
        raise ConfigError(None, f"instance ids must be in [1, {MAX_INSTANCE_ID}] (0 means no object); got "
                                f"{int(ids.min()) if ids.min() < 1 else int(ids.max())}")
    cat = np.asarray(semantics.category, np.int64)
    names = list(semantics.categories)
    if vocabulary is not None:
        where = {name: i for i, name in enumerate(vocabulary)}
        remap = np.array([where.get(n, UNKNOWN) for n in names] + [UNKNOWN], np.int64)
        cat = remap[np.where((cat >= 0) & (cat < len(names)), cat, len(names))]
    order = np.argsort(ids, kind="stable")
    return ids[order], np.where(cat < 0, UNKNOWN, cat)[order].astype(np.int32)


def category_row(semantics, vocabulary: Sequence[str] | None = None) -> np.ndarray:
    """``category_pairs`` as one dense row (int32 [max id + 1], UNKNOWN where no object): a
    host-side view of one scene for tests and tools (``CategoryTable`` keeps the pairs)."""
    ids, cat = category_pairs(semantics, vocabulary)
    row = np.full(int(ids.max()) + 1 if ids.size else 1, UNKNOWN, np.int32)
    row[ids] = cat
    return row


class CategoryTable:
    """Id -> category tables of ``scenes`` scene indices on ``device``: ``keys`` int64 [scenes *
    K + 1] and ``values`` int32 (the same length), scene index i's segment ``[i * K, (i + 1) *
    K)`` holding its ids as ``i << 32 | id``, increasing, then pads ``i << 32 | 2^32 - 1``
    (category UNKNOWN), one pad closing the array: so all keys are sorted. K (``capacity`` at
    first) is at least one more than the objects of any scene set, doubled when a scene needs
    more; ``version`` counts those reallocations (a captured CUDA graph that read the old
    tensors must then be re-captured). ``set`` / ``clear`` write one segment in place."""

    def __init__(self, scenes: int, device: str = "cpu", vocabulary: Sequence[str] | None = None,
                 capacity: int = 64):
        import torch

        if scenes < 1 or capacity < 1:
            raise ConfigError(None, f"CategoryTable needs scenes >= 1 and capacity >= 1; got {scenes}, {capacity}")
        self.vocabulary = None if vocabulary is None else list(vocabulary)
        self.device = torch.device(device)
        self._pairs: list[tuple[np.ndarray, np.ndarray] | None] = [None] * scenes
        self._arena = self._layout(max(int(capacity), 2))
        self.version = 0
        self._lock = threading.Lock()

    @property
    def keys(self):
        """The sorted keys, int64 [scenes * K + 1] (see the class docstring)."""
        return self._arena[0]

    @property
    def values(self):
        """The category of each key, int32 (UNKNOWN for pads)."""
        return self._arena[1]

    @property
    def capacity(self) -> int:
        """K: entries per scene index (its objects + at least one pad)."""
        return (self._arena[0].shape[0] - 1) // len(self._pairs)

    @property
    def nbytes(self) -> int:
        """Bytes the table holds on its device."""
        keys, values = self._arena
        return keys.numel() * keys.element_size() + values.numel() * values.element_size()

    def set(self, scene_index: int, semantics) -> None:
        """Make ``scene_index``'s table the one of the scene now attached there (None: no objects).
        Call it where the renderer's ``attach`` is called (between steps)."""
        ids, cats = category_pairs(semantics, self.vocabulary)
        i = int(scene_index)
        with self._lock:
            self._pairs[i] = (ids, cats) if ids.size else None
            if ids.size + 1 > self.capacity:
                self._arena = self._layout(max(ids.size + 1, 2 * self.capacity))
                self.version += 1
            else:
                self._write(i)

    def clear(self, scene_index: int) -> None:
        """Forget the scene of ``scene_index`` (every id maps to UNKNOWN)."""
        with self._lock:
            self._pairs[int(scene_index)] = None
            self._write(int(scene_index))

    def _segment(self, i: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Scene index ``i``'s keys and values, K = ``k`` entries."""
        keys = np.full(k, (i << _KEY_SHIFT) | _PAD_ID, np.int64)
        values = np.full(k, UNKNOWN, np.int32)
        if self._pairs[i] is not None:
            ids, cats = self._pairs[i]
            keys[:ids.size] = (np.int64(i) << _KEY_SHIFT) | ids
            values[:ids.size] = cats
        return keys, values

    def _layout(self, k: int):
        """New device arrays with K = ``k`` holding every scene index's segment."""
        import torch

        parts = [self._segment(i, k) for i in range(len(self._pairs))]
        keys = np.concatenate([p[0] for p in parts] + [np.full(1, np.iinfo(np.int64).max, np.int64)])
        values = np.concatenate([p[1] for p in parts] + [np.full(1, UNKNOWN, np.int32)])
        return torch.from_numpy(keys).to(self.device), torch.from_numpy(values).to(self.device)

    def _write(self, i: int) -> None:
        """Rewrite scene index ``i``'s segment in place (the other segments are untouched)."""
        import torch

        k = self.capacity
        keys, values = self._segment(i, k)
        k_dev, v_dev = self._arena
        k_dev[i * k:(i + 1) * k] = torch.from_numpy(keys).to(self.device, non_blocking=True)
        v_dev[i * k:(i + 1) * k] = torch.from_numpy(values).to(self.device, non_blocking=True)

    def lookup(self, scene_index, semantic):
        """Categories (int32, the shape of ``semantic``) of semantic frames ``semantic`` [N, ...]
        (the sensor's int32 ids) rendered in scenes ``scene_index`` [N] (each < ``scenes``):
        device ops only (a binary search of the sorted keys; an id the scene does not list
        reads UNKNOWN, a negative one a pad's or another segment's miss: UNKNOWN too)."""
        import torch

        keys, values = self._arena
        ids = semantic.to(torch.int64)
        rows = scene_index.to(ids.device, torch.int64).reshape((-1,) + (1,) * (ids.dim() - 1))
        want = (rows << _KEY_SHIFT) + ids
        at = torch.searchsorted(keys, want)
        return torch.where(keys[at] == want, values[at], UNKNOWN)
