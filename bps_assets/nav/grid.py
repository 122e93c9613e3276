"""NavMesh: the runtime representation, a multi-layer 2.5D grid (spec: docs/NAVMESH.md).

The dense arrays (``height``, ``neighbors``, ``island``) are what is stored and what the runtime
reads; everything else (flat span ids, span centres, neighbour span ids, the geodesic graph,
the KD-tree used for snapping) is derived from them on first use and cached.

Spans are numbered in C order of the dense ``[L, D, W]`` arrays (``span_index``), so span ids
are reproducible from the file alone.
"""
from __future__ import annotations

import math
import os
import threading
import time

import numpy as np

from ..container import Container, SectionSpec, write_container
from ..errors import CorruptFileError, FormatVersionError, NavError, is_int, is_real
from . import budget, queries
from .raster import rasterize_centres
from .settings import DEFAULT_SETTINGS, NavSettings
from .validate import check_navmesh_header, check_navmesh_heights

FORMAT = "bps-navmesh"
VERSION = 1
KIND = "NAVM"
# direction k -> (dc, dr): +x, +z, -x, -z
DIRS = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], dtype=np.int64)
OPPOSITE = np.array([2, 3, 0, 1])
MAX_LAYERS = 127  # neighbours are stored as int8 layer indices
# Caps on the grid a set of coordinates may ask for, checked before anything is allocated
# (a grid costs ~20 bytes a cell per layer while built). Absolute: MAX_GRID_CELLS. Relative to
# what the input describes: at most GRID_SPARSITY times the cells its triangles cover in x/z
# (a scan's floors, ceilings and furniture tops; a navmesh's polygons), never below
# MIN_GRID_CAP. One stray vertex far away is then a typed error, not gigabytes.
MAX_GRID_CELLS = 64_000_000
MIN_GRID_CAP = 4_000_000
GRID_SPARSITY = 16


def xz_area(v: np.ndarray, t: np.ndarray) -> float:
    """Area of triangles ``t`` projected on the x/z plane (m^2)."""
    if t.size == 0:
        return 0.0
    a, b, c = v[t[:, 0]], v[t[:, 1]], v[t[:, 2]]
    return float(0.5 * np.abs((b[:, 0] - a[:, 0]) * (c[:, 2] - a[:, 2])
                              - (c[:, 0] - a[:, 0]) * (b[:, 2] - a[:, 2])).sum())


def grid_frame(lo, hi, cs: float, source: str | None, what: str, covered_area: float | None = None):
    """(origin (ox, oz), D, W) of a grid covering x/z ``lo..hi`` with a one-cell margin.

    ``NavError`` naming ``what`` (the field the bounds come from) when the bounds are not
    finite or the grid would exceed its cap (see ``MAX_GRID_CELLS``), before allocating.
    """
    lo = np.asarray(lo, np.float64)
    hi = np.asarray(hi, np.float64)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise NavError(source or None, f"{what}: non-finite coordinates")
    nx = (hi[0] - lo[0]) / cs + 4.0  # float: no int overflow whatever the coordinates
    nz = (hi[2] - lo[2]) / cs + 4.0
    cap = MAX_GRID_CELLS
    if covered_area is not None:
        cap = int(min(MAX_GRID_CELLS, max(MIN_GRID_CAP, GRID_SPARSITY * covered_area / cs ** 2)))
    if not nx * nz <= cap:
        raise NavError(source or None, (
            f"{what}: x [{lo[0]:.6g}, {hi[0]:.6g}] z [{lo[2]:.6g}, {hi[2]:.6g}] m would need a grid "
            f"of {nx:.3g} x {nz:.3g} cells of {cs:g} m, over the cap of {cap} cells"
            + ("" if covered_area is None else
               f" ({GRID_SPARSITY} x the {covered_area:.4g} m^2 its triangles cover)")
            + _cap_hint(lo, hi, cs, cap)))
    origin = (math.floor(lo[0] / cs) * cs - cs, math.floor(lo[2] / cs) * cs - cs)
    W = int(math.ceil((hi[0] - origin[0]) / cs)) + 2
    D = int(math.ceil((hi[2] - origin[1]) / cs)) + 2
    return origin, D, W


def _cap_hint(lo, hi, cs: float, cap: int) -> str:
    """What fixes a grid over its cap: under the absolute cap a coarser cell (the setting
    ``cell_size``, ``--cell-size``) fits a large scene; under the sparsity cap a coarser cell
    does not help (both scale alike), so a stray vertex is the likely cause."""
    if cap < MAX_GRID_CELLS:
        return ": a vertex far from the rest?"
    fit = cs
    while ((hi[0] - lo[0]) / fit + 4.0) * ((hi[2] - lo[2]) / fit + 4.0) > cap:
        fit *= 1.1
    fit = float(f"{fit * 1.05:.2g}")
    return (f": a large scene needs a coarser grid: cell size {fit:g} m fits it (setting cell_size, "
            f"--cell-size {fit:g}); or a vertex far from the rest?")


class NavMesh:
    """Multi-layer grid of walkable spans. Build with ``build_navmesh``, ``from_spans`` or
    ``from_walkable_triangles``; read with ``load_navmesh``. The query methods below delegate
    to the vectorized functions of queries.py.
    """

    def __init__(self, height: np.ndarray, neighbors: np.ndarray, origin, settings: NavSettings = DEFAULT_SETTINGS,
                 island: np.ndarray | None = None, island_area: np.ndarray | None = None,
                 island_radius: np.ndarray | None = None, method: str = "", source: str = "",
                 build_seconds: float = 0.0):
        self.height = np.ascontiguousarray(height, dtype=np.float32)
        self.neighbors = np.ascontiguousarray(neighbors, dtype=np.int8)
        if self.height.ndim != 3 or self.neighbors.shape != self.height.shape + (4,):
            raise NavError(None, f"height {self.height.shape} / neighbors {self.neighbors.shape} shapes disagree")
        self.origin = np.asarray(origin, dtype=np.float64).reshape(2)
        self.settings = settings
        self.cell_size = float(settings.cell_size)
        self.method, self.source, self.build_seconds = method, source, float(build_seconds)
        # what an imported file said about itself (``nav info``); not stored in NAVM files
        self.source_info: dict = {}
        # the file it was made from (``container.source_record``: resolved path, sha256), stored as
        # ``source_file`` so ``navmesh --overwrite`` tells another folder's same-named scan apart; None: unknown
        self.source_file: dict | None = None
        # per island, the share of its points with scene geometry above (nav.indoor); None: unknown
        self.island_indoor: np.ndarray | None = None
        self._lock = threading.Lock()
        self._cache: dict = {}
        self._derive_spans()
        if island is None or island_area is None:
            self._label_islands()
        else:
            self.island = np.ascontiguousarray(island, dtype=np.int32)
            self.island_area = np.ascontiguousarray(island_area, dtype=np.float32)
            self.span_island = self.island[self.span_lrc[:, 0], self.span_lrc[:, 1], self.span_lrc[:, 2]]
        if island_radius is None:
            island_radius = self._island_radii()
        self.island_radius_m = np.ascontiguousarray(island_radius, dtype=np.float32)

    # ------------------------------------------------------------------ shape and derived arrays
    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, rows along z, columns along x) of the span grid."""
        return tuple(int(s) for s in self.height.shape)  # type: ignore[return-value]

    @property
    def num_spans(self) -> int:
        """Number of walkable spans (grid cells with a height)."""
        return int(self.span_lrc.shape[0])

    @property
    def num_islands(self) -> int:
        """Number of connected walkable islands."""
        return int(self.island_area.shape[0])

    @property
    def navigable_area(self) -> float:
        """Walkable area in m^2, summed over every island."""
        return float(self.island_area.astype(np.float64).sum())

    def _derive_spans(self):
        L, D, W = self.shape
        valid = ~np.isnan(self.height)
        l, r, c = np.nonzero(valid)
        S = l.size
        self.span_lrc = np.stack([l, r, c], 1).astype(np.int64)
        self.span_index = np.full((L, D, W), -1, dtype=np.int32)
        self.span_index[l, r, c] = np.arange(S, dtype=np.int32)
        cs = self.cell_size
        self.span_pos = np.stack([self.origin[0] + (c + 0.5) * cs, self.height[l, r, c],
                                  self.origin[1] + (r + 0.5) * cs], 1).astype(np.float64)
        # neighbour span ids, padded: row S is the "no span" sink (maps to itself)
        nb = np.full((S + 1, 4), S, dtype=np.int64)
        for k, (dc, dr) in enumerate(DIRS):
            m = self.neighbors[l, r, c, k].astype(np.int64)
            rr, cc = r + dr, c + dc
            ok = (m >= 0) & (rr >= 0) & (rr < D) & (cc >= 0) & (cc < W) & (m < L)
            tgt = np.full(S, -1, dtype=np.int64)
            tgt[ok] = self.span_index[m[ok], rr[ok], cc[ok]]
            nb[:S, k] = np.where(tgt >= 0, tgt, S)
        self.nbr = nb

    def _label_islands(self):
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        S = self.num_spans
        src = np.repeat(np.arange(S), 4)
        dst = self.nbr[:S].reshape(-1)
        ok = dst < S
        g = coo_matrix((np.ones(int(ok.sum()), np.int8), (src[ok], dst[ok])), shape=(S, S)).tocsr()
        n, lab = connected_components(g, directed=False) if S else (0, np.zeros(0, np.int64))
        counts = np.bincount(lab, minlength=n)
        order = np.argsort(-counts, kind="stable")  # largest island first
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n)
        self.span_island = rank[lab].astype(np.int32)
        self.island = np.full(self.shape, -1, dtype=np.int32)
        l, r, c = self.span_lrc.T
        self.island[l, r, c] = self.span_island
        self.island_area = (counts[order] * self.cell_size ** 2).astype(np.float32)

    def _island_radii(self) -> np.ndarray:
        n = self.num_islands
        if n == 0:
            return np.zeros(0, np.float32)
        cnt = np.bincount(self.span_island, minlength=n).astype(np.float64)
        cen = np.stack([np.bincount(self.span_island, self.span_pos[:, k], minlength=n) for k in range(3)], 1)
        cen /= np.maximum(cnt, 1)[:, None]
        d = np.linalg.norm(self.span_pos - cen[self.span_island], axis=1)
        rad = np.zeros(n)
        np.maximum.at(rad, self.span_island, d)
        return rad.astype(np.float32)

    def set_island_stats(self, area, radius) -> None:
        """Replace the islands' area and radius (e.g. habitat's own, from an imported Detour
        file) and renumber the islands in decreasing area again (stable)."""
        area = np.asarray(area, np.float64).reshape(-1)
        radius = np.asarray(radius, np.float64).reshape(-1)
        if area.shape != (self.num_islands,) or radius.shape != area.shape:
            raise NavError(None, f"island stats for {area.shape[0]} islands, navmesh has {self.num_islands}")
        order = np.argsort(-area.astype(np.float32), kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        self.span_island = rank[self.span_island].astype(np.int32) if len(order) else self.span_island
        self.island = np.full(self.shape, -1, dtype=np.int32)
        l, r, c = self.span_lrc.T
        self.island[l, r, c] = self.span_island
        self.island_area = area[order].astype(np.float32)
        self.island_radius_m = radius[order].astype(np.float32)
        if self.island_indoor is not None:
            self.island_indoor = self.island_indoor[order]

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_spans(cls, rows, cols, ys, nbr, origin, grid_shape, settings: NavSettings = DEFAULT_SETTINGS,
                   min_island_cells: int = 0, **meta) -> "NavMesh":
        """Build from a span list: ``rows, cols, ys`` [S] and ``nbr`` [S, 4] (neighbour span id
        per direction, -1 none; must be symmetric). Islands with fewer than ``min_island_cells``
        spans are dropped; layers are assigned by height within each cell.
        """
        rows = np.asarray(rows, np.int64)
        cols = np.asarray(cols, np.int64)
        ys = np.asarray(ys, np.float64)
        nbr = np.asarray(nbr, np.int64).reshape(-1, 4)
        S = rows.size
        D, W = (int(v) for v in grid_shape)
        keep = np.ones(S, bool)
        if min_island_cells > 0 and S:
            from scipy.sparse import coo_matrix
            from scipy.sparse.csgraph import connected_components

            src = np.repeat(np.arange(S), 4)
            dst = nbr.reshape(-1)
            ok = dst >= 0
            g = coo_matrix((np.ones(int(ok.sum()), np.int8), (src[ok], dst[ok])), shape=(S, S))
            _, lab = connected_components(g.tocsr(), directed=False)
            keep = np.bincount(lab)[lab] >= min_island_cells
        # renumber kept spans sorted by (row, col, y)
        idx = np.nonzero(keep)[0]
        order = idx[np.lexsort((ys[idx], cols[idx], rows[idx]))]
        new_id = np.full(S + 1, -1, np.int64)
        new_id[order] = np.arange(order.size)
        r, c, y = rows[order], cols[order], ys[order]
        cell = r * W + c
        first = np.r_[True, cell[1:] != cell[:-1]] if cell.size else np.zeros(0, bool)
        start = np.maximum.accumulate(np.where(first, np.arange(cell.size), 0)) if cell.size else cell
        layer = np.arange(cell.size) - start
        L = int(layer.max()) + 1 if layer.size else 1
        if L > MAX_LAYERS:
            raise NavError(None, f"{L} walkable layers over one cell (at most {MAX_LAYERS} supported)")
        height = np.full((L, D, W), np.nan, np.float32)
        height[layer, r, c] = y
        nb_new = new_id[np.where(nbr[order] >= 0, nbr[order], S)]  # -1 where dropped / none
        neighbors = np.full((L, D, W, 4), -1, np.int8)
        for k in range(4):
            t = nb_new[:, k]
            ok = t >= 0
            neighbors[layer[ok], r[ok], c[ok], k] = layer[t[ok]]
        return cls(height, neighbors, origin, settings, **meta)

    @classmethod
    def from_walkable_triangles(cls, vertices, triangles, settings: NavSettings = DEFAULT_SETTINGS,
                                triangle_groups=None, source: str = "", method: str = "triangles") -> "NavMesh":
        """Rasterize a walkable surface (e.g. Detour polygons / detail triangles, habitat frame).

        A cell holds a span where its centre lies inside a triangle's x/z projection, at the
        triangle's height there. Spans of one cell closer than ``max_climb`` are merged.
        Neighbouring spans connect when their heights differ by at most ``max_climb`` and, if
        ``triangle_groups`` (an int per triangle, e.g. the Detour island) is given, their
        triangles are in the same group (keeps islands that touch along thin walls apart).
        No erosion and no small-island removal: the surface is taken as final.
        """
        t0 = time.perf_counter()
        v = np.asarray(vertices, np.float64).reshape(-1, 3)
        t = np.asarray(triangles, np.int64).reshape(-1, 3)
        if t.size and (t.min() < 0 or t.max() >= len(v)):
            raise NavError(None, "triangle index out of range")
        cs = settings.cell_size
        if t.size == 0:
            return cls(np.full((1, 1, 1), np.nan, np.float32), np.full((1, 1, 1, 4), -1, np.int8),
                       (0.0, 0.0), settings, method=method, source=source)
        used = v[np.unique(t)]
        area = xz_area(v, t)
        origin, D, W = grid_frame(used.min(0), used.max(0), cs, source, "walkable surface vertices",
                                  covered_area=area)
        budget.check_fits(source or None, "rasterizing this walkable surface", budget.import_bytes(area, cs),
                          area / cs ** 2, cs)
        r, c, y, tri = rasterize_centres(v, t, origin, cs, D, W)
        grp = None if triangle_groups is None else np.asarray(triangle_groups, np.int64)[tri]
        # merge spans of one cell (and group) closer than max_climb
        key = r * W + c
        order = np.lexsort((y, key)) if grp is None else np.lexsort((y, grp, key))
        r, c, y, key = r[order], c[order], y[order], key[order]
        if grp is not None:
            grp = grp[order]
        new = np.r_[True, (key[1:] != key[:-1]) | (np.diff(y) > settings.max_climb)
                    | (False if grp is None else grp[1:] != grp[:-1])]
        sid = np.cumsum(new) - 1
        S = int(sid[-1]) + 1
        cnt = np.bincount(sid, minlength=S)
        ys = np.bincount(sid, y, minlength=S) / cnt
        rs, cs_ = r[new], c[new]
        gs = None if grp is None else grp[new]
        nbr = connect_by_height(rs, cs_, ys, D, W, settings.max_climb, gs)
        return cls.from_spans(rs, cs_, ys, nbr, origin, (D, W), settings, method=method, source=source,
                              build_seconds=time.perf_counter() - t0)

    # ------------------------------------------------------------------ queries (queries.py)
    def locate(self, points, max_dy: float = 0.5) -> np.ndarray:
        """Span id [N] in each point's cell whose height is nearest the point's y, -1 when none
        lies within ``max_dy``."""
        return queries.locate(self, points, max_dy)

    def is_navigable(self, points, max_y_delta: float = 0.5):
        """habitat's is_navigable: x/z on the navmesh, surface within ``max_y_delta`` in y."""
        return queries.is_navigable(self, points, max_y_delta)

    def snap_point(self, points):
        """Nearest navigable point (habitat's snap_point); NaN rows when nothing is in reach."""
        return queries.snap_point(self, points)

    def island_of(self, points):
        """Island id of each point (after snapping), -1 when it cannot be snapped."""
        return queries.island_of(self, points)

    def island_radius(self, points):
        """habitat's island_radius of the island holding each point (0 when not snappable)."""
        return queries.island_radius(self, points)

    def distance_field(self, goal, limit: float = np.inf, radius: int = queries.DEFAULT_RADIUS):
        """Geodesic distance f4 [L, D, W] from every span centre to ``goal`` (inf: unreachable)."""
        return queries.distance_field(self, goal, limit, radius)

    def distance_field_to_any(self, goals, limit: float = np.inf, radius: int = queries.DEFAULT_RADIUS):
        """Geodesic distance f4 [L, D, W] from every span centre to the nearest of ``goals``."""
        return queries.distance_field_to_any(self, goals, limit, radius)

    def distance_at(self, field: np.ndarray, points, radius: int = queries.DEFAULT_RADIUS, goals=None,
                    gate: float = queries.NEAR_EXACT):
        """Read a ``distance_field`` at points (sub-cell accurate, exact near the goals a point
        sees where the read is below ``gate`` m), inf when unreachable. The goals are the
        ``DistanceField``'s (lost by ``np.asarray``, a slice or a stack) or ``goals``."""
        return queries.distance_at(self, field, points, radius, goals, gate)

    def geodesic_distance(self, a, b, radius: int = queries.DEFAULT_RADIUS):
        """Geodesic distance between rows of ``a`` and ``b`` (or one point against many)."""
        return queries.geodesic_distance(self, a, b, radius)

    def sample_navigable_point(self, n: int = 1, seed: int | None = None, island: int | None = None,
                               rng: np.random.Generator | None = None) -> np.ndarray:
        """``n`` points uniform over the navigable area (optionally of one island)."""
        return queries.sample_navigable_point(self, n, seed, island, rng)

    def try_step(self, start, end, sliding: bool = True):
        """habitat's try_step (sliding along walls) / try_step_no_sliding."""
        return queries.try_step(self, start, end, sliding)

    # ------------------------------------------------------------------ cells
    def cell_of(self, points) -> tuple[np.ndarray, np.ndarray]:
        """(row, col) int64 arrays of the cells holding ``points`` [N, 3] (may be out of grid)."""
        p = np.asarray(points, np.float64).reshape(-1, 3)
        with np.errstate(over="ignore", invalid="ignore"):   # huge finite coordinates are out of grid, no warning
            f = np.floor((p[:, [0, 2]] - np.asarray(self.origin, np.float64)[:2]) / self.cell_size)
        # clipped before the cast (a float beyond int64 casts to an undefined value): every cell
        # inside the grid is kept exactly, every other stays outside it; NaN is outside too
        f = np.clip(np.nan_to_num(f, nan=-1.0), -1, 2**31).astype(np.int64)
        return f[:, 1], f[:, 0]

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) corners in metres, Habitat frame, of the walkable surface: span positions
        widened by half a cell in x and z (zeros when there are no spans)."""
        if self.num_spans == 0:
            return np.zeros(3), np.zeros(3)
        h = self.cell_size / 2
        lo = self.span_pos.min(0) - [h, 0, h]
        hi = self.span_pos.max(0) + [h, 0, h]
        return lo, hi

    # ------------------------------------------------------------------ file I/O
    def header(self) -> dict:
        """The JSON header written with the navmesh file: format, grid, settings, bounds, area,
        islands and where the navmesh came from."""
        lo, hi = self.bounds()
        return {
            "format": FORMAT, "version": VERSION, "frame": "habitat",
            "origin": [float(self.origin[0]), float(self.origin[1])],
            "cell_size": self.cell_size, "shape": list(self.shape),
            "settings": self.settings.to_dict(),
            "bounds": {"min": [float(x) for x in lo], "max": [float(x) for x in hi]},
            "navigable_area": self.navigable_area, "num_islands": self.num_islands,
            "method": self.method, "source": self.source,
        } | ({} if self.island_indoor is None else
             {"island_indoor": [round(float(x), 4) for x in self.island_indoor]}) | (
            {} if self.source_file is None else {"source_file": dict(self.source_file)})

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> int:
        """Write a ``NAVM`` file (atomic; refuses to replace ``path`` unless ``overwrite``)."""
        arrays = {"height": self.height, "neighbors": self.neighbors, "island": self.island,
                  "island_area": self.island_area, "island_radius": self.island_radius_m}
        specs = {"height": SectionSpec(filter="shuffle"), "island": SectionSpec(filter="shuffle")}
        return write_container(path, KIND, self.header(), arrays, specs, overwrite=overwrite)

    def info(self) -> dict:
        """Summary for ``nav info``: settings, bounds, area, islands with areas."""
        h = self.header()
        h["num_spans"] = self.num_spans
        h["build_seconds"] = round(self.build_seconds, 3)  # of this process, not of the file
        h["islands"] = [{"id": i, "area": round(float(a), 4), "radius": round(float(rad), 4)}
                        for i, (a, rad) in enumerate(zip(self.island_area, self.island_radius_m))]
        h.update(self.source_info)
        return h

    def __repr__(self):
        return (f"NavMesh(shape={self.shape}, spans={self.num_spans}, area={self.navigable_area:.2f} m^2, "
                f"islands={self.num_islands}, method={self.method!r})")


def connect_by_height(rows, cols, ys, D, W, max_climb, groups=None, ceil=None, agent_height=None) -> np.ndarray:
    """Neighbour span ids [S, 4] (-1 none) joining spans of side-neighbour cells whose heights
    differ by <= max_climb (the closest one when several qualify). With ``ceil`` (the height of
    the obstacle above each span), the head room shared by both spans must be >= agent_height.
    """
    rows, cols, ys = (np.asarray(a) for a in (rows, cols, ys))
    S = rows.size
    key = rows * W + cols
    order = np.lexsort((ys, key))
    skey = key[order]
    nbr = np.full((S, 4), -1, np.int64)
    if S == 0:
        return nbr
    # max spans per cell bounds the candidates to look at
    cnt = np.bincount(key, minlength=1)
    kmax = int(cnt.max())
    first = np.searchsorted(skey, np.arange(D * W + 1))  # start of each cell's run
    for k, (dc, dr) in enumerate(DIRS):
        rr, cc = rows + dr, cols + dc
        inb = (rr >= 0) & (rr < D) & (cc >= 0) & (cc < W)
        nk = np.where(inb, rr * W + cc, 0)
        start = first[nk]
        n_in = np.where(inb, first[nk + 1] - start, 0)
        best = np.full(S, -1, np.int64)
        bestd = np.full(S, np.inf)
        for j in range(kmax):
            has = n_in > j
            cand = order[np.minimum(start + j, S - 1)]
            d = np.abs(ys[cand] - ys)
            ok = has & (d <= max_climb + 1e-6)
            if groups is not None:
                ok &= groups[cand] == groups
            if ceil is not None:
                room = np.minimum(ceil[cand], ceil) - np.maximum(ys[cand], ys)
                ok &= room >= agent_height - 1e-6
            better = ok & (d < bestd)
            best[better] = cand[better]
            bestd[better] = d[better]
        nbr[:, k] = best
    # keep only mutual links so the graph is symmetric
    S_idx = np.arange(S)
    for k in range(4):
        t = nbr[:, k]
        ok = t >= 0
        back = np.full(S, -1, np.int64)
        back[ok] = nbr[t[ok], OPPOSITE[k]]
        nbr[ok & (back != S_idx), k] = -1
    return nbr


def load_navmesh(path: str | os.PathLike) -> NavMesh:
    """Read and check a ``NAVM`` file (docs/NAVMESH.md §3); CorruptFileError on any problem."""
    path = os.fspath(path)
    with Container(path, kind=KIND) as f:
        h = f.header
        if h.get("format") != FORMAT:
            raise CorruptFileError(path, f"header format is {h.get('format')!r}, expected {FORMAT!r}")
        if h.get("version") != VERSION:
            raise FormatVersionError(path, f"navmesh version {h.get('version')!r} is not supported "
                                           f"(this build reads {VERSION})")
        try:
            shape = tuple(int(v) for v in h["shape"])
            cs = float(h["cell_size"])
            origin = [float(v) for v in h["origin"]]
            raw_settings = dict(h.get("settings") or {})
            method, source = h.get("method", ""), h.get("source", "")
            if not isinstance(method, str) or not isinstance(source, str):
                raise ValueError("method / source are not strings")
            source_file = h.get("source_file")   # absent in files written before the key
            if source_file is not None and not (isinstance(source_file, dict) and all(
                    isinstance(source_file.get(k), str) and source_file[k] for k in ("path", "sha256"))):
                raise ValueError("source_file is not an object with path and sha256 strings")
            # older files stored the build's wall time here; checked and dropped
            secs = h.get("build_seconds", 0.0)
            if not is_real(secs) or not secs >= 0:
                raise ValueError(f"build_seconds {secs!r} is not a number >= 0")
            num_islands = h.get("num_islands")
            if not is_int(num_islands) or num_islands < 0:
                raise ValueError(f"num_islands {num_islands!r} is not an int >= 0")
            indoor = h.get("island_indoor")   # its length is checked against the islands below
            if indoor is not None and (not isinstance(indoor, list) or not all(
                    is_real(x) and 0 <= x <= 1 for x in indoor)):
                raise ValueError("island_indoor is not one number in [0, 1] per island")
        except Exception as e:  # noqa: BLE001 - any malformed header value is corruption
            raise CorruptFileError(path, f"bad navmesh header: {e}") from None
        if not all(math.isfinite(x) for x in origin + [cs]):
            raise CorruptFileError(path, "bad navmesh header: non-finite origin / cell_size")
        if len(shape) == 3 and len(origin) == 2:
            check_navmesh_header(path, origin, cs, shape)
        if len(shape) == 3 and (shape[0] > MAX_LAYERS or shape[1] * shape[2] > MAX_GRID_CELLS):
            raise CorruptFileError(path, f"bad navmesh header: shape {list(shape)} over the caps "
                                         f"({MAX_LAYERS} layers, {MAX_GRID_CELLS} cells)")
        try:   # after the range checks: they name what is wrong with the grid itself
            settings = NavSettings.from_dict(raw_settings)
        except Exception as e:  # noqa: BLE001 - a malformed settings value is corruption
            raise CorruptFileError(path, f"bad navmesh header: {e}") from None
        if len(shape) != 3 or min(shape) < 1 or not cs > 0 or len(origin) != 2 or \
                abs(settings.cell_size - cs) > 1e-9:
            raise CorruptFileError(path, "bad navmesh header: shape / cell_size / origin")
        cells = shape[0] * shape[1] * shape[2]  # islands <= spans <= cells (docs/FORMAT.md 4)
        # the dense grid alone, before any section is read (its spans are counted below)
        budget.check_fits(path, f"loading this {shape[0]}-layer navmesh", budget.load_bytes(shape, 0), cells, cs,
                          "rebuilding it with a coarser --cell-size", cap=budget.MAX_DENSE_CELLS)
        f.check_bounds({"island_area": 4 * cells, "island_radius": 4 * cells})
        arrays = {}
        want = {"height": ("f4", shape), "neighbors": ("i1", shape + (4,)), "island": ("i4", shape),
                "island_area": ("f4", None), "island_radius": ("f4", None)}
        for name, (dt, shp) in want.items():
            if name not in f:
                raise CorruptFileError(path, "missing section", section=name)
            s = f.sections[name]
            if s.dtype != np.dtype(dt) or (shp is not None and s.shape != shp) or (shp is None and len(s.shape) != 1):
                raise CorruptFileError(path, f"dtype/shape {s.dtype}{list(s.shape)} do not match the header",
                                       section=name)
            arrays[name] = f.read(name)
            if name == "height":  # the spans it holds decide what loading costs
                spans = int(np.count_nonzero(~np.isnan(arrays[name])))
                budget.check_fits(path, f"loading this navmesh of {spans} spans", budget.load_bytes(shape, spans),
                                  spans, cs, "rebuilding it with a coarser --cell-size")
    L = shape[0]
    I = arrays["island_area"].shape[0]
    if arrays["island_radius"].shape[0] != I:
        raise CorruptFileError(path, "length differs from island_area", section="island_radius")
    if num_islands != I:
        raise CorruptFileError(path, f"bad navmesh header: num_islands {num_islands} does not match the "
                                     f"{I} islands of section 'island_area'")
    nb, isl, hgt = arrays["neighbors"], arrays["island"], arrays["height"]
    if nb.size and (nb.min() < -1 or nb.max() >= L):
        raise CorruptFileError(path, "layer index out of range", section="neighbors")
    if isl.size and (isl.min() < -1 or isl.max() >= I):
        raise CorruptFileError(path, "island id out of range", section="island")
    if np.any(np.isnan(hgt) != (isl < 0)):
        raise CorruptFileError(path, "spans and island labels disagree", section="island")
    check_navmesh_heights(path, hgt)
    nav = NavMesh(hgt, nb, origin, settings, island=isl, island_area=arrays["island_area"],
                  island_radius=arrays["island_radius"], method=method, source=source)
    if indoor is not None:
        if len(indoor) != I:
            raise CorruptFileError(path, f"bad navmesh header: island_indoor has {len(indoor)} values for {I} islands")
        nav.island_indoor = np.asarray(indoor, np.float32)
    nav.source_file = source_file
    return nav


def is_navmesh_file(path: str | os.PathLike) -> bool:
    """True when ``path`` starts like a bps navmesh container (False for anything unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return head[:8] == b"\x89BPS\r\n\x1a\n" and head[12:16] == KIND.encode()
