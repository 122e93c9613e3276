"""Annotated synthetic scans: the HM3D-Semantics and MP3D annotation files of a synth scene,
with ground truth, so the semantic path is tested without the licensed data.

Every surface of a scene belongs to an object: per room its floor (door thresholds included),
walls (jambs and lintels included) and ceiling, the stair flight, and each piece of furniture.
Labels are real category names: table, chair, sofa, cabinet, shelf, railing; a platform is
labelled ``bed``; boxes take, in turn, ``toilet``, ``potted plant``, ``tv`` and ``box`` (so the
six ObjectNav goals chair, bed, plant, toilet, tv_monitor, sofa occur). The render scan itself
is unchanged: the annotation mesh has the scan's exact geometry.

``write_hm3d`` writes ``NAME.semantic.glb`` (flat colour per face through a PNG colour texture
of 4x4-texel cells, one per object; or vertex colours) and ``NAME.semantic.txt``;
``write_mp3d`` writes ``ID_semantic.ply`` (binary, face ``object_id``) and ``ID.house`` (C, O,
R records). ``truth`` gives the objects and the count per mpcat40 category that a converted
scene's object table must reproduce. Writes are atomic; existing files need ``overwrite``.
"""
from __future__ import annotations

import hashlib
import io
import os

import numpy as np

from ..container import atomic_write
from ..readers.semantic_categories import map_raw, mpcat40
from ..semantics import ObjectRecord
from . import _build, geometry
from .names import semantic_paths

FURNITURE_LABEL = {"table": "table", "chair": "chair", "sofa": "sofa", "cabinet": "cabinet",
                   "shelf": "shelf", "platform": "bed", "rail": "railing"}
BOX_LABELS = ("toilet", "potted plant", "tv", "box")
CELL = 4  # texels per object cell side in the colour texture


def annotate(layout: str, name: str, seed: int = 0, size: str = "small"):
    """(positions float32 [V,3] file frame, indices uint32 [T,3], tri_object int32 [T],
    objects [ObjectRecord]) of a synth scene; the geometry is the scan's."""
    b = _build(layout, name, seed, size)
    rng_mesh, _, sseed = b.rngs
    arr = geometry.mesh_quads(b.quads, b.cell, rng_mesh, noise_seed=sseed)
    owners = b.quads.owner
    key_id: dict = {}
    objects: list[ObjectRecord] = []
    boxes = 0
    rooms = {r.id: r for r in b.plan.rooms}
    for ow in owners:
        if ow in key_id:
            continue
        kind, i = ow
        if kind == "furniture":
            f = b.plan.furniture[i]
            if f.kind == "box":
                label, boxes = BOX_LABELS[boxes % len(BOX_LABELS)], boxes + 1
            else:
                label = FURNITURE_LABEL.get(f.kind, f.kind)
            region = f.room
        else:
            label, region = kind, (i if i in rooms else -1)
        oid = len(objects) + 1
        key_id[ow] = oid
        objects.append(ObjectRecord(oid, label, region, oid, _colour(oid, sseed)))
    quad_obj = np.array([key_id[o] for o in owners], np.int32)
    return arr.positions, arr.indices, quad_obj[arr.tri_quad], objects


def _colour(oid: int, seed: int) -> int:
    """A distinct, non-black 0xRRGGBB per object id (HM3D colours look random too)."""
    h = int.from_bytes(hashlib.sha256(f"{seed}/{oid}".encode()).digest()[:3], "big")
    return (h & 0xEFF000) | 0x100000 | (oid & 0xFFF)   # low 12 bits: the id, so colours differ


def truth(objects: list[ObjectRecord]) -> dict:
    """Ground truth: object count and count per mpcat40 category name (unmatched: "")."""
    names = mpcat40()
    counts: dict[str, int] = {}
    for o in objects:
        c = map_raw(o.raw_name)
        k = names[c] if c >= 0 else ""
        counts[k] = counts.get(k, 0) + 1
    return {"objects": len(objects), "categories": dict(sorted(counts.items()))}


def _write_pair(scene_path, layout: str, data: tuple[bytes, bytes], overwrite: bool) -> None:
    """Write ``data`` to ``names.semantic_paths(scene_path, layout)`` (``layout``: whose pair,
    gibson -> HM3D's, mp3d -> MP3D's), atomically; every target is checked before anything is
    written."""
    targets = dict(zip(semantic_paths(scene_path, layout), data))
    if not overwrite:
        for t in targets:
            if t.exists():
                from ..errors import OutputExistsError
                raise OutputExistsError(t, "already exists (pass overwrite / --overwrite to replace it)")
    for t, data in targets.items():
        t.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(t, lambda f, data=data: f.write(data), overwrite=overwrite)


def hm3d_files(positions, indices, tri_object, objects, colours: str = "texture") -> tuple[bytes, str]:
    """(semantic GLB bytes, semantic.txt text) of an annotation; ``colours``: texture | vertex."""
    from ..scene import Material, Mesh, SceneDocument, Texture
    from ..writers.glb import GlbOptions, build_glb, encode_image

    t = tri_object.astype(np.int64)
    col = np.array([0] + [o.color for o in objects], np.int64)
    tri = indices.astype(np.int64)
    # one vertex per corner: faces of different objects never share a vertex colour or UV
    pos = positions[tri.reshape(-1)]
    idx = np.arange(len(pos), dtype=np.uint32).reshape(-1, 3)
    doc = SceneDocument(source_format="synth-semantic")
    encoded = []
    if colours == "vertex":
        rgb = np.stack([(col >> 16) & 255, (col >> 8) & 255, col & 255], 1)[np.repeat(t, 3)]
        c = np.concatenate([rgb / 255.0, np.ones((len(rgb), 1))], 1).astype(np.float32)
        doc.meshes.append(Mesh(positions=pos, indices=idx, colors=c, name="semantic"))
    else:
        n = int(np.ceil(np.sqrt(len(objects) + 1)))
        side = 1 << int(np.ceil(np.log2(max(1, n * CELL))))
        img = np.zeros((side, side, 4), np.uint8)
        img[..., 3] = 255
        cells = side // CELL
        for k in range(len(objects) + 1):  # cell 0: black, "no object"
            r, c = divmod(k, cells)
            img[r * CELL:(r + 1) * CELL, c * CELL:(c + 1) * CELL, :3] = [(col[k] >> 16) & 255, (col[k] >> 8) & 255, col[k] & 255]
        r, c = np.divmod(t, cells)
        uv = np.stack([(c * CELL + CELL / 2) / side, (r * CELL + CELL / 2) / side], 1).astype(np.float32)
        doc.textures.append(Texture(img, source="synth:semantic", name="semantic"))
        doc.materials.append(Material(name="semantic", texture=0))
        doc.meshes.append(Mesh(positions=pos, indices=idx, uvs=np.repeat(uv, 3, axis=0), material=0, name="semantic"))
        encoded.append(encode_image(img, "png", GlbOptions(png_compress_level=1)))
    glb = b"".join(bytes(ch) for ch in build_glb(doc, GlbOptions(generator="bps_assets.synth"), encoded_images=encoded or None))
    lines = ["HM3D Semantic Annotations"] + [f'{o.id},{o.color:06X},"{o.raw_name}",{o.region}' for o in objects]
    return glb, "\n".join(lines) + "\n"


def mp3d_files(positions, indices, tri_object, objects, name: str) -> tuple[bytes, str]:
    """(semantic PLY bytes, .house text) of an annotation (habitat's PLY layout, Z up)."""
    v = len(positions)
    head = (f"ply\nformat binary_little_endian 1.0\nelement vertex {v}\nproperty float x\nproperty float y\n"
            f"property float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\n"
            f"element face {len(indices)}\nproperty list uchar int vertex_indices\nproperty int object_id\n"
            "end_header\n").encode()
    vd = np.zeros(v, [("p", "<f4", 3), ("c", "u1", 3)])
    vd["p"] = positions
    vd["c"] = 128
    fd = np.zeros(len(indices), [("n", "u1"), ("i", "<i4", 3), ("o", "<i4")])
    fd["n"] = 3
    fd["i"] = indices.astype(np.int32)
    # habitat: the O record index, -1 none; index = our id, so O 0 is a placeholder no face uses
    # (habitat's sensor reads object 0 as 0, which is also "no object")
    fd["o"] = np.where(tri_object > 0, tri_object, -1).astype(np.int32)
    buf = io.BytesIO()
    buf.write(head)
    buf.write(vd.tobytes())
    buf.write(fd.tobytes())
    raws = sorted({o.raw_name for o in objects})
    cat_of = {r: i for i, r in enumerate(raws)}
    names = mpcat40()
    lo, hi = positions.min(0), positions.max(0)
    regions = sorted({o.region for o in objects if o.region >= 0})
    out = ["ASCII 1.1",
           f"H {name} house 0 0 0 0 0 {len(objects) + 1} {len(raws)} {len(regions)} 0 1  0 0 0 0 0  "
           f"{lo[0]:.4f} {lo[1]:.4f} {lo[2]:.4f} {hi[0]:.4f} {hi[1]:.4f} {hi[2]:.4f}  0 0 0 0 0",
           f"L 0 {len(regions)} level  0 0 0  {lo[0]:.4f} {lo[1]:.4f} {lo[2]:.4f} {hi[0]:.4f} {hi[1]:.4f} {hi[2]:.4f}  0 0 0 0 0"]
    out += [f"R {r} 0 0 0 z  0 0 0  0 0 0 0 0 0  2.5  0 0 0 0" for r in regions]
    for r, i in cat_of.items():
        m = map_raw(r)
        out.append(f"C {i} {i + 1} {r.replace(' ', '#')} {m} {names[m] if m >= 0 else 'misc'} 0 0 0 0 0")
    out.append("O 0 -1 -1 0 0 0  1 0 0  0 1 0  0 0 0 0 0 0 0 0 0 0 0")   # the placeholder object 0
    for o in objects:
        sel = tri_object == o.id
        p = positions[indices[sel].reshape(-1)] if sel.any() else np.zeros((1, 3), np.float32)
        c, rad = (p.min(0) + p.max(0)) / 2, (p.max(0) - p.min(0)) / 2
        out.append(f"O {o.id} {o.region} {cat_of[o.raw_name]} {c[0]:.4f} {c[1]:.4f} {c[2]:.4f}  1 0 0  0 1 0  "
                   f"{rad[0]:.4f} {rad[1]:.4f} {rad[2]:.4f} 0 0 0 0 0 0 0 0")
    return buf.getvalue(), "\n".join(out) + "\n"


def write_hm3d(scene_path: str | os.PathLike, layout: str, name: str, seed: int = 0, size: str = "small",
               colours: str = "texture", overwrite: bool = False, y_up: bool = False) -> dict:
    """Write the HM3D-Semantics pair beside ``scene_path``; returns ``truth``. ``y_up``: turn the
    annotation mesh Y-up as HM3D stages are (for a scan written Y-up)."""
    pos, idx, tri_obj, objects = annotate(layout, name, seed, size)
    if y_up:
        pos = np.stack([pos[:, 0], pos[:, 2], -pos[:, 1]], axis=1).astype(np.float32)
    glb, txt = hm3d_files(pos, idx, tri_obj, objects, colours)
    _write_pair(scene_path, "gibson", (glb, txt.encode()), overwrite)
    return truth(objects)


def write_mp3d(scene_path: str | os.PathLike, layout: str, name: str, seed: int = 0, size: str = "small",
               overwrite: bool = False) -> dict:
    """Write the MP3D pair (``ID_semantic.ply``, ``ID.house``) beside ``scene_path``; returns ``truth``."""
    pos, idx, tri_obj, objects = annotate(layout, name, seed, size)
    ply, house = mp3d_files(pos, idx, tri_obj, objects, name)
    _write_pair(scene_path, "mp3d", (ply, house.encode()), overwrite)
    return truth(objects)
