"""Matterport3D annotations in the habitat layout: ``ID_semantic.ply`` + ``ID.house`` -> Annotation.

The PLY, as habitat-sim's ``Mp3dInstanceMeshData::saveSemMeshPLY`` writes it: vertices ``x y z``
(+ colours), faces ``vertex_indices`` and an ``int object_id``: the index of an ``O`` record
of the ``.house`` file, -1 for none. Z-up, like the scan's ``ID.glb``.

The ``.house`` (first line ``ASCII 1.1``), as habitat-sim's ``SemanticScene::loadMp3dHouse``
reads it: ``C category_index category_mapping_index category_mapping_name mpcat40_index
mpcat40_name ...`` (``#`` in names stands for a space), ``O object_index region_index
category_index px py pz ...`` (category -1: none), ``R region_index level_index 0 0 label ...``.
Other records are skipped. A face's id is what habitat-sim's sensor reports: its object index
(object 0: 0, our "no object" too, so no table row; ``object_zero_faces``), ``NO_OBJECT``
(65535) for none (-1). ``AnnotationError`` (file and line): a malformed record, a category with
no C record, an object index repeated or >= 65535, a face ``object_id`` with no O record (the
pair does not match). An O record no face uses is counted (``unused_objects``).
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import AnnotationError, InputError
from ..semantics import Annotation, ObjectRecord
from .guard import headed_lines

HOUSE_HEADER = "ASCII 1.1"
# how ids are made (part of a scene's preprocess fingerprint): packed scenes made under an older
# rule ("": object_index + 1; "object_index": faces of no object 0) convert again on resume
ID_RULE = "object_index, no object 65535"
# habitat-sim's id of a face of no object: the PLY's int -1 read as unsigned and cut to 16 bits
# (docs/ASSETS.md); object indices must stay below it
NO_OBJECT = 65535
MAX_HOUSE_BYTES = 256 << 20
MAX_OBJECTS = 1 << 20


def parse_house(path: str | os.PathLike, text: str | None = None) -> list[ObjectRecord]:
    """The objects of a ``.house`` file (``text``: its content, else read from ``path``); id =
    object index (so object 0 has id 0: ``read_mp3d_semantics`` leaves it out)."""
    spath = os.fspath(path)
    lines = headed_lines(spath, text, MAX_HOUSE_BYTES, HOUSE_HEADER, AnnotationError)
    cats: dict[int, tuple[str, str]] = {}
    objs: dict[int, tuple[int, int, int]] = {}
    for no, line in enumerate(lines[1:], start=2):
        tok = line.split()
        if not tok or tok[0] not in ("C", "O"):
            continue
        try:
            if tok[0] == "C":
                ci, raw, mpc = int(tok[1]), tok[3].replace("#", " "), tok[5]
                int(tok[2]), int(tok[4])
                if ci < 0 or ci > MAX_OBJECTS or ci in cats:
                    raise ValueError(f"category index {ci} repeated or outside [0, {MAX_OBJECTS}]")
                cats[ci] = (raw, mpc)
            else:
                oi, ri, ci = int(tok[1]), int(tok[2]), int(tok[3])
                [float(x) for x in tok[4:16]]
                if len(tok) < 16:
                    raise ValueError(f"{len(tok)} fields, an O record has at least 16")
                if not (-1 <= ri <= MAX_OBJECTS and -1 <= ci <= MAX_OBJECTS):
                    raise ValueError(f"region {ri} or category {ci} outside [-1, {MAX_OBJECTS}]")
                if oi < 0 or oi >= NO_OBJECT or oi in objs:
                    raise ValueError(f"object index {oi} repeated or outside [0, {NO_OBJECT}) (habitat-sim "
                                     f"keeps 16-bit ids, {NO_OBJECT} = no object)")
                objs[oi] = (ri, ci, no)
        except (ValueError, IndexError) as e:
            raise AnnotationError(spath, f"line {no}: malformed {tok[0]} record ({e})") from None
    out = []
    for oi, (ri, ci, no) in sorted(objs.items()):
        if ci >= 0 and ci not in cats:
            raise AnnotationError(spath, f"line {no}: object {oi} has category {ci}, which no C record defines")
        raw, mpc = cats.get(ci, ("", ""))
        out.append(ObjectRecord(oi, raw, ri if ri >= 0 else -1, oi, -1, mpc))
    return out


def read_semantic_ply(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions float32 [V, 3], triangles int64 [F, 3], object_id int64 [F]) of a semantic PLY
    (polygons fan-triangulated, each triangle keeping its polygon's object_id)."""
    from .ply import read_elements
    from .polygons import fan_triangulate

    try:
        spath, els, _ = read_elements(path)
    except InputError as e:
        raise AnnotationError(e.path or os.fspath(path), e.detail) from None
    vert, face = els.get("vertex", {}), els.get("face", {})
    if not all(k in vert for k in "xyz"):
        raise AnnotationError(spath, "semantic PLY vertex element needs x, y and z")
    lst = face.get("vertex_indices", face.get("vertex_index"))
    if lst is None or "object_id" not in face:
        raise AnnotationError(spath, "semantic PLY face element needs vertex_indices and object_id")
    with np.errstate(over="ignore", invalid="ignore"):   # a double past float32's range: refused below
        pos = np.stack([vert["x"], vert["y"], vert["z"]], axis=1).astype(np.float32)
    finite = np.isfinite(pos).all(1)
    if not finite.all():
        raise AnnotationError(spath, f"vertex {int(np.argmin(finite))} is not finite (NaN or inf); "
                                     f"{int((~finite).sum())} such vertices")
    counts, flat = lst
    flat = flat.astype(np.int64)
    if flat.size and (int(flat.max()) >= len(pos) or int(flat.min()) < 0):
        raise AnnotationError(spath, f"face index out of range for {len(pos)} vertices")
    oid = np.asarray(face["object_id"]).astype(np.int64)
    tris, poly = fan_triangulate(counts, flat)
    return pos, tris.astype(np.int64), oid[poly]


def read_mp3d_semantics(ply: str | os.PathLike, house: str | os.PathLike) -> Annotation:
    """Read an MP3D pair into an Annotation (positions in the PLY's Z-up frame)."""
    objects = parse_house(house)
    pos, tris, oid = read_semantic_ply(ply)
    if not len(tris):
        raise AnnotationError(ply, "semantic mesh has no triangles")
    known = np.zeros(MAX_OBJECTS + 1, bool)
    known[[o.source_id for o in objects]] = True
    bad = (oid < -1) | (oid >= MAX_OBJECTS) | ~known[np.clip(oid, 0, MAX_OBJECTS)] & (oid >= 0)
    if bad.any():
        v = int(oid[np.argmax(bad)])
        raise AnnotationError(ply, f"face object_id {v} has no O record in {os.fspath(house)} "
                                   f"({int(bad.sum())} faces; the .house does not match this PLY)")
    ann = Annotation(pos, tris, [o for o in objects if o.id > 0],
                     face_object=np.where(oid < 0, NO_OBJECT, oid).astype(np.int32), source=os.fspath(ply))
    used = set(int(x) for x in np.unique(oid[oid > 0]))
    ann.warn("unused_objects", sum(1 for o in ann.objects if o.source_id not in used))
    ann.warn("unannotated_faces", int((oid < 0).sum()))
    ann.warn("object_zero_faces", int((oid == 0).sum()))
    return ann
