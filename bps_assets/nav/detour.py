"""Read Detour ``MSET`` navmesh sets (habitat ``.navmesh``), spec: docs/DETOUR.md.

``read_detour_navmesh(path) -> DetourNavMesh`` parses every tile into numpy arrays (vertices,
polygons with neighbours / flags / area / type, links, detail meshes, BV tree, off-mesh
connections) without needing Detour itself; ``DetourNavMesh.triangles()`` gives the walkable
surface as one triangle soup in the file's frame (habitat files are already Y-up, habitat
frame); ``import_detour(path, settings)`` turns that surface into the runtime ``NavMesh``.

Every count and size read from the file is checked against the bytes that are actually there
(and against caps) before anything is allocated; each failure is a ``CorruptFileError`` that
names the file and the tile / field. Variants handled (layouts: docs/DETOUR.md): set versions
1 and 2 (habitat's NavMeshSettings block in each layout habitat-sim has written; an unknown
block is skipped with a ``NavFormatWarning``), 32- and 64-bit tile refs and 12- or 16-byte
``dtLink`` records, each told apart by which reading makes the file's blocks add up.
"""
from __future__ import annotations

import dataclasses
import os
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, CorruptFileError, FormatVersionError, InputError, UnsupportedFormatError
from ..readers.detect import TILE_CACHE_MESSAGE

# ------------------------------------------------------------------------------ constants
SET_MAGIC = 0x4D534554  # 'MSET' as a little-endian int32
SET_VERSIONS = (1, 2)
TILE_MAGIC = 0x444E4156  # 'DNAV'
TILE_VERSION = 7
_TILE_MAGIC_BYTES = struct.pack("<i", TILE_MAGIC)
TILECACHE_MAGIC_BYTES = b"TEST"  # DetourTileCache's 'TSET', little-endian
VERTS_PER_POLYGON = 6  # DT_VERTS_PER_POLYGON
EXT_LINK = 0x8000  # neighbour flag: the edge is a portal to another tile
NULL_LINK = 0xFFFFFFFF
POLYTYPE_GROUND = 0
POLYTYPE_OFFMESH_CONNECTION = 1
# habitat-sim's (and RecastDemo's) walkable flag; habitat's query filter includes only this.
POLYFLAGS_WALK = 0x01

# Caps on counts read from a file (checked before allocating). A Matterport house has a few
# thousand polygons in one tile; these leave ample room while refusing garbage.
MAX_TILES = 1 << 16
MAX_TILE_BYTES = 1 << 30
MAX_COUNT = 1 << 24
MAX_TILE_CELLS = 65535  # vertices and BV nodes are u16 cell coordinates from the tile's bmin

_SET_HEADER = struct.Struct("<iii3fffii")  # magic, version, numTiles, dtNavMeshParams
assert _SET_HEADER.size == 40
# habitat NavMeshSettings (set version 2 only): habitat-sim fwrite()s the C++ struct as it is.
# Its history (src/esp/nav/PathFinder.h): 13 floats then 3 bools from the commit that added
# version 2 (e7e8b1137, 2022-10-07), sizeof 56 with one padding byte whose value is whatever
# was in memory (ReplicaCAD v3 files carry e.g. 118 there); a 4th bool, includeStaticObjects,
# from 2b44336d6 (2023-05-17) on, same sizeof 56. Both are 56 bytes: the layout is told apart
# by the last byte (0/1: the 4-bool layout; anything else: the padding of the 3-bool one).
SETTINGS_FLOATS = (
    "cellSize", "cellHeight", "agentHeight", "agentRadius", "agentMaxClimb", "agentMaxSlope",
    "regionMinSize", "regionMergeSize", "edgeMaxLen", "edgeMaxError", "vertsPerPoly",
    "detailSampleDist", "detailSampleMaxError",
)
SETTINGS_BOOLS = ("filterLowHangingObstacles", "filterLedgeSpans", "filterWalkableLowHeightSpans",
                  "includeStaticObjects")
SETTINGS_FIELDS = SETTINGS_FLOATS + SETTINGS_BOOLS
_SETTINGS = struct.Struct("<13f4B")
assert _SETTINGS.size == 56
LAYOUT_3BOOL = "habitat-sim 2022-10: 13 f32, 3 bools, 1 pad byte"
LAYOUT_4BOOL = "habitat-sim 2023-05: 13 f32, 4 bools"
SETTINGS_LAYOUTS = {LAYOUT_3BOOL: (56, SETTINGS_FLOATS + SETTINGS_BOOLS[:3]),
                    LAYOUT_4BOOL: (56, SETTINGS_FIELDS)}
# An unknown settings block is skipped; the first tile record is looked for this far at most.
MAX_SETTINGS_BYTES = 4096


class NavFormatWarning(UserWarning):
    """A navmesh file was read, but part of it was not understood (and skipped)."""


_TILE_REC32 = struct.Struct("<Ii")
_TILE_REC64 = struct.Struct("<Qi4x")
# dtMeshHeader: 15 int32 then walkableHeight/Radius/Climb, bmin[3], bmax[3], bvQuantFactor.
_MESH_HEADER = struct.Struct("<iiiiiIiiiiiiiii3f3f3ff")
assert _MESH_HEADER.size == 100

POLY_DTYPE = np.dtype([("first_link", "<u4"), ("verts", "<u2", (6,)), ("neis", "<u2", (6,)),
                       ("flags", "<u2"), ("vert_count", "u1"), ("area_and_type", "u1")])
assert POLY_DTYPE.itemsize == 32
LINK32_DTYPE = np.dtype([("ref", "<u4"), ("next", "<u4"), ("edge", "u1"), ("side", "u1"),
                         ("bmin", "u1"), ("bmax", "u1")])
LINK64_DTYPE = np.dtype([("ref", "<u8"), ("next", "<u4"), ("edge", "u1"), ("side", "u1"),
                         ("bmin", "u1"), ("bmax", "u1")])
assert LINK32_DTYPE.itemsize == 12 and LINK64_DTYPE.itemsize == 16
# dtPolyDetail is 10 bytes of fields padded to 12 by the uint32 alignment.
DETAIL_DTYPE = np.dtype({"names": ["vert_base", "tri_base", "vert_count", "tri_count"],
                         "formats": ["<u4", "<u4", "u1", "u1"], "offsets": [0, 4, 8, 9],
                         "itemsize": 12})
BVNODE_DTYPE = np.dtype([("bmin", "<u2", (3,)), ("bmax", "<u2", (3,)), ("i", "<i4")])
assert BVNODE_DTYPE.itemsize == 16
OFFMESH_DTYPE = np.dtype([("pos", "<f4", (6,)), ("rad", "<f4"), ("poly", "<u2"),
                          ("flags", "u1"), ("side", "u1"), ("user_id", "<u4")])
assert OFFMESH_DTYPE.itemsize == 36


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _f32(v: float) -> float:
    """The shortest decimal that is the same float32 (0.05, not 0.05000000074505806)."""
    return float(f"{float(np.float32(v)):.7g}")


def _next_pow2(v: int) -> int:
    return 1 << (int(v) - 1).bit_length() if v > 1 else 1


def _ilog2(v: int) -> int:
    return int(v).bit_length() - 1


# ---------------------------------------------------------------------------------- model
@dataclass
class DetourTile:
    """One ``DNAV`` tile. Arrays are read-only views of copies owned by this object.

    Polygons (``P`` of them, ground polygons first, then off-mesh connections from
    ``offmesh_base``): ``poly_verts`` uint16 [P,6] indices into ``vertices`` (only the first
    ``poly_vert_count`` are meaningful); ``poly_neis`` uint16 [P,6] per edge: 0 = wall,
    ``k`` (< 0x8000) = internal neighbour polygon ``k-1``, ``0x8000 | side`` = portal to the
    neighbouring tile on that side (see ``EXT_LINK``); ``poly_flags`` uint16, ``poly_area``
    (0-63), ``poly_type`` (0 ground, 1 off-mesh connection).

    Detail mesh ``i`` belongs to polygon ``i`` (ground polygons only): ``detail_meshes``
    int64 [D,4] = (vert_base, tri_base, vert_count, tri_count); ``detail_tris`` uint8 [T,4]
    are 3 local indices (``< n`` refers to the polygon's own vertex ``poly_verts[p, idx]``,
    else ``detail_vertices[vert_base + idx - n]``) and an edge-flags byte.
    """

    index: int
    ref: int
    x: int
    y: int
    layer: int
    user_id: int
    walkable_height: float
    walkable_radius: float
    walkable_climb: float
    bmin: np.ndarray
    bmax: np.ndarray
    bv_quant_factor: float
    offmesh_base: int
    vertices: np.ndarray
    poly_first_link: np.ndarray
    poly_verts: np.ndarray
    poly_neis: np.ndarray
    poly_flags: np.ndarray
    poly_vert_count: np.ndarray
    poly_area: np.ndarray
    poly_type: np.ndarray
    links: np.ndarray
    detail_meshes: np.ndarray
    detail_vertices: np.ndarray
    detail_tris: np.ndarray
    bv_nodes: np.ndarray
    offmesh_connections: np.ndarray
    max_link_count: int

    @property
    def poly_count(self) -> int:
        return len(self.poly_verts)

    @property
    def ground_polys(self) -> np.ndarray:
        """Indices of ground polygons (not off-mesh connections)."""
        return np.flatnonzero(self.poly_type == POLYTYPE_GROUND)

    def polygon(self, p: int) -> np.ndarray:
        """Vertex positions [n,3] of polygon ``p``."""
        return self.vertices[self.poly_verts[p, : self.poly_vert_count[p]]]

    def internal_neighbours(self) -> np.ndarray:
        """[E,3] int64 rows (polygon, edge, neighbour polygon) for edges shared inside the tile."""
        n = self.poly_neis.astype(np.int64)
        valid = np.arange(VERTS_PER_POLYGON)[None, :] < self.poly_vert_count[:, None]
        internal = valid & (n != 0) & ((n & EXT_LINK) == 0)
        p, e = np.nonzero(internal)
        return np.stack([p, e, n[p, e] - 1], axis=1)

    def detail_triangles(self, polys: np.ndarray | None = None):
        """Detail triangles of ground polygons ``polys`` (default all).

        Returns ``(vertices [V,3] float32, triangles [T,3] int64, tri_poly [T] int64)`` where
        ``vertices`` is this tile's ``vertices`` followed by its ``detail_vertices``.
        """
        nd = len(self.detail_meshes)
        if polys is None:
            polys = np.arange(nd)
        polys = np.asarray(polys, dtype=np.int64)
        polys = polys[polys < nd]
        verts = np.concatenate([self.vertices, self.detail_vertices]).astype(np.float32)
        if len(polys) == 0 or len(self.detail_tris) == 0:
            return verts, np.zeros((0, 3), np.int64), np.zeros(0, np.int64)
        dm = self.detail_meshes[polys]
        counts = dm[:, 3]
        tri_poly = np.repeat(polys, counts)
        starts = np.repeat(dm[:, 1], counts)
        offs = np.arange(len(tri_poly)) - np.repeat(np.cumsum(counts) - counts, counts)
        local = self.detail_tris[starts + offs, :3].astype(np.int64)  # [T,3]
        nv = self.poly_vert_count[tri_poly].astype(np.int64)[:, None]
        own = local < nv
        poly_idx = np.take_along_axis(
            self.poly_verts[tri_poly].astype(np.int64), np.minimum(local, 5), axis=1)
        detail_idx = len(self.vertices) + np.repeat(dm[:, 0], counts)[:, None] + local - nv
        tris = np.where(own, poly_idx, detail_idx)
        return verts, tris, tri_poly

    def fan_triangles(self, polys: np.ndarray | None = None):
        """Polygons ``polys`` (default: ground ones) fan-triangulated (they are convex).

        Returns ``(vertices, triangles [T,3] int64, tri_poly [T])`` on ``self.vertices``.
        """
        if polys is None:
            polys = self.ground_polys
        polys = np.asarray(polys, dtype=np.int64)
        nv = self.poly_vert_count[polys].astype(np.int64)
        k = np.maximum(nv - 2, 0)
        tri_poly = np.repeat(polys, k)
        j = np.arange(len(tri_poly)) - np.repeat(np.cumsum(k) - k, k) + 1
        pv = self.poly_verts[tri_poly].astype(np.int64)
        tris = np.stack([pv[:, 0], pv[np.arange(len(pv)), j], pv[np.arange(len(pv)), j + 1]], 1) \
            if len(pv) else np.zeros((0, 3), np.int64)
        return self.vertices, tris, tri_poly


@dataclass
class DetourNavMesh:
    """A parsed ``MSET`` set: params, optional habitat settings, tiles."""

    path: str
    version: int
    origin: np.ndarray
    tile_width: float
    tile_height: float
    max_tiles: int
    max_polys: int
    settings: dict[str, Any] | None  # habitat NavMeshSettings (version 2), camelCase names
    tile_ref_bits: int  # 32 or 64 (the per-tile record in the set)
    link_ref_bits: int  # 32 or 64 (dtLink.ref, i.e. DT_POLYREF64 builds)
    settings_layout: str | None = None  # a SETTINGS_LAYOUTS name; None: no block / unknown
    settings_bytes: int = 0  # length of the settings block found before the first tile
    warnings: list[str] = field(default_factory=list)  # parts read but not understood
    tiles: list[DetourTile] = field(default_factory=list)
    cross_tile_links: int = 0  # set by polygon_islands()

    @property
    def poly_count(self) -> int:
        return sum(t.poly_count for t in self.tiles)

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Union of the tile header bounds (what habitat reports as the navmesh bounds)."""
        if not self.tiles:
            z = np.zeros(3, np.float32)
            return z, z
        return (np.min([t.bmin for t in self.tiles], axis=0),
                np.max([t.bmax for t in self.tiles], axis=0))

    def polygon_islands(self) -> list[np.ndarray]:
        """Connected components of the polygons, one int64 array [P] per tile.

        Polygons are joined through shared edges inside a tile and through the tile's saved
        ``links`` (Detour writes a tile's runtime links with it, which is how edges across tile
        borders are known); off-mesh connections are not followed. Ids are dense from 0.
        Sets ``cross_tile_links`` to the number of links found between tiles: 0 in a multi-tile
        set with portals means the file carries no runtime links (tiles were never linked).
        """
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        base = np.cumsum([0] + [t.poly_count for t in self.tiles])
        total = int(base[-1])
        rows, cols = [], []
        if self.link_ref_bits == 64:
            poly_bits, tile_bits = 20, 28
        else:
            poly_bits = _ilog2(_next_pow2(max(self.max_polys, 1)))
            tile_bits = _ilog2(_next_pow2(max(self.max_tiles, 1)))
        tile_of_index = {}
        for k, t in enumerate(self.tiles):
            tile_of_index[(t.ref >> poly_bits) & ((1 << tile_bits) - 1)] = k
        cross = 0
        for k, t in enumerate(self.tiles):
            nb = t.internal_neighbours()
            rows.append(base[k] + nb[:, 0])
            cols.append(base[k] + nb[:, 2])
            # links: walk each ground polygon's chain (firstLink -> next) over the saved links
            if len(t.links) == 0:
                continue
            owner = np.full(len(t.links), -1, np.int64)
            for p in t.ground_polys:
                li, steps = int(t.poly_first_link[p]), 0
                while li != NULL_LINK and 0 <= li < len(t.links) and steps < len(t.links):
                    owner[li] = p
                    li, steps = int(t.links["next"][li]), steps + 1
            ref = t.links["ref"].astype(np.uint64)
            ip = (ref & np.uint64((1 << poly_bits) - 1)).astype(np.int64)
            it = ((ref >> np.uint64(poly_bits)) & np.uint64((1 << tile_bits) - 1)).astype(np.int64)
            for li in np.flatnonzero(owner >= 0):
                kk = tile_of_index.get(int(it[li]))
                if kk is None or ref[li] == 0 or ip[li] >= self.tiles[kk].poly_count:
                    continue
                if self.tiles[kk].poly_type[ip[li]] != POLYTYPE_GROUND:
                    continue
                rows.append(np.array([base[k] + owner[li]]))
                cols.append(np.array([base[kk] + ip[li]]))
                cross += kk != k
        self.cross_tile_links = cross
        r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
        g = coo_matrix((np.ones(len(r)), (r, c)), shape=(total, total))
        _, lab = connected_components(g, directed=False)
        return [lab[base[k]:base[k + 1]].astype(np.int64) for k in range(len(self.tiles))]

    def triangles(self, include_flags: int = POLYFLAGS_WALK, exclude_flags: int = 0,
                  detail: bool = True, return_islands: bool = False):
        """The walkable surface as ``(vertices [V,3] float32, triangles [T,3] int64)``.

        Ground polygons pass like Detour's query filter: ``flags & include_flags != 0`` and
        ``flags & exclude_flags == 0`` (habitat includes only ``POLYFLAGS_WALK``); off-mesh
        connections are links, not surface, and are left out. ``detail=True`` uses the
        detail meshes (true surface heights), else the polygons fan-triangulated.
        Vertices are in the file's frame: Y up, which for habitat files is the habitat frame.
        ``return_islands=True`` adds a third array [T]: the ``polygon_islands`` id of each
        triangle's polygon.
        """
        vs, ts, isl = [], [], []
        islands = self.polygon_islands() if return_islands else None
        base = 0
        for k, t in enumerate(self.tiles):
            keep = t.ground_polys
            f = t.poly_flags[keep].astype(np.int64)
            keep = keep[((f & include_flags) != 0) & ((f & exclude_flags) == 0)]
            v, tri, tri_poly = t.detail_triangles(keep) if detail else t.fan_triangles(keep)
            vs.append(np.asarray(v, np.float32))
            ts.append(tri + base)
            if islands is not None:
                isl.append(islands[k][tri_poly])
            base += len(v)
        v = np.concatenate(vs) if vs else np.zeros((0, 3), np.float32)
        tri = np.concatenate(ts) if ts else np.zeros((0, 3), np.int64)
        if return_islands:
            return v, tri, (np.concatenate(isl) if isl else np.zeros(0, np.int64))
        return v, tri

    def island_stats(self, include_flags: int = POLYFLAGS_WALK) -> tuple[np.ndarray, np.ndarray]:
        """habitat-sim's island area and island radius (``PathFinder.island_area`` /
        ``island_radius``) of each ``polygon_islands`` id, float64 [I] each.

        Area: the 3D area of the detail triangles of the island's polygons that pass the walk
        filter, leaving out polygons under 1e-5 m^2 (habitat disables those). Radius: the
        largest distance from the mean of the island's polygon corners (each polygon's corners
        counted once per polygon, as habitat collects them) to one of those corners.
        """
        islands = self.polygon_islands()
        n = int(max((int(i.max()) for i in islands if len(i)), default=-1)) + 1
        area = np.zeros(n)
        vsum, vcnt = np.zeros((n, 3)), np.zeros(n)
        corners = []
        for k, t in enumerate(self.tiles):
            ground = t.ground_polys
            if not len(ground):
                continue
            isl = islands[k]
            nv = t.poly_vert_count[ground].astype(np.int64)
            poly_of = np.repeat(ground, nv)
            j = np.arange(len(poly_of)) - np.repeat(np.cumsum(nv) - nv, nv)
            c = t.vertices[t.poly_verts[poly_of, j]].astype(np.float64)
            corners.append((isl[poly_of], c))
            np.add.at(vsum, isl[poly_of], c)
            vcnt += np.bincount(isl[poly_of], minlength=n)
            v, tri, tri_poly = t.detail_triangles(ground)
            p = v[tri].astype(np.float64)
            ta = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 1]), axis=1)
            pa = np.bincount(tri_poly, ta, minlength=t.poly_count)
            f = t.poly_flags.astype(np.int64)
            ok = (pa >= 1e-5) & ((f & include_flags) != 0)
            ok[np.setdiff1d(np.arange(t.poly_count), ground)] = False
            area += np.bincount(isl[ok], pa[ok], minlength=n)
        cen = vsum / np.maximum(vcnt, 1)[:, None]
        radius = np.zeros(n)
        for ids, c in corners:
            np.maximum.at(radius, ids, np.linalg.norm(c - cen[ids], axis=1))
        return area, radius

    def area(self, **kw) -> float:
        """Area of ``triangles(**kw)`` in m^2 (habitat's ``navigable_area`` with the defaults)."""
        v, t = self.triangles(**kw)
        if len(t) == 0:
            return 0.0
        a = v[t].astype(np.float64)
        return float(0.5 * np.linalg.norm(np.cross(a[:, 1] - a[:, 0], a[:, 2] - a[:, 0]),
                                          axis=1).sum())

    def describe(self) -> dict:
        """What the file says about itself, for ``nav info``: set version, settings layout and
        values, tile / polygon counts, record widths, and any part skipped with a warning."""
        return {"set_version": self.version, "tiles": len(self.tiles),
                "polygons": self.poly_count, "tile_ref_bits": self.tile_ref_bits,
                "link_ref_bits": self.link_ref_bits, "settings_layout": self.settings_layout,
                "settings_bytes": self.settings_bytes,
                "settings": None if self.settings is None else {
                    k: (v if isinstance(v, bool) else _f32(v)) for k, v in self.settings.items()},
                "warnings": list(self.warnings)}

    def nav_settings(self, base=None):
        """``NavSettings`` describing the agent this navmesh was built for.

        Starts from ``base`` (default ``DEFAULT_SETTINGS``); takes agent height, radius and max
        climb from the tile headers (Detour stores them) and, for habitat version-2 files,
        everything the settings block holds.
        """
        from . import settings as nav_settings_mod  # the runtime NavSettings (other module)

        if base is None:
            base = nav_settings_mod.DEFAULT_SETTINGS
        vals: dict[str, Any] = {}
        if self.tiles:
            t = self.tiles[0]
            vals.update(agent_height=float(t.walkable_height),
                        agent_radius=float(t.walkable_radius),
                        max_climb=float(t.walkable_climb))
        if self.settings is not None:
            s = self.settings
            vals.update(cell_size=s["cellSize"], cell_height=s["cellHeight"],
                        agent_height=s["agentHeight"], agent_radius=s["agentRadius"],
                        max_climb=s["agentMaxClimb"], max_slope=s["agentMaxSlope"],
                        region_min_size=s["regionMinSize"],
                        filter_low_hanging_obstacles=s["filterLowHangingObstacles"],
                        filter_ledge_spans=s["filterLedgeSpans"],
                        filter_walkable_low_height_spans=s["filterWalkableLowHeightSpans"])
        names = {f.name for f in dataclasses.fields(base)}
        try:
            return dataclasses.replace(base, **{
                k: (v if isinstance(v, bool) else _f32(v)) for k, v in vals.items() if k in names})
        except ConfigError as e:   # e.g. a cellSize outside the range every navmesh must keep
            raise CorruptFileError(self.path, f"its settings block is unusable: {e.detail}") from None


# -------------------------------------------------------------------------------- reading
class _Reader:
    def __init__(self, path: str, data: bytes):
        self.path = path
        self.data = data

    def fail(self, detail: str, where: str | None = None):
        raise CorruptFileError(self.path, f"{where}: {detail}" if where else detail)

    def unpack(self, st: struct.Struct, off: int, what: str):
        if off < 0 or off + st.size > len(self.data):
            self.fail(f"truncated: needs {st.size} bytes at offset {off}, file has "
                      f"{len(self.data)}", what)
        return st.unpack_from(self.data, off)


def read_detour_navmesh(path: str | os.PathLike, data: bytes | None = None) -> DetourNavMesh:
    """Parse a Detour ``MSET`` navmesh set (habitat ``.navmesh``) at ``path``.

    ``data`` may hold the file's bytes already (``path`` is then only used in messages).
    Raises ``InputError`` if the file cannot be read, ``FormatVersionError`` for set versions
    other than 1/2 or tile versions other than 7, ``CorruptFileError`` for anything else.
    """
    path = os.fspath(path)
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise InputError(path, f"cannot read: {e.strerror or e}") from e
    r = _Reader(path, data)
    if data[:4] == _TILE_MAGIC_BYTES:
        return _single_tile(r)
    if data[:4] == TILECACHE_MAGIC_BYTES:
        raise UnsupportedFormatError(path, TILE_CACHE_MESSAGE)
    if len(data) >= 4 and data[:4] == b"MSET":
        r.fail("big-endian Detour set (magic 'MSET' byte-swapped): not supported", "set header")
    if len(data) < 4 or struct.unpack_from("<i", data)[0] != SET_MAGIC:
        r.fail(f"bad magic {data[:4]!r} (expected a Detour navmesh set, 'TESM' on disk)",
               "set header")
    magic, version, num_tiles, ox, oy, oz, tw, th, max_tiles, max_polys = r.unpack(
        _SET_HEADER, 0, "set header")
    if version not in SET_VERSIONS:
        raise FormatVersionError(path, f"set header: MSET version {version} is not supported "
                                       f"(reads {SET_VERSIONS})")
    if not 0 <= num_tiles <= MAX_TILES:
        r.fail(f"numTiles {num_tiles} out of range [0, {MAX_TILES}]", "set header")
    if not np.all(np.isfinite([ox, oy, oz, tw, th])):
        r.fail("non-finite origin / tile size", "set header")
    off = _SET_HEADER.size
    settings, layout, block, warns = None, None, 0, []
    if version >= 2:
        block = _settings_block_length(data, off, num_tiles)
        if block:
            settings, layout, warn = _parse_settings(data[off: off + block])
            if warn:
                warns.append(f"{path}: settings block: {warn}")
                warnings.warn(warns[-1], NavFormatWarning, stacklevel=2)
            off += block
    tile_bits = 32
    if num_tiles:
        rec = _tile_record_at(data, off)
        if rec is None:
            r.fail(f"no DNAV tile after the set header at offset {off} (neither a 32-bit "
                   "nor a 64-bit tile reference record precedes one)", "tile 0")
        tile_bits = rec
    rec_st = _TILE_REC32 if tile_bits == 32 else _TILE_REC64
    mesh = DetourNavMesh(path=path, version=version, origin=np.array([ox, oy, oz], np.float32),
                         tile_width=tw, tile_height=th, max_tiles=max_tiles,
                         max_polys=max_polys, settings=settings, tile_ref_bits=tile_bits,
                         link_ref_bits=32, settings_layout=layout, settings_bytes=block,
                         warnings=warns)
    link_bits = set()
    for i in range(num_tiles):
        ref, size = r.unpack(rec_st, off, f"tile {i} record")
        off += rec_st.size
        if ref == 0 or size == 0:  # Detour's loaders stop at an empty record
            break
        if not 0 < size <= min(MAX_TILE_BYTES, len(data) - off):
            r.fail(f"dataSize {size} exceeds the {len(data) - off} bytes left "
                   f"(or the {MAX_TILE_BYTES}-byte cap)", f"tile {i}")
        tile, lb = _parse_tile(r, i, ref, off, size)
        link_bits.add(lb)
        mesh.tiles.append(tile)
        off += size
    if len(link_bits) > 1:
        r.fail("tiles disagree on the dtLink size (32- and 64-bit polygon refs mixed)")
    mesh.link_ref_bits = link_bits.pop() if link_bits else 32
    return mesh


def _single_tile(r: _Reader) -> DetourNavMesh:
    """A file holding one ``DNAV`` tile (what ``dtCreateNavMeshData`` returns, the input of
    ``dtNavMesh::init(data, size, flags)``): read as a set of that tile, ``version`` 0."""
    tile, link_bits = _parse_tile(r, 0, 1, 0, len(r.data))
    return DetourNavMesh(path=r.path, version=0, origin=tile.bmin.copy(),
                         tile_width=float(tile.bmax[0] - tile.bmin[0]),
                         tile_height=float(tile.bmax[2] - tile.bmin[2]), max_tiles=1,
                         max_polys=max(tile.poly_count, 1), settings=None, tile_ref_bits=32,
                         link_ref_bits=link_bits, tiles=[tile])


def _settings_block_length(data: bytes, off: int, num_tiles: int) -> int:
    """Bytes between the set header and the first tile record of a version-2 set.

    Found from the file's structure, not assumed: the first offset whose tile record is followed
    by a DNAV tile header whose counts add up to the record's ``dataSize`` (a plausible tile);
    failing that, the first offset followed by the DNAV magic (so a damaged first tile is
    reported as such). 0 for sets without a settings block (Detour users other than habitat).
    Without tiles, whatever follows the header is the block.
    """
    if num_tiles == 0:
        return min(len(data) - off, MAX_SETTINGS_BYTES)
    last = min(len(data), off + MAX_SETTINGS_BYTES + 16 + 4)
    found = []
    pos = data.find(_TILE_MAGIC_BYTES, off + 8, last)
    while pos >= 0:
        for width in (8, 16):
            rec = pos - width
            if rec >= off and _tile_record_at(data, rec) == (32 if width == 8 else 64):
                if _plausible_tile(data, rec, width):
                    return rec - off
                found.append(rec - off)
        pos = data.find(_TILE_MAGIC_BYTES, pos + 1, last)
    for preferred in (_SETTINGS.size, 0):  # a damaged tile after a habitat-sized block
        if preferred in found:
            return preferred
    return min(found) if found else 0


def _plausible_tile(data: bytes, rec: int, width: int) -> bool:
    """The tile record at ``rec`` has a non-zero ref and a dataSize that its DNAV header's
    counts add up to (with 12- or 16-byte links), within the file."""
    ref, size = (_TILE_REC32 if width == 8 else _TILE_REC64).unpack_from(data, rec)
    start = rec + width
    if ref == 0 or size <= 0 or start + max(size, _MESH_HEADER.size) > len(data):
        return False
    h = _MESH_HEADER.unpack_from(data, start)
    if h[1] != TILE_VERSION or not all(0 <= c <= MAX_COUNT for c in h[6:14]):
        return False
    return size in _tile_sizes(*h[6:14])


def _tile_sizes(polys, verts, links, dmeshes, dverts, dtris, bvnodes, offmesh) -> tuple[int, int]:
    """A DNAV tile's byte size from its header counts, with 12- and with 16-byte links."""
    fixed = (_align4(100) + _align4(12 * verts) + _align4(32 * polys) + _align4(12 * dmeshes)
             + _align4(12 * dverts) + _align4(4 * dtris) + _align4(16 * bvnodes)
             + _align4(36 * offmesh))
    return fixed + _align4(12 * links), fixed + _align4(16 * links)


def _parse_settings(block: bytes) -> tuple[dict | None, str | None, str | None]:
    """(settings, layout name, warning) of a settings block of any length.

    The known habitat layouts (``SETTINGS_LAYOUTS``) are parsed; anything else is skipped with
    a warning (the tiles do not depend on it). A known-size block whose values are not
    plausible settings (non-finite or non-positive sizes, bools other than 0/1 where the layout
    has bools) is treated as unknown.
    """
    n = len(block)
    if n != _SETTINGS.size:
        return None, None, (f"unknown layout of {n} bytes (habitat-sim writes 56): skipped, "
                            "the file's agent settings are taken from its tile headers")
    vals = _SETTINGS.unpack(block)
    layout = LAYOUT_4BOOL if vals[16] in (0, 1) else LAYOUT_3BOOL
    names = SETTINGS_LAYOUTS[layout][1]
    floats, bools = vals[:13], vals[13:len(names)]
    if not all(np.isfinite(floats)) or floats[0] <= 0 or floats[1] <= 0 \
            or any(b not in (0, 1) for b in bools):
        return None, None, ("56 bytes that are not habitat NavMeshSettings (non-finite or "
                            "non-positive sizes, or bools other than 0/1): skipped")
    settings = {k: (bool(v) if k in SETTINGS_BOOLS else v) for k, v in zip(names, vals)}
    return settings, layout, None


def _tile_record_at(data: bytes, off: int) -> int | None:
    """32 or 64 if a tile record of that width at ``off`` is followed by a DNAV header."""
    if data[off + 8: off + 12] == _TILE_MAGIC_BYTES:
        return 32
    if data[off + 16: off + 20] == _TILE_MAGIC_BYTES:
        return 64
    return None


def _check_extent(r: _Reader, where: str, bmin, bmax, bvq: float, verts, dverts) -> None:
    """Sizes derived from coordinates stay what a tile can describe (before any grid is made).

    Detour stores polygon vertices as 16-bit cell coordinates from the tile's ``bmin`` (cell
    ``1 / bvQuantFactor``) and its BV tree quantizes the same way, so a tile spans at most
    65535 cells per axis and every vertex lies in ``[bmin, bmax]``; a tolerance of one cell
    plus 0.25 m (the height quantization) is allowed. One wild vertex (1e6) would otherwise
    make a grid of billions of cells.
    """
    if np.any(bmin > bmax):
        r.fail(f"bounds bmin {bmin.tolist()} > bmax {bmax.tolist()}", where)
    cell = 1.0 / bvq if bvq > 0 else 0.0
    if bvq > 0:
        cells = (bmax - bmin)[[0, 2]].astype(np.float64) * bvq
        if np.any(cells > MAX_TILE_CELLS):
            r.fail(f"bounds span {cells.max():.0f} cells of {cell:g} m (bmax - bmin) "
                   f"> {MAX_TILE_CELLS}, more than a tile can describe", where)
    tol = cell + 0.25
    for name, v in (("vertex", verts), ("detail vertex", dverts)):
        if len(v) == 0:
            continue
        out = (v < bmin - tol) | (v > bmax + tol)
        if np.any(out):
            k, axis = (int(x[0]) for x in np.nonzero(out))
            r.fail(f"{name} {k} {'xyz'[axis]} = {float(v[k, axis]):g} lies outside the tile "
                   f"bounds [{float(bmin[axis]):g}, {float(bmax[axis]):g}]", where)


def _check_polygons(r: _Reader, where: str, polys, vert_count: int, poly_count: int, max_link_count: int):
    """Every polygon's vertex count fits its type, and its vertex, neighbour and first-link
    indices stay inside the tile's tables. Returns (vertex counts, polygon types)."""
    nvc = polys["vert_count"].astype(np.int64)
    ptype = (polys["area_and_type"] >> 6).astype(np.uint8)
    if np.any(nvc > VERTS_PER_POLYGON) or np.any((nvc < 3) & (ptype == POLYTYPE_GROUND)) \
            or np.any((nvc != 2) & (ptype == POLYTYPE_OFFMESH_CONNECTION)):
        bad = int(np.flatnonzero((nvc > 6) | ((nvc < 3) & (ptype == 0)) |
                                 ((nvc != 2) & (ptype == 1)))[0])
        r.fail(f"polygon {bad}: vertCount {nvc[bad]} invalid for its type {ptype[bad]}", where)
    if np.any(ptype > 1):
        r.fail(f"polygon {int(np.flatnonzero(ptype > 1)[0])}: unknown polygon type", where)
    used = np.arange(VERTS_PER_POLYGON)[None, :] < nvc[:, None]
    pv = polys["verts"].astype(np.int64)
    if np.any(used & (pv >= vert_count)):
        bad = int(np.flatnonzero(np.any(used & (pv >= vert_count), axis=1))[0])
        r.fail(f"polygon {bad}: vertex index >= vertCount {vert_count}", where)
    ne = polys["neis"].astype(np.int64)
    internal = used & (ne != 0) & ((ne & EXT_LINK) == 0)
    if np.any(internal & (ne > poly_count)):
        bad = int(np.flatnonzero(np.any(internal & (ne > poly_count), axis=1))[0])
        r.fail(f"polygon {bad}: neighbour index >= polyCount {poly_count}", where)
    fl = polys["first_link"].astype(np.int64)
    if np.any((fl != NULL_LINK) & (fl >= max(max_link_count, 1))):
        r.fail("polygon firstLink beyond maxLinkCount", where)
    return nvc, ptype


def _check_detail_and_links(r: _Reader, where: str, nvc, dmesh, dtris, bv, offmesh, poly_count: int,
                            detail_vert_count: int, detail_tri_count: int, bv_node_count: int,
                            offmesh_count: int):
    """Detail meshes, the BV tree and off-mesh connections index only what the tile holds.
    Returns the detail meshes as an int64 [D, 4] table (vert base, tri base, vert count, tri count)."""
    dm = np.stack([dmesh["vert_base"], dmesh["tri_base"], dmesh["vert_count"],
                   dmesh["tri_count"]], axis=1).astype(np.int64) if len(dmesh) \
        else np.zeros((0, 4), np.int64)
    if len(dm):
        if np.any(dm[:, 0] + dm[:, 2] > detail_vert_count):
            r.fail(f"detail mesh vertices beyond detailVertCount {detail_vert_count}", where)
        if np.any(dm[:, 1] + dm[:, 3] > detail_tri_count):
            r.fail(f"detail mesh triangles beyond detailTriCount {detail_tri_count}", where)
        # every detail triangle index must name a polygon vertex or one of its detail vertices
        counts_t = dm[:, 3]
        tri_poly = np.repeat(np.arange(len(dm)), counts_t)
        t0 = np.repeat(dm[:, 1], counts_t)
        local = np.arange(len(tri_poly)) - np.repeat(np.cumsum(counts_t) - counts_t, counts_t)
        lim = nvc[: len(dm)][tri_poly] + dm[tri_poly, 2]
        idx = dtris[t0 + local, :3].astype(np.int64)
        if np.any(idx >= lim[:, None]):
            bad = int(tri_poly[np.flatnonzero(np.any(idx >= lim[:, None], axis=1))[0]])
            r.fail(f"detail mesh {bad}: triangle index beyond its vertices", where)
    if bv_node_count:
        bi = bv["i"].astype(np.int64)  # leaf: polygon index; inner node: -escape offset
        if np.any(bi >= poly_count) or np.any(-bi > bv_node_count):
            r.fail("BV tree node index out of range", where)
    if offmesh_count and np.any(offmesh["poly"].astype(np.int64) >= poly_count):
        r.fail("off-mesh connection polygon index >= polyCount", where)
    if not np.all(np.isfinite(offmesh["pos"])):
        r.fail("non-finite off-mesh connection", where)
    return dm


def _parse_tile(r: _Reader, i: int, ref: int, start: int, size: int):
    where = f"tile {i}"
    h = r.unpack(_MESH_HEADER, start, f"{where} header")
    (magic, version, x, y, layer, user_id, poly_count, vert_count, max_link_count,
     detail_mesh_count, detail_vert_count, detail_tri_count, bv_node_count,
     offmesh_count, offmesh_base) = h[:15]
    walkable_height, walkable_radius, walkable_climb = h[15:18]
    bmin, bmax, bvq = np.array(h[18:21], np.float32), np.array(h[21:24], np.float32), h[24]
    if magic != TILE_MAGIC:
        r.fail(f"bad tile magic 0x{magic & 0xFFFFFFFF:08x} (expected 'DNAV')", where)
    if version != TILE_VERSION:
        raise FormatVersionError(r.path, f"{where}: DNAV version {version} is not supported "
                                         f"(reads {TILE_VERSION})")
    counts = dict(polyCount=poly_count, vertCount=vert_count, maxLinkCount=max_link_count,
                  detailMeshCount=detail_mesh_count, detailVertCount=detail_vert_count,
                  detailTriCount=detail_tri_count, bvNodeCount=bv_node_count,
                  offMeshConCount=offmesh_count)
    for k, v in counts.items():
        if not 0 <= v <= MAX_COUNT:
            r.fail(f"{k} {v} out of range [0, {MAX_COUNT}]", where)
    if not np.all(np.isfinite(h[15:])):
        r.fail("non-finite walkable sizes / bounds", where)
    if not (0 <= offmesh_base <= poly_count and offmesh_base + offmesh_count <= poly_count):
        r.fail(f"offMeshBase {offmesh_base} + offMeshConCount {offmesh_count} exceed "
               f"polyCount {poly_count}", where)
    if detail_mesh_count > poly_count:
        r.fail(f"detailMeshCount {detail_mesh_count} > polyCount {poly_count}", where)

    sizes = [_align4(100), _align4(12 * vert_count), _align4(32 * poly_count), None,
             _align4(12 * detail_mesh_count), _align4(12 * detail_vert_count),
             _align4(4 * detail_tri_count), _align4(16 * bv_node_count),
             _align4(36 * offmesh_count)]
    fixed = sum(s for s in sizes if s is not None)
    if fixed + _align4(12 * max_link_count) == size:
        link_dtype, link_bits = LINK32_DTYPE, 32
    elif fixed + _align4(16 * max_link_count) == size:
        link_dtype, link_bits = LINK64_DTYPE, 64
    else:
        r.fail(f"dataSize {size} does not match the tile's counts ({fixed + 12 * max_link_count}"
               f" bytes with 32-bit polygon refs, {fixed + 16 * max_link_count} with 64-bit)",
               where)
    sizes[3] = _align4(link_dtype.itemsize * max_link_count)

    offs = np.cumsum([start] + sizes).tolist()
    buf = r.data

    def arr(block: int, dtype, count: int, shape=None):
        a = np.frombuffer(buf, dtype=dtype, count=count, offset=offs[block]).copy()
        if shape is not None:
            a = a.reshape(shape)
        a.flags.writeable = False
        return a

    verts = arr(1, "<f4", 3 * vert_count, (vert_count, 3))
    polys = arr(2, POLY_DTYPE, poly_count)
    links = arr(3, link_dtype, max_link_count)
    dmesh = arr(4, DETAIL_DTYPE, detail_mesh_count)
    dverts = arr(5, "<f4", 3 * detail_vert_count, (detail_vert_count, 3))
    dtris = arr(6, "u1", 4 * detail_tri_count, (detail_tri_count, 4))
    bv = arr(7, BVNODE_DTYPE, bv_node_count)
    offmesh = arr(8, OFFMESH_DTYPE, offmesh_count)

    if not np.all(np.isfinite(verts)) or not np.all(np.isfinite(dverts)):
        r.fail("non-finite vertex coordinates", where)
    _check_extent(r, where, bmin, bmax, bvq, verts, dverts)
    nvc, ptype = _check_polygons(r, where, polys, vert_count, poly_count, max_link_count)
    dm = _check_detail_and_links(r, where, nvc, dmesh, dtris, bv, offmesh, poly_count,
                                 detail_vert_count, detail_tri_count, bv_node_count, offmesh_count)

    def ro(a):
        a = np.ascontiguousarray(a)
        a.flags.writeable = False
        return a

    tile = DetourTile(
        index=i, ref=int(ref), x=x, y=y, layer=layer, user_id=user_id,
        walkable_height=float(walkable_height), walkable_radius=float(walkable_radius),
        walkable_climb=float(walkable_climb), bmin=bmin, bmax=bmax, bv_quant_factor=float(bvq),
        offmesh_base=offmesh_base, vertices=verts, poly_first_link=ro(polys["first_link"]),
        poly_verts=ro(polys["verts"]), poly_neis=ro(polys["neis"]),
        poly_flags=ro(polys["flags"]), poly_vert_count=ro(polys["vert_count"]),
        poly_area=ro(polys["area_and_type"] & 0x3F), poly_type=ro(ptype), links=links,
        detail_meshes=ro(dm), detail_vertices=dverts, detail_tris=dtris, bv_nodes=bv,
        offmesh_connections=offmesh, max_link_count=max_link_count)
    return tile, link_bits


# ------------------------------------------------------------------------------ importing
def import_detour(path, settings=None, include_flags: int = POLYFLAGS_WALK):
    """Read a Detour set (a path, or one ``read_detour_navmesh`` already read) and rasterize its
    walkable surface into the runtime ``NavMesh``.

    ``settings`` default: ``DetourNavMesh.nav_settings()`` (the file's own agent; habitat
    version-2 settings block when present). The polygons are already eroded by the agent
    radius they were built for; ``NavMesh.from_walkable_triangles`` takes them as the surface.
    """
    from .grid import NavMesh  # the runtime grid

    dm = path if isinstance(path, DetourNavMesh) else read_detour_navmesh(path)
    path = dm.path
    if settings is None:
        settings = dm.nav_settings()
    v, t, isl = dm.triangles(include_flags=include_flags, return_islands=True)
    if len(t) == 0:
        raise CorruptFileError(path, "no walkable polygons (nothing passes the walk flag)")
    portals = any(np.any((tt.poly_neis & EXT_LINK) != 0) for tt in dm.tiles)
    if len(dm.tiles) > 1 and portals and dm.cross_tile_links == 0:
        isl = None  # unlinked tiles: let the grid join them by height instead
    # Detour's polygon islands keep surfaces apart that the grid would otherwise join where
    # they come within one cell and max climb of each other.
    nav = NavMesh.from_walkable_triangles(v, t, settings, triangle_groups=isl,
                                          source=os.path.basename(os.fspath(path)),
                                          method="detour")
    nav.source_info = {"detour": dm.describe()}
    if nav.num_islands:
        _habitat_island_stats(nav, dm, include_flags)
    return nav


def _habitat_island_stats(nav, dm: DetourNavMesh, include_flags: int) -> None:
    """Give each grid island habitat-sim's island area and radius (``DetourNavMesh.island_stats``'
    definitions) over the Detour polygons that fall on it (each polygon's detail-area centroid,
    snapped). A grid island that is one Detour island gets exactly habitat's values; tiles
    joined by height, or an island the raster split, get those of their own polygons."""
    I = nav.num_islands
    area, vsum, vcnt = np.zeros(I), np.zeros((I, 3)), np.zeros(I)
    corners = []
    for t in dm.tiles:
        g = t.ground_polys
        g = g[(t.poly_flags[g].astype(np.int64) & include_flags) != 0]
        if not len(g):
            continue
        v, tri, tri_poly = t.detail_triangles(g)
        p = v[tri].astype(np.float64)
        ta = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 1]), axis=1)
        pa = np.bincount(tri_poly, ta, minlength=t.poly_count)
        cen = np.stack([np.bincount(tri_poly, ta * p.mean(1)[:, k], minlength=t.poly_count)
                        for k in range(3)], 1)[g] / np.maximum(pa[g], 1e-12)[:, None]
        isl = np.asarray(nav.island_of(cen), np.int64).reshape(-1)
        ok = isl >= 0
        g, isl = g[ok], isl[ok]
        keep = pa[g] >= 1e-5   # habitat disables polygons of smaller area
        area += np.bincount(isl[keep], pa[g][keep], minlength=I)
        nv = t.poly_vert_count[g].astype(np.int64)
        j = np.arange(int(nv.sum())) - np.repeat(np.cumsum(nv) - nv, nv)
        c = t.vertices[t.poly_verts[np.repeat(g, nv), j]].astype(np.float64)
        ids = np.repeat(isl, nv)
        np.add.at(vsum, ids, c)
        vcnt += np.bincount(ids, minlength=I)
        corners.append((ids, c))
    cen = vsum / np.maximum(vcnt, 1)[:, None]
    radius = np.zeros(I)
    for ids, c in corners:
        np.maximum.at(radius, ids, np.linalg.norm(c - cen[ids], axis=1))
    has = vcnt > 0   # an island no polygon centroid snaps to keeps its cell-count values
    nav.set_island_stats(np.where(has, area, nav.island_area), np.where(has, radius, nav.island_radius_m))
