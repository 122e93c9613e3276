"""Build a NavMesh from a scan: the Recast voxel recipe, vectorized with numpy.

Steps (``build_navmesh``): mark triangles walkable by slope (front faces, as Recast) ->
conservative rasterization of every triangle into the x/z cell columns (the exact y-range of the
triangle clipped to each column) -> merge the pieces of each column into solid spans (the top
surface decides walkability, Recast's flag-merge rule) -> filters: low hanging obstacles,
ledges, walkable spans with head room < agent height -> connect neighbour spans whose step <=
max climb with shared head room >= agent height -> erode by the agent radius (like
rcErodeWalkableArea) -> drop islands under ``region_min_size^2`` cells (Recast's
minRegionArea) -> label islands -> the indoor test per island (nav.indoor).

Heights are floats: the walkable surface at the cell centre, from the walkable triangles over
it (``_centre_heights``); ``cell_height`` is only the tolerance for merging pieces of one column
(pieces closer than half of it merge). Design notes and timings: docs/DECISIONS.md.
"""
from __future__ import annotations

import ctypes
import math
import os
import time
from pathlib import Path

import numpy as np

from ..errors import InputError, NavError
from . import budget
from .grid import DIRS, NavMesh, connect_by_height, grid_frame, xz_area
from .raster import rasterize_centres, rasterize_solid
from .settings import DEFAULT_SETTINGS, NavSettings
from ..transforms.frame import Options as FrameOptions, frame_matrix



# ------------------------------------------------------------------------------ inputs
def scene_triangles(scene, dataset: str | None = None, up: str | None = None
                    ) -> tuple[np.ndarray, np.ndarray, str]:
    """(vertices f64 [V,3], triangles i64 [T,3], source) in the habitat frame from a
    SceneDocument, a packed scene (object or path), a scan path, or a (vertices, triangles) pair.

    A SceneDocument still in its source frame is moved with the frame transform for ``dataset``
    and ``up`` (``transforms.frame.Options``; gibson / mp3d, or up z: Z-up -> (x, z, -y)); the
    document itself is not modified.
    """
    if isinstance(scene, (tuple, list)) and len(scene) == 2:
        v = np.asarray(scene[0], np.float64).reshape(-1, 3)
        t = np.asarray(scene[1], np.int64).reshape(-1, 3)
        return v, t, ""
    if isinstance(scene, (str, os.PathLike)):
        path = Path(scene)
        if not path.exists():
            raise InputError(path, "no such file")
        with open(path, "rb") as f:
            head = f.read(16)
        if head[:8] == b"\x89BPS\r\n\x1a\n" and head[12:16] == b"SCEN":
            from ..packed_scene import read_packed_scene

            ps = read_packed_scene(path, sections=["positions", "indices"])
            v, t, _ = scene_triangles(ps, dataset, up)
            return v, t, path.name
        from ..readers import load

        doc = load(path)
        v, t, _ = scene_triangles(doc, dataset, up)
        return v, t, path.name
    if hasattr(scene, "meshes"):  # SceneDocument
        vs, ts, off = [], [], 0
        for m in scene.meshes:
            if m.indices.size == 0:
                continue
            vs.append(np.asarray(m.positions, np.float64).reshape(-1, 3))
            ts.append(np.asarray(m.indices, np.int64).reshape(-1, 3) + off)
            off += vs[-1].shape[0]
        v = np.concatenate(vs) if vs else np.zeros((0, 3))
        t = np.concatenate(ts) if ts else np.zeros((0, 3), np.int64)
        if getattr(scene, "frame", "habitat") != "habitat":
            v = v @ frame_matrix(frame_options(dataset, up))[:3, :3].T
        return v, t, os.path.basename(getattr(scene, "source_path", "") or "")
    if hasattr(scene, "positions") and hasattr(scene, "indices"):  # PackedScene: habitat frame
        return (np.asarray(scene.positions, np.float64).reshape(-1, 3),
                np.asarray(scene.indices, np.int64).reshape(-1, 3), "")
    raise NavError(None, f"cannot build a navmesh from {type(scene).__name__}")


def frame_options(dataset: str | None = None, up: str | None = None) -> FrameOptions:
    """The frame transform's options of a scan read for a navmesh: ``dataset``'s preset
    (None: generic, Y-up), its up axis overridden by ``up`` (y | z) when given."""
    return FrameOptions(dataset=dataset or "generic", up=up)


def merge_columns(key, ymin, ymax, walk, merge_gap, climb):
    """Merge the pieces of each column into solid spans.

    Returns (key, bot, top, walkable) of the spans sorted by (key, bot). A span is walkable when
    a walkable piece reaches within ``climb`` of its top (Recast's flag-merge rule).
    """
    order = np.lexsort((ymin, key))
    key, ymin, ymax, walk = key[order], ymin[order], ymax[order], walk[order]
    n = key.size
    if n == 0:
        z = np.zeros(0)
        return key, z, z, np.zeros(0, bool)
    # running max of ymax within each column (columns sorted): offset by column rank
    col_new = np.r_[True, key[1:] != key[:-1]]
    col_id = np.cumsum(col_new) - 1
    span = float(max(ymax.max() - ymin.min(), 1.0)) * 4 + 1
    shifted = (ymax - ymin.min()) + col_id * span
    run = np.maximum.accumulate(shifted) - col_id * span + ymin.min()
    prev_run = np.r_[-np.inf, run[:-1]]
    new = col_new | (ymin > prev_run + merge_gap)
    sid = np.cumsum(new) - 1
    S = int(sid[-1]) + 1
    bot = ymin[new]
    top = np.full(S, -np.inf)
    np.maximum.at(top, sid, ymax)
    wtop = np.full(S, -np.inf)
    np.maximum.at(wtop, sid, np.where(walk, ymax, -np.inf))
    walkable = wtop >= top - climb
    return key[new], bot, top, walkable


def build_navmesh(scene, settings: NavSettings = DEFAULT_SETTINGS, dataset: str | None = None,
                  source: str = "", up: str | None = None) -> NavMesh:
    """Voxel recipe on a scan (see module doc). ``scene``: SceneDocument, packed scene, path,
    or (vertices [V,3], triangles [T,3]) in the habitat frame; ``dataset`` / ``up`` as for
    ``scene_triangles`` (a document or path's frame)."""
    t_start = time.perf_counter()
    v, t, src = scene_triangles(scene, dataset, up)
    source = source or src
    s = settings
    cs = float(s.cell_size)
    if t.size:
        if t.min() < 0 or t.max() >= len(v):
            raise NavError(source or None, "triangle index out of range")
        fin = np.isfinite(v[t]).all(axis=(1, 2))
        t = t[fin]
    if t.size == 0:
        raise NavError(source or None, "no triangles to build a navmesh from")
    p = v[t]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    nl = np.linalg.norm(n, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        walkable = (nl > 0) & (n[:, 1] / nl >= math.cos(math.radians(s.max_slope)))

    used = p.reshape(-1, 3)
    area = xz_area(v, t)
    origin, D, W = grid_frame(used.min(0), used.max(0), cs, source, "scene vertex bounds", covered_area=area)
    budget.check_fits(source or None, "building this navmesh", budget.build_bytes(area, cs, len(t)),
                      area / cs ** 2, cs)

    if s.recast_compat:  # Recast rounds the agent to whole voxels
        s = s.replace(agent_height=math.ceil(s.agent_height / s.cell_height - 1e-6) * s.cell_height,
                      max_climb=math.floor(s.max_climb / s.cell_height + 1e-6) * s.cell_height)
    pieces = rasterize_solid(v, t, walkable, origin, cs, D, W)
    key, bot, top, wk = merge_columns(*pieces[:4], 0.5 * s.cell_height, s.max_climb)
    same_prev = np.r_[False, key[1:] == key[:-1]]
    same_next = np.r_[key[1:] == key[:-1], False]
    ceil = np.where(same_next, np.r_[bot[1:], np.inf], np.inf)

    if s.filter_low_hanging_obstacles:
        prev_w = np.r_[False, wk[:-1]] & same_prev
        prev_top = np.r_[-np.inf, top[:-1]]
        wk = wk | (~wk & prev_w & (top - prev_top <= s.max_climb))
    walk_ok = wk.copy()
    if s.filter_walkable_low_height_spans:
        walk_ok &= (ceil - top) >= s.agent_height
    rows, cols = key // W, key % W

    if s.filter_ledge_spans:
        walk_ok &= ~_ledges(key, bot, top, ceil, rows, cols, D, W, walk_ok, s)

    idx = np.nonzero(walk_ok)[0]
    y_centre = _centre_heights(v, t[walkable], origin, cs, D, W, key, bot, top, idx, s.max_climb)
    r, c, y, ce = rows[idx], cols[idx], y_centre, ceil[idx]
    nbr = connect_by_height(r, c, y, D, W, s.max_climb, ceil=ce, agent_height=s.agent_height)
    if s.recast_compat:
        keep = _erode_recast(nbr, s.agent_radius, cs)
    else:
        keep = _erode_exact(nbr, r, c, y, origin, cs, D, W, s, v, t, walkable, pieces)
    nbr = _subset(nbr, keep)
    r, c, y = r[keep], c[keep], y[keep]
    min_cells = int(round(s.region_min_size ** 2))
    nav = NavMesh.from_spans(r, c, y, nbr, origin, (D, W), settings, min_island_cells=min_cells,
                             method="voxel", source=source)
    from .indoor import island_indoor  # which islands have a ceiling (episodes use those)

    nav.island_indoor = island_indoor(nav, v, t)
    nav.build_seconds = time.perf_counter() - t_start
    return nav


def _centre_heights(v, t, origin, cs, D, W, key, bot, top, idx, climb) -> np.ndarray:
    """Height of the walkable surface at the cell centre for spans ``idx`` (sorted by key, top):
    the highest walkable triangle over the centre within ``climb`` below the span top; the top
    itself where no triangle covers the centre (slivers). Removes the up-to-half-a-cell bias of
    the column maximum on ramps."""
    out = top[idx].copy()
    if t.size == 0 or idx.size == 0:
        return out
    r, c, y, _ = rasterize_centres(v, t, origin, cs, D, W)
    if y.size == 0:
        return out
    lo = float(min(bot.min(), y.min())) - 1.0
    span = float(max(top.max(), y.max()) - lo) + 2.0
    ks, ts = key[idx].astype(np.float64), top[idx]
    comb = ks * span + (ts - lo)  # spans are sorted by (key, bot) => also by (key, top) here
    order = np.argsort(comb, kind="stable")
    comb_sorted = comb[order]
    sk = (r * W + c).astype(np.float64)
    j = np.searchsorted(comb_sorted, sk * span + (y - lo) - 1e-6)  # first span with top >= y
    ok = j < comb_sorted.size
    jj = order[np.minimum(j, comb_sorted.size - 1)]
    ok &= (key[idx][jj] == r * W + c) & (y >= ts[jj] - climb)
    best = np.full(idx.size, -np.inf)
    np.maximum.at(best, jj[ok], y[ok])
    return np.where(np.isfinite(best), np.minimum(best, out), out)


def _ledges(key, bot, top, ceil, rows, cols, D, W, cand, s: NavSettings) -> np.ndarray:
    """Recast's rcFilterLedgeSpans on the candidate spans: a drop > max climb to some neighbour
    (including the empty space under a neighbour column's first span, and the grid border), or
    accessible neighbours spread over more than max climb."""
    idx = np.nonzero(cand)[0]
    t, ce = top[idx], ceil[idx]
    r, c = rows[idx], cols[idx]
    first = np.searchsorted(key, np.arange(D * W + 1))
    kmax = int(np.bincount(key).max())
    minh = np.full(idx.size, np.inf)
    amin, amax = t.copy(), t.copy()
    for dc, dr in DIRS:
        rr, cc = r + dr, c + dc
        inb = (rr >= 0) & (rr < D) & (cc >= 0) & (cc < W)
        minh[~inb] = -np.inf
        nk = np.where(inb, rr * W + cc, 0)
        st = first[nk]
        cnt = np.where(inb, first[nk + 1] - st, 0)
        # the space below the neighbour's first span (floor at -inf)
        first_bot = np.where(cnt > 0, bot[np.minimum(st, key.size - 1)], np.inf)
        gap = np.minimum(ce, first_bot) - t
        minh[inb & (gap > s.agent_height)] = -np.inf
        for j in range(kmax):
            has = cnt > j
            jj = np.minimum(st + j, key.size - 1)
            nt, nc_ = top[jj], ceil[jj]
            gap = np.minimum(ce, nc_) - np.maximum(t, nt)
            ok = has & (gap > s.agent_height)
            d = nt - t
            minh = np.where(ok, np.minimum(minh, d), minh)
            acc = ok & (np.abs(d) <= s.max_climb)
            amin = np.where(acc, np.minimum(amin, nt), amin)
            amax = np.where(acc, np.maximum(amax, nt), amax)
    ledge = (minh < -s.max_climb) | (amax - amin > s.max_climb)
    out = np.zeros(cand.size, bool)
    out[idx] = ledge
    return out


def _diag_neighbors(nbr: np.ndarray) -> np.ndarray:
    """[S, 4] diagonal neighbours (+x+z, -x+z, -x-z, +x-z) reached the same way x-first and z-first."""
    S = nbr.shape[0]
    p = np.vstack([np.where(nbr >= 0, nbr, S), np.full((1, 4), S)])
    out = np.full((S, 4), -1, np.int64)
    for i, (a, b) in enumerate(((0, 1), (2, 1), (2, 3), (0, 3))):
        x1 = p[p[:S, a], b]
        x2 = p[p[:S, b], a]
        out[:, i] = np.where((x1 == x2) & (x1 < S), x1, -1)
    return out


def _erode_recast(nbr: np.ndarray, radius: float, cs: float) -> np.ndarray:
    """Recast's rcErodeWalkableArea: keep mask of spans whose chamfer distance (2 per side
    step, 3 per diagonal) from the spans lacking a side neighbour is at least
    ``2 * ceil(radius / cs)``: the radius rounded up to whole cells."""
    S = nbr.shape[0]
    cells = int(math.ceil(radius / cs - 1e-6))
    if cells <= 0 or S == 0:
        return np.ones(S, bool)
    d = np.where((nbr >= 0).all(1), np.inf, 0.0)
    diag = _diag_neighbors(nbr)
    for _ in range(cells + 2):
        dp = np.r_[d, np.inf]
        for k in range(4):
            d = np.minimum(d, dp[np.where(nbr[:, k] >= 0, nbr[:, k], S)] + 2.0)
            d = np.minimum(d, dp[np.where(diag[:, k] >= 0, diag[:, k], S)] + 3.0)
    return d >= 2 * cells


# the 8 link directions of _erode_exact: the 4 sides (DIRS order), then the diagonals in
# _diag_neighbors' order (+x+z, -x+z, -x-z, +x-z); (dc, dr)
_DIRS8 = np.array([[1, 0], [0, 1], [-1, 0], [0, -1], [1, 1], [-1, 1], [-1, -1], [1, -1]])
SUBCELL = 3  # sub-cell samples per cell side for obstacle coverage (spacing h = cs / 3)
# A sample is blocked when geometry comes within h / sqrt(2) of it (anywhere in its
# sub-square), so the nearest blocked sample lies on average h / sqrt(2) - h / 2 short of the
# geometry: distances to it are lengthened by that much.
_SAMPLE_TOL = 1 / math.sqrt(2)
_SAMPLE_OFFSET = _SAMPLE_TOL - 0.5
_QUERY_CHUNK = 1 << 16


def _erode_exact(nbr, rows, cols, ys, origin, cs, D, W, s: NavSettings, v, t, walkable,
                 pieces) -> np.ndarray:
    """Keep mask of spans whose centre is at least ``agent_radius`` (metres, not rounded to
    cells) from the nearest blocked point of the scene at the span's level.

    Blocked points are measured inside each cell next to the walkable area, at SUBCELL x
    SUBCELL sample points (``_blocked_samples``): a wall 0.1 m thick crossing a cell blocks
    the samples it covers, not the whole cell. Each span next to a missing link takes the
    nearest blocked sample of its missing neighbour cells as its feature point; feature points
    then spread over the span graph (sides and diagonals), each span keeping the nearest one
    it is offered (a vector distance transform), and the distance is measured from the span
    centre in metres (corrected for the sample spacing, see ``_SAMPLE_OFFSET``).
    """
    S = nbr.shape[0]
    radius = float(s.agent_radius)
    if radius <= 0 or S == 0:
        return np.ones(S, bool)
    links = np.concatenate([nbr, _diag_neighbors(nbr)], 1)  # [S, 8]
    cx = origin[0] + (cols + 0.5) * cs
    cz = origin[1] + (rows + 0.5) * cs
    h = cs / SUBCELL
    feat = np.full((S, 2), np.inf)
    off = np.zeros(S)
    best = np.full(S, np.inf)
    span, k = np.nonzero(links < 0)
    if span.size:
        nr, nc = rows[span] + _DIRS8[k, 1], cols[span] + _DIRS8[k, 0]
        inb = (nr >= 0) & (nr < D) & (nc >= 0) & (nc < W)
        blocked = np.ones((span.size, SUBCELL * SUBCELL), bool)
        if np.any(inb):
            # one query per (cell, level): a wall cell borders several spans of one floor
            qk = np.stack([nr[inb] * W + nc[inb], np.round(ys[span[inb]] / 1e-3)], 1)
            uq, inv = np.unique(qk, axis=0, return_inverse=True)
            lev = np.full(len(uq), np.nan)
            lev[inv.reshape(-1)] = ys[span[inb]]
            bq = _blocked_samples(uq[:, 0].astype(np.int64), lev, origin, cs, W, s, v, t, walkable, pieces)
            # a neighbour the column rules dropped although no sample is blocked (a low facet
            # under max climb that a scan's noise pushed a millimetre into the cell): the
            # obstacle is where that geometry is, not the whole cell (issue 12: spans 0.22 m
            # from a noisy wall were eroded at radius 0.18)
            free = np.nonzero(~bq.any(1))[0]
            if free.size:
                bq[free] = _blocked_samples(uq[free, 0].astype(np.int64), lev[free], origin, cs, W, s, v, t,
                                            walkable, pieces, rise=0.5 * s.cell_height)
            blocked[inb] = bq[inv.reshape(-1)]
        g = (np.arange(SUBCELL) + 0.5) * h
        sx = origin[0] + nc[:, None] * cs + np.tile(g, SUBCELL)[None, :]  # [Q, K*K]
        sz = origin[1] + nr[:, None] * cs + np.repeat(g, SUBCELL)[None, :]
        dist = np.hypot(sx - cx[span, None], sz - cz[span, None])
        dist = np.where(blocked, dist, np.inf)
        j = dist.argmin(1)
        qd = dist[np.arange(span.size), j] + _SAMPLE_OFFSET * h
        qx, qz = sx[np.arange(span.size), j], sz[np.arange(span.size), j]
        qoff = np.full(span.size, -_SAMPLE_OFFSET * h)
        # a side link missing for a reason no sample sees (a ledge filtered in the neighbour):
        # the neighbour cell counts from its nearest point (diagonals: the sides decide)
        none = ~np.isfinite(qd)
        use = ~none | (k < 4)
        span, nr, nc, qd, qx, qz, qoff, none = (a[use] for a in (span, nr, nc, qd, qx, qz, qoff, none))
        if np.any(none):
            ex = np.clip(cx[span], origin[0] + nc * cs, origin[0] + (nc + 1) * cs)
            ez = np.clip(cz[span], origin[1] + nr * cs, origin[1] + (nr + 1) * cs)
            qx, qz = np.where(none, ex, qx), np.where(none, ez, qz)
            qoff = np.where(none, 0.0, qoff)
            qd = np.where(none, np.hypot(ex - cx[span], ez - cz[span]), qd)
        order = np.lexsort((qd, span))
        first = np.r_[True, span[order][1:] != span[order][:-1]]
        pick = order[first]
        sp = span[pick]
        feat[sp, 0], feat[sp, 1], off[sp], best[sp] = qx[pick], qz[pick], qoff[pick], qd[pick]
    # spread the feature points over the graph (each span keeps the nearest one offered)
    safe = np.where(links >= 0, links, S)
    for _ in range(int(math.ceil(radius / cs)) + 3):
        fx, fz, fo = np.r_[feat[:, 0], np.inf], np.r_[feat[:, 1], np.inf], np.r_[off, 0.0]
        changed = False
        for kk in range(8):
            n = safe[:, kk]
            d = np.hypot(fx[n] - cx, fz[n] - cz) - fo[n]
            better = d < best - 1e-12
            if np.any(better):
                changed = True
                best[better] = d[better]
                feat[better, 0], feat[better, 1], off[better] = fx[n][better], fz[n][better], fo[n][better]
        if not changed:
            break
    return ~(best < radius - 1e-9)


def _blocked_samples(cell_keys, levels, origin, cs, W, s: NavSettings, v, t, walkable,
                     pieces, rise: float | None = None) -> np.ndarray:
    """[Q, K*K] bool: which sample points of cell ``cell_keys[q]`` are blocked for an agent
    standing at height ``levels[q]``: no walkable triangle under the sample within max climb
    of that height, or some triangle within ``_SAMPLE_TOL`` sample spacings of it (x/z) reaching into
    the agent's body (above max climb, below agent height; its y-range over the cell). With
    ``rise``: any non-walkable triangle reaching more than ``rise`` above the level counts
    (what makes the column rules drop a cell)."""
    pkey, pymin, pymax, _, ptri = pieces
    wanted = np.zeros(int(max(pkey.max(initial=0), cell_keys.max(initial=0))) + 1, bool)
    wanted[cell_keys] = True
    sel = np.nonzero(wanted[pkey])[0]  # only the pieces of the queried cells
    order = sel[np.argsort(pkey[sel], kind="stable")]
    skey = pkey[order]
    K2 = SUBCELL * SUBCELL
    h = cs / SUBCELL
    g = (np.arange(SUBCELL) + 0.5) * h
    gx, gz = np.tile(g, SUBCELL), np.repeat(g, SUBCELL)
    Q = cell_keys.size
    out = np.ones((Q, K2), bool)
    for q0 in range(0, Q, _QUERY_CHUNK):
        q1 = min(q0 + _QUERY_CHUNK, Q)
        ck, lev = cell_keys[q0:q1], levels[q0:q1]
        lo = np.searchsorted(skey, ck)
        cnt = np.searchsorted(skey, ck, side="right") - lo
        q = np.repeat(np.arange(q1 - q0), cnt)
        if q.size == 0:
            continue
        pidx = order[np.repeat(lo, cnt) + np.arange(q.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)]
        tri, y0, y1, y = ptri[pidx], pymin[pidx], pymax[pidx], lev[q]
        gxf, gzf = gx.astype(np.float32)[None, :], gz.astype(np.float32)[None, :]

        def samples(idx):  # [len(idx), K2] sample coordinates of the pairs idx
            cell = ck[q[idx]]
            return ((origin[0] + (cell % W) * cs).astype(np.float32)[:, None] + gxf,
                    (origin[1] + (cell // W) * cs).astype(np.float32)[:, None] + gzf)

        hit = np.zeros((q1 - q0, K2), bool)
        if rise is None:
            ob = np.nonzero((y1 > y + s.max_climb + 1e-6) & (y0 < y + s.agent_height - 1e-6))[0]
        else:
            ob = np.nonzero(~walkable[tri] & (y1 > y + rise) & (y0 < y + s.agent_height - 1e-6))[0]
        if ob.size:
            hit = _near_rows(v, t[tri[ob]], ck[q[ob]], q[ob], q1 - q0, origin, cs, W, gx, gz, _SAMPLE_TOL * h)
        # the floor only matters where some sample is still free
        open_q = ~hit.all(1)
        fl = np.nonzero(walkable[tri] & open_q[q] & (y0 <= y + s.max_climb) & (y1 >= y - s.max_climb))[0]
        floor = np.zeros((q1 - q0, K2), bool)
        if fl.size:
            A, B, C = (v[t[tri[fl], i]] for i in range(3))
            inside, yy = _bary(A, B, C, *samples(fl))
            floor = _or_rows(inside & (np.abs(yy - y[fl, None]) <= s.max_climb + 1e-6), q[fl], q1 - q0)
        out[q0:q1] = hit | ~floor
    return out


def _near_rows(v, tris, cells, rows, n, origin, cs, W, gx, gz, tol) -> np.ndarray:
    """[n, K2]: OR over the pairs of each row of ``_near_triangle`` (triangles ``tris`` [P, 3]
    against the samples of their cells ``cells`` [P]); the compiled loop when it was built
    (bps_assets/native/_navbuild.c: the same float32 arithmetic), else numpy."""
    gxf, gzf = gx.astype(np.float32), gz.astype(np.float32)
    x0 = (origin[0] + (cells % W) * cs).astype(np.float32)
    z0 = (origin[1] + (cells // W) * cs).astype(np.float32)
    tol2 = np.float32(tol * tol)
    f = _native_near()
    if f is not None:
        tri6 = np.ascontiguousarray(v[:, [0, 2]][tris].reshape(-1, 6), np.float64)
        r = np.ascontiguousarray(rows, np.int64)
        out = np.zeros((n, gxf.size), np.uint8)
        rc = f(len(r), tri6.ctypes.data, x0.ctypes.data, z0.ctypes.data, r.ctypes.data, n, gxf.size,
               gxf.ctypes.data, gzf.ctypes.data, tol2, out.ctypes.data)
        if rc != 0:
            raise NavError(None, "navmesh build: the compiled sample test refused its input")
        return out.view(bool)
    A, B, C = (v[tris[:, i]] for i in range(3))
    return _or_rows(_near_triangle(A, B, C, x0[:, None] + gxf[None], z0[:, None] + gzf[None], tol), rows, n)


def _native_near():
    """``bps_near_samples`` from the compiled helper, or None (then numpy is used)."""
    from bps_assets import native

    i64, p = ctypes.c_int64, ctypes.c_void_p
    return native.function("bps_assets.native._navbuild", "bps_near_samples",
                           [i64, p, p, p, p, i64, i64, p, p, ctypes.c_float, p])


def _or_rows(m: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """[n, K2]: OR of the rows of ``m`` grouped by ``rows`` (sorted, as the pairs are)."""
    out = np.zeros((n, m.shape[1]), bool)
    if rows.size:
        start = np.r_[0, np.nonzero(np.diff(rows))[0] + 1]
        out[rows[start]] = np.logical_or.reduceat(m, start, axis=0)
    return out


def _bary(A, B, C, X, Z):
    """Samples (X, Z) [P, K2] inside the x/z projection of triangles ABC [P, 3], and the
    triangle's height there."""
    det = ((B[:, 0] - A[:, 0]) * (C[:, 2] - A[:, 2]) - (C[:, 0] - A[:, 0]) * (B[:, 2] - A[:, 2]))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        w1 = ((X - A[:, None, 0]) * (C[:, None, 2] - A[:, None, 2])
              - (C[:, None, 0] - A[:, None, 0]) * (Z - A[:, None, 2])) / det
        w2 = ((B[:, None, 0] - A[:, None, 0]) * (Z - A[:, None, 2])
              - (X - A[:, None, 0]) * (B[:, None, 2] - A[:, None, 2])) / det
        w0 = 1 - w1 - w2
    e = -1e-9
    inside = (np.abs(det) > 1e-14) & (w0 >= e) & (w1 >= e) & (w2 >= e)
    with np.errstate(invalid="ignore"):
        yy = w0 * A[:, None, 1] + w1 * B[:, None, 1] + w2 * C[:, None, 1]
    return inside, yy


def _near_triangle(A, B, C, X, Z, tol):
    """Samples (X, Z) [P, K2] within ``tol`` (x/z) of the projection of triangles ABC: inside
    it or near one of its edges (vertical wall sheets project to segments). float32: the
    distances are centimetres in a cell."""
    X, Z = X.astype(np.float32), Z.astype(np.float32)
    tol2 = np.float32(tol * tol)
    pos = np.ones(X.shape, bool)
    neg = np.ones(X.shape, bool)
    near = np.zeros(X.shape, bool)
    for P0, P1 in ((A, B), (B, C), (C, A)):
        ex = (P1[:, 0] - P0[:, 0]).astype(np.float32)[:, None]
        ez = (P1[:, 2] - P0[:, 2]).astype(np.float32)[:, None]
        dx = X - P0[:, 0].astype(np.float32)[:, None]
        dz = Z - P0[:, 2].astype(np.float32)[:, None]
        cross = ex * dz - ez * dx
        pos &= cross >= 0
        neg &= cross <= 0
        L2 = ex * ex + ez * ez
        u = np.clip((dx * ex + dz * ez) / np.where(L2 > 0, L2, np.float32(1)), 0, 1)
        dx -= u * ex
        dz -= u * ez
        near |= dx * dx + dz * dz <= tol2
    return near | pos | neg


def _subset(nbr: np.ndarray, keep: np.ndarray) -> np.ndarray:
    S = nbr.shape[0]
    new = np.full(S + 1, -1, np.int64)
    new[np.nonzero(keep)[0]] = np.arange(int(keep.sum()))
    out = new[np.where(nbr >= 0, nbr, S)][keep]
    return out
