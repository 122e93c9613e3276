"""Batched navigation queries on a NavMesh (spec: docs/NAVMESH.md §4).

All functions take points as [N, 3] (or [3]) arrays in the habitat frame and are vectorized
over N; ``NavMesh`` (grid.py) defines its query methods (``nav.snap_point(p)``) on them. This
module does not import grid.py: the dependency goes one way.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import NavError
from .geodesic import DEFAULT_RADIUS, NEAR_EXACT, GeodesicGraph, line_of_sight, near_goals

if TYPE_CHECKING:
    from .grid import NavMesh

# habitat-sim's projectToPoly search box (findNearestPoly half extents, metres)
SNAP_EXTENTS = np.array([2.0, 4.0, 2.0])
_INSET = 1e-4  # results are pulled this far inside their cell


def _points(p) -> tuple[np.ndarray, bool]:
    a = np.asarray(p, np.float64)
    single = a.ndim == 1
    a = a.reshape(-1, 3)
    return a, single


def _out(a, single):
    return a[0] if single else a


# ------------------------------------------------------------------------------ lookup / snap
def locate(nav: NavMesh, points, max_dy: float = 0.5) -> np.ndarray:
    """Span id [N] of the span in each point's cell whose height is nearest the point's y,
    when within ``max_dy``; -1 otherwise."""
    p, _ = _points(points)
    L, D, W = nav.shape
    r, c = nav.cell_of(p)
    inb = (r >= 0) & (r < D) & (c >= 0) & (c < W)
    rr, cc = np.where(inb, r, 0), np.where(inb, c, 0)
    h = nav.height[:, rr, cc].T.astype(np.float64)  # [N, L]
    dy = np.abs(h - p[:, 1:2])
    dy[np.isnan(dy)] = np.inf
    best = dy.argmin(axis=1)
    ok = inb & (dy[np.arange(len(p)), best] <= max_dy)
    sid = nav.span_index[best, rr, cc]
    return np.where(ok, sid, -1).astype(np.int64)


def is_navigable(nav: NavMesh, points, max_y_delta: float = 0.5):
    """habitat's is_navigable: the point's x/z lies on the navmesh with the surface within
    ``max_y_delta`` in y."""
    p, single = _points(points)
    return _out(locate(nav, p, max_y_delta) >= 0, single)


def _kdtree(nav: NavMesh):
    t = nav._cache.get("kdtree")
    if t is None:
        from scipy.spatial import cKDTree

        t = nav._cache["kdtree"] = cKDTree(nav.span_pos)
    return t


def snap_spans(nav: NavMesh, points) -> tuple[np.ndarray, np.ndarray]:
    """(snapped points [N,3] with NaN rows, span ids [N] with -1) - Detour's findNearestPoly
    rule: over a cell, the distance is |dy| minus max climb; elsewhere the 3D distance to the
    nearest point of the cell square; only inside the 2 x 4 x 2 m half-extent box."""
    p, _ = _points(points)
    N = len(p)
    S = nav.num_spans
    out = np.full((N, 3), np.nan)
    sid = np.full(N, -1, np.int64)
    if S == 0 or N == 0:
        return out, sid
    k = min(16, S)
    _, nn = _kdtree(nav).query(p, k=k)
    nn = nn.reshape(N, k)
    # plus every span of the point's own cell
    L, D, W = nav.shape
    r, c = nav.cell_of(p)
    inb = (r >= 0) & (r < D) & (c >= 0) & (c < W)
    own = nav.span_index[:, np.where(inb, r, 0), np.where(inb, c, 0)].T.astype(np.int64)  # [N, L]
    own[~inb] = -1
    cand = np.concatenate([np.where(nn < S, nn, -1), own], axis=1)
    valid = cand >= 0
    cc = np.where(valid, cand, 0)
    cen = nav.span_pos[cc]  # [N, K, 3]
    h = nav.cell_size / 2 - _INSET
    q = np.empty_like(cen)
    q[..., 0] = np.clip(p[:, None, 0], cen[..., 0] - h, cen[..., 0] + h)
    q[..., 2] = np.clip(p[:, None, 2], cen[..., 2] - h, cen[..., 2] + h)
    q[..., 1] = cen[..., 1]
    # "over" a span: the point's own cell (half-open, as ``cell_of``), so ties on cell edges
    # resolve to the cell that ``locate`` and the line-of-sight walk use
    over = (nav.span_lrc[cc, 1] == r[:, None]) & (nav.span_lrc[cc, 2] == c[:, None])
    dy = np.abs(p[:, None, 1] - q[..., 1])
    with np.errstate(over="ignore"):   # a huge finite coordinate: inf, i.e. nothing snaps to it
        d_over = np.maximum(dy - nav.settings.max_climb, 0.0) ** 2
        d_far = ((q - p[:, None, :]) ** 2).sum(-1)
    d = np.where(over, d_over, d_far)
    inbox = (np.abs(q - p[:, None, :]) <= SNAP_EXTENTS).all(-1)
    d = np.where(valid & inbox, d, np.inf)
    j = d.argmin(axis=1)
    found = np.isfinite(d[np.arange(N), j])
    sid[found] = cand[np.arange(N), j][found]
    out[found] = q[np.arange(N), j][found]
    # a point already inside its cell keeps its own x/z exactly
    keep_xz = found & over[np.arange(N), j]
    out[keep_xz, 0] = p[keep_xz, 0]
    out[keep_xz, 2] = p[keep_xz, 2]
    return out, sid


def snap_point(nav: NavMesh, points):
    """Nearest navigable point (habitat's snap_point); NaN rows when nothing is within reach."""
    p, single = _points(points)
    return _out(snap_spans(nav, p)[0], single)


def island_of(nav: NavMesh, points):
    """Island id of each point (after snapping), -1 when it cannot be snapped."""
    p, single = _points(points)
    _, sid = snap_spans(nav, p)
    isl = np.full(sid.shape, -1, np.int64)
    isl[sid >= 0] = nav.span_island[sid[sid >= 0]]
    return _out(isl, single)


def island_radius(nav: NavMesh, points):
    """habitat's island_radius of the island holding each point (0 when not snappable)."""
    p, single = _points(points)
    isl = np.atleast_1d(island_of(nav, p))
    r = np.zeros(isl.shape)
    r[isl >= 0] = nav.island_radius_m[isl[isl >= 0]]
    return _out(r.astype(np.float64), single)


# ------------------------------------------------------------------------------ geodesics
def geodesic_graph(nav: NavMesh, radius: int = DEFAULT_RADIUS, corners: bool = True) -> GeodesicGraph:
    """The navmesh's geodesic graph (built once, cached); ``corners=False`` leaves out the corner
    nodes (paths then bend at span centres only: the graph before issue 12, for comparisons)."""
    key = ("graph", radius, corners)
    g = nav._cache.get(key)
    if g is None:
        with nav._lock:
            g = nav._cache.get(key)
            if g is None:
                g = nav._cache[key] = GeodesicGraph(nav, radius, corners)
    return g


class DistanceField(np.ndarray):
    """A ``distance_field`` [L, D, W] that keeps its snapped goals (``goal_points`` [P, 3],
    ``goal_spans`` [P]), so that ``distance_at`` is exact near them. A copy or view of the
    same shape keeps them; any other shape (a slice, a stack) is a plain field without, and so
    is a ufunc's result (``f + 1`` is not the field of those goals)."""

    goal_points = None
    goal_spans = None

    def __array_finalize__(self, obj):
        if obj is not None and getattr(obj, "shape", None) == self.shape:
            self.goal_points = getattr(obj, "goal_points", None)
            self.goal_spans = getattr(obj, "goal_spans", None)

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        out = np.asarray(arr).view(np.ndarray)
        return out[()] if return_scalar else out


def _field_of(nav: NavMesh, pts: np.ndarray, sid: np.ndarray, flat) -> DistanceField:
    out = np.full(nav.shape, np.inf, np.float32).view(DistanceField)
    if flat is not None:
        l, r, c = nav.span_lrc.T
        out[l, r, c] = flat
    out.goal_points, out.goal_spans = pts, sid
    return out


def snapped_goals(nav: NavMesh, goals) -> tuple[np.ndarray, np.ndarray]:
    """(points [P, 3], spans [P]) of the ``goals`` that can be snapped, snapped (the ends a
    distance field is attached to)."""
    g, _ = _points(goals)
    pts, sid = snap_spans(nav, g)
    ok = sid >= 0
    return pts[ok], sid[ok]


def distance_field(nav: NavMesh, goal, limit: float = np.inf, radius: int = DEFAULT_RADIUS) -> DistanceField:
    """Geodesic distance f4 [L, D, W] from every span centre to ``goal`` (snapped); inf where
    unreachable, beyond ``limit``, or where there is no span. All inf if the goal cannot be
    snapped."""
    g, _ = _points(goal)
    pts, sid = snapped_goals(nav, g[:1])
    flat = geodesic_graph(nav, radius).field_from_point(int(sid[0]), pts[0], nav.span_pos, limit) if len(sid) else None
    return _field_of(nav, pts, sid, flat)


def distance_field_to_any(nav: NavMesh, goals, limit: float = np.inf,
                          radius: int = DEFAULT_RADIUS) -> DistanceField:
    """Geodesic distance f4 [L, D, W] from every span centre to the NEAREST of ``goals`` [P, 3]
    (each snapped; one multi-source search, not P fields): ObjectNav's distance to the nearest
    view point. Goals that cannot be snapped are left out; all inf when none can be."""
    pts, sid = snapped_goals(nav, goals)
    flat = geodesic_graph(nav, radius).field_from_points(sid, pts, nav.span_pos, limit) if len(sid) else None
    return _field_of(nav, pts, sid, flat)


def distance_at(nav: NavMesh, field: np.ndarray, points, radius: int = DEFAULT_RADIUS, goals=None,
                gate: float = NEAR_EXACT):
    """Read a ``distance_field`` at points (snapped): sub-cell accurate, inf when unreachable;
    exact near the field's goals (those of a ``DistanceField``, or ``goals`` [P, 3]) that a
    point sees in a straight line, where the read is below ``gate`` m (``geodesic.near_goals``;
    a task's gate: ``geodesic.near_gate(success_distance)``). ``np.asarray(field)``, a slice or a
    stack of a ``DistanceField`` is a plain array without its goals: pass them as ``goals``."""
    p, single = _points(points)
    if goals is not None:
        gp, gs = snapped_goals(nav, goals)
    else:
        gp, gs = getattr(field, "goal_points", None), getattr(field, "goal_spans", None)
    f = np.asarray(field)
    if f.shape == nav.shape:
        l, r, c = nav.span_lrc.T
        f = f[l, r, c].astype(np.float64)
    q, sid = snap_spans(nav, p)
    res = np.full(len(p), np.inf)
    ok = sid >= 0
    if ok.any():
        res[ok] = geodesic_graph(nav, radius).read_field(f, sid[ok], q[ok], nav.span_pos)
        if gs is not None and len(gs):
            res[ok] = near_goals(nav, res[ok], sid[ok], q[ok], gs, gp, gate)
    return _out(res, single)


def geodesic_distance(nav: NavMesh, a, b, radius: int = DEFAULT_RADIUS, corners: bool = True):
    """Geodesic distance between rows of ``a`` and ``b`` ([N,3] each, or one [3] against many);
    inf when either end cannot be snapped or they lie on different islands. ``radius`` /
    ``corners``: the graph's (see ``geodesic_graph``)."""
    pa, sa = _points(a)
    pb, sb = _points(b)
    if len(pa) == 1 and len(pb) > 1:
        pa = np.repeat(pa, len(pb), 0)
    if len(pb) == 1 and len(pa) > 1:
        pb = np.repeat(pb, len(pa), 0)
    if len(pa) != len(pb):
        raise NavError(None, f"geodesic_distance: {len(pa)} starts but {len(pb)} ends")
    qa, ia = snap_spans(nav, pa)
    qb, ib = snap_spans(nav, pb)
    N = len(pa)
    res = np.full(N, np.inf)
    ok = (ia >= 0) & (ib >= 0)
    ok[ok] &= nav.span_island[ia[ok]] == nav.span_island[ib[ok]]
    # pairs that see each other: the exact straight-line distance
    vis = np.zeros(N, bool)
    vis[ok] = line_of_sight(nav, ia[ok], qa[ok], ib[ok], qb[ok])
    res[vis] = np.linalg.norm(qa[vis] - qb[vis], axis=1)
    idx = np.nonzero(ok & ~vis)[0]
    if idx.size:
        g = geodesic_graph(nav, radius, corners)
        keys = np.round(qa[idx], 6)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        for u in range(len(uniq)):
            rows = idx[inv == u]
            r0 = rows[0]
            f = g.field_from_point(int(ia[r0]), qa[r0], nav.span_pos)
            res[rows] = g.read_field(f, ib[rows], qb[rows], nav.span_pos)
    return _out(res, sa and sb)


# ------------------------------------------------------------------------------ sampling
def sample_navigable_point(nav: NavMesh, n: int = 1, seed: int | None = None, island: int | None = None,
                           rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` points uniform over the navigable area (optionally of one island), [n, 3]."""
    rng = rng if rng is not None else np.random.default_rng(seed)
    if island is None:
        pool = np.arange(nav.num_spans)
    else:
        if not 0 <= island < nav.num_islands:
            raise NavError(None, f"island {island} does not exist (navmesh has {nav.num_islands})")
        pool = np.nonzero(nav.span_island == island)[0]
    if pool.size == 0:
        raise NavError(None, "navmesh has no navigable area to sample from")
    s = pool[rng.integers(0, pool.size, size=int(n))]
    u = np.clip(rng.random((int(n), 2)), 1e-4, 1 - 1e-4)
    cs = nav.cell_size
    out = nav.span_pos[s].copy()
    out[:, 0] += (u[:, 0] - 0.5) * cs
    out[:, 2] += (u[:, 1] - 0.5) * cs
    return out


# ------------------------------------------------------------------------------ try_step
def try_step(nav: NavMesh, start, end, sliding: bool = True):
    """habitat's try_step (sliding along walls) / try_step_no_sliding (stop at the wall).

    Made for agent steps: the flood-filled window grows with the longest step in the batch
    (cost ~ (step / cell_size)^3 per agent), ~50 us per agent for 0.25 m steps."""
    ps, single = _points(start)
    pe, _ = _points(end)
    if len(ps) != len(pe):
        raise NavError(None, f"try_step: {len(ps)} starts but {len(pe)} ends")
    N = len(ps)
    out = ps.copy()
    if N == 0 or nav.num_spans == 0:
        return _out(out, single)
    qs, ss = snap_spans(nav, ps)
    _, se = snap_spans(nav, pe)
    ok = (ss >= 0) & (se >= 0)
    ok[ok] &= nav.span_island[ss[ok]] == nav.span_island[se[ok]]
    idx = np.nonzero(ok)[0]
    if idx.size == 0:
        return _out(out, single)
    res = _move_along_surface(nav, qs[idx], ss[idx], pe[idx], sliding)
    out[idx] = res
    return _out(out, single)


def _move_along_surface(nav: NavMesh, start, span, end, sliding):
    S = nav.num_spans
    cs = nav.cell_size
    L, D, W = nav.shape
    N = len(start)
    d = end[:, [0, 2]] - start[:, [0, 2]]
    dist = np.linalg.norm(d, axis=1)
    R = int(math.ceil(float(dist.max()) / cs)) + 2
    n = 2 * R + 1
    r0, c0 = nav.span_lrc[span, 1], nav.span_lrc[span, 2]
    off = np.arange(-R, R + 1)
    rr = r0[:, None, None] + off[None, :, None]  # [N, n, 1]
    cc = c0[:, None, None] + off[None, None, :]  # [N, 1, n]
    # Detour's search circle around the segment midpoint
    mid = (start[:, [0, 2]] + end[:, [0, 2]]) / 2
    rad = dist / 2 + 1e-3
    x0 = nav.origin[0] + cc * cs
    z0 = nav.origin[1] + rr * cs
    dx = np.maximum(np.maximum(x0 - mid[:, 0, None, None], 0), mid[:, 0, None, None] - (x0 + cs))
    dz = np.maximum(np.maximum(z0 - mid[:, 1, None, None], 0), mid[:, 1, None, None] - (z0 + cs))
    allowed = (dx ** 2 + dz ** 2) <= (rad ** 2)[:, None, None]
    state = np.full((N, n, n), S, np.int64)
    state[:, R, R] = span
    nbr = nav.nbr
    # flood fill inside the window through connected spans
    moves = [(0, 0, 1), (1, 1, 0), (2, 0, -1), (3, -1, 0)]  # (dir, drow, dcol)
    for _ in range(n * n):
        changed = False
        for k, di, dj in moves:
            src = state[:, max(0, -di):n - max(0, di), max(0, -dj):n - max(0, dj)]
            dst = state[:, max(0, di):n - max(0, -di), max(0, dj):n - max(0, -dj)]
            al = allowed[:, max(0, di):n - max(0, -di), max(0, dj):n - max(0, -dj)]
            cand = nbr[src, k]
            upd = (dst == S) & (cand < S) & al
            if upd.any():
                dst[upd] = cand[upd]
                changed = True
        if not changed:
            break
    reached = state < S
    h = cs / 2 - _INSET
    cx = nav.origin[0] + (cc + 0.5) * cs
    cz = nav.origin[1] + (rr + 0.5) * cs
    cx, cz = np.broadcast_to(cx, (N, n, n)), np.broadcast_to(cz, (N, n, n))
    if sliding:
        hf = cs / 2
        qx = np.clip(end[:, 0, None, None], cx - hf, cx + hf)
        qz = np.clip(end[:, 2, None, None], cz - hf, cz + hf)
        dd = (qx - end[:, 0, None, None]) ** 2 + (qz - end[:, 2, None, None]) ** 2
        dd = np.where(reached, dd, np.inf).reshape(N, -1)
        j = dd.argmin(axis=1)
        ar = np.arange(N)
        res = np.stack([qx.reshape(N, -1)[ar, j], np.zeros(N), qz.reshape(N, -1)[ar, j]], 1)
        # a clamped (slid) result is pulled inside its cell so it locates back to that span
        inside = dd[ar, j] == 0
        ccx, ccz = cx.reshape(N, -1)[ar, j], cz.reshape(N, -1)[ar, j]
        res[:, 0] = np.where(inside, res[:, 0], np.clip(res[:, 0], ccx - h, ccx + h))
        res[:, 2] = np.where(inside, res[:, 2], np.clip(res[:, 2], ccz - h, ccz + h))
        sp = state.reshape(N, -1)[ar, j]
    else:
        res, sp = _advance_until_blocked(nav, start, end, state, reached, r0, c0, R)
    res[:, 1] = nav.span_pos[sp, 1]
    return res


def _advance_until_blocked(nav, start, end, state, reached, r0, c0, R):
    """Walk the segment start->end through its crossed cells; stop just before the first cell
    that is not reached (the wall)."""
    cs = nav.cell_size
    N = len(start)
    n = 2 * R + 1
    sx, sz = start[:, 0], start[:, 2]
    ex, ez = end[:, 0], end[:, 2]
    dx, dz = ex - sx, ez - sz
    ts = [np.zeros((N, 1)), np.ones((N, 1))]
    with np.errstate(divide="ignore", invalid="ignore"):
        for s0, dd, o in ((sx, dx, nav.origin[0]), (sz, dz, nav.origin[1])):
            k = np.arange(-R - 1, R + 2)
            base = np.floor((s0 - o) / cs)
            lines = o + (base[:, None] + k[None, :]) * cs
            t = (lines - s0[:, None]) / dd[:, None]
            t = np.where((t > 0) & (t < 1) & np.isfinite(t), t, np.inf)
            ts.append(t)
    t = np.sort(np.concatenate(ts, axis=1), axis=1)  # crossing params, inf padded
    t0, t1 = t[:, :-1], t[:, 1:]
    valid = np.isfinite(t1) & (t1 > t0)
    tm = np.where(valid, (t0 + t1) / 2, 0)
    mx, mz = sx[:, None] + tm * dx[:, None], sz[:, None] + tm * dz[:, None]
    mc = np.floor((mx - nav.origin[0]) / cs).astype(np.int64) - c0[:, None] + R
    mr = np.floor((mz - nav.origin[1]) / cs).astype(np.int64) - r0[:, None] + R
    inwin = (mc >= 0) & (mc < n) & (mr >= 0) & (mr < n)
    ar = np.arange(N)[:, None]
    good = inwin & reached[ar, np.clip(mr, 0, n - 1), np.clip(mc, 0, n - 1)]
    blocked = valid & ~good
    first_bad = np.where(blocked.any(1), blocked.argmax(1), t0.shape[1])
    # stop at the entry of the first bad interval (end of the last good one)
    tstop = np.where(first_bad < t0.shape[1], t0[np.arange(N), np.minimum(first_bad, t0.shape[1] - 1)], 1.0)
    seglen = np.hypot(dx, dz)
    back = np.where(seglen > 0, _INSET / np.maximum(seglen, 1e-12), 0)
    tstop = np.where(first_bad < t0.shape[1], np.maximum(tstop - back, 0), 1.0)
    res = np.stack([sx + tstop * dx, np.zeros(N), sz + tstop * dz], 1)
    # the span at the result: the cell of the last valid interval before the first bad one
    # (an unblocked move ends in the end's cell, not the start's)
    before = valid & (np.arange(t0.shape[1])[None, :] < first_bad[:, None])
    last = np.where(before.any(1), t0.shape[1] - 1 - np.argmax(before[:, ::-1], axis=1), 0)
    lr = np.clip(mr[np.arange(N), last], 0, n - 1)
    lc = np.clip(mc[np.arange(N), last], 0, n - 1)
    sp = state[np.arange(N), lr, lc]
    start_sp = state[:, R, R]
    sp = np.where(sp < nav.num_spans, sp, start_sp)
    return res, sp
