"""Vectorized polygon helpers shared by the PLY and OBJ readers."""
from __future__ import annotations

import numpy as np


def fan_triangulate(counts: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fan-triangulate polygons given per-polygon corner ``counts`` and their concatenated
    corner values ``flat``. Returns (triangles [T, 3] of values, polygon index of each
    triangle). Polygons with fewer than 3 corners produce nothing."""
    counts = np.asarray(counts, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if counts.size else counts
    ntri = np.maximum(counts - 2, 0)
    total = int(ntri.sum())
    if total == 0:
        return np.zeros((0, 3), flat.dtype), np.zeros(0, np.int64)
    poly = np.repeat(np.arange(counts.size), ntri)
    # j = 1 .. k-2 within each polygon
    first_tri = np.concatenate([[0], np.cumsum(ntri)[:-1]])
    j = np.arange(total) - np.repeat(first_tri, ntri) + 1
    base = starts[poly]
    tris = np.stack([flat[base], flat[base + j], flat[base + j + 1]], axis=1)
    return tris, poly
