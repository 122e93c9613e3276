"""What a navmesh must satisfy to be used: finite, in range, consistent with its own bounds.

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

from ..errors import CorruptFileError

MIN_CELL_SIZE = 1e-3   # 1 mm: 50x finer than habitat's 5 cm
MAX_CELL_SIZE = 10.0   # 10 m: no agent walks on a coarser grid
MAX_COORD = 1e6        # 1000 km from the origin: no scan is larger, float32 still resolves 6 cm


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
