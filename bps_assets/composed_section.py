"""The packed scene's optional instance table (composed scenes; docs/FORMAT.md 5.7).

A composed scene file is a ``SCEN`` file whose geometry is the stage (in the habitat frame)
plus an instance table placing assets of the dataset's asset library (``assets/KEY.bps``, each
a plain ``SCEN`` file in the asset's own coordinates). Header key ``composed``: ``instances`` N,
``assets`` (``key``, ``path`` relative to the scene file, ``source``), ``categories``, ``names``
and ``kinds`` (N each), ``motion_types`` (== ``MOTION_TYPES``), ``skipped``, ``notes``. Sections,
N rows each: ``instance_asset`` i4, ``instance_transform`` f8 [N,4,4] (asset -> world),
``instance_semantic`` i4 (habitat's semantic id), ``instance_category`` i4 (into ``categories``,
-1 none), ``instance_motion`` u1 (into ``motion_types``), ``instance_group`` i4 (the scene-instance
entry: an articulated object's links share one). Caps before reading: N <= 2^17, assets <= N + 1,
4096 categories; every header field's type and length is checked before use (a CorruptFileError
naming the file and the field). ``expand``: the flattened ``PackedScene`` given an asset reader
(object ids = group + 1, bps's own numbering); ``habitat_view``: the ids the sensor reports.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import CorruptFileError, is_int
from .semantics import SemanticTable

HEADER_KEY = "composed"
MAX_INSTANCES = 1 << 17
MAX_CATEGORIES = 4096
# the largest semantic id (bps_runtime.render.semantic.MAX_INSTANCE_ID, the semantic sensor's
# observation bound); the runtime's category table sizes by objects, not by this
MAX_SEMANTIC_ID = 1 << 20
MOTION_TYPES = ("STATIC", "KINEMATIC", "DYNAMIC")   # index = the code in ``instance_motion``
KINDS = ("object", "articulated")                   # an instance: a rigid object or a URDF link
LAYOUT = {
    "instance_asset": (("i4",), ()), "instance_transform": (("f8",), (4, 4)),
    "instance_semantic": (("i4",), ()), "instance_category": (("i4",), ()),
    "instance_motion": (("u1",), ()), "instance_group": (("i4",), ()),
}
FIELDS = tuple(LAYOUT)


def _err(path, msg, section=None):
    if section is None:
        return CorruptFileError(path, f"header: {HEADER_KEY}: {msg}")
    return CorruptFileError(path, msg, section=section)


def instance_count(path, header: dict) -> int | None:
    """N from the header (None: not a composed scene), checked against the caps."""
    c = header.get(HEADER_KEY)
    if c is None:
        return None
    if not isinstance(c, dict):
        raise _err(path, "not an object")
    n = c.get("instances")
    if not is_int(n) or not 0 <= n <= MAX_INSTANCES:
        raise _err(path, f"instances missing or not in [0, {MAX_INSTANCES}]")
    assets, cats = c.get("assets"), c.get("categories")
    if not isinstance(assets, list) or len(assets) > n + 1:
        raise _err(path, "assets is not a list of at most instances + 1 entries")
    if not isinstance(cats, list) or len(cats) > MAX_CATEGORIES or not all(isinstance(x, str) for x in cats):
        raise _err(path, f"categories is not a list of at most {MAX_CATEGORIES} names")
    for i, a in enumerate(assets):
        p = a.get("path") if isinstance(a, dict) else None
        if not isinstance(p, str) or os.path.isabs(p) or not p.startswith("../assets/") or ".." in p[3:].split("/"):
            raise _err(path, f"assets[{i}].path must be ../assets/NAME.bps")
        if not all(isinstance(a.get(k), str) for k in ("key", "source")):
            raise _err(path, f"assets[{i}]: key and source must be strings")
    if c.get("motion_types") != list(MOTION_TYPES):
        raise _err(path, f"motion_types is not {list(MOTION_TYPES)}")
    for key, typ in (("skipped", list), ("notes", list), ("stage", dict), ("source", str)):
        if not isinstance(c.get(key, typ()), typ):
            raise _err(path, f"{key} is not a JSON {({list: 'array', dict: 'object', str: 'string'})[typ]}")
    if not isinstance(c.get("navmesh"), (str, type(None))):
        raise _err(path, "navmesh is neither a path string nor null")
    if not isinstance(c.get("navmesh_unknown"), (str, type(None))):   # absent: packed before the key
        raise _err(path, "navmesh_unknown is neither a handle string nor null")
    if not isinstance(c.get("navmesh_missing"), (str, type(None))):
        raise _err(path, "navmesh_missing is neither a path string nor null")
    return n


def section_rows(path, header: dict) -> dict[str, int]:
    """Rows of every instance section: N (0 without a ``composed`` key: the sections are then refused)."""
    n = instance_count(path, header) or 0
    return {name: n for name in LAYOUT}


@dataclass
class InstanceTable:
    """A composed scene's instance table (numpy) and its header object."""

    header: dict
    asset: np.ndarray
    transform: np.ndarray
    semantic: np.ndarray
    category: np.ndarray
    motion: np.ndarray
    group: np.ndarray

    @property
    def count(self) -> int:
        return int(self.asset.shape[0])

    def motion_type(self, i: int) -> str:
        return MOTION_TYPES[int(self.motion[i])]


def check(path, header: dict, a: dict) -> InstanceTable:
    """Checks once the sections are read (their rows checked against N): ``names`` and ``kinds``
    hold N entries each, indices in range, finite transforms."""
    c = header[HEADER_KEY]
    n = int(a["instance_asset"].shape[0])
    for key, allowed in (("names", None), ("kinds", KINDS)):
        v = c.get(key)
        if not isinstance(v, list) or len(v) != n:
            raise _err(path, f"{key} is not a list of {n} entries (one per instance)")
        bad = next((i for i, x in enumerate(v) if not isinstance(x, str) or (allowed and x not in allowed)), None)
        if bad is not None:
            raise _err(path, f"{key}[{bad}] {v[bad]!r} is not {'one of ' + ', '.join(allowed) if allowed else 'a string'}")
    n_assets, n_cat = len(c["assets"]), len(c["categories"])
    if a["instance_asset"].size and (a["instance_asset"].min() < 0 or a["instance_asset"].max() >= n_assets):
        raise _err(path, f"asset index outside 0..{n_assets - 1}", "instance_asset")
    if a["instance_category"].size and (a["instance_category"].min() < -1 or a["instance_category"].max() >= n_cat):
        raise _err(path, f"category index outside -1..{n_cat - 1}", "instance_category")
    if a["instance_motion"].size and a["instance_motion"].max() >= len(MOTION_TYPES):
        raise _err(path, "motion type code above 2", "instance_motion")
    if not np.isfinite(a["instance_transform"]).all():
        raise _err(path, "non-finite transform", "instance_transform")
    bad = semantic_id_problem(a["instance_semantic"], c["names"])
    if bad:
        raise _err(path, bad, "instance_semantic")
    g = a["instance_group"]   # an entry of a scene instance file: fewer than MAX_INSTANCES (its cap)
    if g.size and (g.min() < 0 or g.max() >= MAX_INSTANCES):
        raise _err(path, f"group outside 0..{MAX_INSTANCES - 1}", "instance_group")
    return InstanceTable(c, *(a[f] for f in FIELDS))


def semantic_id_problem(ids, names) -> str | None:
    """Why habitat semantic ids ``ids`` (of the instances ``names``) cannot be a composed scene's
    ``instance_semantic`` (outside 0..``MAX_SEMANTIC_ID``), or None. Packing and reading check it."""
    ids = np.asarray(ids, np.int64)
    bad = np.flatnonzero((ids < 0) | (ids > MAX_SEMANTIC_ID))
    if not bad.size:
        return None
    i = int(bad[0])
    return (f"instance {names[i]!r}: semantic_id {int(ids[i])} outside 0..{MAX_SEMANTIC_ID} (the semantic "
            "sensor's id cap)")


def read_table(path, container) -> InstanceTable:
    """The instance table of an open ``Container`` (its header already checked by the reader)."""
    n = instance_count(path, container.header)
    if n is None:
        raise _err(path, "not a composed scene (no composed header key)")
    return check(path, container.header, {f: container.read(f) for f in FIELDS})


def asset_path(scene_path, entry: dict) -> Path:
    """The asset file an ``assets`` entry names, beside the scene's folder."""
    return Path(scene_path).resolve().parent / entry["path"]


def expand(scene, table: InstanceTable, want: list[str], read, motions=None):
    """``scene`` (the stage, a PackedScene) with every instance's asset appended in world space.

    ``read(path, sections)`` reads an asset (``read_packed_scene``); ``motions``: the motion
    types kept (None: all). Semantics: one object per instance group (id = group + 1, category
    and habitat semantic id from the table); the stage's own semantic section is dropped."""
    keep = [i for i in range(table.count) if motions is None or table.motion_type(i) in motions]
    cache: dict[int, object] = {}
    parts = [(scene, np.eye(4), 0)]
    asset_want = [f for f in want if not f.startswith("object_") and f != "tri_object"]
    if "object_aabb" in want and "positions" not in asset_want:  # boxes come from the assets' vertices
        asset_want.append("positions")
    for i in keep:
        a = int(table.asset[i])
        if a not in cache:
            cache[a] = read(asset_path(scene.path, table.header["assets"][a]), asset_want)
        parts.append((cache[a], table.transform[i], int(table.group[i]) + 1))
    return _merge(scene, parts, want, table)


def habitat_view(sem: SemanticTable) -> tuple[np.ndarray, SemanticTable]:
    """What the semantic sensor of a composed scene reports: habitat-sim's semantic id of the hit
    instance (its config's ``semantic_id``, 0 when unset or for the stage), not ``expand``'s
    group + 1. Returns ``lut`` (int32, indexed by group + 1: the id rendered for it) and the
    table keyed by those ids (ids > 0; a box the union of its instances'; the category -1 where
    instances sharing an id disagree) that the env's category table is filled from."""
    ids = np.asarray(sem.ids, np.int64)
    src = np.asarray(sem.source_ids if sem.source_ids is not None else ids, np.int64)
    lut = np.zeros(int(ids.max(initial=0)) + 1, np.int32)
    lut[ids] = src
    keep = sorted({int(x) for x in src if x > 0})
    rows = [np.flatnonzero(src == k) for k in keep]
    cat = [int(sem.category[r[0]]) if (sem.category[r] == sem.category[r[0]]).all() else -1 for r in rows]
    box = [np.concatenate([sem.aabb[r, :3].min(0), sem.aabb[r, 3:].max(0)]) for r in rows]
    table = SemanticTable(ids=np.array(keep, np.int32), category=np.array(cat, np.int32),
                          raw_names=[sem.raw_names[r[0]] for r in rows], region=np.full(len(keep), -1, np.int32),
                          aabb=np.array(box, np.float32).reshape(-1, 6), points=np.zeros((len(keep), 0, 3), np.float32),
                          categories=list(sem.categories), source_ids=np.array(keep, np.int64))
    return lut, table


def check_expanded_totals(path, vertices: int, triangles: int, materials: int) -> None:
    """The flattened scene's totals (stage plus every instance's asset) fit its int32 indices
    (vertex, triangle and material ids; textures never outnumber materials). The merge and
    ``verify --deep`` (from the headers' counts, nothing merged) both call this."""
    if vertices >= 2**31 or triangles >= 2**31:
        raise CorruptFileError(path, "the expanded scene exceeds 2^31 vertices or triangles")
    if materials >= 2**31:
        raise CorruptFileError(path, "the expanded scene exceeds 2^31 materials")


def _merge(scene, parts, want, table):
    out = type(scene)(header=dict(scene.header), path=scene.path)
    hdr = out.header
    nv = [p.header["counts"]["vertices"] for p, _, _ in parts]
    nt = [p.header["counts"]["triangles"] for p, _, _ in parts]
    nm = [p.header["counts"]["materials"] for p, _, _ in parts]
    ntex = [len(p.header.get("textures") or []) for p, _, _ in parts]
    nk = [p.header["counts"]["meshlets"] for p, _, _ in parts]
    voff, toff, moff, texoff, koff = (np.concatenate([[0], np.cumsum(x)]).astype(np.int64) for x in (nv, nt, nm, ntex, nk))
    check_expanded_totals(scene.path, int(voff[-1]), int(toff[-1]), int(moff[-1]))

    def cat(fn):
        arrs = [fn(p, m, j) for j, (p, m, _) in enumerate(parts)]
        if any(a is None for a in arrs):
            return None
        return np.concatenate(arrs).astype(arrs[0].dtype, copy=False)

    def xf(pts, m):
        return (pts.astype(np.float64) @ m[:3, :3].T + m[:3, 3]).astype(np.float32)

    def flip(m):
        return np.linalg.det(m[:3, :3]) < 0   # a mirror turns triangles over: keep them CCW

    if "positions" in want:   # each part's placed vertices, computed once: boxes read them here too
        out.positions = cat(lambda p, m, j: xf(p.positions, m))

        def placed(j):
            return out.positions[voff[j]:voff[j + 1]]
    else:   # only asked for parts with positions (_semantics checks first)
        def placed(j):
            p, m, _ = parts[j]
            return xf(p.positions, m)
    if "indices" in want:
        out.indices = cat(lambda p, m, j: ((p.indices[:, ::-1] if flip(m) else p.indices)
                                                       .astype(np.int64) + voff[j]).astype(np.uint32))
    if "uvs" in want:
        out.uvs = cat(lambda p, m, j: p.uvs)
    if "colors" in want and any(p.colors is not None for p, _, _ in parts):
        out.colors = np.concatenate([p.colors if p.colors is not None else np.full((nv[j], 4), 255, np.uint8)
                                     for j, (p, _, _) in enumerate(parts)])
    if "tri_material" in want:
        out.tri_material = cat(lambda p, m, j: p.tri_material + np.int32(moff[j]))
    if "material_color" in want:
        out.material_color = cat(lambda p, m, j: p.material_color)
    if "material_texture" in want:
        out.material_texture = cat(lambda p, m, j: np.where(
            p.material_texture >= 0, p.material_texture + np.int32(texoff[j]), -1).astype(np.int32))
    if "tex_blocks" in want or "tex_levels" in want:
        boff, blocks, levels = 0, [], []
        for j, (p, _, _) in enumerate(parts):
            if p.tex_blocks is None or p.tex_levels is None:
                break
            b = p.tex_blocks
            pad = (-b.size) % 16
            blocks.append(np.concatenate([b, np.zeros(pad, np.uint8)]) if pad else b)
            lv = p.tex_levels.copy()
            lv[:, 0] += texoff[j]
            lv[:, 4] += boff
            levels.append(lv)
            boff += b.size + pad
        else:
            out.tex_blocks = np.concatenate(blocks) if "tex_blocks" in want else None
            out.tex_levels = np.concatenate(levels) if "tex_levels" in want else None
    if "meshlet_tris" in want:
        out.meshlet_tris = cat(lambda p, m, j: None if p.meshlet_tris is None
                               else p.meshlet_tris + np.array([toff[j], 0]))
    if "chunk_tris" in want:
        out.chunk_tris = cat(lambda p, m, j: p.chunk_tris + np.array([toff[j], 0]))
    if "chunk_meshlets" in want:
        out.chunk_meshlets = cat(lambda p, m, j: None if p.chunk_meshlets is None
                                 else p.chunk_meshlets + np.array([koff[j], 0]))
    for f in ("meshlet_spheres", "chunk_spheres"):
        if f in want:
            def sph(p, m, j, f=f):
                s = getattr(p, f)
                if s is None:
                    return None
                r = s[:, 3:] * np.linalg.norm(m[:3, :3], axis=0).max()
                return np.concatenate([xf(s[:, :3], m), r.astype(np.float32)], axis=1)
            setattr(out, f, cat(sph))
    counts = dict(hdr["counts"])
    counts.update(triangles=int(toff[-1]), vertices=int(voff[-1]), materials=int(moff[-1]),
                  textures=int(texoff[-1]), meshlets=int(koff[-1]),
                  chunks=int(sum(p.header["counts"]["chunks"] for p, _, _ in parts)),
                  texture_levels=int(sum(p.header["counts"]["texture_levels"] for p, _, _ in parts)))
    hdr["counts"] = counts
    hdr["textures"] = [t for p, _, _ in parts for t in (p.header.get("textures") or [])]
    hdr["expanded"] = {"instances": len(parts) - 1}
    _semantics(out, parts, nt, want, table, placed)
    if out.positions is not None and len(out.positions):
        hdr["bounds"] = {"min": out.positions.min(0).tolist(), "max": out.positions.max(0).tolist()}
    return out


def _semantics(out, parts, nt, want, table, placed) -> None:
    """One semantic object per instance group that has triangles (id = group + 1); its box from
    its parts' vertices in world space (``placed(j)``: part j's, as the merge places them)."""
    from .semantic_section import FIELDS as SEM
    for f in SEM:
        setattr(out, f, None)
    out.header.pop("semantics", None)
    groups = sorted({g for _, _, g in parts if g > 0})
    if not groups or not any(f in want for f in SEM):
        return
    c = table.header
    gi = {g: np.flatnonzero(table.group == g - 1)[0] for g in groups}
    if "tri_object" in want:
        out.tri_object = np.concatenate([np.full(n, g, np.int32) for (_, _, g), n in zip(parts, nt)])
    out.object_ids = np.array(groups, np.int32)
    out.object_category = np.array([table.category[gi[g]] for g in groups], np.int32)
    out.object_region = np.full(len(groups), -1, np.int32)
    out.object_source_ids = np.array([table.semantic[gi[g]] for g in groups], np.int64)
    lo = {g: np.full(3, np.inf) for g in groups}
    hi = {g: np.full(3, -np.inf) for g in groups}
    for j, (p, _, g) in enumerate(parts):   # each instance's box from its asset's vertices, placed
        if g > 0 and p.positions is not None and len(p.positions):
            # float32 vertices: rounding keeps order, so their box is the float64 box rounded
            w = placed(j)
            lo[g], hi[g] = np.minimum(lo[g], w.min(0)), np.maximum(hi[g], w.max(0))
    boxes = np.array([np.concatenate([lo[g], hi[g]]) if np.isfinite(lo[g]).all() else np.zeros(6)
                      for g in groups], np.float32).reshape(-1, 6)
    out.object_aabb = boxes
    out.object_points = np.zeros((0, 3), np.float32)
    out.header["semantics"] = {
        "objects": len(groups), "points_per_object": 0, "categories": list(c.get("categories", [])),
        "raw_names": [c["names"][gi[g]].split("/")[0] for g in groups],
        "source": {"format": "composed", "path": "", "warnings": {}}, "transfer": {}}
