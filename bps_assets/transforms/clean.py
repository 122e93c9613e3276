"""Drop triangles a renderer cannot use; count each kind in ``SceneDocument.stats``.

- ``invalid_index_triangles``: a corner indexes past the vertex array (readers should
  already refuse these; this keeps later steps safe whatever produced the document);
- ``nonfinite_triangles``: a corner position is NaN or infinite;
- ``degenerate_triangles``: two corners share an index, or the area is below ``min_area``.
Non-finite UVs are set to 0 (``nonfinite_uvs`` counts the vertices). Unused vertices are left
for ``reorder`` to drop.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scene import SceneDocument


@dataclass(frozen=True)
class Options:
    min_area: float = 1e-12  # m^2; smaller triangles cover no pixel and trouble ray casting


DEFAULTS = Options()


def bad_triangle_masks(positions: np.ndarray, indices: np.ndarray, min_area: float):
    """(invalid, nonfinite, degenerate) boolean masks over triangles, mutually exclusive."""
    n = positions.shape[0]
    idx = indices.astype(np.int64, copy=False)
    invalid = (idx >= n).any(1) | (idx < 0).any(1)
    safe = np.where(invalid[:, None], 0, idx)
    finite_v = np.isfinite(positions).all(1) if n else np.zeros(0, bool)
    nonfinite = ~invalid & ~finite_v[safe].all(1) if n else ~invalid
    ok = ~invalid & ~nonfinite
    same = (safe[:, 0] == safe[:, 1]) | (safe[:, 1] == safe[:, 2]) | (safe[:, 0] == safe[:, 2])
    degenerate = ok & same
    rest = ok & ~same
    if rest.any():
        t = safe[rest]
        p = positions.astype(np.float64, copy=False)
        a, b, c = p[t[:, 0]], p[t[:, 1]], p[t[:, 2]]
        area2 = np.linalg.norm(np.cross(b - a, c - a), axis=1)
        tiny = np.zeros(len(idx), bool)
        tiny[np.flatnonzero(rest)] = ~(area2 > 2.0 * min_area)  # NaN-safe
        degenerate |= tiny
    return invalid, nonfinite, degenerate


def clean(options: Options = DEFAULTS):
    """Factory: a callable dropping unusable triangles from every mesh (in place)."""

    def apply(doc: SceneDocument) -> SceneDocument:
        for key in ("invalid_index_triangles", "nonfinite_triangles", "degenerate_triangles", "nonfinite_uvs"):
            doc.stats.setdefault(key, 0)
        for mesh in doc.meshes:
            idx = np.asarray(mesh.indices).reshape(-1, 3)
            inv, nonf, deg = bad_triangle_masks(np.asarray(mesh.positions), idx, options.min_area)
            doc.count("invalid_index_triangles", int(inv.sum()))
            doc.count("nonfinite_triangles", int(nonf.sum()))
            doc.count("degenerate_triangles", int(deg.sum()))
            drop = inv | nonf | deg
            if drop.any():
                mesh.indices = np.ascontiguousarray(idx[~drop], dtype=np.uint32)
            if mesh.uvs is not None:
                bad = ~np.isfinite(mesh.uvs).all(1)
                if bad.any():
                    mesh.uvs = mesh.uvs.copy()
                    mesh.uvs[bad] = 0.0
                    doc.count("nonfinite_uvs", int(bad.sum()))
        return doc

    return apply
