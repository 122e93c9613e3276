"""A resident scene's bytes by part: what the scene cache charges for it, broken down.

``scene_footprint(shading, renderer, num_vertices, num_triangles, navigation_bytes)`` -> a dict
of ints (bytes) with the keys ``PARTS``; their sum is what the cache charges for the scene:
- bvh: the renderer's acceleration structure (its estimate, ``renderer.accel_breakdown``)
- geometry: the vertex buffer the renderer holds and the triangle index buffer, one array that
  the shading tables and the BVH share (a renderer that copies them counts its copies here)
- shading: the per-vertex / per-triangle / per-material shading tables (uvs, colours, material
  and mip bias per triangle, instance ids)
- textures: the texel blocks of every kept mip level and their level tables
- navigation: the navmesh's arrays
A file's footprint (``bps-assets info``): ``file_footprint``. Measurements: docs/PERFORMANCE.md ("Resident bytes per scene").
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..render.shading_data import ShadingData

PARTS = ("bvh", "geometry", "shading", "textures", "navigation")
TEXTURE_TABLES = ("tex_data", "level_info", "tex_nlevels", "tex_format")
GEOMETRY_TABLES = ("indices",)


def scene_footprint(shading: ShadingData, renderer: Any, num_vertices: int, num_triangles: int,
                    navigation_bytes: int = 0, level: int = -1) -> dict[str, int]:
    """The bytes a resident scene holds, by part (see the module docstring); ``level`` >= 0: the
    mesh is that converter LOD level (``lod_kwargs``)."""
    arrays = shading.arrays()
    textures = sum(a.nbytes for k, a in arrays.items() if k in TEXTURE_TABLES)
    geometry = sum(a.nbytes for k, a in arrays.items() if k in GEOMETRY_TABLES)
    accel = dict(renderer.accel_breakdown(num_vertices, num_triangles, **lod_kwargs(level)))
    return {"bvh": int(accel.get("bvh", 0)), "geometry": geometry + int(accel.get("geometry", 0)),
            "shading": shading.nbytes - textures - geometry, "textures": textures,
            "navigation": int(navigation_bytes)}


def accel_bytes(renderer: Any, num_vertices: int, num_triangles: int, level: int = -1) -> int:
    """What ``renderer.prepare`` adds for a mesh of this size beyond the shading tables: the sum
    of its ``accel_breakdown`` (the bvh and geometry parts of ``scene_footprint``). Nothing in
    the library calls it: tests and benchmarks do, to predict a scene's resident bytes."""
    return int(sum(renderer.accel_breakdown(num_vertices, num_triangles, **lod_kwargs(level)).values()))


def lod_kwargs(level: int) -> dict:
    """The keyword a renderer's ``prepare`` / ``accel_breakdown`` gets for a converter LOD
    ``level`` (``render.protocol.Renderer.prepare``); none for the full mesh, so a file without
    LODs takes exactly the call it always took."""
    return {"level": int(level)} if level >= 0 else {}


def navmesh_nbytes(nav: Any) -> int:
    """Bytes of the numpy arrays a NavMesh holds (its attributes, one level deep)."""
    if nav is None:
        return 0
    total = 0
    for v in vars(nav).values():
        if isinstance(v, np.ndarray):
            total += v.nbytes
    return total


def add_footprints(footprints) -> dict[str, int]:
    """Part-wise sum of several scenes' footprints (the cache report's total)."""
    total = dict.fromkeys(PARTS, 0)
    for f in footprints:
        _add_into(total, f, 1)
    return total


def _add_into(total: dict, footprint, sign: int) -> None:
    """``total`` += ``sign`` x ``footprint``, part by part (a missing part or footprint: 0)."""
    for k in PARTS:
        total[k] += sign * int((footprint or {}).get(k, 0))


class ResidentFootprint:
    """The resident scenes' footprints summed as they arrive and leave (``total``, by part):
    each scene's own, and each shared asset's (``asset_footprints``) once while any resident
    scene holds it, so a step's report copies the total instead of summing every scene again.
    ``updates``: footprints folded in or out so far (one per scene and per first / last asset)."""

    def __init__(self):
        self.total = dict.fromkeys(PARTS, 0)
        self.updates = 0
        self._assets: dict = {}   # asset path -> [resident scenes holding it, its footprint]

    def arrived(self, scene) -> None:
        """``scene`` (a LoadedScene) is resident."""
        self._fold(scene.footprint, 1)
        for path, f in (scene.asset_footprints or {}).items():
            held = self._assets.setdefault(path, [0, f])
            if held[0] == 0:
                self._fold(f, 1)
            held[0] += 1

    def left(self, scene) -> None:
        """``scene`` (one ``arrived`` was told of) is no longer resident."""
        self._fold(scene.footprint, -1)
        for path in scene.asset_footprints or {}:
            held = self._assets[path]
            held[0] -= 1
            if held[0] == 0:
                self._fold(held[1], -1)
                del self._assets[path]

    def _fold(self, footprint, sign: int) -> None:
        self.updates += 1
        _add_into(self.total, footprint, sign)


def decoded_scan_bytes(scene) -> int:
    """Bytes of a packed scene decoded the plain way: positions, indices, uvs, colours and RGBA8
    texels of every texture's level 0 (no mips): the yardstick the resident bytes are held to."""
    total = sum(a.nbytes for a in (scene.positions, scene.indices, scene.uvs, scene.colors) if a is not None)
    levels = np.zeros((0, 6), np.int64) if scene.tex_levels is None else \
        np.asarray(scene.tex_levels, np.int64).reshape(-1, 6)
    top = levels[levels[:, 1] == 0]
    return int(total + (top[:, 2] * top[:, 3] * 4).sum())
