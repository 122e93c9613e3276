"""Keep resident only the texture mip levels the configured cameras can sample.

``sensor_mips(shading, options)`` -> a ShadingData whose textures lack the levels finer than
any pixel of the sensor or of a declared ``options.view_cameras`` camera (goal images) selects
from ``options.texture_near`` metres or more (the agent radius). The model picks level
round(log2(z * pixel_angle / max(|cos|, 0.05)) + tri_lod_bias) with z the z-depth; z is at least
texture_near / |d| for the longest camera ray d (the image corner), |cos| <= 1, so a texture's
first selectable level is round(log2(z_min * pixel_angle) + its triangles' smallest bias), the
least over the cameras. The dropped levels' rows of ``level_info`` point at that first kept
level, so a closer or undeclared finer camera samples it (coarser texels; never outside the
tables) and every other pixel is unchanged.
``tri_lod_bias`` keeps referring to the source's level 0. ``texture_near = 0`` keeps every level.
Measurements: docs/PERFORMANCE.md ("Resident bytes per scene").
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .camera import camera_directions
from .protocol import RenderOptions, view_options
from .shading_data import ShadingData, level_nbytes

MARGIN = 1e-3  # mip levels: float32 rounding in the renderers' lod never reaches this


def first_levels(sd: ShadingData, options: RenderOptions) -> np.ndarray:
    """[X] int: each texture's finest level the sensor or a declared view camera can select (0:
    keep every level)."""
    nx = sd.level_info.shape[0]
    first = np.zeros(nx, np.int64)
    if options.texture_near <= 0 or not sd.tri_material.size:
        return first
    base = np.inf
    for cam in (options, *(view_options(options, r, h) for r, h in options.view_cameras)):
        z_min = options.texture_near / float(np.linalg.norm(camera_directions(cam), axis=1).max())
        base = min(base, np.log2(z_min * cam.pixel_angle))
    tex = sd.material_texture[sd.tri_material]
    bias = np.full(nx, np.inf)
    used = tex >= 0
    np.minimum.at(bias, tex[used], sd.tri_lod_bias[used].astype(np.float64))
    seen = np.isfinite(bias)
    lvl = np.floor(base + bias[seen] + 0.5 - MARGIN)
    first[seen] = np.clip(lvl, 0, np.maximum(sd.tex_nlevels[seen] - 1, 0))
    return first


def sensor_mips(sd: ShadingData, options: RenderOptions) -> ShadingData:
    """``sd`` with only the texture levels ``options``' sensor can select (see the module
    docstring); ``sd`` itself when nothing can be dropped."""
    first = first_levels(sd, options)
    if not first.any():
        return sd
    info = sd.level_info.copy()
    parts, off = [], 0
    for t in range(info.shape[0]):
        n = int(sd.tex_nlevels[t])
        for lv in range(int(first[t]), n):
            o, w, h = (int(x) for x in sd.level_info[t, lv])
            size = int(level_nbytes(sd.tex_format[t], w, h))
            parts.append(sd.tex_data[o:o + size])
            info[t, lv] = (off, w, h)
            off += size
            pad = -off % 8  # BC1 levels start at multiples of 8
            if pad:
                parts.append(np.zeros(pad, np.uint8))
                off += pad
        info[t, :first[t]] = info[t, first[t]] if n else 0
    data = np.concatenate(parts) if parts else np.zeros(8, np.uint8)
    return dataclasses.replace(sd, tex_data=data, level_info=info)
