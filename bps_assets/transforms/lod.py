"""Simplified render meshes (levels of detail) with a stated geometric error, object by object.

``simplify(positions [V,3], indices [T,3], groups [T], Options(max_error)) -> Lod``: each group
of triangles (one per object and material: pass e.g. ``tri_object * num_materials +
tri_material``) is simplified on its own with meshoptimizer's ``simplify`` (absolute error in
the positions' units, metres here), its border locked, so every boundary between objects or
materials keeps its vertices: no cracks between groups, and every LOD triangle belongs to
exactly one source group (``Lod.tri_source``: the index of a source triangle of its group,
through which semantic ids and materials carry over). The LOD reuses the source's vertex
buffer (indices only); a group simplified to nothing keeps its source triangles (no object
vanishes from a level). meshoptimizer bounds the error it accepts by its own quadric measure;
the tests check the distance between the surfaces by ray casting. ``lod(options)`` is the
factory; the packed format's LOD sections (``bps_assets.lod_section``) store its levels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, MissingDependencyError


@dataclass(frozen=True)
class Options:
    max_error: float = 0.01   # metres: how far the simplified surface may move
    lock_border: bool = True  # keep each group's boundary (object / material borders) intact


DEFAULTS = Options()


@dataclass
class Lod:
    indices: np.ndarray     # uint32 [T', 3] into the source's vertex buffer
    tri_source: np.ndarray  # int64 [T']: a source triangle of the same group
    max_error: float        # the error asked for
    result_error: float     # the largest error meshoptimizer reported over the groups


def _meshopt():
    try:
        import meshoptimizer
    except ImportError as e:
        raise MissingDependencyError(None, "mesh simplification (--lod)", "meshoptimizer") from e
    return meshoptimizer


def simplify(positions: np.ndarray, indices: np.ndarray, groups: np.ndarray | None = None,
             options: Options = DEFAULTS) -> Lod:
    """The simplified mesh of ``positions`` / ``indices`` (see the module docstring)."""
    if not options.max_error > 0:
        raise ConfigError(None, f"max_error must be > 0 (metres), got {options.max_error}")
    m = _meshopt()
    pos = np.ascontiguousarray(positions, np.float32)
    idx = np.ascontiguousarray(indices, np.uint32).reshape(-1, 3)
    grp = np.zeros(len(idx), np.int64) if groups is None else np.asarray(groups).reshape(-1)
    if grp.shape[0] != idx.shape[0]:
        raise ConfigError(None, f"groups has {grp.shape[0]} entries for {idx.shape[0]} triangles")
    flags = m.SIMPLIFY_ERROR_ABSOLUTE | (m.SIMPLIFY_LOCK_BORDER if options.lock_border else 0)
    order = np.argsort(grp, kind="stable")
    starts = np.flatnonzero(np.r_[True, grp[order][1:] != grp[order][:-1]]) if len(grp) else np.zeros(0, int)
    out_idx, out_src, worst = [], [], 0.0
    for a, b in zip(starts, np.r_[starts[1:], len(grp)]):
        tris = order[a:b]
        src = np.ascontiguousarray(idx[tris]).reshape(-1)
        dst = np.zeros(src.size, np.uint32)
        err = np.zeros(1, np.float32)
        n = m.simplify(dst, src, pos, target_index_count=0, target_error=float(options.max_error),
                       options=flags, result_error=err)
        if n == 0:  # the whole group collapsed: keep it as it is, or its object id would be lost
            dst, n = src, src.size
        out_idx.append(dst[:n].reshape(-1, 3))
        out_src.append(np.full(n // 3, tris[0], np.int64))
        worst = max(worst, float(err[0]))
    if not out_idx:
        return Lod(np.zeros((0, 3), np.uint32), np.zeros(0, np.int64), options.max_error, 0.0)
    return Lod(np.concatenate(out_idx), np.concatenate(out_src), options.max_error, worst)


def lod(options: Options = DEFAULTS):
    """The transform: ``(positions, indices, groups) -> Lod`` at ``options.max_error``."""
    if not options.max_error > 0:
        raise ConfigError(None, f"max_error must be > 0 (metres), got {options.max_error}")
    return lambda positions, indices, groups=None: simplify(positions, indices, groups, options)
