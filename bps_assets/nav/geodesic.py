"""Geodesic distances on the span grid: Dijkstra over line-of-sight edges of a large neighbourhood.

Each span gets an edge to the span reached along the straight line to every cell at offset
``(dc, dr)`` with ``max(|dc|, |dr|) <= R`` and ``gcd(dc, dr) == 1``, kept only when every cell
the segment crosses is walked through connected spans (at an exact corner crossing, both
orders must lead to the same span). Edge weights are 3D distances between span centres.
Shortest paths then bend only at obstacle corners, and along open stretches the direction is
quantized to the neighbourhood's angles (worst case 1/cos(half the largest angle gap) - 1).
The goal (or the start, for a field) is attached to the spans it sees directly with its exact
distance, and a query point reads the field through the spans it sees directly, so endpoints
are not rounded to cell centres. Our compiled Dijkstra (``bps_assets/native/_dijkstra.c``) does
the search with the GIL released; scipy's is the fallback when it was not compiled (scipy holds
the GIL for the whole search, which stalled the runtime's step loop while background threads
computed fields).

``queries.geodesic_distance`` first checks whether the two points see each other (a walk of the
crossed cells through the neighbour links) and then returns the exact straight-line distance.

Measured on the accuracy scenes of bps_assets/nav/reference_scenes.py (8 x 6 m room, 7 rotated rectangular
obstacles, free space known exactly, 150 random pairs >= 1 m apart per scene, exact distances
from a visibility graph); relative error median / p95 / max, scene seed 0 | seed 1.
Graph only (before the line-of-sight shortcut was added):
  R=1 (plain 8-connected Dijkstra):  5.4% / 8.0% / 9.0%   | 6.2% / 8.0% / 8.3%
  R=2 (16 directions):               1.6% / 2.7% / 4.1%   | 1.4% / 2.7% / 3.4%
  R=3 (32 directions):               0.52% / 1.3% / 2.5% | 0.50% / 1.3% / 2.6%
  R=4 (48 directions):               0.27% / 0.79% / 1.9% | 0.26% / 1.0% / 2.5%
  R=5 (80 directions):               0.16% / 0.66% / 1.8% | 0.17% / 0.92% / 2.4%
With the line-of-sight shortcut (``python benchmarks/bench_navmesh.py``):
  R=1:  4.5% / 7.8% / 9.0%    | 3.0% / 7.6% / 8.1%
  R=2:  1.0% / 2.4% / 4.1%    | 0.57% / 2.6% / 3.4%
  R=3:  0.30% / 1.2% / 2.5%   | 0.18% / 1.3% / 2.6%
  R=4 (the default):  0.18% / 0.77% / 1.9%  | 0.12% / 1.0% / 2.5%
  R=5:  0.11% / 0.63% / 1.8%  | 0.06% / 0.92% / 2.4%
The remaining max error comes from the free space itself being rounded to cells near obstacle
corners, which no neighbourhood removes. R=4 meets median <= 1% and p95 <= 3% with margin at
48 edges per span (2.9 M edges, 0.2-0.3 s to build, ~55 ms per Dijkstra on a 63K-span scene);
R=5 costs 1.7x the edges for little.
Not tried: fast marching / Theta*-style parent relaxation (inherently sequential: would need a
compiled extension; the R=4 neighbourhood already meets the target with scipy alone).
"""
from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from ..errors import NavError

DEFAULT_RADIUS = 4


def offsets(radius: int = DEFAULT_RADIUS) -> list[tuple[int, int]]:
    """Primitive integer offsets (dc, dr) with max(|dc|, |dr|) <= radius."""
    out = []
    for dc in range(-radius, radius + 1):
        for dr in range(-radius, radius + 1):
            if (dc or dr) and math.gcd(abs(dc), abs(dr)) == 1:
                out.append((dc, dr))
    return out


def line_moves(dc: int, dr: int) -> list[tuple[int, ...]]:
    """Unit moves (direction indices, see grid.DIRS) of the cells crossed by the segment from
    the centre of cell (0,0) to the centre of cell (dr, dc); a pair means an exact corner
    crossing (both orders must agree)."""
    sx = 0 if dc > 0 else 2
    sz = 1 if dr > 0 else 3
    ax, az = abs(dc), abs(dr)
    moves = []
    # parametric crossings: x boundaries at t = (i + 0.5)/ax, z at (j + 0.5)/az (i, j >= 0)
    i = j = 0
    while i < ax or j < az:
        tx = (i + 0.5) / ax if i < ax else math.inf
        tz = (j + 0.5) / az if j < az else math.inf
        # compare exactly with integers: (i+0.5)*az vs (j+0.5)*ax
        lhs = (2 * i + 1) * az if i < ax else None
        rhs = (2 * j + 1) * ax if j < az else None
        if lhs is not None and rhs is not None and lhs == rhs:
            moves.append((sx, sz))
            i += 1
            j += 1
        elif tx < tz:
            moves.append((sx,))
            i += 1
        else:
            moves.append((sz,))
            j += 1
    return moves


def _native_dijkstra():
    """``bps_dijkstra`` from the compiled helper (GIL-free), or None (then scipy's is used)."""
    from bps_assets import native

    lib = native.load("bps_assets.native._dijkstra")
    if lib is None:
        return None
    f = lib.bps_dijkstra
    if f.argtypes is None:
        f.restype = ctypes.c_int
        f.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double, ctypes.c_void_p]
    return f


class GeodesicGraph:
    """Line-of-sight edges of a NavMesh: ``adj`` [S, K] span ids (S = none) and the CSR graph
    with one extra "virtual" row S whose K slots are rewritten per query."""

    def __init__(self, nav, radius: int = DEFAULT_RADIUS):
        S = nav.num_spans
        nbr = nav.nbr  # [S+1, 4], row S is the sink
        self.radius = radius
        self.S = S
        offs = offsets(radius)
        adj = np.empty((S, len(offs)), np.int64)
        for k, (dc, dr) in enumerate(offs):
            cur = np.arange(S, dtype=np.int64)
            for mv in line_moves(dc, dr):
                if len(mv) == 1:
                    cur = nbr[cur, mv[0]]
                else:
                    a = nbr[nbr[cur, mv[0]], mv[1]]
                    b = nbr[nbr[cur, mv[1]], mv[0]]
                    cur = np.where(a == b, a, S)
            adj[:, k] = cur
        self.adj = adj.astype(np.int32) if S < 2**31 - 1 else adj  # halves the memory
        self.K = adj.shape[1] + 1  # + the span itself for point attachment
        pos = nav.span_pos
        src = np.repeat(np.arange(S), adj.shape[1])
        dst = adj.reshape(-1)
        ok = dst < S
        src, dst = src[ok], dst[ok]
        w = np.linalg.norm(pos[src] - pos[dst], axis=1)
        w = np.maximum(w, 1e-9)
        # CSR rows 0..S-1 from sorted src, then the virtual row S with K slots
        counts = np.bincount(src, minlength=S)
        indptr = np.zeros(S + 2, np.int64)
        indptr[1:S + 1] = np.cumsum(counts)
        indptr[S + 1] = indptr[S] + self.K
        self.indices = np.concatenate([dst, np.full(self.K, S)]).astype(np.int32)
        self.data = np.concatenate([w, np.zeros(self.K)])
        self.indptr = indptr.astype(np.int32) if indptr[-1] < 2**31 else indptr
        self._indptr64 = indptr
        self._lock = threading.Lock()
        self.num_edges = int(ok.sum())

    def seen_from(self, spans: np.ndarray) -> np.ndarray:
        """[N, K] spans seen directly from each span (itself first), S = none."""
        spans = np.asarray(spans, np.int64)
        return np.concatenate([spans[:, None], self.adj[spans].astype(np.int64)], axis=1)

    def field_from_point(self, span: int, point: np.ndarray, span_pos: np.ndarray,
                         limit: float = np.inf) -> np.ndarray:
        """Dijkstra distances [S] from ``point`` (lying in ``span``) to every span centre."""
        S = self.S
        seeds = self.seen_from(np.array([span]))[0]
        valid = seeds < S
        w = np.zeros(self.K)
        w[valid] = np.maximum(np.linalg.norm(span_pos[seeds[valid]] - point, axis=1), 1e-9)
        dij = _native_dijkstra() if self.indices.dtype == np.int32 else None
        if dij is not None:
            # the seeds go in as arguments (not into the shared virtual row S): no lock, and
            # calls from several threads run in parallel with the GIL released
            sd = np.ascontiguousarray(seeds[valid], np.int64)
            sw = np.ascontiguousarray(w[valid], np.float64)
            d = np.empty(S, np.float64)
            rc = dij(S, self._indptr64.ctypes.data, self.indices.ctypes.data, self.data.ctypes.data, sd.size,
                     sd.ctypes.data, sw.ctypes.data, float(limit), d.ctypes.data)
            if rc != 0:
                raise NavError(None, f"geodesic search over {S} spans ran out of memory" if rc == -1
                               else "geodesic graph is corrupt (the compiled Dijkstra refused it)")
            return d
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra

        with self._lock:
            self.indices[-self.K:] = np.where(valid, seeds, S)
            self.data[-self.K:] = np.where(valid, w, 0.0)
            g = csr_matrix((self.data, self.indices, self.indptr), shape=(S + 1, S + 1), copy=False)
            d = dijkstra(g, directed=True, indices=S, limit=limit)
        return d[:S]

    def read_field(self, field: np.ndarray, spans: np.ndarray, points: np.ndarray,
                   span_pos: np.ndarray) -> np.ndarray:
        """Distance at ``points`` (in ``spans``): min over directly seen spans of
        field + |point - centre|. inf where unreachable."""
        S = self.S
        seen = self.seen_from(spans)  # [N, K]
        ok = seen < S
        fp = np.r_[field, np.inf]
        pos = np.vstack([span_pos, np.zeros((1, 3))])
        d = np.linalg.norm(pos[seen] - points[:, None, :], axis=2)
        tot = np.where(ok, fp[seen] + d, np.inf)
        return tot.min(axis=1)
