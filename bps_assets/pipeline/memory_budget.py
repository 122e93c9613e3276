"""How many scenes may convert at once without running the machine out of memory.

A scan's conversion peaks at a multiple of its source file: textures arrive compressed (JPEG,
PNG, Basis) and are decoded whole, then mipped and block-compressed; geometry is expanded to
float arrays, welded and reordered. Measured (docs/PERFORMANCE.md, "HM3D-size scan",
``benchmarks/bench_hm3d_memory.py``) on a generated 2 M-triangle, 40-texture HM3D-layout scan:
peak RSS 13.4x its 100 MiB GLB; the geometry-only and textures-only variants 16.6x and 18.7x.
The budget takes 20x plus the interpreter's own 64 MiB, and the pool gets as many workers as
fit in 80 % of the memory available now, never fewer than one (a single scan larger than the
machine still runs, alone). A scene's navmesh import is estimated from its Detour file
(``nav.budget``: the area its polygons cover, not the file's bytes) and the larger of the two
counts: an 11.8 KB navmesh can describe gigabytes of grid.
"""
from __future__ import annotations

import os

from ..errors import BpsError
from ..memory import available_memory  # noqa: F401  (preprocess reads it from here)
from ..nav.budget import import_bytes

BASE_BYTES = 64 << 20       # one worker process before it reads anything
PEAK_PER_SOURCE_BYTE = 20   # measured 13.4-18.7 (module docstring)
USABLE_FRACTION = 0.8       # leave the rest to the page cache and the parent


def scan_budget(source_bytes: int) -> int:
    """Peak memory (bytes) one worker may reach converting a scan of ``source_bytes``."""
    return BASE_BYTES + PEAK_PER_SOURCE_BYTE * max(0, int(source_bytes))


def workers_for(source_sizes: list[int], wanted: int, available: int | None,
                navmesh_bytes: list[int] | None = None) -> tuple[int, str | None]:
    """(workers, note): at most ``wanted``, and no more than fit in memory if the largest scenes
    all ran at once; a scene needs ``scan_budget`` of its source size or its navmesh's estimate
    (``navmesh_bytes``, parallel to ``source_sizes``), whichever is larger; ``note`` says why
    when the pool was made smaller."""
    if available is None or not source_sizes:
        return wanted, None
    nav = navmesh_bytes or [0] * len(source_sizes)
    need, size, nbytes = max((max(scan_budget(s), BASE_BYTES + n), s, n) for s, n in zip(source_sizes, nav))
    fit = max(1, int(USABLE_FRACTION * available) // need)
    if fit >= wanted:
        return wanted, None
    what = (f"the largest scan ({size / 2**20:.0f} MiB)" if scan_budget(size) >= BASE_BYTES + nbytes
            else f"the largest navmesh import ({nbytes / 2**30:.1f} GiB estimated from its polygons)")
    return fit, (f"{fit} worker{'s' if fit > 1 else ''} instead of {wanted}: {what} may need "
                 f"{need / 2**30:.1f} GiB to convert and {available / 2**30:.1f} GiB are available")


def detour_import_bytes(path: str | os.PathLike, cell_size: float | None = None) -> int:
    """Estimated peak bytes of importing the Detour navmesh at ``path`` (its own cell size
    unless ``cell_size``), from the area its polygons cover; 0 when the file cannot be read
    (the import reports that)."""
    from ..nav.detour import read_detour_navmesh
    from ..nav.grid import xz_area

    try:
        dm = read_detour_navmesh(path)
        v, t = dm.triangles()
        cs = cell_size or dm.nav_settings().cell_size
    except (BpsError, OSError, ValueError):
        return 0
    return import_bytes(xz_area(v, t), cs)
