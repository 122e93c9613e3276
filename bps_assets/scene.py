"""The in-memory scene model: what readers produce and transforms consume. No I/O here.

Coordinates are in the file's own frame until the ``frame`` transform moves them into the
habitat frame (Y up, -Z forward); ``SceneDocument.frame`` records which one holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Texture:
    """A decoded image. ``rgba`` is uint8 [H, W, 4]; ``source`` names where it came from."""

    rgba: np.ndarray
    source: str = ""
    name: str = ""

    @property
    def size(self) -> tuple[int, int]:
        return int(self.rgba.shape[1]), int(self.rgba.shape[0])


@dataclass
class Material:
    """glTF metallic-roughness subset that a batch renderer needs.

    ``uv_transform`` is the 3x3 KHR_texture_transform matrix (already applied to the mesh
    UVs by the reader, kept for the record); ``texture`` indexes ``SceneDocument.textures``.
    """

    name: str = ""
    base_color: np.ndarray = field(default_factory=lambda: np.ones(4, np.float32))
    texture: int | None = None
    double_sided: bool = False
    alpha_mode: str = "OPAQUE"
    uv_transform: np.ndarray | None = None


@dataclass
class Mesh:
    """One triangle list with one material, in scene (world) coordinates.

    positions float32 [V, 3]; indices uint32 [T, 3]; optional uvs float32 [V, 2] (the texCoord
    set the material's base colour texture uses, transform applied), colors float32 [V, 4] in
    0..1, normals float32 [V, 3]. ``material`` indexes ``SceneDocument.materials`` (None: default).
    """

    positions: np.ndarray
    indices: np.ndarray
    uvs: np.ndarray | None = None
    colors: np.ndarray | None = None
    normals: np.ndarray | None = None
    material: int | None = None
    name: str = ""

    @property
    def triangle_count(self) -> int:
        return int(self.indices.shape[0])


@dataclass
class SceneDocument:
    """A whole scene, node hierarchy already flattened into world-space meshes.

    ``stats`` counts what readers and transforms skipped or dropped (for the summary), e.g.
    ``skipped_points``, ``skipped_lines``, ``degenerate_triangles``, ``nonfinite_triangles``.
    ``frame`` is ``"source"`` until the frame transform sets ``"habitat"``; ``frame_matrix`` is
    the 4x4 applied to positions so far.
    """

    meshes: list[Mesh] = field(default_factory=list)
    materials: list[Material] = field(default_factory=list)
    textures: list[Texture] = field(default_factory=list)
    source_path: str = ""
    source_format: str = ""
    frame: str = "source"
    frame_matrix: np.ndarray = field(default_factory=lambda: np.eye(4))
    stats: dict = field(default_factory=dict)

    @property
    def triangle_count(self) -> int:
        return sum(m.triangle_count for m in self.meshes)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) of all vertex positions referenced by any triangle."""
        lo = np.full(3, np.inf)
        hi = np.full(3, -np.inf)
        for m in self.meshes:
            if m.indices.size:
                p = m.positions[np.unique(m.indices)]
                lo = np.minimum(lo, p.min(0))
                hi = np.maximum(hi, p.max(0))
        return lo, hi

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n
