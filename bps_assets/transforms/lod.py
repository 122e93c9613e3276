"""Simplified render meshes (levels of detail) with a stated geometric error, object by object.

``simplify(positions [V,3], indices [T,3], groups [T], Options(max_error)) -> Lod`` with
meshoptimizer (absolute error, metres here). Groups: one per object and material (e.g.
``tri_object * num_materials + tri_material``). ``borders="seams"`` (default): one call, each
group with its own vertex copies, so a boundary between groups is a seam, simplified only along
itself and alike on both sides (no cracks, no triangle across it) while open borders simplify
too; ``"locked"``: one call per group, its whole border kept. Every LOD triangle belongs to one
group (``Lod.tri_source``: a source triangle of it: semantic ids and materials carry over); a
group simplified to nothing keeps its triangles. Indices into the source's vertex buffer. The
error is checked by ray casting from the source centroids along their normals (meshoptimizer's
quadric undercounts on folded sheets); groups with over 1 % of samples beyond ``max_error`` are
redone alone, borders locked, at half the error (``verify_tries`` times). ``lod(options)`` is
the factory; ``bps_assets.lod_section`` stores the levels in packed scenes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, MissingDependencyError


@dataclass(frozen=True)
class Options:
    max_error: float = 0.01   # metres: how far the simplified surface may move
    borders: str = "seams"    # "seams": one call, groups joined as seams; "locked": one call per group, borders kept
    verify_tries: int = 3     # redo groups whose measured error exceeds max_error, at half the error, this often


VERIFY_SHARE = 0.01   # a group passes when at most this share of its samples moved farther than max_error
VERIFY_MAX = 1.5      # ... and none farther than this times max_error

DEFAULTS = Options()
BORDERS = ("seams", "locked")


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
    if options.borders not in BORDERS:
        raise ConfigError(None, f"borders must be one of {BORDERS}, got {options.borders!r}")
    flags = m.SIMPLIFY_ERROR_ABSOLUTE | m.SIMPLIFY_LOCK_BORDER
    order = np.argsort(grp, kind="stable")
    starts = np.flatnonzero(np.r_[True, grp[order][1:] != grp[order][:-1]])
    spans = list(zip(starts, np.r_[starts[1:], len(grp)]))
    target = np.full(len(spans), float(options.max_error))
    out_idx, out_err = [None] * len(spans), np.zeros(len(spans))
    todo = range(len(spans))
    sidx = idx[order]  # the source triangles in group order
    seams = _simplify_seams(m, pos, sidx, grp[order], starts, options.max_error) \
        if options.borders == "seams" else None
    if seams is not None:
        out_idx, out_err[:] = seams
        todo = [g for g in range(len(spans)) if not len(out_idx[g])]  # collapsed: kept as they are below
        target[todo] = 0.0
    probes = None  # (centroids, normals) of the source triangles: the same for every verify pass
    for attempt in range(options.verify_tries + 1):
        for g in todo:
            a, b = spans[g]
            out_idx[g], out_err[g] = _simplify_group(m, pos, sidx[a:b], target[g], flags)
        if attempt == options.verify_tries:
            break
        # meshoptimizer's quadric error can undercount (thin folded sheets): groups whose surface
        # moved farther than asked at over VERIFY_SHARE of their samples are redone at half the error
        lod_idx = np.concatenate(out_idx)
        if probes is None:
            probes = _probes(pos, sidx)
        dist = _surface_distance(pos, *probes, lod_idx, options.max_error)
        share = np.add.reduceat((dist > options.max_error).astype(np.float64), starts) / np.diff(np.r_[starts, len(grp)])
        worst = np.maximum.reduceat(dist, starts)
        bad = (share > VERIFY_SHARE) | (worst > VERIFY_MAX * options.max_error)
        todo = [g for g in np.flatnonzero(bad) if not np.array_equal(out_idx[g], sidx[spans[g][0]:spans[g][1]])]
        if not todo:
            break
        target[todo] /= 2
    src = np.concatenate([np.full(len(x), order[a], np.int64) for x, (a, _) in zip(out_idx, spans)])
    return Lod(np.concatenate(out_idx), src, options.max_error, float(out_err.max()))


def _simplify_seams(m, pos: np.ndarray, tris: np.ndarray, grp: np.ndarray, starts: np.ndarray, target: float):
    """One meshoptimizer call over every group, each group with its own copies of its vertices:
    a boundary between groups is then a seam (collapsed only along itself, the same way on both
    sides: no cracks, no triangle across it), and open borders simplify too. Returns one index
    array per group (groups ordered as ``starts``) and the reported error; None if a triangle
    came out with corners of two groups (meshoptimizer only collapses along edges: not seen)."""
    nv = len(pos)
    keys = np.repeat(grp, 3) * nv + tris.reshape(-1).astype(np.int64)
    uk, inv = np.unique(keys, return_inverse=True)
    copies = np.ascontiguousarray(pos[uk % nv], np.float32)
    src = inv.reshape(-1).astype(np.uint32)
    dst = np.zeros(src.size, np.uint32)
    err = np.zeros(1, np.float32)
    n = m.simplify(dst, src, copies, target_index_count=0, target_error=float(target),
                   options=m.SIMPLIFY_ERROR_ABSOLUTE, result_error=err)
    out = uk[dst[:n].reshape(-1, 3)]
    if len(out) and not (out // nv == (out[:, :1] // nv)).all():
        return None
    g = np.searchsorted(np.unique(grp), out[:, 0] // nv)
    by = np.argsort(g, kind="stable")
    cuts = np.searchsorted(g[by], np.arange(len(starts) + 1))
    return [(out[by[a:b]] % nv).astype(np.uint32) for a, b in zip(cuts[:-1], cuts[1:])], float(err[0])


def _simplify_group(m, pos: np.ndarray, tris: np.ndarray, target: float, flags: int):
    """(indices [t,3], reported error) of one group, its borders locked; a group that collapses
    (or ``target`` 0) keeps its triangles."""
    if not target > 0:
        return tris.reshape(-1, 3), 0.0
    src = np.ascontiguousarray(tris).reshape(-1)
    dst = np.zeros(src.size, np.uint32)
    err = np.zeros(1, np.float32)
    n = m.simplify(dst, src, pos, target_index_count=0, target_error=float(target), options=flags, result_error=err)
    if n == 0:  # the whole group collapsed: keep it as it is, or its object id would be lost
        return tris.reshape(-1, 3), 0.0
    return dst[:n].reshape(-1, 3), float(err[0])


def _probes(pos: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(centroids, unit normals) of the triangles ``src`` (float64; +Y for a degenerate one)."""
    p = pos[src.astype(np.int64)].astype(np.float64)
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    ln = np.linalg.norm(n, axis=1, keepdims=True)
    return p.mean(1), np.where(ln > 0, n / np.maximum(ln, 1e-30), [0.0, 1.0, 0.0])


def _surface_distance(pos: np.ndarray, c: np.ndarray, n: np.ndarray, lod: np.ndarray, max_error: float) -> np.ndarray:
    """Distance from each source triangle's centroid ``c`` to the nearest LOD surface along the
    triangle's normal ``n`` (``_probes``), either way (at most 4 x ``max_error``: farther or none
    counts as that)."""
    from ..raycast import RayCaster

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
