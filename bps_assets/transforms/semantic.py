"""Ids of an annotated mesh onto the packed render mesh: ``tri_object`` and the object table.

The annotation mesh (HM3D ``.semantic.glb``, MP3D ``_semantic.ply``) is another mesh than the
render mesh, so ids reach render triangles by geometry, once, at conversion: each render
triangle is probed at ``samples`` points (its centroid and points towards its corners) by two
rays along its normal, from either side of a slab ``probe`` (metres) thick, cast with ``bps_assets.raycast``
against the annotation mesh, the hit nearest the probe point winning; the hit's id is the face's id or the annotation texel at the hit's UV (HM3D
paints boundaries inside faces). A probe that hits nothing takes the nearest annotation face
(its centroid, k-d tree). The triangle gets the majority id of its probes, ties to the
centroid's (4 bytes per triangle; accuracy: docs/ASSETS.md). ``split_mixed`` first cuts the
triangles a boundary crosses.

The table: a row per id some render triangle got (others: ``objects_without_triangles``):
mpcat40 category (MP3D's own, else the raw label mapped by data_manifests/semantics/ or the
``label_table`` file; unmatched labels counted), its render triangles' AABB, samples.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AnnotationError
from ..semantics import Annotation, SemanticTable

MISMATCH_ERROR = 0.5    # share above which the annotation is refused (most of it does not fit)
MISMATCH_WARN = 0.05    # share above which a warning line says what does not fit

# probe points (barycentric weights of corners 2 and 3): centroid first (it breaks ties)
_PROBES = np.array([[1 / 3, 1 / 3], [1 / 6, 1 / 6], [2 / 3, 1 / 6], [1 / 6, 2 / 3],
                    [0.45, 0.1], [0.1, 0.45], [0.45, 0.45]], np.float32)


@dataclass(frozen=True)
class Options:
    """Transfer settings: probes per triangle (1..7), slab half-thickness (m), samples per object."""
    samples: int = 4
    probe: float = 0.02
    points_per_object: int = 8
    seed: int = 0
    allow_mismatch: bool = False   # an annotation that mostly does not fit: a warning, not an error
    label_table: str = ""          # a habitat-sim mapping TSV for raw labels ("": data_manifests' table)


DEFAULTS = Options()


def annotation_ids(ann: Annotation, positions: np.ndarray, indices: np.ndarray,
                   bary: np.ndarray, tri: np.ndarray, probe: float) -> tuple[np.ndarray, int]:
    """Annotation id at points ``bary`` of render triangles ``tri``: (int32 ids, misses)."""
    from ..raycast import RayCaster

    p = positions[indices[tri].astype(np.int64)].astype(np.float64)       # [n, 3, 3]
    pts = p[:, 0] * (1 - bary[:, :1] - bary[:, 1:]) + p[:, 1] * bary[:, :1] + p[:, 2] * bary[:, 1:]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-30)
    cached = ann.__dict__.get("_bvh")
    if cached is None or cached[0] is not ann.positions:  # one BVH per annotation (and frame)
        ann.__dict__["_bvh"] = cached = (ann.positions, RayCaster(ann.positions, ann.indices, "semantic conversion"))
    caster = cached[1]
    best = np.full(len(pts), np.inf)
    face = np.full(len(pts), -1, np.int64)
    uv = np.zeros((len(pts), 2), np.float32)
    for sign in (1.0, -1.0):  # from both sides of the slab: the surface nearest the probe wins
        hit = caster.intersect(pts + sign * n * probe, -sign * n)
        f = np.asarray(hit["primID"], np.int64)
        d = np.abs(np.asarray(hit["tfar"], np.float64) - probe)
        take = (f >= 0) & (d <= probe) & (d < best)
        best[take], face[take] = d[take], f[take]
        uv[take] = np.stack([hit["u"], hit["v"]], 1)[take]
    ok = face >= 0
    ids = np.zeros(len(pts), np.int32)
    if ok.any():
        ids[ok] = ann.ids_at(face[ok], uv[ok])
    miss = ~ok
    if miss.any():
        from scipy.spatial import cKDTree
        cent = ann.positions[ann.indices].mean(1)
        _, f = cKDTree(cent).query(pts[miss])
        ids[miss] = ann.ids_at(np.asarray(f, np.int64), np.full((int(miss.sum()), 2), 1 / 3, np.float32))
    return ids, int(miss.sum())


BLOCK = 1 << 17  # triangles probed at a time: bounds the probe arrays (~100 MB at 7 probes)


def probe_ids(ann: Annotation, positions: np.ndarray, indices: np.ndarray, s: int,
              probe: float) -> tuple[np.ndarray, int]:
    """(int32 [T, s] ids at the first ``s`` probe points of every triangle, misses), in blocks."""
    t = int(indices.shape[0])
    out = np.zeros((t, s), np.int32)
    misses = 0
    for a in range(0, t, BLOCK):
        b = min(t, a + BLOCK)
        ids, m = annotation_ids(ann, positions, indices, np.tile(_PROBES[:s], (b - a, 1)),
                                np.repeat(np.arange(a, b), s), probe)
        out[a:b] = ids.reshape(b - a, s)
        misses += m
    return out, misses


def transfer_ids(ann: Annotation, positions: np.ndarray, indices: np.ndarray,
                 options: Options = DEFAULTS) -> tuple[np.ndarray, dict]:
    """(tri_object int32 [T], stats) for the render mesh ``positions``/``indices`` (same frame
    as ``ann``)."""
    t = int(indices.shape[0])
    s = max(1, min(int(options.samples), len(_PROBES)))
    if t == 0:
        return np.zeros(0, np.int32), {"probe_misses": 0}
    ids, misses = probe_ids(ann, positions, indices, s, options.probe)
    votes = (ids[:, :, None] == ids[:, None, :]).sum(2)          # [T, s]: agreeing probes
    out = ids[np.arange(t), np.argmax(votes, 1)].astype(np.int32)  # first max: centroid on ties
    mixed = int((ids != ids[:, :1]).any(1).sum())
    return out, {"probe_misses": misses, "mixed_triangles": mixed}


def object_table(ann: Annotation, positions: np.ndarray, indices: np.ndarray, tri_object: np.ndarray,
                 options: Options = DEFAULTS) -> tuple[SemanticTable, dict]:
    """The SemanticTable of the ids ``tri_object`` holds (see the module docstring)."""
    from ..readers.semantic_categories import label_mapper, mpcat40

    cats = mpcat40()
    map_raw = label_mapper(options.label_table)
    rec = {o.id: o for o in ann.objects}
    present = np.unique(tri_object[tri_object > 0])
    present = present[np.isin(present, np.fromiter(rec, np.int64, len(rec)))]
    o, k = len(present), int(options.points_per_object)
    aabb = np.full((o, 6), np.nan, np.float32)
    pts = np.full((o, k, 3), np.nan, np.float32)
    if o:
        tri_p = positions[indices.astype(np.int64)].astype(np.float64)   # [T, 3, 3]
        area = 0.5 * np.linalg.norm(np.cross(tri_p[:, 1] - tri_p[:, 0], tri_p[:, 2] - tri_p[:, 0]), axis=1)
        order = np.argsort(tri_object, kind="stable")
        sid = tri_object[order]
        starts = np.searchsorted(sid, present)
        ends = np.searchsorted(sid, present, side="right")
        rng = np.random.default_rng(options.seed)
        for i, (a, b) in enumerate(zip(starts, ends)):
            ts = order[a:b]
            q = tri_p[ts].reshape(-1, 3)
            aabb[i, :3], aabb[i, 3:] = q.min(0), q.max(0)
            w = area[ts]
            pick = ts[rng.choice(len(ts), k, p=w / w.sum())] if w.sum() > 0 else ts[np.arange(k) % len(ts)]
            r = rng.random((k, 2))
            flip = r.sum(1) > 1
            r[flip] = 1 - r[flip]
            c = tri_p[pick]
            pts[i] = c[:, 0] + r[:, :1] * (c[:, 1] - c[:, 0]) + r[:, 1:] * (c[:, 2] - c[:, 0])
    category, raw, region, source = [], [], [], []
    for i in present:
        r = rec[int(i)]
        ci = cats.index(r.category) if r.category in cats else map_raw(r.raw_name)
        category.append(ci)
        raw.append(r.raw_name)
        region.append(r.region)
        source.append(r.source_id)
    table = SemanticTable(ids=present.astype(np.int32), category=np.asarray(category, np.int32),
                          raw_names=raw, region=np.asarray(region, np.int32), aabb=aabb, points=pts,
                          categories=cats, source_ids=np.asarray(source, np.int64))
    names = [cats[c] if c >= 0 else "" for c in category]
    stats = {"objects": o, "objects_without_triangles": len(rec) - o,
             "categories": {n: names.count(n) for n in sorted(set(names))},
             "unmatched_objects": int((table.category < 0).sum()),
             "unmatched_labels": unmatched_labels(raw, category),
             "object_triangles": int(np.isin(tri_object, present).sum())}   # not MP3D's no-object id
    return table, stats


MAX_UNMATCHED_LABELS = 20  # distinct unmatched labels a scene records (most objects first)


def unmatched_labels(raw_names, category) -> dict[str, int]:
    """{raw label: objects} of the objects whose category is -1, most frequent first (at most
    ``MAX_UNMATCHED_LABELS`` labels)."""
    from collections import Counter

    n = Counter(r for r, c in zip(raw_names, category) if int(c) < 0)
    return dict(sorted(n.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_UNMATCHED_LABELS])


def transfer(ann: Annotation, positions: np.ndarray, indices: np.ndarray,
             options: Options = DEFAULTS) -> tuple[np.ndarray, SemanticTable, dict]:
    """(tri_object, table, stats): ``transfer_ids`` then ``object_table``."""
    tri_object, st = transfer_ids(ann, positions, indices, options)
    table, st2 = object_table(ann, positions, indices, tri_object, options)
    st = {**st, **st2, **{f"annotation_{k}": v for k, v in ann.warnings.items()}}
    probes = int(indices.shape[0]) * max(1, min(int(options.samples), len(_PROBES)))
    mismatch = check_fit(ann, st, probes, options.allow_mismatch)
    if mismatch:
        st["mismatch"] = mismatch
    return tri_object, table, st


def check_fit(ann: Annotation, stats: dict, probes: int, allow: bool = False) -> str:
    """"" when the annotation fits its scan; else one line saying what does not fit (shares
    above ``MISMATCH_WARN``). ``AnnotationError`` naming the annotation when a share is above
    ``MISMATCH_ERROR`` or no object reached the scan, unless ``allow``."""
    faces, objects = max(1, len(ann.indices)), len(ann.objects)
    w = ann.warnings
    shares = [(w.get("unknown_colour_faces", 0) / faces, "of the annotation's faces have a colour no table line names"),
              (w.get("uncoloured_faces", 0) / faces, "of the annotation's faces have no texture or colour"),
              (w.get("unused_objects", 0) / max(1, objects), "of the table's objects colour no face"),
              (stats.get("probe_misses", 0) / max(1, probes),
               "of the scan's probes hit no annotation surface (another scene's annotation, or scaled?)")]
    if objects and stats.get("objects", 0) == 0:
        shares.append((1.0, "of the table's objects reach the scan: none does"))
    bad = [(s, what) for s, what in shares if s > MISMATCH_WARN]
    if not bad:
        return ""
    line = "; ".join(f"{100 * s:.0f}% {what}" for s, what in bad)
    if not allow and max(s for s, _ in bad) > MISMATCH_ERROR:
        raise AnnotationError(ann.source or None, f"the annotation does not fit its scan: {line} (more than "
                                                  f"{100 * MISMATCH_ERROR:.0f}%; --allow-annotation-mismatch "
                                                  "converts it anyway)")
    return f"annotation mismatch: {line}"


def to_frame(ann: Annotation, matrix) -> Annotation:
    """Move ``ann`` into the frame a document's ``frame_matrix`` gives (once; in place)."""
    if ann.frame != "habitat":
        m = np.asarray(matrix, np.float64)
        ann.positions = (ann.positions.astype(np.float64) @ m[:3, :3].T + m[:3, 3]).astype(np.float32)
        ann.frame = "habitat"
    return ann


def _mixed(ann: Annotation, positions: np.ndarray, indices: np.ndarray, probe: float) -> np.ndarray:
    """Triangles whose 7 probes do not all see one id (an annotation boundary crosses them)."""
    ids, _ = probe_ids(ann, positions, indices, len(_PROBES), probe)
    return (ids != ids[:, :1]).any(1)


def _split4(mesh, sel: np.ndarray) -> None:
    """Cut triangles ``sel`` of ``mesh`` into 4 at their edge midpoints (attributes linear)."""
    tri = mesh.indices[sel].astype(np.int64)
    n0 = len(mesh.positions)
    k = len(tri)
    mids = {}
    for name in ("positions", "uvs", "colors", "normals"):
        a = getattr(mesh, name)
        if a is None:
            continue
        c = a[tri].astype(np.float64)                                   # [k, 3, d]
        m = np.concatenate([(c[:, 0] + c[:, 1]) / 2, (c[:, 1] + c[:, 2]) / 2, (c[:, 2] + c[:, 0]) / 2])
        mids[name] = np.concatenate([a, m.astype(a.dtype)])
    for name, a in mids.items():
        setattr(mesh, name, a)
    ab, bc, ca = n0 + np.arange(k), n0 + k + np.arange(k), n0 + 2 * k + np.arange(k)
    a_, b_, c_ = tri[:, 0], tri[:, 1], tri[:, 2]
    children = np.concatenate([np.stack(x, 1) for x in ((a_, ab, ca), (ab, b_, bc), (ca, bc, c_), (ab, bc, ca))])
    mesh.indices = np.concatenate([mesh.indices[~sel], children.astype(mesh.indices.dtype)])


def split_mixed(levels: int, ann: Annotation, options: Options = DEFAULTS):
    """Document transform factory: cut the triangles an annotation boundary crosses into 4^L
    children (L = ``levels``; each level re-probes the children), so per-triangle ids follow
    boundaries painted inside annotation faces. Needs the document in the habitat frame; moves
    ``ann`` there. Counts ``semantic_split_triangles`` (triangles cut) in ``doc.stats``."""
    def apply(doc):
        to_frame(ann, doc.frame_matrix)
        for mesh in doc.meshes:
            for _ in range(int(levels)):
                if not len(mesh.indices):
                    break
                sel = _mixed(ann, mesh.positions, mesh.indices, options.probe)
                if not sel.any():
                    break
                doc.count("semantic_split_triangles", int(sel.sum()))
                _split4(mesh, sel)
        return doc
    return apply
