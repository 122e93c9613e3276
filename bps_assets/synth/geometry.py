"""Meshing a floor plan into scan-like triangles (file frame, Z up).

A plan becomes a list of planar quads (room-facing wall faces with door cut-outs, door jambs,
lintels and thresholds, floors and ceilings with the stairwell hole, stair treads/risers,
furniture boxes). Surfaces are surfaces, as in a scan: a wall is the two faces its rooms see,
so no face is hidden inside a solid and none is doubled.

Every quad is then split into a grid of near-square cells whose size is solved for so the
scene hits a target triangle count (scans have a fairly uniform triangle size), each cell cut
along a random diagonal, and every vertex moved by a few millimetres of noise. The noise is a
hash of the vertex position, so vertices that coincide on two quads move together and no crack
opens along shared edges.

Vertex colours carry what a scan bakes in: a per-surface tint, low-frequency lighting and
darkening where walls meet the floor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..hashing import splitmix64
from .layout import SLAB, WALL_T, Plan, Rect

NOISE_MM = 2.5   # per-axis vertex noise amplitude (triangular distribution, so |d| <= 2 * NOISE_MM)


@dataclass(frozen=True)
class MaterialSpec:
    name: str
    texture: str | None     # texture kind (textures.KINDS) or None
    color: tuple            # baseColorFactor
    uv_scale: float         # metres per texture repeat


MATERIALS = (
    MaterialSpec("floor_wood", "wood", (1.0, 1.0, 1.0, 1.0), 2.0),
    MaterialSpec("floor_tile", "tile", (1.0, 1.0, 1.0, 1.0), 1.2),
    MaterialSpec("floor_carpet", "carpet", (1.0, 1.0, 1.0, 1.0), 1.5),
    MaterialSpec("wall", "plaster", (1.0, 1.0, 1.0, 1.0), 2.5),
    MaterialSpec("ceiling", "plaster", (1.0, 1.0, 1.0, 1.0), 3.0),
    MaterialSpec("furniture_wood", "darkwood", (1.0, 1.0, 1.0, 1.0), 1.0),
    MaterialSpec("fabric", "fabric", (1.0, 1.0, 1.0, 1.0), 0.6),
    MaterialSpec("cardboard", "cardboard", (1.0, 1.0, 1.0, 1.0), 0.8),
    MaterialSpec("stairs", "wood", (0.85, 0.8, 0.75, 1.0), 2.0),
    MaterialSpec("rail", None, (0.55, 0.55, 0.58, 1.0), 1.0),
)
MAT = {m.name: i for i, m in enumerate(MATERIALS)}
_PART_MAT = {"darkwood": "furniture_wood", "fabric": "fabric", "cardboard": "cardboard",
             "carpet": "floor_carpet", "rail": "rail"}
_FLOOR_MAT = {"wood": "floor_wood", "tile": "floor_tile", "carpet": "floor_carpet"}


class Quads:
    """Planar quads o + s*u + t*v (s, t in [0, 1]); the front side is along u x v."""

    def __init__(self):
        self.o, self.u, self.v, self.mat, self.tint, self.base_z = [], [], [], [], [], []
        self.owner, self.cur = [], None   # what each quad belongs to (the semantic annotation)

    def add(self, o, u, v, mat: str, tint=(1.0, 1.0, 1.0), base_z=float("nan")):
        self.o.append(o)
        self.u.append(u)
        self.v.append(v)
        self.mat.append(MAT[mat])
        self.tint.append(tint)
        self.base_z.append(base_z)
        self.owner.append(self.cur)

    # horizontal: up=True faces +z (floors, tops), False faces -z (ceilings, undersides)
    def horiz(self, r: Rect, z, up, mat, tint=(1.0, 1.0, 1.0)):
        if r.w <= 1e-6 or r.h <= 1e-6:
            return
        if up:
            self.add((r.x0, r.y0, z), (r.w, 0, 0), (0, r.h, 0), mat, tint)
        else:
            self.add((r.x0, r.y0, z), (0, r.h, 0), (r.w, 0, 0), mat, tint)

    def wall_y(self, y, x0, x1, z0, z1, normal_sign, mat, tint=(1.0, 1.0, 1.0), base_z=float("nan")):
        """Vertical quad in the plane y = const, facing +y (normal_sign > 0) or -y."""
        if x1 - x0 <= 1e-6 or z1 - z0 <= 1e-6:
            return
        if normal_sign > 0:
            self.add((x0, y, z0), (0, 0, z1 - z0), (x1 - x0, 0, 0), mat, tint, base_z)
        else:
            self.add((x0, y, z0), (x1 - x0, 0, 0), (0, 0, z1 - z0), mat, tint, base_z)

    def wall_x(self, x, y0, y1, z0, z1, normal_sign, mat, tint=(1.0, 1.0, 1.0), base_z=float("nan")):
        """Vertical quad in the plane x = const, facing +x (normal_sign > 0) or -x."""
        if y1 - y0 <= 1e-6 or z1 - z0 <= 1e-6:
            return
        if normal_sign > 0:
            self.add((x, y0, z0), (0, y1 - y0, 0), (0, 0, z1 - z0), mat, tint, base_z)
        else:
            self.add((x, y0, z0), (0, 0, z1 - z0), (0, y1 - y0, 0), mat, tint, base_z)

    def box(self, r: Rect, z0, z1, mat, tint=(1.0, 1.0, 1.0), base_z=float("nan"), bottom=False):
        """The faces of a solid box; the bottom one only if asked (it is hidden when standing)."""
        self.horiz(r, z1, True, mat, tint)
        if bottom:
            self.horiz(r, z0, False, mat, tint)
        self.wall_y(r.y0, r.x0, r.x1, z0, z1, -1, mat, tint, base_z)
        self.wall_y(r.y1, r.x0, r.x1, z0, z1, +1, mat, tint, base_z)
        self.wall_x(r.x0, r.y0, r.y1, z0, z1, -1, mat, tint, base_z)
        self.wall_x(r.x1, r.y0, r.y1, z0, z1, +1, mat, tint, base_z)

    def arrays(self):
        return (np.asarray(self.o, np.float64).reshape(-1, 3), np.asarray(self.u, np.float64).reshape(-1, 3),
                np.asarray(self.v, np.float64).reshape(-1, 3), np.asarray(self.mat, np.int32),
                np.asarray(self.tint, np.float32).reshape(-1, 3), np.asarray(self.base_z, np.float64))


def _wall_pieces(s0, s1, doors, cz):
    """Split a wall side [s0, s1] around door openings: [(a, b, z_bottom_offset_or_None)]."""
    out, pos = [], s0
    for d in sorted(doors, key=lambda d: d.s0):
        a, b = max(d.s0, s0), min(d.s1, s1)
        if b <= a:
            continue
        out.append((pos, a, None))
        out.append((a, b, d.height))
        pos = b
    out.append((pos, s1, None))
    return [p for p in out if p[1] - p[0] > 1e-6]


def plan_quads(plan: Plan) -> tuple[Quads, float]:
    """All surfaces of ``plan`` as quads, and the total floor area (m^2, all storeys)."""
    q = Quads()
    floor_area = 0.0
    st = plan.stairs
    rooms = plan.rooms
    h = WALL_T / 2
    for room in rooms:
        ri, c, fz, cz = room.interior, room.cell, room.floor_z, room.ceil_z
        fmat = _FLOOR_MAT[room.floor_kind]
        floors, ceils = [ri], [ri]
        q.cur = ("floor", room.id)
        if st is not None and room.hall:
            if room.storey == 0:
                ceils = ri.minus(st.rect)
            else:
                floors = ri.minus(st.rect)
        for r in floors:
            q.horiz(r, fz, True, fmat)
            floor_area += r.area
        q.cur = ("ceiling", room.id)
        for r in ceils:
            q.horiz(r, cz, False, "ceiling")
        q.cur = ("wall", room.id)
        mydoors = plan.doors_of(room.id)
        sides = (
            ("y", c.y0, +1, ri.x0, ri.x1, ri.y0), ("y", c.y1, -1, ri.x0, ri.x1, ri.y1),
            ("x", c.x0, +1, ri.y0, ri.y1, ri.x0), ("x", c.x1, -1, ri.y0, ri.y1, ri.x1),
        )
        for axis, line, sign, s0, s1, at in sides:
            ds = [d for d in mydoors if d.axis == axis and abs(d.c - line) < 1e-6]
            for a, b, dh in _wall_pieces(s0, s1, ds, cz):
                z0 = fz if dh is None else fz + dh
                if axis == "y":
                    q.wall_y(at, a, b, z0, cz, sign, "wall", room.wall_tint, fz)
                else:
                    q.wall_x(at, a, b, z0, cz, sign, "wall", room.wall_tint, fz)

    for d in plan.doors:  # door jambs, lintel underside, threshold
        ra = rooms[d.a]
        fz = ra.floor_z
        top = fz + d.height
        thr = d.threshold()
        q.cur = ("floor", ra.id)
        q.horiz(thr, fz, True, _FLOOR_MAT[ra.floor_kind])
        q.cur = ("wall", ra.id)
        floor_area += thr.area
        q.horiz(thr, top, False, "wall", ra.wall_tint)
        if d.axis == "x":
            q.wall_y(d.s0, d.c - h, d.c + h, fz, top, +1, "wall", ra.wall_tint, fz)
            q.wall_y(d.s1, d.c - h, d.c + h, fz, top, -1, "wall", ra.wall_tint, fz)
        else:
            q.wall_x(d.s0, d.c - h, d.c + h, fz, top, +1, "wall", ra.wall_tint, fz)
            q.wall_x(d.s1, d.c - h, d.c + h, fz, top, -1, "wall", ra.wall_tint, fz)

    if st is not None:
        r = st.rect
        h1 = plan.storeys[0][1]
        f2 = st.z1
        q.cur = ("stairs", -1)
        for k in range(1, st.n_steps):
            ya, yb = r.y0 + (k - 1) * st.tread, r.y0 + k * st.tread
            q.horiz(Rect(r.x0, ya, r.x1, yb), k * st.rise, True, "stairs")
            q.wall_y(ya, r.x0, r.x1, (k - 1) * st.rise, k * st.rise, -1, "stairs")
            q.wall_x(r.x1, ya, yb, 0.0, min(k * st.rise, h1), +1, "stairs", base_z=0.0)
        top = (st.n_steps - 1) * st.rise
        q.wall_y(r.y1, r.x0, r.x1, top, f2, -1, "stairs")            # last riser, onto the upper floor
        q.wall_y(r.y1, r.x0, r.x1, 0.0, min(top, h1), +1, "stairs", base_z=0.0)  # back of the flight
        # stairwell edges through the slab
        q.cur = ("wall", next((rm.id for rm in rooms if rm.hall and rm.storey == 1), -1))
        q.wall_x(r.x0, r.y0, r.y1, h1, f2, +1, "wall")
        q.wall_x(r.x1, r.y0, r.y1, h1, f2, -1, "wall")
        q.wall_y(r.y0, r.x0, r.x1, h1, f2, +1, "wall")

    for fi, f in enumerate(plan.furniture):
        q.cur = ("furniture", fi)
        base = rooms[f.room].floor_z
        for p in f.parts:
            # raised parts (table tops, shelf boards) show their underside unless they rest on a part
            rests = p.z0 <= base + 1e-6 or any(
                o is not p and abs(o.z1 - p.z0) < 1e-6 and o.rect.x0 <= p.rect.x0 + 1e-6 and p.rect.x1 <= o.rect.x1 + 1e-6
                and o.rect.y0 <= p.rect.y0 + 1e-6 and p.rect.y1 <= o.rect.y1 + 1e-6 for o in f.parts)
            q.box(p.rect, p.z0, p.z1, _PART_MAT[p.kind], base_z=base, bottom=not rests)
    return q, floor_area


def add_roof(q: Quads, plan: Plan) -> float:
    """A flat roof over the top storey's rooms (their cells, walls included), facing up, one
    slab above their ceiling: walkable and open to the sky. Returns its height (z)."""
    top = max(r.storey for r in plan.rooms)
    rooms = [r for r in plan.rooms if r.storey == top]
    z = max(r.ceil_z for r in rooms) + SLAB
    for r in rooms:
        q.cur = ("ceiling", r.id)
        q.horiz(r.cell, z, True, "ceiling")
    return float(z)


# ------------------------------------------------------------------------------ meshing

def _cells(lu, lv, cell):
    return np.maximum(1, np.ceil(lu / cell - 1e-9)).astype(np.int64), \
        np.maximum(1, np.ceil(lv / cell - 1e-9)).astype(np.int64)


def solve_cell(quads: Quads, target_triangles: int) -> tuple[float, int]:
    """Cell size whose subdivision gives the triangle count closest to the target, and that count."""
    _, u, v, *_ = quads.arrays()
    lu, lv = np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1)

    def count(c):
        nu, nv = _cells(lu, lv, c)
        return int(2 * (nu * nv).sum())

    lo, hi = 1e-3, 10.0
    for _ in range(50):
        mid = math.sqrt(lo * hi)
        if count(mid) > target_triangles:
            lo = mid
        else:
            hi = mid
    best = min((lo, hi), key=lambda c: abs(count(c) - target_triangles))
    return best, count(best)


def position_noise(p: np.ndarray, seed: int, amplitude: float) -> np.ndarray:
    """Deterministic per-position displacement [V, 3]: equal positions get equal offsets."""
    qi = np.round(p * 2000.0).astype(np.int64).view(np.uint64)  # 0.5 mm lattice
    h = splitmix64(qi[:, 0] ^ np.uint64(seed & 0xFFFFFFFFFFFFFFFF))
    h = splitmix64(h ^ qi[:, 1])
    h = splitmix64(h ^ qi[:, 2])
    out = np.empty((p.shape[0], 3), np.float64)
    for k in range(3):
        a = ((h >> np.uint64(k * 20)) & np.uint64(0x3FF)).astype(np.float64) / 1023.0
        b = ((h >> np.uint64(k * 20 + 10)) & np.uint64(0x3FF)).astype(np.float64) / 1023.0
        out[:, k] = (a + b - 1.0) * amplitude
    return out


@dataclass
class MeshArrays:
    positions: np.ndarray    # float32 [V, 3]
    indices: np.ndarray      # uint32 [T, 3]
    uvs: np.ndarray          # float32 [V, 2]
    colors: np.ndarray       # float32 [V, 4]
    vertex_ranges: list      # per material: (v0, v1)
    triangle_ranges: list    # per material: (t0, t1)
    tri_quad: np.ndarray | None = None  # int64 [T]: the quad (index into Quads) of each triangle


def mesh_quads(quads: Quads, cell: float, rng: np.random.Generator, noise_seed: int) -> MeshArrays:
    """Subdivide every quad into ~``cell``-sized cells, grouped by material (fully vectorized)."""
    o, u, v, mat, tint, base_z = quads.arrays()
    order = np.argsort(mat, kind="stable")
    o, u, v, mat, tint, base_z = o[order], u[order], v[order], mat[order], tint[order], base_z[order]
    lu, lv = np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1)
    nu, nv = _cells(lu, lv, cell)
    nvert = (nu + 1) * (nv + 1)
    voff = np.concatenate([[0], np.cumsum(nvert)])
    qid = np.repeat(np.arange(len(o)), nvert)
    k = np.arange(voff[-1]) - voff[qid]
    i = k % (nu[qid] + 1)
    j = k // (nu[qid] + 1)
    s = (i / nu[qid])[:, None]
    t = (j / nv[qid])[:, None]
    pos = o[qid] + s * u[qid] + t * v[qid]

    ncell = nu * nv
    coff = np.concatenate([[0], np.cumsum(ncell)])
    cq = np.repeat(np.arange(len(o)), ncell)
    c = np.arange(coff[-1]) - coff[cq]
    ci, cj = c % nu[cq], c // nu[cq]
    row = nu[cq] + 1
    v00 = voff[cq] + cj * row + ci
    v10, v01 = v00 + 1, v00 + row
    v11 = v01 + 1
    flip = rng.random(len(c)) < 0.5
    tri = np.empty((2 * len(c), 3), np.int64)
    a, b = tri[0::2], tri[1::2]
    a[:] = np.where(flip[:, None], np.stack([v00, v10, v01], 1), np.stack([v00, v10, v11], 1))
    b[:] = np.where(flip[:, None], np.stack([v10, v11, v01], 1), np.stack([v00, v11, v01], 1))

    # UVs: world-planar projection picked by the quad's normal, so patterns line up across quads
    n = np.cross(u, v)
    ax = np.argmax(np.abs(n), axis=1)[qid]
    uv = np.where((ax == 2)[:, None], pos[:, [0, 1]], np.where((ax == 0)[:, None], pos[:, [1, 2]], pos[:, [0, 2]]))
    scale = np.array([m.uv_scale for m in MATERIALS])[mat[qid]]
    uv = uv / scale[:, None]
    uv[:, 1] = -uv[:, 1]  # image rows run down; keep wall textures upright

    # colours: tint x low-frequency light x contact darkening at the foot of vertical surfaces
    waves = rng.normal(size=(3, 3)) * 0.9
    phase = rng.uniform(0, 2 * np.pi, 3)
    light = 0.88 + 0.08 * np.sin(pos @ waves.T + phase).mean(1)
    bz = base_z[qid]
    above = np.where(np.isnan(bz), 10.0, pos[:, 2] - np.nan_to_num(bz))
    light *= 1.0 - 0.22 * np.exp(-np.maximum(above, 0) / 0.25)
    col = np.empty((len(pos), 4), np.float32)
    col[:, :3] = np.clip(tint[qid] * light[:, None], 0, 1)
    col[:, 3] = 1.0

    pos = pos + position_noise(pos, noise_seed, NOISE_MM / 1000.0)

    vr, tr = [], []
    for m in range(len(MATERIALS)):
        qs = np.nonzero(mat == m)[0]
        if len(qs) == 0:
            vr.append((0, 0))
            tr.append((0, 0))
            continue
        vr.append((int(voff[qs[0]]), int(voff[qs[-1] + 1])))
        tr.append((int(2 * coff[qs[0]]), int(2 * coff[qs[-1] + 1])))
    return MeshArrays(pos.astype(np.float32), tri.astype(np.uint32), uv.astype(np.float32), col, vr, tr,
                      tri_quad=np.repeat(order, 2 * ncell))
