"""The in-memory model of a scene's object annotations (no I/O): what the semantic readers
produce, the packed scene's semantic section stores, and the renderers' semantic sensor and the
ObjectNav task consume.

Contract:
- Instance ids are int32 and start at 1; 0 means "no object" everywhere (a triangle, a pixel);
  MP3D faces of no object carry habitat-sim's 65535 (``readers.semantic_mp3d.NO_OBJECT``).
- ``tri_object[t]`` is the instance id of render-mesh triangle ``t`` (int32 [T]); a semantic
  sensor reads it at the hit triangle (``object_ids``), so it needs no second mesh.
- ``SemanticTable`` row ``i`` describes instance ``ids[i]``; ``category`` indexes
  ``categories`` (the dataset's category names, e.g. mpcat40 or HM3D raw names mapped by
  data_manifests/); positions are in the habitat frame (Y up), metres.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SemanticTable:
    """One row per annotated object instance."""

    ids: np.ndarray                 # int32 [O], >= 1, unique
    category: np.ndarray            # int32 [O], index into ``categories`` (-1: unknown)
    raw_names: list[str]            # [O], the annotation's own label ("kitchen chair")
    region: np.ndarray              # int32 [O], region / room id (-1: none)
    aabb: np.ndarray                # float32 [O, 6]: min xyz, max xyz (habitat frame)
    points: np.ndarray              # float32 [O, K, 3]: surface samples (NaN rows pad)
    categories: list[str] = field(default_factory=list)
    source_ids: np.ndarray | None = None  # int64 [O]: the id habitat-sim reports (HM3D, MP3D: = ids)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def category_name(self, i: int) -> str:
        """The category name of row ``i`` ("" when unknown)."""
        c = int(self.category[i])
        return self.categories[c] if 0 <= c < len(self.categories) else ""

    def habitat_id(self, i: int) -> int:
        """The id habitat-sim reports for row ``i``'s object (what habitat's episode files call
        ``object_id``): ``source_ids[i]``, else the instance id."""
        return int(self.source_ids[i] if self.source_ids is not None else self.ids[i])


@dataclass
class ObjectRecord:
    """One object of an annotation file, before it is tied to a packed scene's triangles."""

    id: int                         # our instance id (>= 1)
    raw_name: str                   # the file's label ("kitchen chair"; MP3D: the raw category)
    region: int                     # region / room id (-1: none)
    source_id: int                  # the id habitat-sim reports for it (HM3D: = id; MP3D: object index)
    color: int = -1                 # HM3D: 0xRRGGBB annotation colour (-1: none)
    category: str = ""              # a category the file itself names (MP3D: mpcat40), "" if none


@dataclass
class Annotation:
    """An annotated mesh as read from a semantic file pair (habitat frame once ``frame`` is
    applied): per-face object ids, or (HM3D textured) an id image sampled at face UVs.

    ``face_object`` int32 [F] holds each face's id when it is flat. Textured (HM3D): the id of
    a surface point is the texel of ``id_images[face_image[f]]`` (int32 [H, W], 0 = unannotated)
    at its UV (``uvs`` float32 [V, 2]; nearest texel, wrapped), so one face may hold several ids.
    """

    positions: np.ndarray           # float32 [V, 3]
    indices: np.ndarray             # int64 [F, 3]
    objects: list[ObjectRecord]
    face_object: np.ndarray | None = None
    uvs: np.ndarray | None = None
    face_image: np.ndarray | None = None   # int32 [F]: which id image a face samples (textured)
    id_images: list = field(default_factory=list)  # [int32 [H, W]] per texture
    source: str = ""
    format: str = ""                                # hm3d | mp3d
    frame: str = "source"                           # "habitat" once moved (transforms.semantic.to_frame)
    warnings: dict = field(default_factory=dict)   # counted problems, e.g. unknown_colour_faces

    def warn(self, key: str, n: int = 1) -> None:
        """Count ``n`` occurrences of the problem ``key``."""
        if n:
            self.warnings[key] = self.warnings.get(key, 0) + int(n)

    def ids_at(self, faces: np.ndarray, bary: np.ndarray) -> np.ndarray:
        """int32 id at points of ``faces`` (int [n]) given by ``bary`` (float [n, 2]: the
        weights of each face's 2nd and 3rd corner, as Embree reports them)."""
        faces = np.asarray(faces, np.int64)
        out = self.face_object[faces].astype(np.int32) if self.face_object is not None \
            else np.zeros(len(faces), np.int32)
        if self.face_image is None or not self.id_images or not len(faces):
            return out
        img = self.face_image[faces]
        tex = img >= 0
        if not tex.any():
            return out
        f, b = faces[tex], bary[tex].astype(np.float64)
        c = self.uvs[self.indices[f]].astype(np.float64)          # [n, 3, 2]
        uv = c[:, 0] * (1 - b[:, :1] - b[:, 1:]) + c[:, 1] * b[:, :1] + c[:, 2] * b[:, 1:]
        res = np.zeros(len(f), np.int32)
        for k in np.unique(img[tex]):
            sel = img[tex] == k
            im = self.id_images[int(k)]
            h, w = im.shape
            # glTF UV (0, 0) is the image's first texel row; nearest texel, wrapped (REPEAT)
            col = np.floor(np.mod(uv[sel, 0], 1.0) * w).astype(np.int64) % w
            row = np.floor(np.mod(uv[sel, 1], 1.0) * h).astype(np.int64) % h
            res[sel] = im[row, col]
        out[tex] = res
        return out


def object_ids(tri_object: np.ndarray | None, prim: np.ndarray) -> np.ndarray:
    """Instance id (int32 [n]) of each hit triangle ``prim`` (int [n], -1: miss): what a
    semantic sensor sees; 0 for misses and when ``tri_object`` is None."""
    prim = np.asarray(prim)
    out = np.zeros(prim.shape[0], np.int32)
    if tri_object is not None:
        hit = (prim >= 0) & (prim < tri_object.shape[0])
        out[hit] = tri_object[prim[hit]]
    return out
