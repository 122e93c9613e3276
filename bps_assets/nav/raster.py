"""Rasterizing triangles into the x/z cell columns of a navmesh grid (used by the voxel
recipe in build.py and by ``NavMesh.from_walkable_triangles`` in grid.py).

``rasterize_centres``: the cells whose centre a triangle's x/z projection covers, with the
triangle's height there. ``rasterize_solid``: conservative, every (triangle, column) pair it
touches with the exact y-range of the triangle inside the column. Work is chunked to
``_CHUNK_PAIRS`` (triangle, cell) pairs at a time, a large triangle split too, so memory stays
bounded whatever the triangle sizes.
"""
from __future__ import annotations

import numpy as np

_CHUNK_PAIRS = 1 << 21  # (triangle, cell) pairs processed at once: bounds memory


def _bbox_cells(v, t, origin, cs, D, W, centre: bool):
    """Per triangle: first row/col and counts of the cells its x/z box touches (centres inside
    the box when ``centre``)."""
    p = v[t]  # [T,3,3]
    lo, hi = p.min(1), p.max(1)
    off = 0.5 if centre else 0.0
    c0 = np.ceil((lo[:, 0] - origin[0]) / cs - off).astype(np.int64) if centre else \
        np.floor((lo[:, 0] - origin[0]) / cs).astype(np.int64)
    c1 = np.floor((hi[:, 0] - origin[0]) / cs - off).astype(np.int64)
    r0 = np.ceil((lo[:, 2] - origin[1]) / cs - off).astype(np.int64) if centre else \
        np.floor((lo[:, 2] - origin[1]) / cs).astype(np.int64)
    r1 = np.floor((hi[:, 2] - origin[1]) / cs - off).astype(np.int64)
    c0, r0 = np.maximum(c0, 0), np.maximum(r0, 0)
    c1, r1 = np.minimum(c1, W - 1), np.minimum(r1, D - 1)
    nc = np.maximum(c1 - c0 + 1, 0)
    nr = np.maximum(r1 - r0 + 1, 0)
    return r0, c0, nr, nc


def _pair_chunks(nr, nc):
    """Yield (tri, local_row, local_col) arrays over all (triangle, cell-in-box) pairs, at most
    ``_CHUNK_PAIRS`` at a time (a triangle with more cells than that is split too)."""
    cnt = nr * nc
    csum = np.cumsum(cnt)
    total = int(csum[-1]) if csum.size else 0
    for base in range(0, total, _CHUNK_PAIRS):
        idx = np.arange(base, min(base + _CHUNK_PAIRS, total), dtype=np.int64)
        tri = np.searchsorted(csum, idx, side="right")
        local = idx - (csum[tri] - cnt[tri])
        yield tri, local // nc[tri], local % nc[tri]


def rasterize_centres(v, t, origin, cs, D, W):
    """Cells whose centre lies inside a triangle's x/z projection: (rows, cols, y, tri)."""
    r0, c0, nr, nc = _bbox_cells(v, t, origin, cs, D, W, centre=True)
    a, b, c = v[t[:, 0]], v[t[:, 1]], v[t[:, 2]]
    det = (b[:, 0] - a[:, 0]) * (c[:, 2] - a[:, 2]) - (c[:, 0] - a[:, 0]) * (b[:, 2] - a[:, 2])
    nondeg = np.abs(det) > 1e-12
    nr = np.where(nondeg, nr, 0)
    out = []
    for tri, lr, lc in _pair_chunks(nr, nc):
        rr, cc = r0[tri] + lr, c0[tri] + lc
        px = origin[0] + (cc + 0.5) * cs
        pz = origin[1] + (rr + 0.5) * cs
        A, B, C, dt = a[tri], b[tri], c[tri], det[tri]
        w1 = ((px - A[:, 0]) * (C[:, 2] - A[:, 2]) - (C[:, 0] - A[:, 0]) * (pz - A[:, 2])) / dt
        w2 = ((B[:, 0] - A[:, 0]) * (pz - A[:, 2]) - (px - A[:, 0]) * (B[:, 2] - A[:, 2])) / dt
        w0 = 1 - w1 - w2
        eps = -1e-7
        ok = (w0 >= eps) & (w1 >= eps) & (w2 >= eps)
        y = w0 * A[:, 1] + w1 * B[:, 1] + w2 * C[:, 1]
        out.append((rr[ok], cc[ok], y[ok], tri[ok]))
    if not out:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0), z
    return tuple(np.concatenate(x) for x in zip(*out))


def _clip_yrange(A, B, C, x0, x1, z0, z1):
    """Exact (ymin, ymax) of triangles ABC [P,3] restricted to the columns [x0,x1]x[z0,z1];
    NaN where they do not overlap."""
    P = A.shape[0]
    lo = np.full(P, np.inf)
    hi = np.full(P, -np.inf)

    def take(ok, y):
        np.minimum(lo, np.where(ok, y, np.inf), out=lo)
        np.maximum(hi, np.where(ok, y, -np.inf), out=hi)

    e = 1e-9
    for V in (A, B, C):
        take((V[:, 0] >= x0 - e) & (V[:, 0] <= x1 + e) & (V[:, 2] >= z0 - e) & (V[:, 2] <= z1 + e), V[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        for Pp, Q in ((A, B), (B, C), (C, A)):
            d = Q - Pp
            for xb in (x0, x1):  # crossings of x = xb
                tt = (xb - Pp[:, 0]) / d[:, 0]
                z = Pp[:, 2] + tt * d[:, 2]
                take((tt >= 0) & (tt <= 1) & (z >= z0 - e) & (z <= z1 + e), Pp[:, 1] + tt * d[:, 1])
            for zb in (z0, z1):
                tt = (zb - Pp[:, 2]) / d[:, 2]
                x = Pp[:, 0] + tt * d[:, 0]
                take((tt >= 0) & (tt <= 1) & (x >= x0 - e) & (x <= x1 + e), Pp[:, 1] + tt * d[:, 1])
        det = (B[:, 0] - A[:, 0]) * (C[:, 2] - A[:, 2]) - (C[:, 0] - A[:, 0]) * (B[:, 2] - A[:, 2])
        for px in (x0, x1):
            for pz in (z0, z1):
                w1 = ((px - A[:, 0]) * (C[:, 2] - A[:, 2]) - (C[:, 0] - A[:, 0]) * (pz - A[:, 2])) / det
                w2 = ((B[:, 0] - A[:, 0]) * (pz - A[:, 2]) - (px - A[:, 0]) * (B[:, 2] - A[:, 2])) / det
                w0 = 1 - w1 - w2
                ok = (np.abs(det) > 1e-14) & (w0 >= 0) & (w1 >= 0) & (w2 >= 0)
                take(ok, w0 * A[:, 1] + w1 * B[:, 1] + w2 * C[:, 1])
    return lo, hi


def rasterize_solid(v, t, walkable, origin, cs, D, W):
    """Conservative rasterization: (cell key, ymin, ymax, walkable, triangle) per (triangle,
    column)."""
    r0, c0, nr, nc = _bbox_cells(v, t, origin, cs, D, W, centre=False)
    p = v[t]
    lo_y, hi_y = p[:, :, 1].min(1), p[:, :, 1].max(1)
    single = (nr == 1) & (nc == 1)
    keys = [(r0[single] * W + c0[single])]
    ymins, ymaxs, walks = [lo_y[single]], [hi_y[single]], [walkable[single]]
    tris = [np.nonzero(single)[0]]
    multi = np.nonzero(~single & (nr > 0) & (nc > 0))[0]
    if multi.size:
        for tri_l, lr, lc in _pair_chunks(nr[multi], nc[multi]):
            tri = multi[tri_l]
            rr, cc = r0[tri] + lr, c0[tri] + lc
            x0 = origin[0] + cc * cs
            z0 = origin[1] + rr * cs
            ylo, yhi = _clip_yrange(p[tri, 0], p[tri, 1], p[tri, 2], x0, x0 + cs, z0, z0 + cs)
            ok = np.isfinite(ylo)
            keys.append(rr[ok] * W + cc[ok])
            ymins.append(ylo[ok])
            ymaxs.append(yhi[ok])
            walks.append(walkable[tri[ok]])
            tris.append(tri[ok])
    return (np.concatenate(keys), np.concatenate(ymins), np.concatenate(ymaxs),
            np.concatenate(walks), np.concatenate(tris))
