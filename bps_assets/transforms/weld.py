"""Weld vertices that are equal in every attribute (position, UV, colour).

Run after ``quantize``: vertices are then compared by their integer grid coordinates, so two
vertices merge exactly when a reader would reconstruct them identically, and welding adds no
error beyond the quantization bound. Without quantization, float bit patterns are compared
(+0.0 and -0.0 treated as equal). Triangles whose corners collapse onto one vertex are dropped
and counted in ``stats['collapsed_triangles']``.

Vectorized: the attribute columns are packed into as few uint64 words as fit, then grouped
with np.unique (one word) or one lexsort (several).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .merged import MergedGeometry


@dataclass(frozen=True)
class Options:
    drop_collapsed: bool = True  # drop triangles whose corners weld together


DEFAULTS = Options()


def _columns(g: MergedGeometry) -> list[tuple[np.ndarray, int]]:
    """(uint64 column, bit width) for every attribute component that identifies a vertex."""
    cols = []
    pos = g.positions_q if g.positions_q is not None else (g.positions + np.float32(0.0)).view(np.uint32)
    for a in (pos, g.uvs_q if g.uvs_q is not None else
              (None if g.uvs is None else (g.uvs + np.float32(0.0)).view(np.uint32)), g.colors):
        if a is None:
            continue
        bits = a.dtype.itemsize * 8
        for j in range(a.shape[1]):
            cols.append((a[:, j].astype(np.uint64), bits))
    return cols


def _pack(cols: list[tuple[np.ndarray, int]], n: int) -> list[np.ndarray]:
    words, cur, used = [], None, 0
    for c, bits in cols:
        if cur is None or used + bits > 64:
            if cur is not None:
                words.append(cur)
            cur, used = np.zeros(n, np.uint64), 0
        cur |= c << np.uint64(used)
        used += bits
    if cur is not None:
        words.append(cur)
    return words


def group_rows(words: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(representative, inverse): representative[k] is the lowest row index of group k (groups
    in key order), inverse[i] the group of row i."""
    n = len(words[0])
    if len(words) == 1:
        _, rep, inv = np.unique(words[0], return_index=True, return_inverse=True)
        return rep, inv.reshape(-1)
    order = np.lexsort(words[::-1])  # stable: the first row of each group has the lowest index
    diff = np.zeros(n, bool)
    diff[0] = True
    for w in words:
        ws = w[order]
        diff[1:] |= ws[1:] != ws[:-1]
    gid = np.cumsum(diff) - 1
    inv = np.empty(n, np.int64)
    inv[order] = gid
    return order[diff], inv


def weld(options: Options = DEFAULTS):
    """Factory: a callable welding a MergedGeometry's vertices in place."""

    def apply(g: MergedGeometry) -> MergedGeometry:
        n = g.vertex_count
        g.stats.setdefault("collapsed_triangles", 0)
        if n == 0:
            g.stats["welded_vertices"] = 0
            return g
        rep, inv = group_rows(_pack(_columns(g), n))
        g.stats["welded_vertices"] = int(n - len(rep))
        g.take_vertices(rep)
        g.indices = inv[g.indices.astype(np.int64)].astype(np.uint32)
        if options.drop_collapsed and len(g.indices):
            t = g.indices
            bad = (t[:, 0] == t[:, 1]) | (t[:, 1] == t[:, 2]) | (t[:, 0] == t[:, 2])
            if bad.any():
                g.take_triangles(~bad)
                g.stats["collapsed_triangles"] += int(bad.sum())
        return g

    return apply
