"""The semantic sensor's data outside the ray loop: instance ids of traced hits, and the
per-scene id -> category table a trainer uses to turn semantic frames into categories on
the device.

Contract (bps_assets.semantics): a semantic pixel is ``tri_object[hit triangle]`` (int32, 0 = no
hit or no object); a scene without ``tri_object`` renders 0 everywhere. The renderers read the
ids from ``ShadingData.tri_object`` (``build_shading_data`` takes a packed scene's
``tri_object``), so they need nothing else. ``CategoryTable`` is the env's side: one row per
scene index (as the renderer's), rewritten when a scene is attached, so
``lookup(scene_index, frames)`` is one gather with no host work and no synchronisation.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from bps_assets.errors import ConfigError
from bps_assets.semantics import object_ids  # noqa: F401 - the sensor's id rule, re-exported

UNKNOWN = -1  # the category of "no object", of an id the scene does not list, and of an unmapped name
# ids index a dense row: cap them before allocating (HM3D-Semantics scenes hold < 5,000 objects)
MAX_INSTANCE_ID = 1 << 20


def category_row(semantics, vocabulary: Sequence[str] | None = None) -> np.ndarray:
    """One scene's id -> category table (int32 [max id + 1], ``UNKNOWN`` where no object):
    ``semantics`` is a ``bps_assets.semantics.SemanticTable`` (or None: just [UNKNOWN]).
    With ``vocabulary`` (the task's category names), categories are indices into it (names
    not in it are UNKNOWN), so scenes with different category lists share one numbering;
    without, they are the scene's own ``category`` values."""
    if semantics is None or len(semantics) == 0:
        return np.full(1, UNKNOWN, np.int32)
    ids = np.asarray(semantics.ids, np.int64)
    if ids.min() < 1 or ids.max() > MAX_INSTANCE_ID:
        raise ConfigError(None, f"instance ids must be in [1, {MAX_INSTANCE_ID}] (0 means no object); got "
                                f"{int(ids.min()) if ids.min() < 1 else int(ids.max())}")
    cat = np.asarray(semantics.category, np.int64)
    if vocabulary is not None:
        where = {name: i for i, name in enumerate(vocabulary)}
        names = list(semantics.categories)
        remap = np.array([where.get(n, UNKNOWN) for n in names] + [UNKNOWN], np.int64)
        cat = remap[np.where((cat >= 0) & (cat < len(names)), cat, len(names))]
    row = np.full(int(ids.max()) + 1, UNKNOWN, np.int32)
    row[ids] = cat
    return row


class CategoryTable:
    """Id -> category rows for ``scenes`` scene indices as one int32 tensor [scenes, K] on
    ``device`` (K grows to the largest id seen; ``version`` counts reallocations, after which a
    captured CUDA graph that read the old tensor must be re-captured)."""

    def __init__(self, scenes: int, device: str = "cpu", vocabulary: Sequence[str] | None = None,
                 capacity: int = 256):
        import torch

        if scenes < 1 or capacity < 1:
            raise ConfigError(None, f"CategoryTable needs scenes >= 1 and capacity >= 1; got {scenes}, {capacity}")
        self.vocabulary = None if vocabulary is None else list(vocabulary)
        self.device = torch.device(device)
        self.table = torch.full((scenes, capacity), UNKNOWN, dtype=torch.int32, device=self.device)
        self.version = 0
        self._lock = threading.Lock()

    def set(self, scene_index: int, semantics) -> None:
        """Make ``scene_index``'s row the table of the scene now attached there (None: no objects).
        Call it where the renderer's ``attach`` is called (between steps)."""
        import torch

        row = torch.from_numpy(category_row(semantics, self.vocabulary))
        with self._lock:
            if row.shape[0] > self.table.shape[1]:
                grown = torch.full((self.table.shape[0], max(row.shape[0], 2 * self.table.shape[1])), UNKNOWN,
                                   dtype=torch.int32, device=self.device)
                grown[:, :self.table.shape[1]] = self.table
                self.table = grown
                self.version += 1
            self.table[int(scene_index)].fill_(UNKNOWN)
            self.table[int(scene_index), :row.shape[0]] = row.to(self.device, non_blocking=True)

    def clear(self, scene_index: int) -> None:
        """Forget the scene of ``scene_index`` (every id maps to UNKNOWN)."""
        self.table[int(scene_index)].fill_(UNKNOWN)

    def lookup(self, scene_index, semantic):
        """Categories (int32, the shape of ``semantic``) of semantic frames ``semantic`` [N, ...]
        rendered in scenes ``scene_index`` [N] (each a row of the table): device ops only (ids
        past K read UNKNOWN)."""
        import torch

        t = self.table
        ids = semantic.to(torch.int64)
        k = t.shape[1]
        rows = scene_index.to(ids.device, torch.int64).reshape((-1,) + (1,) * (ids.dim() - 1))
        out = t.reshape(-1)[rows * k + ids.clamp(0, k - 1)]
        return out.masked_fill(ids >= k, UNKNOWN)
