"""HM3D-Semantics v0.2 annotations: ``NAME.semantic.txt`` + ``NAME.semantic.glb`` -> Annotation.

The table, as habitat-sim's ``SemanticScene::loadHM3DHouse`` reads it: the first line MUST be
``HM3D Semantic Annotations``; every other non-empty line is ``id,RRGGBB,"raw name",region``
(instance id, colour in hex, label, region id). Like habitat-sim we split it on its two quotes
(a label may hold commas; kept verbatim) and refuse (``AnnotationError``, file and line) what
it would misread: not two quotes, not two fields before the label and one after, a non-integer
id or region, an id outside [1, 2^20], a colour not 6 hex digits, a repeated id or colour, a
label over ``MAX_LABEL`` characters.

The mesh: the scan's geometry with a flat annotation colour per face, given by the base colour
texture (HM3D v0.2: its texels are painted per object, boundaries inside faces) or by vertex
colours (COLOR_0). Texels become ids through the table (``id_images``); a face colour or texel
colour in no table line is id 0 and counted (``unknown_colour_faces``), a table line whose
colour no face or texel uses is counted (``unused_objects``). Both are warnings, not errors.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import AnnotationError
from ..semantics import Annotation, ObjectRecord
from .guard import headed_lines

HEADER = "HM3D Semantic Annotations"
MAX_TABLE_BYTES = 64 << 20
MAX_OBJECT_ID = 1 << 20
MAX_LABEL = 4096


def parse_semantic_txt(path: str | os.PathLike, text: str | None = None) -> list[ObjectRecord]:
    """The object lines of a ``.semantic.txt`` (``text``: its content, else read from ``path``)."""
    spath = os.fspath(path)
    lines = headed_lines(spath, text, MAX_TABLE_BYTES, HEADER, AnnotationError)
    out: list[ObjectRecord] = []
    ids, colours = set(), {}
    for no, line in enumerate(lines[1:], start=2):
        def bad(msg, no=no):
            return AnnotationError(spath, f"line {no}: {msg}")

        if not line.strip():
            continue
        parts = line.split('"')
        if len(parts) != 3:
            raise bad(f"{len(parts) - 1} double quote(s); a line is id,RRGGBB,\"label\",region with the label "
                      "between two quotes (it may hold commas, not quotes)")
        head, name, tail = parts[0].split(","), parts[1], parts[2].strip()
        if len(head) != 3 or head[2].strip() or not tail.startswith(",") or "," in tail[1:]:
            raise bad("expected id,RRGGBB, before the quoted label and ,region after it")
        if len(name) > MAX_LABEL:
            raise bad(f"label of {len(name)} characters, more than {MAX_LABEL}")
        sid, hexc, reg = head[0].strip(), head[1].strip(), tail[1:].strip()
        try:
            oid, region = int(sid), int(reg)
        except ValueError:
            raise bad(f"id {sid!r} or region {reg!r} is not an integer") from None
        if not 1 <= oid <= MAX_OBJECT_ID:
            raise bad(f"id {oid} outside [1, {MAX_OBJECT_ID}]")
        if region < -1 or region > MAX_OBJECT_ID:
            raise bad(f"region {region} outside [-1, {MAX_OBJECT_ID}]")
        if len(hexc) != 6 or any(c not in "0123456789abcdefABCDEF" for c in hexc):
            raise bad(f"colour {hexc!r} is not 6 hex digits")
        col = int(hexc, 16)
        if oid in ids:
            raise bad(f"id {oid} appears twice")
        if col in colours:
            raise bad(f"colour {hexc} is also object {colours[col]}'s")
        ids.add(oid)
        colours[col] = oid
        out.append(ObjectRecord(oid, name, region, oid, col))
    return out


def _colour_keys(rgb: np.ndarray) -> np.ndarray:
    """0xRRGGBB int64 keys of uint8 [..., >=3] colours."""
    c = rgb[..., :3].astype(np.int64)
    return (c[..., 0] << 16) | (c[..., 1] << 8) | c[..., 2]


def colours_to_ids(keys: np.ndarray, objects: list[ObjectRecord]) -> np.ndarray:
    """int32 ids of 0xRRGGBB keys through the table (0 where no line has that colour)."""
    if not objects:
        return np.zeros(keys.shape, np.int32)
    table_c = np.array([o.color for o in objects], np.int64)
    table_i = np.array([o.id for o in objects], np.int32)
    order = np.argsort(table_c)
    table_c, table_i = table_c[order], table_i[order]
    pos = np.clip(np.searchsorted(table_c, keys), 0, len(table_c) - 1)
    return np.where(table_c[pos] == keys, table_i[pos], 0).astype(np.int32)


def read_hm3d_semantics(glb: str | os.PathLike, txt: str | os.PathLike) -> Annotation:
    """Read an HM3D-Semantics pair into an Annotation (positions in the glTF's frame, Y-up)."""
    from . import load

    objects = parse_semantic_txt(txt)
    doc = load(glb)
    pos, idx, uvs, fobj, fimg = [], [], [], [], []
    images: list[np.ndarray] = []
    tex_image: dict[int, int] = {}
    base = 0
    ann = Annotation(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int64), objects, source=os.fspath(glb))
    used_colours: set[int] = set()
    for m in doc.meshes:
        tri = m.indices.astype(np.int64)
        n = tri.shape[0]
        tex = doc.materials[m.material].texture if m.material is not None else None
        if tex is not None and m.uvs is not None:
            if tex not in tex_image:
                keys = _colour_keys(doc.textures[tex].rgba)
                used_colours.update(int(k) for k in np.unique(keys))
                tex_image[tex] = len(images)
                ids = colours_to_ids(keys, objects)
                del keys  # int64 per texel: the largest array here
                images.append(ids.astype(np.uint16) if max((o.id for o in objects), default=0) < 1 << 16 else ids)
            fimg.append(np.full(n, tex_image[tex], np.int32))
            fobj.append(np.zeros(n, np.int32))
        elif m.colors is not None:
            c8 = np.rint(np.clip(m.colors[:, :3], 0, 1) * 255).astype(np.uint8)
            corner = _colour_keys(c8)[tri]              # [n, 3]
            mixed = (corner[:, 0] != corner[:, 1]) | (corner[:, 0] != corner[:, 2])
            ann.warn("mixed_colour_faces", int(mixed.sum()))
            fk = np.where(corner[:, 1] == corner[:, 2], corner[:, 1], corner[:, 0])  # 2-of-3 vote
            used_colours.update(int(k) for k in np.unique(fk))
            ids = colours_to_ids(fk, objects)
            ann.warn("unknown_colour_faces", int((ids == 0).sum()))
            fobj.append(ids)
            fimg.append(np.full(n, -1, np.int32))
        else:
            ann.warn("uncoloured_faces", n)
            fobj.append(np.zeros(n, np.int32))
            fimg.append(np.full(n, -1, np.int32))
        pos.append(m.positions.astype(np.float32))
        uvs.append(m.uvs.astype(np.float32) if m.uvs is not None else np.zeros((len(m.positions), 2), np.float32))
        idx.append(tri + base)
        base += len(m.positions)
    if not idx or base == 0:
        raise AnnotationError(glb, "semantic mesh has no triangles")
    ann.positions = np.concatenate(pos)
    ann.indices = np.concatenate(idx)
    ann.face_object = np.concatenate(fobj)
    ann.face_image = np.concatenate(fimg)
    ann.uvs = np.concatenate(uvs)
    ann.id_images = images
    if images:  # textured faces: count those whose centroid texel has no table colour
        f = np.nonzero(ann.face_image >= 0)[0]
        ids = ann.ids_at(f, np.full((len(f), 2), 1 / 3, np.float32))
        ann.warn("unknown_colour_faces", int((ids == 0).sum()))
    ann.warn("unused_objects", sum(1 for o in objects if o.color not in used_colours))
    return ann
