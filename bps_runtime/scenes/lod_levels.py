"""Which converter LOD a scene is loaded at (docs/FORMAT.md 5.8), and the read of that level.

``RenderOptions.lod == "auto"`` (the default): the coarsest level whose geometric error is at
most one pixel's footprint at ``REFERENCE_DISTANCE`` (HFOV / width in radians, times 1 m: 64 px
at HFOV 90 -> 2.45 cm, so a 1 cm level is taken, a 5 cm one is not), the pixel being the finest
of the sensor's and of the declared ``RenderOptions.view_cameras`` (``render_view`` renders the
resident level: a declared finer goal camera gets a level fit for it; an undeclared one gets
the sensor's). ``lod == i`` (an int): level i (a file with fewer levels: its coarsest). Only that
level's geometry is read and made resident. A file without LODs, or ``lod == "full"``, is read
exactly as ``read_packed_scene`` reads it. ``choice`` says which level and why (logged per load).
The navmesh never depends on the level (it is built from the full mesh at preprocess time).
"""
from __future__ import annotations

import os

from bps_assets import lod_section
from bps_assets.container import Container
from bps_assets.packed_scene import KIND, read_lod_level, read_packed_scene

REFERENCE_DISTANCE = 1.0   # metres: where a level's error is compared with a pixel


def level_for(options, header: dict, path: str = "") -> int:
    """The level ``options`` (RenderOptions) selects in a file with ``header``; -1: the full mesh."""
    return choice(options, header, path)[0]


def choice(options, header: dict, path: str = "") -> tuple[int, str]:
    """(``level_for``, why: one line naming ``options.lod``, the pixel footprint and the levels'
    errors) of a file with ``header``."""
    if options.lod == "full":
        return -1, "lod='full': the full mesh"
    if lod_section.HEADER_KEY not in header:
        return -1, f"lod={options.lod!r}: the file has no converter LODs, the full mesh"
    return decide(options, [x["max_error"] for x in lod_section.levels(path, header)])


def decide(options, errors) -> tuple[int, str]:
    """``choice`` among levels of ``errors`` (metres, finest first; a manifest's ``--lod``)."""
    errs = ", ".join(f"{i}: {e * 100:g} cm" for i, e in enumerate(errors))
    if options.lod == "full" or not errors:
        return -1, f"lod={options.lod!r}: the full mesh"
    if options.lod != "auto":
        level = min(int(options.lod), len(errors) - 1)
        return level, (f"lod={options.lod}: level {level} (error {errors[level] * 100:g} cm; levels {errs})"
                       + ("" if level == options.lod else ", the coarsest there is"))
    pixel = finest_pixel_footprint(options)
    level = lod_section.choose_level(errors, pixel)
    h, w = options.resolution
    cams = ", the finest of the sensor and view cameras" if options.view_cameras else ""
    pix = f"one pixel at {REFERENCE_DISTANCE:g} m: {pixel * 100:.3g} cm, {h}x{w} HFOV {options.hfov_deg:g}{cams}"
    return level, (f"lod='auto': level {level}, the coarsest whose error <= {pix}; levels {errs}" if level >= 0
                   else f"lod='auto': the full mesh, no level's error <= {pix}; levels {errs}")


def finest_pixel_footprint(options) -> float:
    """Metres the finest pixel of the sensor and of the declared view cameras spans at
    ``REFERENCE_DISTANCE`` (the bound a level's error must meet)."""
    cams = [(options.resolution, options.hfov_deg), *options.view_cameras]
    return min(lod_section.pixel_footprint(hfov, res[1], REFERENCE_DISTANCE) for res, hfov in cams)


def header_choice(path: str | os.PathLike, options) -> tuple[int, str]:
    """``choice`` from the file's header alone (no section is read)."""
    with Container(path, KIND) as c:
        return choice(options, c.header, os.fspath(path))


def header_level(path: str | os.PathLike, options) -> int:
    """``level_for`` from the file's header alone (no section is read)."""
    return header_choice(path, options)[0]


def read_for_sensor(path: str | os.PathLike, options, expand: bool = True):
    """The packed scene at the level ``options`` selects (``PackedScene.lod`` says which,
    ``lod_reason`` why: the one ``choice`` of the read)."""
    level, why = header_choice(path, options)
    ps = read_packed_scene(path, expand=expand) if level < 0 else read_lod_level(path, level, expand=expand)
    ps.lod_reason = why
    return ps
