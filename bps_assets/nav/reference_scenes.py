"""Small in-memory scenes with known answers (habitat frame, Y up, outward-facing triangles),
shared by the navmesh tests and benchmarks/bench_navmesh.py: a house with doors and stairs,
rooms whose exact shortest paths are known (ExactRoom), a 600K-triangle scan-like house."""
from __future__ import annotations

import numpy as np

from bps_assets.nav.exact_scenes import subdivide


class Geometry:
    def __init__(self):
        self.v: list[np.ndarray] = []
        self.t: list[np.ndarray] = []
        self.n = 0

    def add(self, verts, tris):
        verts = np.asarray(verts, np.float64)
        self.v.append(verts)
        self.t.append(np.asarray(tris, np.int64) + self.n)
        self.n += len(verts)
        return self

    def quad_y(self, x0, z0, x1, z1, y, up=True, div=1):
        """Horizontal rectangle at height y, split into div x div cells of 2 triangles."""
        xs = np.linspace(x0, x1, div + 1)
        zs = np.linspace(z0, z1, div + 1)
        X, Z = np.meshgrid(xs, zs, indexing="ij")
        verts = np.stack([X.ravel(), np.full(X.size, y), Z.ravel()], 1)
        i = np.arange(div)[:, None] * (div + 1) + np.arange(div)[None, :]
        a, b, c, d = i, i + (div + 1), i + (div + 1) + 1, i + 1  # (x0,z0),(x1,z0),(x1,z1),(x0,z1)
        # counter-clockwise seen from +y: a, d, c and a, c, b give normal +y
        t1 = np.stack([a, d, c], -1).reshape(-1, 3)
        t2 = np.stack([a, c, b], -1).reshape(-1, 3)
        tris = np.concatenate([t1, t2])
        if not up:
            tris = tris[:, ::-1]
        return self.add(verts, tris)

    def box(self, x0, y0, z0, x1, y1, z1):
        """Closed box with outward normals."""
        v = np.array([[x0, y0, z0], [x1, y0, z0], [x1, y0, z1], [x0, y0, z1],
                      [x0, y1, z0], [x1, y1, z0], [x1, y1, z1], [x0, y1, z1]], float)
        f = [[4, 7, 6], [4, 6, 5],      # top (+y)
             [0, 1, 2], [0, 2, 3],      # bottom (-y)
             [0, 4, 5], [0, 5, 1],      # -z
             [3, 2, 6], [3, 6, 7],      # +z
             [0, 3, 7], [0, 7, 4],      # -x
             [1, 5, 6], [1, 6, 2]]      # +x
        return self.add(v, f)

    def wall_sheet(self, x0, z0, x1, z1, y0, y1):
        """A zero-thickness vertical wall (as in scans)."""
        v = [[x0, y0, z0], [x1, y0, z1], [x1, y1, z1], [x0, y1, z0]]
        return self.add(v, [[0, 1, 2], [0, 2, 3]])

    def arrays(self):
        return np.concatenate(self.v), np.concatenate(self.t)


def house(door: bool = True, stairs: bool = True) -> Geometry:
    """Ground floor 10 x 6 m: room A (x 0..5) and room B (x 5..10) joined by a 0.9 m door;
    a closed room C (x 0..3, z 6..9); in A a table (top 0.75 m, 2 x 1.2 m), a low step
    (0.15 m); in B a shelf at 1.8 m; stairs in B up to a mezzanine at 2.0 m over x 7..10, z 3..6
    (ceiling at 5 m)."""
    g = Geometry()
    H = 3.0
    g.quad_y(0, 0, 10, 6, 0.0, div=10)
    # outer walls (thin boxes 0.1 m)
    g.box(-0.1, 0, -0.1, 10.1, H + 2, 0)
    g.box(-0.1, 0, 6, 10.1, H + 2, 6.1)
    g.box(-0.1, 0, -0.1, 0, H + 2, 6.1)
    g.box(10, 0, -0.1, 10.1, H + 2, 6.1)
    # wall between A and B at x = 5 with a door at z in [2.5, 3.4]
    g.box(4.95, 0, 0, 5.05, H, 2.5)
    g.box(4.95, 0, 3.4, 5.05, H, 6)
    g.box(4.95, 2.2 if door else 0.0, 2.5, 5.05, H, 3.4)  # lintel (or a closed door)
    # table in A: top 0.7..0.75, legs
    g.box(1.0, 0.70, 1.0, 3.0, 0.75, 2.2)
    for x, z in ((1.0, 1.0), (2.9, 1.0), (1.0, 2.1), (2.9, 2.1)):
        g.box(x, 0, z, x + 0.1, 0.7, z + 0.1)
    # low step in A
    g.box(3.0, 0, 4.0, 4.2, 0.15, 5.2)
    # shelf in B above agent height
    g.box(5.5, 1.8, 0.5, 6.5, 1.85, 1.5)
    # mezzanine in B: slab 1.9..2.0 over x 7..10, z 3..6
    g.box(7.0, 1.9, 3.0, 10.0, 2.0, 6.0)
    # stairs along +x in z 3.0..4.2, 11 steps of 0.18 m rise, 0.12 m run, up to the mezzanine
    nsteps, run = 11, 0.12
    for i in range(nsteps if stairs else 0):
        x0 = 7.0 - (nsteps - i) * run
        g.box(x0, 0, 3.0, x0 + run, (i + 1) * 2.0 / nsteps, 4.2)
    if not stairs:  # a solid block where the stairs were (same footprint, flat 2 m top)
        g.box(7.0 - nsteps * run, 0, 3.0, 7.0, 1.0, 4.2)
    # closed room C
    g.quad_y(0, 6.1, 3, 9, 0.0, div=4)
    g.box(-0.1, 0, 9, 3.1, H, 9.1)
    g.box(3, 0, 6.1, 3.1, H, 9.1)
    g.box(-0.1, 0, 6.1, 0, H, 9.1)
    return g


# ------------------------------------------------------------------------- exact free space
def _rot_rect(cx, cz, w, d, ang):
    c, s = np.cos(ang), np.sin(ang)
    pts = np.array([[-w, -d], [w, -d], [w, d], [-w, d]]) / 2
    return pts @ np.array([[c, s], [-s, c]]) + [cx, cz]  # counter-clockwise


def _sat_overlap(poly, a, b, eps):
    """Does segment ab overlap the interior of convex polygon ``poly`` (shrunk by eps)?"""
    axes = []
    for i in range(len(poly)):
        e = poly[(i + 1) % len(poly)] - poly[i]
        axes.append(np.array([-e[1], e[0]]))
    seg = b - a
    if np.hypot(*seg) > 0:
        axes.append(np.array([-seg[1], seg[0]]))
    for ax in axes:
        ax = ax / np.hypot(*ax)
        pp = poly @ ax
        sp = np.array([a @ ax, b @ ax])
        if sp.max() <= pp.min() + eps or sp.min() >= pp.max() - eps:
            return False
    return True


def _poly_inside(poly, x, z):
    """Points (x, z) strictly inside a counter-clockwise convex polygon."""
    ok = np.ones(np.shape(x), bool)
    for i in range(len(poly)):
        p, q = poly[i], poly[(i + 1) % len(poly)]
        cross = (q[0] - p[0]) * (z - p[1]) - (q[1] - p[1]) * (x - p[0])
        ok &= cross > 0
    return ok


class ExactRoom:
    """A room [0, W] x [0, D] (habitat x/z) with convex obstacles; free space known exactly."""

    def __init__(self, W=8.0, D=6.0, n_obstacles=7, seed=0):
        rng = np.random.default_rng(seed)
        self.W, self.D = W, D
        self.obstacles: list[np.ndarray] = []
        tries = 0
        while len(self.obstacles) < n_obstacles and tries < 500:
            tries += 1
            w, d = rng.uniform(0.3, 1.8), rng.uniform(0.2, 1.0)
            poly = _rot_rect(rng.uniform(0.8, W - 0.8), rng.uniform(0.8, D - 0.8), w, d, rng.uniform(0, np.pi))
            if poly.min() < 0.4 or poly[:, 0].max() > W - 0.4 or poly[:, 1].max() > D - 0.4:
                continue
            grown = poly + 0.35 * (poly - poly.mean(0)) / np.linalg.norm(poly - poly.mean(0), axis=1)[:, None]
            if any(_sat_overlap(o, grown[i], grown[(i + 1) % 4], 0) for o in self.obstacles for i in range(4)) or \
                    any(_poly_inside(grown, o[:, 0], o[:, 1]).any() or _poly_inside(o, grown[:, 0], grown[:, 1]).any()
                        for o in self.obstacles):
                continue
            self.obstacles.append(poly)
        self._graph()

    def free(self, x, z):
        ok = (x > 0) & (x < self.W) & (z > 0) & (z < self.D)
        for o in self.obstacles:
            ok &= ~_poly_inside(o, x, z)
        return ok

    def visible(self, a, b):
        return not any(_sat_overlap(o, a, b, 1e-9) for o in self.obstacles)

    def _graph(self):
        from scipy.sparse.csgraph import shortest_path

        self.nodes = np.concatenate(self.obstacles) if self.obstacles else np.zeros((0, 2))
        n = len(self.nodes)
        w = np.full((n, n), np.inf)
        for i in range(n):
            for j in range(i + 1, n):
                if self.visible(self.nodes[i], self.nodes[j]):
                    w[i, j] = w[j, i] = np.hypot(*(self.nodes[i] - self.nodes[j]))
        w[~np.isfinite(w)] = 0
        self.node_dist = shortest_path(w, directed=False) if n else w

    def distance(self, a, b):
        """Exact shortest path between 2D points a and b (visibility graph)."""
        if self.visible(a, b):
            return float(np.hypot(*(a - b)))
        va = np.array([np.hypot(*(a - p)) if self.visible(a, p) else np.inf for p in self.nodes])
        vb = np.array([np.hypot(*(b - p)) if self.visible(b, p) else np.inf for p in self.nodes])
        return float((va[:, None] + self.node_dist + vb[None, :]).min())

    def navmesh(self, settings=None):
        """NavMesh whose cells are the grid cells with centres in the free space (y = 0)."""
        from bps_assets.nav import DEFAULT_SETTINGS, NavMesh
        from bps_assets.nav.grid import connect_by_height

        s = settings or DEFAULT_SETTINGS
        cs = s.cell_size
        Wc, Dc = int(round(self.W / cs)), int(round(self.D / cs))
        r, c = np.mgrid[0:Dc, 0:Wc]
        x, z = (c + 0.5) * cs, (r + 0.5) * cs
        ok = self.free(x, z)
        r, c = r[ok], c[ok]
        y = np.zeros(r.size)
        nbr = connect_by_height(r, c, y, Dc, Wc, s.max_climb)
        return NavMesh.from_spans(r, c, y, nbr, (0.0, 0.0), (Dc, Wc), s, method="grid")


def geodesic_errors(room: ExactRoom, nav, n_pairs=200, seed=1, radius=None, min_dist=1.0, corners=True):
    """Relative errors of nav.geodesic_distance against the exact distances on random pairs."""
    from bps_assets.nav.geodesic import DEFAULT_RADIUS

    rng = np.random.default_rng(seed)
    pts = nav.sample_navigable_point(n_pairs * 6, rng=rng)
    pts = pts[room.free(pts[:, 0], pts[:, 2])]
    a, b = pts[: len(pts) // 2], pts[len(pts) // 2: 2 * (len(pts) // 2)]
    exact = np.array([room.distance(p[[0, 2]], q[[0, 2]]) for p, q in zip(a, b)])
    keep = np.nonzero(exact >= min_dist)[0][:n_pairs]
    a, b, exact = a[keep], b[keep], exact[keep]
    from bps_assets.nav.queries import geodesic_distance

    got = np.array([geodesic_distance(nav, a[i], b[i], radius or DEFAULT_RADIUS, corners) for i in range(len(a))])
    return np.abs(got - exact) / exact, exact


def scan_like_house(triangles=600_000, seed=0):
    """The house scaled 1.5x in x/z (~150 m^2 of floor), tessellated to ``triangles`` small
    triangles (largest first) with 2 mm vertex noise: a stand-in for a Gibson scan."""
    v, t = house().arrays()
    v = v * [1.5, 1.0, 1.5]
    while len(t) < triangles / 4:
        v, t = subdivide(v, t)
    area = np.linalg.norm(np.cross(v[t[:, 1]] - v[t[:, 0]], v[t[:, 2]] - v[t[:, 0]]), axis=1)
    sel = np.argsort(-area)[: max(0, (triangles - len(t)) // 3)]
    rest = np.setdiff1d(np.arange(len(t)), sel)
    v, t2 = subdivide(v, t[sel])
    t = np.concatenate([t[rest], t2])
    v = v + np.random.default_rng(seed).normal(0, 0.002, v.shape)
    return v, t
