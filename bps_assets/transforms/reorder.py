"""Order triangles along a space-filling curve and vertices by first use.

Triangles sorted by the Morton (Z-order) code of their centroids are spatially coherent, so
consecutive runs make tight meshlets / chunks, and vertices numbered in order of first use
make the index deltas small (the delta+shuffle filter then compresses them well) and keep
the vertex cache warm. Unused vertices are dropped (``stats['unused_vertices']``). The
triangle set and each triangle's corner order (winding) are unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .merged import MergedGeometry

CURVES = ("morton", "none")


@dataclass(frozen=True)
class Options:
    curve: str = "morton"   # morton | none (keep triangle order, only renumber vertices)
    bits: int = 21          # per axis; 3 * 21 = 63-bit codes


DEFAULTS = Options()


def _spread3(x: np.ndarray) -> np.ndarray:
    """Insert two zero bits between each of the low 21 bits of ``x`` (uint64)."""
    x = x & np.uint64(0x1FFFFF)
    x = (x | (x << np.uint64(32))) & np.uint64(0x1F00000000FFFF)
    x = (x | (x << np.uint64(16))) & np.uint64(0x1F0000FF0000FF)
    x = (x | (x << np.uint64(8))) & np.uint64(0x100F00F00F00F00F)
    x = (x | (x << np.uint64(4))) & np.uint64(0x10C30C30C30C30C3)
    x = (x | (x << np.uint64(2))) & np.uint64(0x1249249249249249)
    return x


def morton_codes(points: np.ndarray, bits: int = 21) -> np.ndarray:
    """63-bit Morton codes of ``points`` [N,3] over their own bounding box."""
    p = np.asarray(points, np.float64)
    if len(p) == 0:
        return np.zeros(0, np.uint64)
    lo, hi = p.min(0), p.max(0)
    scale = (2**bits - 1) / np.maximum(hi - lo, 1e-12)
    q = ((p - lo) * scale).astype(np.uint64)
    return _spread3(q[:, 0]) | (_spread3(q[:, 1]) << np.uint64(1)) | (_spread3(q[:, 2]) << np.uint64(2))


def reorder(options: Options = DEFAULTS):
    """Factory: a callable reordering a MergedGeometry's triangles and vertices in place."""
    if options.curve not in CURVES:
        raise ConfigError(None, f"reorder: unknown curve {options.curve!r} (choose from {', '.join(CURVES)})")

    def apply(g: MergedGeometry) -> MergedGeometry:
        if options.curve == "morton" and g.triangle_count > 1:
            p = g.positions
            t = g.indices
            cent = (p[t[:, 0]].astype(np.float64) + p[t[:, 1]] + p[t[:, 2]]) / 3.0
            order = np.argsort(morton_codes(cent, options.bits), kind="stable")
            g.take_triangles(order)
        flat = g.indices.reshape(-1)
        used, first = np.unique(flat, return_index=True)
        by_first_use = used[np.argsort(first, kind="stable")]
        g.stats["unused_vertices"] = int(g.vertex_count - len(used))
        remap = np.empty(g.vertex_count, np.uint32)
        remap[by_first_use] = np.arange(len(by_first_use), dtype=np.uint32)
        g.take_vertices(by_first_use)
        g.indices = remap[g.indices]
        return g

    return apply
