"""Which converter LOD a scene is loaded at (docs/FORMAT.md 5.8), and the read of that level.

``RenderOptions.lod == "auto"`` (the default): the coarsest level whose geometric error is at
most one pixel's footprint at ``REFERENCE_DISTANCE`` (HFOV / width in radians, times 1 m: 64 px
at HFOV 90 -> 2.45 cm, so a 1 cm level is taken, a 5 cm one is not), the pixel being the finest
of the sensor's and of the declared ``RenderOptions.view_cameras`` (``render_view`` renders the
resident level: a declared finer goal camera gets a level fit for it; an undeclared one gets
the sensor's). Only that level's geometry is read and made resident. A file without LODs, or ``lod == "full"``, is read
exactly as ``read_packed_scene`` reads it. The navmesh never depends on the level (it is built
from the full mesh at preprocess time).
"""
from __future__ import annotations

import os

from bps_assets import lod_section
from bps_assets.container import Container
from bps_assets.packed_scene import KIND, read_lod_level, read_packed_scene

REFERENCE_DISTANCE = 1.0   # metres: where a level's error is compared with a pixel


def level_for(options, header: dict, path: str = "") -> int:
    """The level ``options`` (RenderOptions) selects in a file with ``header``; -1: the full mesh."""
    if options.lod == "full" or lod_section.HEADER_KEY not in header:
        return -1
    errors = [x["max_error"] for x in lod_section.levels(path, header)]
    return lod_section.choose_level(errors, finest_pixel_footprint(options))


def finest_pixel_footprint(options) -> float:
    """Metres the finest pixel of the sensor and of the declared view cameras spans at
    ``REFERENCE_DISTANCE`` (the bound a level's error must meet)."""
    cams = [(options.resolution, options.hfov_deg), *options.view_cameras]
    return min(lod_section.pixel_footprint(hfov, res[1], REFERENCE_DISTANCE) for res, hfov in cams)


def header_level(path: str | os.PathLike, options) -> int:
    """``level_for`` from the file's header alone (no section is read)."""
    with Container(path, KIND) as c:
        return level_for(options, c.header, os.fspath(path))


def read_for_sensor(path: str | os.PathLike, options, expand: bool = True):
    """The packed scene at the level ``options`` selects (``PackedScene.lod`` says which)."""
    level = header_level(path, options)
    if level < 0:
        return read_packed_scene(path, expand=expand)
    return read_lod_level(path, level, expand=expand)
