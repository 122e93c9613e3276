"""Why a converted scene has no triangles left: the typed error ``convert`` raises (before
writing anything) instead of a packed scene with nothing to render or navigate.

The cause is read from the cleaning counts (``transforms.clean`` / ``weld`` stats): no
triangle mesh in the file at all, every triangle non-finite, every triangle of zero area, or
out-of-range indices.
"""
from __future__ import annotations

import os

from .errors import EmptySceneError

_DROPS = (("nonfinite_triangles", "with NaN or infinite coordinates"),
          ("degenerate_triangles", "of zero area"),
          ("collapsed_triangles", "collapsed by quantization"),
          ("invalid_index_triangles", "with out-of-range indices"))


def empty_geometry_error(path: str | os.PathLike | None, triangles_in: int, stats: dict,
                         min_area: float) -> EmptySceneError:
    """The error for a scene whose ``triangles_in`` triangles were all dropped (``stats``: the
    cleaning counts by reason) or that had none."""
    if triangles_in == 0:
        skipped = [f"{stats[k]} {w}" for k, w in (("skipped_points", "point"), ("skipped_lines", "line"))
                   if stats.get(k)]
        what = f" (only {' and '.join(skipped)} primitives)" if skipped else ""
        return EmptySceneError(path, f"contains no triangle mesh{what}: nothing to render or navigate "
                                     "(an empty file, a point cloud, or not a scene?)")
    drops = [(int(stats.get(k, 0) or 0), w) for k, w in _DROPS]
    parts = ", ".join(f"{n} {w}" for n, w in drops if n)
    top = max(drops)
    if top[1] == "with NaN or infinite coordinates" and top[0] == triangles_in:
        cause = "every vertex position is broken (a bad export?)"
    elif top[1] == "of zero area":
        cause = (f"every triangle is below {min_area:g} m2: a line or point set saved as faces, or a "
                 "scene in the wrong units")
    elif top[1] == "with out-of-range indices":
        cause = "the index buffer does not match the vertices (a corrupt file?)"
    else:
        cause = "the geometry is too small for the position quantization"
    return EmptySceneError(path, f"no triangles left after cleaning (all {triangles_in} dropped: {parts}): "
                                 f"{cause}; nothing to render or navigate")
