"""Simplified render meshes (levels of detail) with a stated geometric error, object by object.

``simplify(positions [V,3], indices [T,3], groups [T], Options(max_error)) -> Lod``: each group
of triangles (one per object and material: pass e.g. ``tri_object * num_materials +
tri_material``) is simplified on its own with meshoptimizer's ``simplify`` (absolute error in
the positions' units, metres here), its border locked, so every boundary between objects or
materials keeps its vertices: no cracks between groups, and every LOD triangle belongs to
exactly one source group (``Lod.tri_source``: the index of a source triangle of its group,
through which semantic ids and materials carry over). The LOD reuses the source's vertex
buffer (indices only); a group simplified to nothing keeps its source triangles (no object
vanishes from a level). meshoptimizer bounds the error by its own quadric measure, which can
undercount (thin folded sheets): each group is checked by ray casting from its triangles'
centroids along their normals to the level, and redone at half the error while over 1 % of
them moved farther than ``max_error`` (``verify_tries`` times). ``lod(options)`` is the
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
    verify_tries: int = 3     # redo groups whose measured error exceeds max_error, at half the error, this often


VERIFY_SHARE = 0.01   # a group passes when at most this share of its samples moved farther than max_error

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
    if not len(idx):
        return Lod(np.zeros((0, 3), np.uint32), np.zeros(0, np.int64), options.max_error, 0.0)
    flags = m.SIMPLIFY_ERROR_ABSOLUTE | (m.SIMPLIFY_LOCK_BORDER if options.lock_border else 0)
    order = np.argsort(grp, kind="stable")
    starts = np.flatnonzero(np.r_[True, grp[order][1:] != grp[order][:-1]])
    spans = list(zip(starts, np.r_[starts[1:], len(grp)]))
    target = np.full(len(spans), float(options.max_error))
    out_idx, out_err = [None] * len(spans), np.zeros(len(spans))
    todo = range(len(spans))
    for attempt in range(options.verify_tries + 1):
        for g in todo:
            tris = order[spans[g][0]:spans[g][1]]
            out_idx[g], out_err[g] = _simplify_group(m, pos, idx[tris], target[g], flags)
        if attempt == options.verify_tries:
            break
        # meshoptimizer's quadric error can undercount (thin folded sheets): groups whose surface
        # moved farther than asked at over VERIFY_SHARE of their samples are redone at half the error
        lod_idx = np.concatenate(out_idx)
        far = _surface_distance(pos, idx[order], lod_idx, options.max_error) > options.max_error
        share = np.add.reduceat(far.astype(np.float64), starts) / np.diff(np.r_[starts, len(grp)])
        todo = [g for g in np.flatnonzero(share > VERIFY_SHARE) if not np.array_equal(out_idx[g], idx[order[spans[g][0]:spans[g][1]]])]
        if not todo:
            break
        target[todo] /= 2
    src = np.concatenate([np.full(len(x), order[a], np.int64) for x, (a, _) in zip(out_idx, spans)])
    return Lod(np.concatenate(out_idx), src, options.max_error, float(out_err.max()))


def _simplify_group(m, pos: np.ndarray, tris: np.ndarray, target: float, flags: int):
    """(indices [t,3], reported error) of one group; a group that collapses keeps its triangles."""
    src = np.ascontiguousarray(tris).reshape(-1)
    dst = np.zeros(src.size, np.uint32)
    err = np.zeros(1, np.float32)
    n = m.simplify(dst, src, pos, target_index_count=0, target_error=float(target), options=flags, result_error=err)
    if n == 0:  # the whole group collapsed: keep it as it is, or its object id would be lost
        return tris.reshape(-1, 3), 0.0
    return dst[:n].reshape(-1, 3), float(err[0])


def _surface_distance(pos: np.ndarray, src: np.ndarray, lod: np.ndarray, max_error: float) -> np.ndarray:
    """Distance from each source triangle's centroid to the nearest LOD surface along the
    triangle's normal, either way (at most 4 x ``max_error``: farther or none counts as that)."""
    from ..raycast import RayCaster

    p = pos[src.astype(np.int64)].astype(np.float64)
    c = p.mean(1)
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    ln = np.linalg.norm(n, axis=1, keepdims=True)
    n = np.where(ln > 0, n / np.maximum(ln, 1e-30), [0.0, 1.0, 0.0])
    reach = 4.0 * max_error
    rc = RayCaster(pos, lod, what="checking a LOD's error (--lod)")
    d = np.full(len(c), reach)
    for sgn in (1.0, -1.0):  # from the centroid outwards: the nearest layer, not the outermost one
        t = rc.intersect(c.astype(np.float32), (sgn * n).astype(np.float32))["tfar"].astype(np.float64)
        d = np.minimum(d, np.where(t >= 0, t, reach))
    return d


def lod(options: Options = DEFAULTS):
    """The transform: ``(positions, indices, groups) -> Lod`` at ``options.max_error``."""
    if not options.max_error > 0:
        raise ConfigError(None, f"max_error must be > 0 (metres), got {options.max_error}")
    return lambda positions, indices, groups=None: simplify(positions, indices, groups, options)
