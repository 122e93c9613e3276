"""One vertex/index buffer for the whole scene, with a material id per triangle.

A batch renderer draws a scene as one geometry, so the document's meshes are concatenated
here; the later steps (weld, reorder, meshlets, quantize) work on this flat form.
``tri_source`` keeps, for each triangle, its index in the concatenation order (before any
triangle was dropped or reordered), so callers and tests can relate output to input.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..scene import SceneDocument, Texture


@dataclass
class MergedGeometry:
    positions: np.ndarray            # float32 [V,3]
    indices: np.ndarray              # uint32 [T,3]
    tri_material: np.ndarray         # int32 [T]
    material_color: np.ndarray       # float32 [M,4]
    material_texture: np.ndarray     # int32 [M], -1: none
    uvs: np.ndarray | None = None    # float32 [V,2]
    colors: np.ndarray | None = None  # uint8 [V,4]
    textures: list[Texture] = field(default_factory=list)
    tri_source: np.ndarray | None = None  # int64 [T]
    stats: dict = field(default_factory=dict)
    # set by the quantize step: integer grids and the grid parameters
    positions_q: np.ndarray | None = None
    uvs_q: np.ndarray | None = None
    position_grid: object = None
    uv_grid: object = None

    VERTEX_ARRAYS = ("positions", "uvs", "colors", "positions_q", "uvs_q")

    def take_vertices(self, sel: np.ndarray) -> None:
        """Keep vertices ``sel`` (indices, in that order) in every per-vertex array."""
        for name in self.VERTEX_ARRAYS:
            a = getattr(self, name)
            if a is not None:
                setattr(self, name, np.ascontiguousarray(a[sel]))

    def take_triangles(self, sel: np.ndarray) -> None:
        """Keep triangles ``sel`` (a boolean mask or indices) in every per-triangle array."""
        self.indices = np.ascontiguousarray(self.indices[sel])
        self.tri_material = np.ascontiguousarray(self.tri_material[sel])
        if self.tri_source is not None:
            self.tri_source = np.ascontiguousarray(self.tri_source[sel])

    @property
    def vertex_count(self) -> int:
        return int(self.positions.shape[0])

    @property
    def triangle_count(self) -> int:
        return int(self.indices.shape[0])

    def used_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) float64 of the vertices some triangle uses; zeros when empty."""
        if self.indices.size == 0:
            return np.zeros(3), np.zeros(3)
        used = np.zeros(self.vertex_count, bool)
        used[self.indices.reshape(-1)] = True
        p = self.positions[used].astype(np.float64)
        return p.min(0), p.max(0)


def merge(doc: SceneDocument) -> MergedGeometry:
    """Concatenate ``doc.meshes``; meshes without a material get a white default one."""
    mats = doc.materials
    need_default = any(m.material is None or not 0 <= m.material < len(mats) for m in doc.meshes)
    default_id = len(mats)
    m_count = len(mats) + (1 if need_default else 0)
    material_color = np.ones((m_count, 4), np.float32)
    material_texture = np.full(m_count, -1, np.int32)
    for i, mat in enumerate(mats):
        material_color[i] = np.asarray(mat.base_color, np.float32).reshape(-1)[:4]
        if mat.texture is not None and 0 <= mat.texture < len(doc.textures):
            material_texture[i] = mat.texture

    any_uv = any(m.uvs is not None for m in doc.meshes)
    any_col = any(m.colors is not None for m in doc.meshes)
    pos, idx, uv, col, tmat = [], [], [], [], []
    base = 0
    for m in doc.meshes:
        p = np.asarray(m.positions, np.float32).reshape(-1, 3)
        t = np.asarray(m.indices).reshape(-1, 3).astype(np.int64) + base
        pos.append(p)
        idx.append(t)
        if any_uv:
            uv.append(np.zeros((len(p), 2), np.float32) if m.uvs is None
                      else np.asarray(m.uvs, np.float32).reshape(-1, 2))
        if any_col:
            if m.colors is None:
                col.append(np.full((len(p), 4), 255, np.uint8))
            else:
                c = np.asarray(m.colors, np.float32).reshape(len(p), -1)
                if c.shape[1] == 3:
                    c = np.concatenate([c, np.ones((len(p), 1), np.float32)], 1)
                c = np.nan_to_num(c, nan=0.0)
                col.append(np.round(np.clip(c, 0.0, 1.0) * 255.0).astype(np.uint8))
        mid = m.material if m.material is not None and 0 <= m.material < len(mats) else default_id
        tmat.append(np.full(len(t), mid, np.int32))
        base += len(p)

    positions = np.concatenate(pos) if pos else np.zeros((0, 3), np.float32)
    indices = np.concatenate(idx) if idx else np.zeros((0, 3), np.int64)
    if base >= 2**32:
        from ..errors import InputError
        raise InputError(doc.source_path or None, f"{base} vertices exceed the 2^32 index limit")
    return MergedGeometry(
        positions=positions,
        indices=indices.astype(np.uint32),
        tri_material=np.concatenate(tmat) if tmat else np.zeros(0, np.int32),
        material_color=material_color,
        material_texture=material_texture,
        uvs=np.concatenate(uv) if any_uv else None,
        colors=np.concatenate(col) if any_col else None,
        textures=list(doc.textures),
        tri_source=np.arange(len(indices), dtype=np.int64),
        stats=dict(doc.stats),
    )
