"""Scenes whose navigable space is known exactly, to measure a navmesh build against.

Each ``ExactScene`` is a box-built interior (habitat frame, Y up) together with its exact
description in x/z: convex obstacle footprints (walls, furniture; every one reaches into the
agent's body) inside one rectangle bounded by the outer walls, and the floor height of every
walkable part. The free space eroded by the agent radius ``r`` is the set of interior points at
least ``r`` from every footprint; its area is integrated on a fine grid (``exact_area``) and
its shortest paths come from a visibility graph over the footprints grown by ``r``
(``ExactGeodesic``). Used by tests/test_nav_accuracy.py and benchmarks/nav_accuracy.py.

Scenes: ``apartment`` (walls 0.1-0.2 m thick at positions that are not multiples of any cell
size, doors 0.8-1.0 m, rotated furniture, a closed room) and ``split_level`` (a lower and an
upper room joined by a stair flight in a walled stairwell, plus furniture).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _rect(x0, z0, x1, z1) -> np.ndarray:
    """Counter-clockwise (seen from +y with x right, z down the page) axis-aligned footprint."""
    return np.array([[x0, z0], [x1, z0], [x1, z1], [x0, z1]], float)


def _rot_rect(cx, cz, w, d, ang) -> np.ndarray:
    c, s = np.cos(ang), np.sin(ang)
    pts = np.array([[-w, -d], [w, -d], [w, d], [-w, d]]) / 2
    return pts @ np.array([[c, s], [-s, c]]) + [cx, cz]


def _prism_tris(poly, y0, y1):
    """Closed vertical prism over a convex x/z polygon (outward faces, top facing +y)."""
    n = len(poly)
    bot = np.c_[poly[:, 0], np.full(n, y0), poly[:, 1]]
    top = np.c_[poly[:, 0], np.full(n, y1), poly[:, 1]]
    v = np.vstack([bot, top])
    f = []
    for i in range(1, n - 1):
        f.append([n, n + i + 1, n + i])  # top
        f.append([0, i, i + 1])  # bottom
    for i in range(n):
        j = (i + 1) % n
        f.append([i, n + i, n + j])
        f.append([i, n + j, j])
    f = np.array(f)
    # orient every face outward from the prism's centre
    c = v.mean(0)
    a, b, d = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    nrm = np.cross(b - a, d - a)
    flip = np.einsum("ij,ij->i", nrm, (a + b + d) / 3 - c) < 0
    f[flip] = f[flip][:, ::-1]
    return v, f


@dataclass
class ExactScene:
    name: str
    interior: tuple[float, float, float, float]  # x0, z0, x1, z1 inside the outer walls
    obstacles: list[np.ndarray] = field(default_factory=list)  # convex x/z footprints
    levels: list[tuple[np.ndarray, float]] = field(default_factory=list)  # (footprint, floor y)
    _v: list[np.ndarray] = field(default_factory=list)
    _t: list[np.ndarray] = field(default_factory=list)
    _n: int = 0

    def add(self, v, t):
        self._v.append(np.asarray(v, float))
        self._t.append(np.asarray(t, np.int64) + self._n)
        self._n += len(v)

    def solid(self, poly, y0, y1, obstacle=True):
        """A prism over ``poly``; an obstacle to the exact free space unless told not."""
        self.add(*_prism_tris(np.asarray(poly, float), y0, y1))
        if obstacle:
            self.obstacles.append(np.asarray(poly, float))

    def wall(self, x0, z0, x1, z1, y0=0.0, y1=2.6):
        self.solid(_rect(x0, z0, x1, z1), y0, y1)

    def arrays(self):
        return np.concatenate(self._v), np.concatenate(self._t)

    # ------------------------------------------------------------------ exact measures
    def clearance(self, x, z) -> np.ndarray:
        """Distance (x/z) from points to the nearest obstacle footprint (0 inside one)."""
        d = np.full(np.shape(x), np.inf)
        for poly in self.obstacles:
            inside = np.ones(np.shape(x), bool)
            dmin = np.full(np.shape(x), np.inf)
            for i in range(len(poly)):
                p, q = poly[i], poly[(i + 1) % len(poly)]
                e = q - p
                inside &= e[0] * (z - p[1]) - e[1] * (x - p[0]) > 0
                u = np.clip(((x - p[0]) * e[0] + (z - p[1]) * e[1]) / (e @ e), 0, 1)
                dmin = np.minimum(dmin, np.hypot(x - p[0] - u * e[0], z - p[1] - u * e[1]))
            d = np.minimum(d, np.where(inside, 0.0, dmin))
        return d

    def exact_area(self, radius: float, step: float = 0.01) -> float:
        """Area (m^2) of the interior points at least ``radius`` from every obstacle."""
        x0, z0, x1, z1 = self.interior
        xs = np.arange(x0 + step / 2, x1, step)
        total = 0
        for zc in np.array_split(np.arange(z0 + step / 2, z1, step), 16):
            X, Z = np.meshgrid(xs, zc)
            total += int(np.count_nonzero(self.clearance(X, Z) >= radius))
        return total * step * step

    def floor_height(self, x, z) -> np.ndarray:
        y = np.full(np.shape(x), np.nan)
        for poly, h in self.levels:
            inside = np.ones(np.shape(x), bool)
            for i in range(len(poly)):
                p, q = poly[i], poly[(i + 1) % len(poly)]
                inside &= (q[0] - p[0]) * (z - p[1]) - (q[1] - p[1]) * (x - p[0]) >= 0
            y = np.where(inside & np.isnan(y), h, y)
        return y


class ExactGeodesic:
    """Exact shortest paths (x/z) in the free space of ``scene`` eroded by ``radius``: a
    visibility graph over the obstacle footprints grown by the radius (arcs as 4 segments a
    quarter circle, their vertices between the inscribed and circumscribed radius so the
    polygon's error in path length is second order)."""

    def __init__(self, scene: ExactScene, radius: float, arc_segments: int = 4):
        from scipy.sparse.csgraph import shortest_path

        self.grown = [_grow(p, radius, arc_segments) for p in scene.obstacles]
        nodes = np.concatenate(self.grown)
        # nodes inside another grown obstacle are never on a shortest path
        keep = np.ones(len(nodes), bool)
        for g in self.grown:
            keep &= ~_inside(g, nodes[:, 0], nodes[:, 1], 1e-9)
        self.nodes = nodes[keep]
        n = len(self.nodes)
        vis = self._visible_many(self.nodes[:, None, :].repeat(n, 1).reshape(-1, 2),
                                 np.tile(self.nodes, (n, 1))).reshape(n, n)
        d = np.linalg.norm(self.nodes[:, None] - self.nodes[None], axis=2)
        w = np.where(vis, d, 0.0)
        np.fill_diagonal(w, 0.0)
        self.node_dist = shortest_path(w, directed=False)

    def _visible_many(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """[N] segments a-b that cross no grown obstacle's interior (separating axis test)."""
        ok = np.ones(len(a), bool)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        for g in self.grown:
            near = np.nonzero(np.all(lo <= g.max(0), 1) & np.all(hi >= g.min(0), 1) & ok)[0]
            if near.size:
                ok[near] &= ~_segments_cross(g, a[near], b[near])
        return ok

    def distance(self, a, b) -> float:
        return float(self.distances(a, np.asarray(b, float)[None])[0])

    def distances(self, a, bs) -> np.ndarray:
        """Exact shortest path lengths from point ``a`` to each of the points ``bs`` [N, 2]."""
        a, bs = np.asarray(a, float), np.asarray(bs, float).reshape(-1, 2)
        n, N = len(self.nodes), len(bs)
        direct = self._visible_many(np.repeat(a[None], N, 0), bs)
        va = self._visible_many(np.repeat(a[None], n, 0), self.nodes)
        da = np.where(va, np.linalg.norm(self.nodes - a, axis=1), np.inf)
        via_a = (da[:, None] + self.node_dist).min(0)  # [n]: a -> node j
        vb = self._visible_many(np.repeat(bs, n, 0), np.tile(self.nodes, (N, 1))).reshape(N, n)
        db = np.where(vb, np.linalg.norm(bs[:, None] - self.nodes[None], axis=2), np.inf)
        out = (via_a[None, :] + db).min(1)
        return np.where(direct, np.linalg.norm(bs - a, axis=1), out)


def _grow(poly: np.ndarray, r: float, seg: int) -> np.ndarray:
    """Convex polygon grown by a disc of radius r (Minkowski sum), arcs on the circle."""
    out = []
    n = len(poly)
    for i in range(n):
        p0, p1, p2 = poly[i - 1], poly[i], poly[(i + 1) % n]
        e0, e1 = p1 - p0, p2 - p1
        a0 = np.arctan2(-e0[0], e0[1])  # outward normal of edge p0-p1 (ccw polygon, y-down)
        a1 = np.arctan2(-e1[0], e1[1])
        while a1 < a0:
            a1 += 2 * np.pi
        k = max(1, int(np.ceil((a1 - a0) / (np.pi / 2) * seg)))
        rr = r * (1 + 1 / np.cos((a1 - a0) / k / 2)) / 2
        for ang in np.linspace(a0, a1, k + 1):
            out.append(p1 + (r if ang in (a0, a1) else rr) * np.array([np.cos(ang), np.sin(ang)]))
    pts = np.array(out)
    # keep it convex and counter-clockwise in the same sense as the input
    c = pts.mean(0)
    order = np.argsort(np.arctan2(pts[:, 1] - c[1], pts[:, 0] - c[0]))
    pts = pts[order]
    if _signed_area(pts) * _signed_area(poly) < 0:
        pts = pts[::-1]
    return pts


def _signed_area(p):
    return 0.5 * float(np.sum(p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1]))


def _inside(poly, x, z, eps=0.0):
    s = np.sign(_signed_area(poly))
    ok = np.ones(np.shape(x), bool)
    for i in range(len(poly)):
        p, q = poly[i], poly[(i + 1) % len(poly)]
        ok &= s * ((q[0] - p[0]) * (z - p[1]) - (q[1] - p[1]) * (x - p[0])) > eps
    return ok


def _segments_cross(poly, a, b, eps=1e-9):
    """[N] whether segments a-b overlap the interior of convex ``poly`` (shrunk by eps)."""
    axes = []
    for i in range(len(poly)):
        e = poly[(i + 1) % len(poly)] - poly[i]
        axes.append(np.array([-e[1], e[0]]) / np.hypot(*e))
    pp = np.stack([poly @ ax for ax in axes])  # [A, n]
    sep = np.zeros(len(a), bool)
    for ax, proj in zip(axes, pp):
        sa, sb = a @ ax, b @ ax
        sep |= (np.maximum(sa, sb) <= proj.min() + eps) | (np.minimum(sa, sb) >= proj.max() - eps)
    seg = b - a
    L = np.hypot(seg[:, 0], seg[:, 1])
    nrm = np.stack([-seg[:, 1], seg[:, 0]], 1) / np.where(L > 0, L, 1)[:, None]
    proj = nrm @ poly.T  # [N, n]
    s0 = np.einsum("ij,ij->i", nrm, a)
    sep |= (L > 0) & ((proj.max(1) <= s0 + eps) | (proj.min(1) >= s0 - eps))
    return ~sep


# ---------------------------------------------------------------------------------- scenes
def _furnish(sc: ExactScene, rng, rect, n: int, y0: float, size_max, heights, pad: float):
    """Up to ``n`` rotated boxes inside ``rect`` (x0, z0, x1, z1) standing on ``y0``, kept
    0.5 m apart (an obstacle grown by ``pad`` must not reach into another grown by 0.5 m)."""
    rx0, rz0, rx1, rz1 = rect
    placed, tries = [], 0
    while len(placed) < n and tries < 400:
        tries += 1
        w, d = rng.uniform(0.4, size_max[0]), rng.uniform(0.3, size_max[1])
        poly = _rot_rect(rng.uniform(rx0, rx1), rng.uniform(rz0, rz1), w, d, rng.uniform(0, np.pi))
        if poly[:, 0].min() < rx0 or poly[:, 0].max() > rx1 or poly[:, 1].min() < rz0 \
                or poly[:, 1].max() > rz1:
            continue
        grown = _grow(poly, 0.5, 2)
        if any(_inside(_grow(o, pad, 2) if pad else o, grown[:, 0], grown[:, 1]).any()
               or _inside(grown, o[:, 0], o[:, 1]).any() for o in placed):
            continue
        placed.append(poly)
        sc.solid(poly, y0, y0 + float(rng.choice(heights)))


def subdivide(v: np.ndarray, t: np.ndarray):
    """Split every triangle into 4 at its edge midpoints (a finer, scan-like tessellation)."""
    a, b, c = t[:, 0], t[:, 1], t[:, 2]
    n, T = len(v), len(t)
    iab, ibc, ica = n + np.arange(T), n + T + np.arange(T), n + 2 * T + np.arange(T)
    v2 = np.concatenate([v, (v[a] + v[b]) / 2, (v[b] + v[c]) / 2, (v[c] + v[a]) / 2])
    t2 = np.concatenate([np.stack([a, iab, ica], 1), np.stack([iab, b, ibc], 1),
                         np.stack([ica, ibc, c], 1), np.stack([iab, ibc, ica], 1)])
    return v2, t2


def apartment(seed: int = 0) -> ExactScene:
    """12 x 8 m flat: four rooms and a closed store room, walls 0.1-0.2 m thick, doors
    0.8-1.0 m, rotated furniture (tables, beds, sofas, cabinets), ceiling at 2.6 m."""
    rng = np.random.default_rng(seed)
    j = lambda: float(rng.uniform(0.003, 0.047))  # noqa: E731 - keeps faces off cell lines
    X0, Z0 = 0.0 + j(), 0.0 + j()
    X1, Z1 = 12.0 + j(), 8.0 + j()
    sc = ExactScene("apartment", (X0, Z0, X1, Z1))
    sc.solid(_rect(X0 - 0.5, Z0 - 0.5, X1 + 0.5, Z1 + 0.5), -0.1, 0.0, obstacle=False)  # floor
    sc.levels.append((_rect(X0, Z0, X1, Z1), 0.0))
    t = 0.15
    sc.wall(X0 - t, Z0 - t, X1 + t, Z0)  # outer walls
    sc.wall(X0 - t, Z1, X1 + t, Z1 + t)
    sc.wall(X0 - t, Z0, X0, Z1)
    sc.wall(X1, Z0, X1 + t, Z1)
    # interior walls: x = xa (thick 0.12) with a 0.9 m door; z = za (0.1) with doors 0.8 / 1.0
    xa, ta = 5.0 + j(), 0.12
    door_a = (2.0 + j(), 0.9)
    sc.wall(xa, Z0, xa + ta, door_a[0])
    sc.wall(xa, door_a[0] + door_a[1], xa + ta, 4.5)
    za, tz = 4.5 + j(), 0.1
    d1, d2 = (2.3 + j(), 0.8), (8.0 + j(), 1.0)
    sc.wall(X0, za, d1[0], za + tz)
    sc.wall(d1[0] + d1[1], za, d2[0], za + tz)
    sc.wall(d2[0] + d2[1], za, X1, za + tz)
    # the wall x = xa continues north of za as the wall of room C, door 0.95 m
    sc.wall(xa, za + tz, xa + ta, 5.8 + j())
    sc.wall(xa, 6.75 + j(), xa + ta, Z1)
    # closed store room in the south-east corner: 0.2 m walls, no door
    sx0, sz0 = 9.5 + j(), 5.6 + j()
    sc.wall(sx0, sz0, sx0 + 0.2, Z1)
    sc.wall(sx0 + 0.2, sz0, X1, sz0 + 0.2)
    # furniture: rotated boxes (tables are solid up to their top: the head room under a 0.75 m
    # table is less than the agent height, so its footprint is blocked either way)
    rooms = [(X0 + 0.4, Z0 + 0.4, xa - 0.4, za - 0.4), (xa + ta + 0.4, Z0 + 0.4, X1 - 0.4, za - 0.4),
             (X0 + 0.4, za + tz + 0.4, xa - 0.4, Z1 - 0.4), (xa + ta + 0.4, za + tz + 0.4, sx0 - 0.4, Z1 - 0.4),
             (sx0 + 0.6, sz0 + 0.6, X1 - 0.4, Z1 - 0.4)]
    for k, rect in enumerate(rooms):
        _furnish(sc, rng, rect, 1 if k == 4 else 3, 0.0, (1.8, 1.0), (0.45, 0.75, 0.9, 1.8), pad=0.01)
    return sc


def split_level(seed: int = 1) -> ExactScene:
    """A lower room (floor 0) and an upper room (floor 1.0 m, on a solid block) side by side,
    separated by a 0.15 m wall; a 1.0 m wide stair flight (6 steps of 1/6 m, 0.35 m runs) in a
    walled stairwell rises from the lower room to a 1.0 m door in that wall. Furniture in both."""
    rng = np.random.default_rng(seed)
    j = lambda: float(rng.uniform(0.003, 0.047))  # noqa: E731
    X0, Z0, X1, Z1 = j(), j(), 10.0 + j(), 6.0 + j()
    sc = ExactScene("split_level", (X0, Z0, X1, Z1))
    t = 0.15
    xs = 6.0 + j()  # the separating wall x in [xs, xs + t]
    up = 1.0
    sc.solid(_rect(X0 - 0.5, Z0 - 0.5, xs + 0.01, Z1 + 0.5), -0.1, 0.0, obstacle=False)
    sc.solid(_rect(xs + t - 0.01, Z0 - 0.5, X1 + 0.5, Z1 + 0.5), -0.1, up, obstacle=False)
    sc.wall(X0 - t, Z0 - t, X1 + t, Z0, y1=up + 2.6)
    sc.wall(X0 - t, Z1, X1 + t, Z1 + t, y1=up + 2.6)
    sc.wall(X0 - t, Z0, X0, Z1, y1=up + 2.6)
    sc.wall(X1, Z0, X1 + t, Z1, y1=up + 2.6)
    zd0, zd1 = 2.5 + j(), 0.0
    zd1 = zd0 + 1.0
    sc.wall(xs, Z0, xs + t, zd0, y1=up + 2.6)
    sc.wall(xs, zd1, xs + t, Z1, y1=up + 2.6)
    sc.solid(_rect(xs - 0.01, zd0 - 0.01, xs + t + 0.01, zd1 + 0.01), 0.0, up, obstacle=False)  # sill
    sc.solid(_rect(xs, zd0, xs + t, zd1), up + 2.2, up + 2.6, obstacle=False)  # lintel
    # stairwell: 6 steps rising towards +x, ending at the door sill
    nsteps, run = 6, 0.35
    x_start = xs - nsteps * run
    for i in range(nsteps):
        x0 = x_start + i * run
        sc.solid(_rect(x0, zd0 - 0.01, xs + 0.01, zd1 + 0.01), 0.0, (i + 1) * up / nsteps,
                 obstacle=False)
    sc.wall(x_start, zd0 - 0.12, xs, zd0, y1=up + 2.6)
    sc.wall(x_start, zd1, xs, zd1 + 0.12, y1=up + 2.6)
    sc.levels += [(_rect(X0, Z0, xs, Z1), 0.0), (_rect(xs + t, Z0, X1, Z1), up)]
    for rect, y0 in (((X0 + 0.4, Z0 + 0.4, x_start - 0.6, Z1 - 0.4), 0.0),
                     ((xs + t + 0.4, Z0 + 0.4, X1 - 0.4, Z1 - 0.4), up)):
        _furnish(sc, rng, rect, 3, y0, (1.5, 0.9), (0.45, 0.75, 1.8), pad=0.0)
    return sc


SCENES = {"apartment": apartment, "split_level": split_level}


def measure(scene: ExactScene, nav, radius: float, n_starts: int = 12, per_start: int = 20,
            seed: int = 0, geo: ExactGeodesic | None = None) -> dict:
    """Area and geodesic errors of ``nav`` against the exact eroded free space of ``scene``.

    Pairs: ``n_starts`` navigable start points, each with ``per_start`` goals on the same floor
    level (stairs excluded: the exact paths are measured in x/z), both ends at least ``radius``
    + 1 cm from every obstacle and 1 m apart in exact distance. Returns the areas, their
    relative difference and the median / p95 / max relative geodesic error.
    """
    exact_area = scene.exact_area(radius)
    geo = geo or ExactGeodesic(scene, radius)
    rng = np.random.default_rng(seed)
    pts = nav.sample_navigable_point(20000, seed=seed)
    clear = scene.clearance(pts[:, 0], pts[:, 2]) >= radius + 0.01
    fy = scene.floor_height(pts[:, 0], pts[:, 2])
    on_floor = np.abs(pts[:, 1] - fy) < 0.02
    pts = pts[clear & on_floor]
    errs = []
    for a in pts[rng.choice(len(pts), n_starts, replace=False)]:
        same = pts[np.abs(pts[:, 1] - a[1]) < 0.02]
        cand = same[rng.choice(len(same), min(len(same), per_start * 4), replace=False)]
        exact = geo.distances(a[[0, 2]], cand[:, [0, 2]])
        ok = np.isfinite(exact) & (exact >= 1.0)
        cand, exact = cand[ok][:per_start], exact[ok][:per_start]
        if len(cand) == 0:
            continue
        got = np.atleast_1d(nav.geodesic_distance(a, cand))
        errs.append(np.abs(got - exact) / exact)
    e = np.concatenate(errs) if errs else np.zeros(0)
    return {"scene": scene.name, "navigable_area": nav.navigable_area, "exact_area": exact_area,
            "area_error": (nav.navigable_area - exact_area) / exact_area, "pairs": int(e.size),
            "geo_median": float(np.median(e)) if e.size else float("nan"),
            "geo_p95": float(np.percentile(e, 95)) if e.size else float("nan"),
            "geo_max": float(e.max()) if e.size else float("nan"),
            "unreached": int(np.count_nonzero(~np.isfinite(e)))}
