"""Memory a navmesh build, import or load needs, estimated before the work starts.

The cost of every navmesh path grows with the cells it rasterizes or holds, which the input
states up front: a scan's or a Detour file's triangles cover ``area`` m^2 in x/z, i.e.
``area / cell_size^2`` samples; a ``.navmesh.bps`` header gives its ``[layers, rows, cols]``
grid, and its height section the span count. Measured peaks (Detour import of habitat's
apartment_1 scaled 1-8x; voxel build of a synthetic Gibson scene scaled 1-4x; load of a
2 M-span file) give the bytes per unit below. More than ``MAX_SAMPLES`` samples or spans (a
21,000 m^2 floor at 5 cm; twice that took 17 s and 2.7 GB to load), or an estimate over
``memory.memory_budget()``, is a ``ResourceLimitError`` naming the ``--cell-size`` that fits,
raised before anything large is allocated.
"""
from __future__ import annotations

import math
import os

from ..errors import ResourceLimitError
from ..memory import memory_budget

MAX_SAMPLES = 1 << 23
MAX_DENSE_CELLS = 1 << 26        # layers x rows x cols of a loaded grid (1.8 GiB of dense arrays)
BUILD_BYTES_PER_SAMPLE = 800     # voxel build: 796-1557 B per sample measured (more when small)
BUILD_BYTES_PER_TRIANGLE = 1000  # per scan triangle (normals, rasterized candidates)
IMPORT_BYTES_PER_SAMPLE = 550    # Detour import: 521-579 B per sample measured
LOAD_BYTES_PER_CELL = 28         # a loaded grid: height, island, span index (4 B), neighbours (16 B)
LOAD_BYTES_PER_SPAN = 130        # derived per-span arrays (centres, neighbour ids, islands)


def build_bytes(area: float, cell_size: float, triangles: int) -> int:
    """Peak bytes of a voxel build over triangles covering ``area`` m^2 in x/z."""
    return int(BUILD_BYTES_PER_SAMPLE * area / cell_size ** 2 + BUILD_BYTES_PER_TRIANGLE * triangles)


def import_bytes(area: float, cell_size: float) -> int:
    """Peak bytes of rasterizing a walkable surface (Detour polygons) of ``area`` m^2."""
    return int(IMPORT_BYTES_PER_SAMPLE * area / cell_size ** 2)


def load_bytes(shape, spans: int | None = None) -> int:
    """Bytes of a loaded navmesh of ``shape`` [layers, rows, cols]; ``spans`` None: every cell."""
    cells = math.prod(int(x) for x in shape)
    return int(LOAD_BYTES_PER_CELL * cells + LOAD_BYTES_PER_SPAN * (cells if spans is None else spans))


def _coarser(cell_size: float, factor: float) -> float:
    """A cell size ``factor`` times the area per cell larger, rounded up to two digits."""
    cs = cell_size * math.sqrt(max(1.0, factor)) * 1.05
    digits = 1 - int(math.floor(math.log10(cs)))
    return math.ceil(cs * 10 ** digits) / 10 ** digits


def check_fits(path: str | os.PathLike | None, what: str, need: int, samples: float, cell_size: float,
               setting: str = "a coarser --cell-size", cap: int = MAX_SAMPLES) -> None:
    """ResourceLimitError when ``samples`` exceeds ``cap`` or ``need`` bytes exceed the memory
    budget; the message names the work, the figures and the cell size that would fit."""
    budget = memory_budget()
    over_cap = samples / cap
    over_mem = need / budget if budget else 0.0
    if over_cap <= 1 and over_mem <= 1:
        return
    if over_cap >= over_mem:
        why = f"{samples:.3g} cells of {cell_size:g} m, over the cap of {cap}"
    else:
        why = (f"about {need / 2**30:.1f} GiB for {samples:.3g} cells of {cell_size:g} m, and "
               f"{budget / 2**30:.1f} GiB may be used now")
    raise ResourceLimitError(path, f"{what} would need {why}: {setting} {_coarser(cell_size, max(over_cap, over_mem)):g} "
                                   "would fit")

