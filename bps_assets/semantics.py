"""The in-memory model of a scene's object annotations (no I/O): what the semantic readers
produce, the packed scene's semantic section stores, and the renderers' semantic sensor and the
ObjectNav task consume.

Contract:
- Instance ids are int32 and start at 1; 0 means "no object" everywhere (a triangle, a pixel).
- ``tri_object[t]`` is the instance id of render-mesh triangle ``t`` (int32 [T]); a semantic
  sensor reads it at the hit triangle, so it needs no second mesh.
- ``SemanticTable`` row ``i`` describes instance ``ids[i]``; ``category`` indexes
  ``categories`` (the dataset's category names, e.g. mpcat40 or HM3D raw names mapped by
  data_manifests/); positions are in the habitat frame (Y up), metres.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SemanticTable:
    """One row per annotated object instance."""

    ids: np.ndarray                 # int32 [O], >= 1, unique
    category: np.ndarray            # int32 [O], index into ``categories`` (-1: unknown)
    raw_names: list[str]            # [O], the annotation's own label ("kitchen chair")
    region: np.ndarray              # int32 [O], region / room id (-1: none)
    aabb: np.ndarray                # float32 [O, 6]: min xyz, max xyz (habitat frame)
    points: np.ndarray              # float32 [O, K, 3]: surface samples (NaN rows pad)
    categories: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def category_name(self, i: int) -> str:
        """The category name of row ``i`` ("" when unknown)."""
        c = int(self.category[i])
        return self.categories[c] if 0 <= c < len(self.categories) else ""
