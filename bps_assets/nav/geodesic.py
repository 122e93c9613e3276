"""Geodesic distances on the span grid: Dijkstra over line-of-sight edges and reflex corners.

Each span gets an edge to the span reached along the straight line to every cell at offset
``(dc, dr)`` with ``max(|dc|, |dr|) <= R`` and ``gcd(dc, dr) == 1``, kept only when every cell
the segment crosses is walked through connected spans; weights are 3D distances between span
centres. Each reflex corner of the navigable region (docs/NAVMESH.md sections 1 and 4) is a node
too, joined to the span centres within ``CORNER_SPAN_RADIUS`` cells and the corner nodes within
``CORNER_RADIUS`` cells that it sees, so shortest paths bend at obstacle corners. A field holds
one distance per span centre; the goal (or start) is attached to the spans it sees directly with
its exact distance, and a query point reads the field through the spans it sees (the runtime's
rule too: bps_runtime/nav/kernels.py ``geodesic``); near a goal, ``near_goals`` takes the
straight line to the goals the point sees. The search runs in our compiled Dijkstra
(``bps_assets/native/_dijkstra.c``, GIL released), or scipy's when that was not compiled.
Accuracy figures and the variants tried and dropped: docs/DECISIONS.md, docs/NAVMESH.md.
"""
from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from ..errors import NavError

DEFAULT_RADIUS = 4
# metres: a field read below this also takes the straight-line distance to every goal the
# point sees (``near_goals``); the read alone is up to ~2x a goal's offset from its nearest
# span centre too far near it (docs/NAVMESH.md section 4)
NEAR_EXACT = 0.5
# metres past a task's success distance that the gate still covers (``near_gate``): the read's
# overestimate (~5 cm) and a step's move both fit well inside it
NEAR_MARGIN = 0.3


def near_gate(success_distance: float) -> float:
    """The near-goal gate of a task whose success distance is ``success_distance`` m:
    ``max(NEAR_EXACT, success_distance + NEAR_MARGIN)``, so a STOP at the success boundary is
    decided on the exact distance (ImageNav's 1.0 m: 1.3 m; PointNav / ObjectNav: 0.5 m)."""
    return max(NEAR_EXACT, float(success_distance) + NEAR_MARGIN)


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

    i64, p = ctypes.c_int64, ctypes.c_void_p
    return native.function("bps_assets.native._dijkstra", "bps_dijkstra",
                           [i64, p, p, p, i64, p, p, ctypes.c_double, p])


def line_of_sight(nav, sa, pa, sb, pb) -> np.ndarray:
    """Whether the x/z segment pa->pb (in spans sa, sb) crosses only connected spans: walk the
    cells it crosses through the neighbour links (so it follows stairs and stays on a floor)."""
    sa = np.asarray(sa, np.int64)
    N = sa.size
    if N == 0:
        return np.zeros(0, bool)
    cs = nav.cell_size
    ts, dirs = [], []
    for axis, o, plus, minus in ((0, nav.origin[0], 0, 2), (2, nav.origin[1], 1, 3)):
        a, b = pa[:, axis], pb[:, axis]
        ia = np.floor((a - o) / cs)
        ib = np.floor((b - o) / cs)
        n = np.abs(ib - ia).astype(np.int64)
        m = int(n.max()) if n.size else 0
        k = np.arange(1, m + 1)
        step = np.sign(ib - ia)
        # the j-th boundary crossed: between cells ia + (j-1)*step and ia + j*step
        line = o + (ia[:, None] + np.where(step[:, None] > 0, k[None, :], 1 - k[None, :])) * cs
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (line - a[:, None]) / (b - a)[:, None]
        t = np.where(k[None, :] <= n[:, None], t, np.inf)
        ts.append(t)
        dirs.append(np.broadcast_to(np.where(step > 0, plus, minus)[:, None], t.shape))
    t = np.concatenate(ts, axis=1)
    d = np.concatenate(dirs, axis=1)
    order = np.argsort(t, axis=1, kind="stable")
    t = np.take_along_axis(t, order, 1)
    d = np.take_along_axis(d, order, 1)
    cur = sa.copy()
    nbr = nav.nbr
    for j in range(t.shape[1]):
        live = np.isfinite(t[:, j])
        if not live.any():
            break
        cur = np.where(live, nbr[cur, d[:, j]], cur)
    return cur == np.asarray(sb, np.int64)


# corner nodes ---------------------------------------------------------------------------------
CORNER_SPAN_RADIUS = 12  # cells: a corner node sees the span centres this far (square window)
CORNER_RADIUS = 16       # cells: and the other corner nodes this far
_CORNER_INSET = 1e-4     # metres: a corner node lies this far inside its span's cell (as snap)
_LOS_CHUNK = 1 << 17     # segments per line-of-sight batch (bounds the walk's temporaries)


def reflex_corners(nav) -> tuple[np.ndarray, np.ndarray]:
    """(span [C], position [C, 3]) of the reflex corners of the navigable region: a corner of a
    span's cell whose two side neighbours are linked to the span but whose diagonal cell is not
    reached from both (a blocked cell, a gap, a different floor). Shortest paths in the union
    of the cells bend only there; the node is pulled ``_CORNER_INSET`` into the span's cell."""
    S = nav.num_spans
    nbr = nav.nbr
    h = nav.cell_size / 2 - _CORNER_INSET
    ar = np.arange(S)
    spans, pos = [], []
    for sx in (1, -1):
        for sz in (1, -1):
            a = nbr[ar, 0 if sx > 0 else 2]
            b = nbr[ar, 1 if sz > 0 else 3]
            d1, d2 = nbr[a, 1 if sz > 0 else 3], nbr[b, 0 if sx > 0 else 2]
            idx = np.nonzero((a < S) & (b < S) & ~((d1 < S) & (d1 == d2)))[0]
            p = nav.span_pos[idx].copy()
            p[:, 0] += sx * h
            p[:, 2] += sz * h
            spans.append(idx)
            pos.append(p)
    return np.concatenate(spans).astype(np.int64), np.concatenate(pos)


def _native_los():
    """``bps_line_of_sight`` from the compiled helper, or None (then numpy's walk is used)."""
    from bps_assets import native

    i64, p, d = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
    return native.function("bps_assets.native._navbuild", "bps_line_of_sight", [i64, p, p, p, p, p, i64, d, d, d, p])


def _visible(nav, sa, pa, sb, pb) -> np.ndarray:
    """``line_of_sight`` for many segments: the compiled walk when it was built (the same
    crossings and tie order), else numpy's in chunks."""
    f = _native_los()
    if f is not None:
        sa, sb = np.ascontiguousarray(sa, np.int64), np.ascontiguousarray(sb, np.int64)
        pa, pb = np.ascontiguousarray(pa, np.float64), np.ascontiguousarray(pb, np.float64)
        nbr = np.ascontiguousarray(nav.nbr, np.int64)
        out = np.zeros(len(sa), np.uint8)
        rc = f(len(sa), sa.ctypes.data, pa.ctypes.data, sb.ctypes.data, pb.ctypes.data, nbr.ctypes.data,
               nav.num_spans, float(nav.origin[0]), float(nav.origin[1]), float(nav.cell_size), out.ctypes.data)
        if rc != 0:
            raise NavError(None, "geodesic graph: the compiled line-of-sight walk refused a span id")
        return out.view(bool)
    out = np.zeros(len(sa), bool)
    for i in range(0, len(sa), _LOS_CHUNK):
        j = slice(i, i + _LOS_CHUNK)
        out[j] = line_of_sight(nav, sa[j], pa[j], sb[j], pb[j])
    return out


def _corner_edges(nav, cspan: np.ndarray, cpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) node ids of the edges of corner nodes (node S + i is corner i), both ways:
    to every span centre within ``CORNER_SPAN_RADIUS`` cells and every corner within
    ``CORNER_RADIUS`` cells that the segment reaches through linked spans."""
    S, C = nav.num_spans, len(cspan)
    if C == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    L, D, W = nav.shape
    R = CORNER_SPAN_RADIUS
    dr, dc = np.meshgrid(np.arange(-R, R + 1), np.arange(-R, R + 1), indexing="ij")
    dr, dc = dr.reshape(-1), dc.reshape(-1)
    r0, c0 = nav.span_lrc[cspan, 1], nav.span_lrc[cspan, 2]
    src, dst = [], []
    step = max(1, _LOS_CHUNK // dr.size)  # corners per batch: bounds the [corners, window] arrays
    for l in range(L):
        for i0 in range(0, C, step):
            rr, cc = r0[i0:i0 + step, None] + dr[None], c0[i0:i0 + step, None] + dc[None]
            inb = (rr >= 0) & (rr < D) & (cc >= 0) & (cc < W)
            tgt = np.where(inb, nav.span_index[l, np.clip(rr, 0, D - 1), np.clip(cc, 0, W - 1)], -1)
            ci, k = np.nonzero(tgt >= 0)
            ci += i0
            t = tgt[ci - i0, k].astype(np.int64)
            ok = _visible(nav, cspan[ci], cpos[ci], t, nav.span_pos[t])
            src += [S + ci[ok], t[ok]]
            dst += [t[ok], S + ci[ok]]
    from scipy.spatial import cKDTree

    pr = cKDTree(cpos[:, [0, 2]]).query_pairs(CORNER_RADIUS * nav.cell_size, output_type="ndarray")
    if len(pr):
        a, b = pr[:, 0].astype(np.int64), pr[:, 1].astype(np.int64)
        ok = _visible(nav, cspan[a], cpos[a], cspan[b], cpos[b])
        ok[ok] = _visible(nav, cspan[b[ok]], cpos[b[ok]], cspan[a[ok]], cpos[a[ok]])
        src += [S + a[ok], S + b[ok]]
        dst += [S + b[ok], S + a[ok]]
    return np.concatenate(src), np.concatenate(dst)



class GeodesicGraph:
    """Line-of-sight edges of a NavMesh: ``adj`` [S, K] span ids (S = none), the corner nodes
    (``corner_span`` [C], ``corner_pos`` [C, 3]: node ``S + i`` is corner ``i``) and the CSR graph
    over the ``N = S + C`` nodes with one extra "virtual" row N whose K slots are rewritten per
    query (scipy fallback only)."""

    def __init__(self, nav, radius: int = DEFAULT_RADIUS, corners: bool = True):
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
        src = np.repeat(np.arange(S), adj.shape[1])
        dst = adj.reshape(-1)
        ok = dst < S
        src, dst = [src[ok]], [dst[ok]]
        if corners and S:
            self.corner_span, self.corner_pos = reflex_corners(nav)
            cs_src, cs_dst = _corner_edges(nav, self.corner_span, self.corner_pos)
            src.append(cs_src)
            dst.append(cs_dst)
        else:
            self.corner_span, self.corner_pos = np.zeros(0, np.int64), np.zeros((0, 3))
        self.C = C = len(self.corner_span)
        self.N = N = S + C
        src, dst = np.concatenate(src), np.concatenate(dst)
        pos = np.vstack([nav.span_pos, self.corner_pos]) if C else nav.span_pos
        w = np.linalg.norm(pos[src] - pos[dst], axis=1)
        w = np.maximum(w, 1e-9)
        # CSR rows 0..N-1 from sorted src, then the virtual row N with K slots
        order = np.argsort(src, kind="stable")
        src, dst, w = src[order], dst[order], w[order]
        counts = np.bincount(src, minlength=N)
        indptr = np.zeros(N + 2, np.int64)
        indptr[1:N + 1] = np.cumsum(counts)
        indptr[N + 1] = indptr[N] + self.K
        self.indices = np.concatenate([dst, np.full(self.K, N)]).astype(np.int32)
        self.data = np.concatenate([w, np.zeros(self.K)])
        self.indptr = indptr.astype(np.int32) if indptr[-1] < 2**31 else indptr
        self._indptr64 = indptr
        self._lock = threading.Lock()
        self.num_edges = int(len(src))

    def seen_from(self, spans: np.ndarray) -> np.ndarray:
        """[N, K] spans seen directly from each span (itself first), S = none."""
        spans = np.asarray(spans, np.int64)
        return np.concatenate([spans[:, None], self.adj[spans].astype(np.int64)], axis=1)

    def field_from_point(self, span: int, point: np.ndarray, span_pos: np.ndarray,
                         limit: float = np.inf) -> np.ndarray:
        """Dijkstra distances [S] from ``point`` (lying in ``span``) to every span centre (the
        search runs over the corner nodes too)."""
        S, N = self.S, self.N
        seeds = self.seen_from(np.array([span]))[0]
        valid = seeds < S
        w = np.zeros(self.K)
        w[valid] = np.maximum(np.linalg.norm(span_pos[seeds[valid]] - point, axis=1), 1e-9)
        dij = _native_dijkstra() if self.indices.dtype == np.int32 else None
        if dij is not None:
            return self._native_field(dij, seeds[valid], w[valid], limit)
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra

        with self._lock:
            self.indices[-self.K:] = np.where(valid, seeds, N)
            self.data[-self.K:] = np.where(valid, w, 0.0)
            g = csr_matrix((self.data, self.indices, self.indptr), shape=(N + 1, N + 1), copy=False)
            d = dijkstra(g, directed=True, indices=N, limit=limit)
        return d[:S]

    def field_from_points(self, spans: np.ndarray, points: np.ndarray, span_pos: np.ndarray,
                          limit: float = np.inf) -> np.ndarray:
        """Multi-source Dijkstra: distances [S] from every span centre to the NEAREST of
        ``points`` [P, 3] (lying in ``spans`` [P]); each point is attached to the spans it sees
        directly, as in ``field_from_point``, so one point gives the same field as that."""
        S, N = self.S, self.N
        spans = np.asarray(spans, np.int64).reshape(-1)
        points = np.asarray(points, np.float64).reshape(-1, 3)
        if spans.size == 0:
            return np.full(S, np.inf)
        seen = self.seen_from(spans)  # [P, K]
        ok = seen < S
        w = np.linalg.norm(span_pos[np.where(ok, seen, 0)] - points[:, None, :], axis=2)
        seeds, w = seen[ok], np.maximum(w[ok], 1e-9)
        best = np.full(S, np.inf)
        np.minimum.at(best, seeds, w)  # one seed per span, at its smallest attachment
        seeds = np.nonzero(np.isfinite(best))[0]
        w = best[seeds]
        dij = _native_dijkstra() if self.indices.dtype == np.int32 else None
        if dij is not None:
            return self._native_field(dij, seeds, w, limit)
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra

        # a private graph with a virtual source row of len(seeds) slots (the shared row has K)
        n = len(seeds)
        indptr = np.concatenate([self._indptr64[:N + 1], [self._indptr64[N] + n]])
        indices = np.concatenate([self.indices[:-self.K].astype(np.int64), seeds])
        data = np.concatenate([self.data[:-self.K], w])
        g = csr_matrix((data, indices, indptr), shape=(N + 1, N + 1))
        return dijkstra(g, directed=True, indices=N, limit=limit)[:S]

    def _native_field(self, dij, seeds: np.ndarray, w: np.ndarray, limit: float) -> np.ndarray:
        """The compiled search from ``seeds`` at distances ``w``: distances [S]."""
        S, N = self.S, self.N
        # the seeds go in as arguments (not into the shared virtual row N): no lock, and
        # calls from several threads run in parallel with the GIL released
        sd = np.ascontiguousarray(seeds, np.int64)
        sw = np.ascontiguousarray(w, np.float64)
        d = np.empty(N, np.float64)
        rc = dij(N, self._indptr64.ctypes.data, self.indices.ctypes.data, self.data.ctypes.data, sd.size,
                 sd.ctypes.data, sw.ctypes.data, float(limit), d.ctypes.data)
        if rc != 0:
            raise NavError(None, f"geodesic search over {N} nodes ran out of memory" if rc == -1
                           else "geodesic graph is corrupt (the compiled Dijkstra refused it)")
        return d[:S].copy() if N > S else d

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


def near_goals(nav, read: np.ndarray, spans: np.ndarray, points: np.ndarray, goal_spans: np.ndarray,
               goal_points: np.ndarray, gate: float = NEAR_EXACT) -> np.ndarray:
    """``read`` [N] (a field read at ``points`` [N, 3] in ``spans`` [N]) lowered, where it is
    below ``gate`` m (``near_gate``), to the 3D distance to each goal (``goal_points`` [P, 3] in
    ``goal_spans`` [P]) that is nearer than the read and that the point sees (``line_of_sight``
    from the point to the goal): the exact geodesic there, never a path through a wall."""
    out = np.array(read, np.float64, copy=True)
    near = np.nonzero(out < gate)[0]
    if near.size == 0 or len(goal_spans) == 0:
        return out
    from scipy.spatial import cKDTree

    gp = np.asarray(goal_points, np.float64).reshape(-1, 3)
    hits = cKDTree(gp).query_ball_point(points[near], gate)
    i = np.repeat(near, [len(h) for h in hits])
    j = np.fromiter((k for h in hits for k in h), np.int64, len(i))
    d = np.linalg.norm(points[i] - gp[j], axis=1)
    keep = d < out[i]
    i, j, d = i[keep], j[keep], d[keep]
    if i.size:
        vis = _visible(nav, np.asarray(spans, np.int64)[i], points[i], np.asarray(goal_spans, np.int64)[j], gp[j])
        np.minimum.at(out, i[vis], d[vis])
    return out
