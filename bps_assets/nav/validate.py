"""What a navmesh must satisfy to be used: finite, in range, consistent with its own bounds, and
inside its scene's bounds (``navmesh_misfit``: preprocess, verify and the runtime's loads).

A file can pass every structural check (sizes, dtypes, CRCs, hashes rewritten) and still hold
numbers no query survives: an origin of 1e300 makes every reward and pointgoal NaN, a cell size
of 1e-300 overflows the first grid sized from it, an inf height poisons distances. Every loader
(``grid.load_navmesh``, ``verify``; the runtime's scene loader should call ``check_navmesh`` on
each navmesh it swaps in) checks them here and gets one ``CorruptFileError`` naming the file.

Ranges: cell size in [``MIN_CELL_SIZE``, ``MAX_CELL_SIZE``] m, every coordinate of the grid
(origin, far corner, span heights) within ``MAX_COORD`` m of the world origin.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..errors import BpsError, CorruptFileError, NavError
from .settings import MAX_CELL_SIZE, MIN_CELL_SIZE   # the builder's limits: one set for both
MAX_COORD = 1e6        # 1000 km from the origin: no scan is larger, float32 still resolves 6 cm
# a navmesh may stick out of its scene's bounds by this much (m): Recast's cell height / climb
FIT_TOLERANCE = 0.5


def check_navmesh_header(path: str | os.PathLike | None, origin, cell_size: float, shape) -> None:
    """Origin, cell size and the grid's far corner (origin + shape x cell size) in range."""
    origin = [float(v) for v in origin]
    cs = float(cell_size)
    if not all(math.isfinite(v) for v in origin + [cs]):
        raise CorruptFileError(path, f"navmesh origin {origin} / cell_size {cs!r} are not finite")
    if not MIN_CELL_SIZE <= cs <= MAX_CELL_SIZE:
        raise CorruptFileError(path, f"navmesh cell_size {cs:g} m is outside [{MIN_CELL_SIZE:g}, "
                                     f"{MAX_CELL_SIZE:g}] m")
    far = [origin[0] + shape[2] * cs, origin[1] + shape[1] * cs]
    if max(abs(v) for v in origin + far) > MAX_COORD:
        raise CorruptFileError(path, f"navmesh grid x/z [{origin[0]:.6g}, {far[0]:.6g}] x [{origin[1]:.6g}, "
                                     f"{far[1]:.6g}] m is beyond {MAX_COORD:g} m of the origin")


def check_navmesh_heights(path: str | os.PathLike | None, height: np.ndarray) -> None:
    """Span heights (the non-NaN cells) finite and within ``MAX_COORD``."""
    h = height[~np.isnan(height)]
    if h.size and not (np.isfinite(h).all() and float(np.abs(h).max()) <= MAX_COORD):
        bad = int((~np.isfinite(h) | (np.abs(h) > MAX_COORD)).sum())
        raise CorruptFileError(path, f"{bad} span height(s) are infinite or beyond {MAX_COORD:g} m",
                               section="height")


def check_navmesh(nav, path: str | os.PathLike | None = None) -> None:
    """Every check above on a ``NavMesh`` (e.g. one imported or built, or before a swap-in)."""
    check_navmesh_header(path, nav.origin, nav.cell_size, nav.shape)
    check_navmesh_heights(path, nav.height)


def header_bounds(header: dict) -> tuple | None:
    """``(lo, hi)`` of a packed scene header's ``bounds`` (float64 [3] each), or None."""
    b = (header or {}).get("bounds") or {}
    try:
        lo, hi = np.asarray(b["min"], np.float64), np.asarray(b["max"], np.float64)
    except (KeyError, TypeError, ValueError):
        return None
    return (lo, hi) if lo.shape == (3,) and hi.shape == (3,) else None


def navmesh_misfit(nav, bounds) -> str | None:
    """THE fit check (preprocess, verify and the runtime's scene load all call it): a message
    when the navmesh ``nav`` (a loaded ``NavMesh``) lies outside the scene's ``bounds``
    (``(lo, hi)``, habitat frame) by more than FIT_TOLERANCE: it was made for another scene or
    in another frame, and agents on it would see nothing. None when it fits or cannot tell
    (no bounds, no navigable point). ``points_misfit(fit_points(nav), bounds)``."""
    if bounds is None:
        return None
    return points_misfit(fit_points(nav), bounds)


def fit_points(nav) -> np.ndarray:
    """The walkable points of ``nav`` the fit check tests ([N, 3], N <= 256, seeded: the same
    for every call); empty when it has none. What a caller that drops the navmesh keeps (verify
    --deep samples them while it checks the file, and does not read it again for the fit)."""
    try:
        pts = np.asarray(nav.sample_navigable_point(256, seed=0), np.float64).reshape(-1, 3)
    except (BpsError, NavError, ValueError):
        return np.zeros((0, 3))
    return pts[np.isfinite(pts).all(1)]


def points_misfit(pts: np.ndarray, bounds) -> str | None:
    """``navmesh_misfit`` of a navmesh's ``fit_points`` ``pts``."""
    if bounds is None or not len(pts):
        return None
    lo, hi = (np.asarray(b, np.float64) for b in bounds)
    below = np.maximum(lo - pts, 0.0)
    above = np.maximum(pts - hi, 0.0)
    out = np.maximum(below, above).max(1)
    bad = out > FIT_TOLERANCE
    if not bad.any():
        return None
    worst = int(out.argmax())
    axis = "xyz"[int(np.maximum(below, above)[worst].argmax())]
    side = "below" if axis == "y" and below[worst, 1] > 0 else "outside"
    return (f"the navmesh does not fit the scene: {bad.mean():.0%} of its walkable points lie "
            f"{side} the scene's bounds (up to {out[worst]:.2f} m along {axis}); is it the "
            f".navmesh of another scene, or in another frame?")


def require_navmesh_fit(nav, bounds, path, scene: str) -> None:
    """NavError naming ``path`` (the navmesh file) and ``scene`` when ``navmesh_misfit`` finds
    that ``nav`` does not fit the scene's ``bounds``; what a loader calls before using a scene."""
    msg = navmesh_misfit(nav, bounds)
    if msg is not None:
        raise NavError(path, f"scene {scene}: {msg}")
