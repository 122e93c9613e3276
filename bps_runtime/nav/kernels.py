"""Navigation as Warp functions over every resident scene's flat buffers (``Nav``, laid out by
``bps_runtime.nav.buffers``; a scene is a row of its meta table): ``move``
(habitat's try_step with sliding, or try_step_no_sliding: snap start and end by Detour's
findNearestPoly rule on a window, same island, flood fill of the spans reachable inside
Detour's search circle, the reached cell square nearest the end, pulled 1e-4 m inside) and
``geodesic`` (min over the spans seen from the point's span of field + distance; below
the row's gate also the straight line to each of the row's goals the point sees). Task kernels
(``bps_runtime.tasks``) call them; ``try_step_query`` / ``geodesic_query`` run them as batch
queries, and ``host_distance`` runs ``geodesic`` on Warp's CPU device over one scene's host
arrays (the episode supplies' check before a scene is published). One source for the CPU and
CUDA; both follow ``bps_assets.nav.queries`` (tests/test_fused_step.py: >= 10,000 steps).
``set_module_options``: the Warp options of every module with step kernels (docs/DECISIONS.md).
"""
from __future__ import annotations

import math
import threading

import numpy as np
import torch
import warp as wp

from bps_assets.nav.geodesic import NEAR_EXACT

from .buffers import (F_CLIMB, F_CS, F_OX, F_OZ, GATE_SCALE, GOAL_WIDTH, M_D, M_FIELD, M_GOALS, M_HEIGHT, M_ISL, M_K,
                      M_L, M_LRC, M_NBR, M_POS, M_S, M_SEEN, M_SIDX, M_W, PULL_INSIDE, T_COUNT, T_GATE, T_OFFSET,
                      TABLE_WIDTH, table_row)
from ..warp_init import init_warp

# Warp's CPU launch builds a ``tile_shared_storage_t`` on entry that points one static of the
# module (x86-64: Warp's stand-in for a thread-local, which its JIT lacks) at the launching
# thread's stack and restores the old value on exit; the debug build's exit check reads through
# it. Two launches of this module side by side (``CpuLaunches``) interleave those writes and leave
# it null or pointing into the other thread's finished frame: a segfault inside the launch in
# debug mode (the crash that once made the CPU step one-threaded), and a data race all the same
# in release mode. These kernels use no tiles, so the entry gets an empty stand-in instead (the
# generated entry names the type after this preamble) and never touches the static.
NO_TILE_STORAGE = """
#undef WP_ENABLE_TILES_IN_STACK_MEMORY
namespace wp { struct bps_no_tile_storage_t {}; }
#define tile_shared_storage_t bps_no_tile_storage_t
"""
# whether side-by-side CPU launches of this module are safe (older Warp: no build preamble)
PARALLEL_CPU_LAUNCHES = hasattr(wp, "ModuleBuildOptions")


def set_module_options(module: str) -> None:
    """The Warp options of every module with step kernels (this one, each task's): no gradients
    (half the compile time), and the tile-storage stand-in for side-by-side CPU launches."""
    wp.set_module_options({"enable_backward": False,
                           **({"extra_build_options": wp.ModuleBuildOptions(extra_cpu_preamble=NO_TILE_STORAGE)}
                              if PARALLEL_CPU_LAUNCHES else {})}, module=module)


set_module_options(__name__)

INF = wp.constant(wp.float64(math.inf))
INSET = wp.constant(wp.float64(PULL_INSIDE))
GATE_UNIT = wp.constant(wp.float64(GATE_SCALE))
TW = wp.constant(TABLE_WIDTH)
GW = wp.constant(GOAL_WIDTH)


@wp.struct
class Nav:
    """Every resident scene's navigation: the meta tables and the six arenas."""
    meta_i: wp.array2d(dtype=wp.int64)
    meta_f: wp.array2d(dtype=wp.float64)
    ints: wp.array(dtype=wp.int32)
    f32: wp.array(dtype=wp.float32)
    f64: wp.array(dtype=wp.float64)
    fields: wp.array(dtype=wp.float32)
    goal_table: wp.array(dtype=wp.int64)
    goals: wp.array(dtype=wp.float64)


# ---------------------------------------------------------------------------------- navigation
@wp.func
def cell_index(x: wp.float64, o: wp.float64, cs: wp.float64) -> int:
    """Grid row / column of a coordinate (floor, may be outside the grid)."""
    return int(wp.floor((x - o) / cs))


@wp.func
def clampd(x: wp.float64, lo: wp.float64, hi: wp.float64) -> wp.float64:
    """x clamped to [lo, hi] (float64)."""
    return wp.min(wp.max(x, lo), hi)


@wp.func
def span_xyz(nav: Nav, poff: wp.int64, s: int) -> wp.vec3d:
    """Centre of span ``s`` of a scene whose centres start at ``poff``."""
    b = poff + wp.int64(3 * s)
    return wp.vec3d(nav.f64[b], nav.f64[b + wp.int64(1)], nav.f64[b + wp.int64(2)])


@wp.func
def snap_window(nav: Nav, scene_i: int, p: wp.vec3d, R: int):
    """Detour's findNearestPoly rule (as ``queries.snap_spans``) over the spans of the
    (2R+1)^2 cells around p's cell: -> (point, span or S, squared distance or inf)."""
    L = int(nav.meta_i[scene_i, M_L])
    D = int(nav.meta_i[scene_i, M_D])
    W = int(nav.meta_i[scene_i, M_W])
    S = int(nav.meta_i[scene_i, M_S])
    sidx = nav.meta_i[scene_i, M_SIDX]
    poff = nav.meta_i[scene_i, M_POS]
    ox = nav.meta_f[scene_i, F_OX]
    oz = nav.meta_f[scene_i, F_OZ]
    cs = nav.meta_f[scene_i, F_CS]
    climb = nav.meta_f[scene_i, F_CLIMB]
    r0 = cell_index(p[2], oz, cs)
    c0 = cell_index(p[0], ox, cs)
    h = cs * wp.float64(0.5) - INSET
    best = INF
    bsid = S
    bq = p
    for l in range(L):
        for i in range(2 * R + 1):
            r = r0 - R + i
            for j in range(2 * R + 1):
                c = c0 - R + j
                if r >= 0 and r < D and c >= 0 and c < W:
                    s = int(nav.ints[sidx + wp.int64((l * D + r) * W + c)])
                    if s >= 0:
                        cen = span_xyz(nav, poff, s)
                        qx = clampd(p[0], cen[0] - h, cen[0] + h)
                        qz = clampd(p[2], cen[2] - h, cen[2] + h)
                        dx = qx - p[0]
                        dy = cen[1] - p[1]
                        dz = qz - p[2]
                        over = r == r0 and c == c0
                        d = dx * dx + dy * dy + dz * dz
                        if over:
                            e = wp.max(wp.abs(dy) - climb, wp.float64(0.0))
                            d = e * e
                        inbox = wp.abs(dx) <= wp.float64(2.0) and wp.abs(dy) <= wp.float64(4.0) and wp.abs(dz) <= wp.float64(2.0)
                        if inbox and d < best:
                            best = d
                            bsid = s
                            if over:
                                bq = wp.vec3d(p[0], cen[1], p[2])
                            else:
                                bq = wp.vec3d(qx, cen[1], qz)
    return bq, bsid, best


@wp.func
def snap(nav: Nav, scene_i: int, p: wp.vec3d, R: int):
    """``snap_window`` around p's own cell, widened to R cells only when p is not over a span."""
    q, s, b = snap_window(nav, scene_i, p, 1)
    if b > wp.float64(0.0) and R > 1:
        q, s, b = snap_window(nav, scene_i, p, R)
    return q, s, b


@wp.func
def in_circle(ox: wp.float64, oz: wp.float64, cs: wp.float64, r: int, c: int, mx: wp.float64,
              mz: wp.float64, rad: wp.float64) -> bool:
    """Detour's search-circle test for cell (r, c): its square within ``rad`` of the midpoint."""
    x0 = ox + wp.float64(c) * cs
    z0 = oz + wp.float64(r) * cs
    dx = wp.max(wp.max(x0 - mx, wp.float64(0.0)), mx - (x0 + cs))
    dz = wp.max(wp.max(z0 - mz, wp.float64(0.0)), mz - (z0 + cs))
    return dx * dx + dz * dz <= rad * rad


@wp.func
def touching(n: int, first: int, o: wp.float64, cs: wp.float64, m: wp.float64, rad: wp.float64):
    """The first and last of the n window rows (or columns) from grid index ``first`` whose cells
    lie within ``rad`` of the coordinate ``m`` along that axis (n, -1 when none)."""
    lo = int(n)
    hi = int(-1)
    for i in range(n):
        x0 = o + wp.float64(first + i) * cs
        d = wp.max(wp.max(x0 - m, wp.float64(0.0)), m - (x0 + cs))
        if d <= rad:
            lo = wp.min(lo, i)
            hi = wp.max(hi, i)
    return lo, hi


@wp.func
def fill_from(nav: Nav, scratch: wp.array2d(dtype=wp.int32), e: int, n: int, S: int, nbr: wp.int64,
              k: int, si: int, sj: int, di: int, dj: int, r0: int, c0: int, R: int, ox: wp.float64,
              oz: wp.float64, cs: wp.float64, mx: wp.float64, mz: wp.float64, rad: wp.float64) -> int:
    """One cell of a direction's update: dst (si+di, sj+dj) takes nbr[src, k]."""
    src = int(scratch[e, si * n + sj])
    ti = si + di
    tj = sj + dj
    if src < S and int(scratch[e, ti * n + tj]) == S:
        cand = int(nav.ints[nbr + wp.int64(4 * src + k)])
        if cand < S:
            if in_circle(ox, oz, cs, r0 - R + ti, c0 - R + tj, mx, mz, rad):
                scratch[e, ti * n + tj] = wp.int32(cand)
                return 1
    return 0


@wp.func
def move(nav: Nav, win: int, scratch: wp.array2d(dtype=wp.int32), e: int, scene_i: int,
         ps: wp.vec3d, pe: wp.vec3d, sliding: bool) -> wp.vec3d:
    """habitat's try_step (``sliding``) or try_step_no_sliding (stop short of the first cell
    the segment crosses that the flood fill did not reach), as ``queries.try_step``."""
    S = int(nav.meta_i[scene_i, M_S])
    cs = nav.meta_f[scene_i, F_CS]
    ox = nav.meta_f[scene_i, F_OX]
    oz = nav.meta_f[scene_i, F_OZ]
    dist = wp.sqrt((pe[0] - ps[0]) * (pe[0] - ps[0]) + (pe[2] - ps[2]) * (pe[2] - ps[2]))
    Rs = int(wp.ceil(dist / cs)) + 2
    qs, ss, b0 = snap(nav, scene_i, ps, Rs)
    _qe, se, _b1 = snap(nav, scene_i, pe, Rs)  # only the end's span matters (its island)
    if ss >= S or se >= S:
        return ps
    isl = nav.meta_i[scene_i, M_ISL]
    if nav.ints[isl + wp.int64(ss)] != nav.ints[isl + wp.int64(se)]:
        return ps
    dd2 = wp.sqrt((pe[0] - qs[0]) * (pe[0] - qs[0]) + (pe[2] - qs[2]) * (pe[2] - qs[2]))
    rad = dd2 / wp.float64(2.0) + wp.float64(1.0e-3)
    R = int(wp.ceil(rad / cs)) + 1
    n = 2 * R + 1
    if n * n > win:
        return ps   # the host sizes the window for the task's step; never reached
    mx = (qs[0] + pe[0]) / wp.float64(2.0)
    mz = (qs[2] + pe[2]) / wp.float64(2.0)
    r0 = cell_index(mz, oz, cs)
    c0 = cell_index(mx, ox, cs)
    # only the rows / columns whose cells can touch the search circle take part (the others
    # are never allowed, so the fill and the choice below are unchanged)
    i0, i1 = touching(n, r0 - R, oz, cs, mz, rad)
    j0, j1 = touching(n, c0 - R, ox, cs, mx, rad)
    for i in range(n):
        for j in range(n):
            scratch[e, i * n + j] = wp.int32(S)
    lrc = nav.meta_i[scene_i, M_LRC]
    si = wp.clamp(int(nav.ints[lrc + wp.int64(3 * ss + 1)]) - r0 + R, 0, n - 1)
    sj = wp.clamp(int(nav.ints[lrc + wp.int64(3 * ss + 2)]) - c0 + R, 0, n - 1)
    scratch[e, si * n + sj] = wp.int32(ss)
    i0 = wp.min(i0, si)
    i1 = wp.max(i1, si)
    j0 = wp.min(j0, sj)
    j1 = wp.max(j1, sj)
    nbr = nav.meta_i[scene_i, M_NBR]
    for _p in range(n * n):
        changed = int(0)
        # k=0 (dcol +1): dst col j from col j-1, walked right to left
        for i in range(i0, i1 + 1):
            for jj in range(j1 - j0):
                j = j1 - 1 - jj
                changed += fill_from(nav, scratch, e, n, S, nbr, 0, i, j, 0, 1, r0, c0, R, ox, oz, cs, mx, mz, rad)
        # k=1 (drow +1): bottom to top
        for ii in range(i1 - i0):
            i = i1 - 1 - ii
            for j in range(j0, j1 + 1):
                changed += fill_from(nav, scratch, e, n, S, nbr, 1, i, j, 1, 0, r0, c0, R, ox, oz, cs, mx, mz, rad)
        # k=2 (dcol -1): left to right
        for i in range(i0, i1 + 1):
            for j in range(j0 + 1, j1 + 1):
                changed += fill_from(nav, scratch, e, n, S, nbr, 2, i, j, 0, -1, r0, c0, R, ox, oz, cs, mx, mz, rad)
        # k=3 (drow -1): top to bottom
        for i in range(i0 + 1, i1 + 1):
            for j in range(j0, j1 + 1):
                changed += fill_from(nav, scratch, e, n, S, nbr, 3, i, j, -1, 0, r0, c0, R, ox, oz, cs, mx, mz, rad)
        if changed == 0:
            break
    if not sliding:
        return advance_until_blocked(nav, scratch, e, scene_i, n, R, r0, c0, ss, qs, pe)
    hf = cs * wp.float64(0.5)
    h = hf - INSET
    best = INF
    bx = ps[0]
    bz = ps[2]
    bs = ss
    bcx = wp.float64(0.0)
    bcz = wp.float64(0.0)
    for i in range(i0, i1 + 1):
        for j in range(j0, j1 + 1):
            s = int(scratch[e, i * n + j])
            if s < S:
                cx = ox + (wp.float64(c0 - R + j) + wp.float64(0.5)) * cs
                cz = oz + (wp.float64(r0 - R + i) + wp.float64(0.5)) * cs
                qx = clampd(pe[0], cx - hf, cx + hf)
                qz = clampd(pe[2], cz - hf, cz + hf)
                d = (qx - pe[0]) * (qx - pe[0]) + (qz - pe[2]) * (qz - pe[2])
                if d < best:
                    best = d
                    bx = qx
                    bz = qz
                    bs = s
                    bcx = cx
                    bcz = cz
    if best != wp.float64(0.0):
        bx = clampd(bx, bcx - h, bcx + h)
        bz = clampd(bz, bcz - h, bcz + h)
    y = span_xyz(nav, nav.meta_i[scene_i, M_POS], bs)[1]
    return wp.vec3d(bx, y, bz)


@wp.func
def next_crossing(s0: wp.float64, dd: wp.float64, o: wp.float64, cs: wp.float64, after: wp.float64) -> wp.float64:
    """The smallest t in (after, 1) at which s0 + t dd crosses a grid line o + k cs (inf: none)."""
    best = INF
    if dd != wp.float64(0.0):
        base = wp.floor((s0 - o) / cs)
        # the lines the segment can cross: those between its ends, one cell of margin
        span = int(wp.ceil(wp.abs(dd) / cs)) + 2
        for kk in range(2 * span + 1):
            line = o + (base + wp.float64(kk - span)) * cs
            t = (line - s0) / dd
            if t > after and t > wp.float64(0.0) and t < wp.float64(1.0) and t < best:
                best = t
    return best


@wp.func
def advance_until_blocked(nav: Nav, scratch: wp.array2d(dtype=wp.int32), e: int, scene_i: int, n: int, R: int,
                          r0: int, c0: int, ss: int, qs: wp.vec3d, pe: wp.vec3d) -> wp.vec3d:
    """try_step_no_sliding after the flood fill (``queries._advance_until_blocked``): walk the
    segment qs -> pe through the cells it crosses, in order of the crossing parameter t; stop
    ``INSET`` before the first interval whose cell was not reached."""
    S = int(nav.meta_i[scene_i, M_S])
    cs = nav.meta_f[scene_i, F_CS]
    ox = nav.meta_f[scene_i, F_OX]
    oz = nav.meta_f[scene_i, F_OZ]
    sx = qs[0]
    sz = qs[2]
    dx = pe[0] - sx
    dz = pe[2] - sz
    t0 = wp.float64(0.0)
    tstop = wp.float64(1.0)
    blocked = bool(False)
    last = ss
    for _k in range(4 * n + 8):
        tx = next_crossing(sx, dx, ox, cs, t0)
        tz = next_crossing(sz, dz, oz, cs, t0)
        t1 = wp.min(wp.min(tx, tz), wp.float64(1.0))
        tm = (t0 + t1) / wp.float64(2.0)
        mc = cell_index(sx + tm * dx, ox, cs) - c0 + R
        mr = cell_index(sz + tm * dz, oz, cs) - r0 + R
        s = S
        if mc >= 0 and mc < n and mr >= 0 and mr < n:
            s = int(scratch[e, mr * n + mc])
        if s >= S:
            blocked = True
            tstop = t0
            break
        last = s
        if t1 >= wp.float64(1.0):
            break
        t0 = t1
    if blocked:
        seglen = wp.sqrt(dx * dx + dz * dz)
        back = wp.float64(0.0)
        if seglen > wp.float64(0.0):
            back = INSET / wp.max(seglen, wp.float64(1.0e-12))
        tstop = wp.max(tstop - back, wp.float64(0.0))
    y = span_xyz(nav, nav.meta_i[scene_i, M_POS], last)[1]
    return wp.vec3d(sx + tstop * dx, y, sz + tstop * dz)


@wp.func
def crossing(a: wp.float64, b: wp.float64, ia: wp.float64, k: int, o: wp.float64, cs: wp.float64) -> wp.float64:
    """The segment parameter t of the k-th grid line (k >= 1) crossed from cell ``ia`` towards b."""
    kk = wp.float64(k)
    if b < a:
        kk = wp.float64(1 - k)
    return (o + (ia + kk) * cs - a) / (b - a)


@wp.func
def sees(nav: Nav, scene_i: int, sa: int, a: wp.vec3d, sb: int, b: wp.vec3d) -> bool:
    """``bps_assets.nav.geodesic.line_of_sight`` of the x/z segment a -> b (in spans sa, sb): walk
    the cells it crosses through the neighbour links, x crossings first at a tie."""
    S = int(nav.meta_i[scene_i, M_S])
    nbr = nav.meta_i[scene_i, M_NBR]
    ox = nav.meta_f[scene_i, F_OX]
    oz = nav.meta_f[scene_i, F_OZ]
    cs = nav.meta_f[scene_i, F_CS]
    iax = wp.floor((a[0] - ox) / cs)
    iaz = wp.floor((a[2] - oz) / cs)
    ibx = wp.floor((b[0] - ox) / cs)
    ibz = wp.floor((b[2] - oz) / cs)
    nx = int(wp.abs(ibx - iax))
    nz = int(wp.abs(ibz - iaz))
    dx = 2
    if ibx > iax:
        dx = 0
    dz = 3
    if ibz > iaz:
        dz = 1
    kx = int(1)
    kz = int(1)
    cur = int(sa)
    for _m in range(nx + nz):
        tx = INF
        tz = INF
        if kx <= nx:
            tx = crossing(a[0], b[0], iax, kx, ox, cs)
        if kz <= nz:
            tz = crossing(a[2], b[2], iaz, kz, oz, cs)
        if tz < tx:
            kz += 1
            cur = int(nav.ints[nbr + wp.int64(4 * cur + dz)])
        else:
            kx += 1
            cur = int(nav.ints[nbr + wp.int64(4 * cur + dx)])
        if cur >= S:
            return False
    return cur == sb


@wp.func
def geodesic(nav: Nav, scene_i: int, row: int, p: wp.vec3) -> wp.float32:
    """Distance to the episode's goal: min over the spans seen from p's span (the span of its
    cell nearest in y) of field + |p - centre| (x/z of p, y of its span); where that is below
    the row's gate (``GoalFields``: the task's ``near_gate``), also |p - g| for each of the row's
    goals g nearer than it that p ``sees``."""
    L = int(nav.meta_i[scene_i, M_L])
    D = int(nav.meta_i[scene_i, M_D])
    W = int(nav.meta_i[scene_i, M_W])
    S = int(nav.meta_i[scene_i, M_S])
    K = int(nav.meta_i[scene_i, M_K])
    px = wp.float64(p[0])
    pz = wp.float64(p[2])
    cs = nav.meta_f[scene_i, F_CS]
    r = cell_index(pz, nav.meta_f[scene_i, F_OZ], cs)
    c = cell_index(px, nav.meta_f[scene_i, F_OX], cs)
    if r < 0 or r >= D or c < 0 or c >= W:
        return wp.float32(wp.inf)
    hoff = nav.meta_i[scene_i, M_HEIGHT]
    sidx = nav.meta_i[scene_i, M_SIDX]
    best = wp.float32(wp.inf)
    layer = int(0)
    for l in range(L):
        hh = nav.f32[hoff + wp.int64((l * D + r) * W + c)]
        dy = wp.abs(hh - p[1])
        if not wp.isnan(dy) and dy < best:
            best = dy
            layer = l
    span = int(nav.ints[sidx + wp.int64((layer * D + r) * W + c)])
    if span < 0:
        return wp.float32(wp.inf)
    poff = nav.meta_i[scene_i, M_POS]
    q = wp.vec3d(px, span_xyz(nav, poff, span)[1], pz)
    seen = nav.meta_i[scene_i, M_SEEN] + wp.int64(span) * wp.int64(K)
    fbase = nav.meta_i[scene_i, M_FIELD] + wp.int64(row) * wp.int64(S)
    tot = INF
    for k in range(K):
        s2 = int(nav.ints[seen + wp.int64(k)])
        if s2 < S:
            f = wp.float64(nav.fields[fbase + wp.int64(s2)])
            t = f + wp.length(span_xyz(nav, poff, s2) - q)
            tot = wp.min(tot, t)
    gt = nav.meta_i[scene_i, M_GOALS] + wp.int64(TW * row)
    # the read detours via a span centre: near a goal (below the row's gate), the straight line
    if tot < wp.float64(nav.goal_table[gt + wp.int64(T_GATE)]) / GATE_UNIT:
        gbase = nav.goal_table[gt + wp.int64(T_OFFSET)]
        for i in range(int(nav.goal_table[gt + wp.int64(T_COUNT)])):
            b = gbase + wp.int64(GW * i)
            g = wp.vec3d(nav.goals[b], nav.goals[b + wp.int64(1)], nav.goals[b + wp.int64(2)])
            if wp.length_sq(g - q) < tot * tot:   # the square first: most view points are farther
                d = wp.length(g - q)
                if d < tot:
                    if sees(nav, scene_i, span, q, int(nav.goals[b + wp.int64(3)]), g):
                        tot = d
    return wp.float32(tot)


# ---------------------------------------------------------------------------------- batch queries
@wp.kernel
def try_step_query(nav: Nav, win: int, scratch: wp.array2d(dtype=wp.int32), scene_idx: wp.array(dtype=wp.int32),
                   start: wp.array(dtype=wp.vec3), end: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    """``try_step`` for [N] agents in any resident scenes (tests, tools; not the step)."""
    e = wp.tid()
    p = start[e]
    q = end[e]
    r = move(nav, win, scratch, e, int(scene_idx[e]), wp.vec3d(wp.float64(p[0]), wp.float64(p[1]), wp.float64(p[2])),
             wp.vec3d(wp.float64(q[0]), wp.float64(q[1]), wp.float64(q[2])), True)   # sliding
    out[e] = wp.vec3(wp.float32(r[0]), wp.float32(r[1]), wp.float32(r[2]))


@wp.kernel
def geodesic_query(nav: Nav, scene_idx: wp.array(dtype=wp.int32), rows: wp.array(dtype=wp.int32),
                   pos: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32)):
    """The step's geodesic distance for [N] points (field ``rows`` of their scenes)."""
    e = wp.tid()
    out[e] = geodesic(nav, int(scene_idx[e]), int(rows[e]), pos[e])



# ---------------------------------------------------------------------------------- host side
def window_cells(max_len: float, min_cell: float) -> int:
    """Scratch cells per agent for ``move`` of segments up to ``max_len`` m in scenes whose
    smallest cell is ``min_cell`` m (0.05 when no scene is resident): ``move``'s own window rule."""
    cs = min_cell if math.isfinite(min_cell) else 0.05
    R = int(math.ceil((max_len / 2 + 1e-3) / cs)) + 2
    return (2 * R + 1) ** 2



def nav_struct(nav) -> Nav:
    """The ``Nav`` view of ``NavBuffers`` (zero-copy; rebuild when ``nav.version`` changes)."""
    ft = init_warp().from_torch
    s = Nav()
    s.meta_i, s.meta_f = ft(nav.meta_i), ft(nav.meta_f)
    s.ints, s.f32, s.f64, s.fields = ft(nav.ints.buf), ft(nav.f32.buf), ft(nav.f64.buf), ft(nav.field_arena.buf)
    s.goal_table, s.goals = ft(nav.goal_table.buf), ft(nav.goal_arena.buf)
    return s


_HOST_LOCK = threading.Lock()


def _host_arrays(scene) -> tuple:
    """``scene.host_arrays()`` as Warp CPU arrays (zero-copy), made once per scene and kept on it."""
    with _HOST_LOCK:
        if scene.host_view is None:
            ft = init_warp().from_torch
            scene.host_view = tuple(ft(torch.from_numpy(a)) for a in scene.host_arrays())
        return scene.host_view


def host_distance(scene, field: np.ndarray, points, goals: np.ndarray | None = None,
                  gate: float = NEAR_EXACT) -> np.ndarray:
    """``geodesic`` for points [N, 3] to field ``field`` [S] of a scene that need not be published
    (float64 out; the float32 rule of the step), exact near ``goals`` [P, GOAL_WIDTH] (the row's
    ``GoalFields.near``; None: the field read alone) where the read is below ``gate`` m (the row's
    ``GoalFields.gate``). Runs on the calling thread, Warp's CPU device."""
    wp = init_warp()
    p = np.ascontiguousarray(np.asarray(points, np.float32).reshape(-1, 3))
    out = np.empty(len(p), np.float32)
    if len(p):
        ft = lambda a, dtype=None: wp.from_torch(torch.from_numpy(a), dtype=dtype)   # noqa: E731 - zero-copy
        nav = Nav()   # one per call: threads query with their own field rows
        nav.meta_i, nav.meta_f, nav.ints, nav.f32, nav.f64 = _host_arrays(scene)
        nav.fields = ft(np.ascontiguousarray(field, np.float32))
        g = np.zeros((0, GOAL_WIDTH)) if goals is None else np.asarray(goals, np.float64).reshape(-1, GOAL_WIDTH)
        nav.goal_table = ft(table_row(0, len(g), round(gate * GATE_SCALE)))
        nav.goals = ft(np.ascontiguousarray(np.concatenate([g.reshape(-1), [np.nan]])))   # never empty
        zeros = ft(np.zeros(len(p), np.int32))   # scene 0, row 0 of the one-scene view
        wp.launch(geodesic_query, dim=len(p), inputs=[nav, zeros, zeros, ft(p, wp.vec3), ft(out)], device="cpu")
    return out.astype(np.float64)


def load_for_host() -> None:
    """Load this module's CPU code now, on the calling thread (Warp's first load of a module is
    not locked: call before threads run ``host_distance``)."""
    init_warp().load_module(__name__, device="cpu")
