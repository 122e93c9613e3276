"""Semantic test scenes for ObjectNav: box-built rooms whose objects are known exactly (each
object's triangles carry its instance id), with their SemanticTable and navmesh.

``two_rooms()``: an 8 x 6 m floor split by a wall (one 1 m door) into room A (x < 4) and room B;
chair 1 and a table in A, chair 2, a sofa and a "hidden" chair 5 sealed inside a closed box in
B (no view point can see it). Walls 2.6 m high, no ceiling. ``synth_semantic_scene(tmp)``: a
synth scan through the real annotation and conversion path, read back as ObjectNav reads it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bps_assets.nav import NavSettings, build_navmesh
from bps_assets.semantics import SemanticTable

CATEGORIES = ["chair", "sofa", "table", "wall", "floor"]
OBJECTNAV_AGENT = NavSettings(agent_radius=0.18, agent_height=0.88)


def box(lo, hi):
    """(vertices [8, 3], triangles [12, 3]) of an axis-aligned box, outward faces."""
    x0, y0, z0 = lo
    x1, y1, z1 = hi
    v = np.array([[x, y, z] for x in (x0, x1) for y in (y0, y1) for z in (z0, z1)], float)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    t = []
    for a, b, c, d in quads:
        t += [[a, b, c], [a, c, d]]
    t = np.array(t)
    c = v.mean(0)
    p = v[t]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    flip = np.einsum("ij,ij->i", n, p.mean(1) - c) < 0
    t[flip] = t[flip][:, ::-1]
    return v, t


@dataclass
class SemanticScene:
    vertices: np.ndarray
    triangles: np.ndarray
    tri_object: np.ndarray
    table: SemanticTable
    navmesh: object


class _Builder:
    def __init__(self):
        self.v, self.t, self.obj = [], [], []
        self.n = 0
        self.rows = []  # (id, category, name, aabb)

    def add(self, lo, hi, oid=0, category=None, name=""):
        v, t = box(lo, hi)
        self.v.append(v)
        self.t.append(t + self.n)
        self.obj.append(np.full(len(t), oid, np.int32))
        self.n += len(v)
        if category is not None:
            self.rows.append((oid, CATEGORIES.index(category), name, [*lo, *hi]))

    def scene(self, settings=OBJECTNAV_AGENT) -> SemanticScene:
        v, t = np.concatenate(self.v), np.concatenate(self.t)
        ids = np.array([r[0] for r in self.rows], np.int32)
        aabb = np.array([r[3] for r in self.rows], np.float32)
        pts = np.stack([np.array([[x, y, z] for x in (a[0], a[3]) for y in (a[1], a[4]) for z in (a[2], a[5])],
                                 np.float32) for a in aabb])
        table = SemanticTable(ids=ids, category=np.array([r[1] for r in self.rows], np.int32),
                              raw_names=[r[2] for r in self.rows], region=np.full(len(ids), -1, np.int32),
                              aabb=aabb, points=pts, categories=list(CATEGORIES))
        nav = build_navmesh((v, t), settings)
        return SemanticScene(v, t, np.concatenate(self.obj), table, nav)


def two_rooms() -> SemanticScene:
    """The scene of the module doc (built fresh: about a second with its navmesh)."""
    b = _Builder()
    b.add((-0.5, -0.1, -0.5), (8.5, 0.0, 6.5))                 # floor slab
    for lo, hi in [((-0.2, 0, -0.2), (8.2, 2.6, 0.0)), ((-0.2, 0, 6.0), (8.2, 2.6, 6.2)),
                   ((-0.2, 0, 0.0), (0.0, 2.6, 6.0)), ((8.0, 0, 0.0), (8.2, 2.6, 6.0)),
                   ((4.0, 0, 0.0), (4.15, 2.6, 2.5)), ((4.0, 0, 3.5), (4.15, 2.6, 6.0))]:
        b.add(lo, hi)                                           # walls; door z in [2.5, 3.5]
    b.add((1.0, 0, 1.0), (1.5, 0.9, 1.5), 1, "chair", "chair_a")
    b.add((2.0, 0, 4.0), (3.2, 0.75, 4.8), 3, "table", "dining table")
    b.add((6.5, 0, 1.0), (7.0, 0.9, 1.5), 2, "chair", "chair_b")
    b.add((5.5, 0, 5.0), (7.3, 0.8, 5.8), 4, "sofa", "sofa")
    # chair 5 sealed in a closed crate: annotated, but no view point can see it
    b.add((7.0, 0, 3.0), (7.6, 1.2, 3.6))
    b.add((7.15, 0.05, 3.15), (7.45, 0.5, 3.45), 5, "chair", "stored chair")
    return b.scene()


def two_levels() -> SemanticScene:
    """A lower floor (y = 0, x < 8.4) with a table, stairs (8 rises of 0.15 m) up to an upper floor
    (y = 1.2, x > 8.4) with a chair; no walls."""
    b = _Builder()
    b.add((0.0, -0.1, 0.0), (8.4, 0.0, 4.0))                   # lower floor
    for k in range(1, 9):
        b.add((6.0 + 0.3 * (k - 1), 0.0, 1.0), (8.4, 0.15 * k, 3.0))  # step k
    b.add((8.4, 0.0, 0.0), (13.0, 1.2, 4.0))                   # upper floor block
    b.add((2.0, 0.0, 1.5), (3.0, 0.75, 2.5), 1, "table", "table")
    b.add((11.0, 1.2, 1.75), (11.5, 2.1, 2.25), 2, "chair", "chair")
    return b.scene()


def synth_semantic_scene(tmp, name: str = "Allensville", layout: str = "gibson"):
    """A synth scan annotated by synth (HM3D-Semantics files) and converted by the real pipeline
    (tests/semantic_fixtures.py), read back as ObjectNav reads it (``semantic_scene``), with an
    ObjectNav-agent navmesh. Returns (SemanticScene, SceneInfo)."""
    from bps_assets.nav.objectnav_episodes import semantic_scene
    from semantic_fixtures import synth_semantic_scene as converted

    out, info, _ = converted(tmp, layout, name=name)
    v, t, tri_object, table = semantic_scene(out)
    return SemanticScene(v, t, tri_object, table, build_navmesh((v, t), OBJECTNAV_AGENT)), info
