"""What a packed scene file would hold resident (``bps-assets info``), beside its decoded size.

``packed_scene_footprint(path, navmesh_path, options)``: a plain file's bytes by part
(``footprint.scene_footprint``) for a sensor, at the level it loads and at every converter LOD
level; ``composed_footprint``: a composed scene's, the report of a scene cache holding it alone
(each shared asset once), so both show one breakdown. It sits above the cache and the
footprint accounting (it builds a cache; the loader charges by ``footprint``), so neither
imports it and no import has to hide a cycle. The renderers are imported when used (Embree and
Warp are optional dependencies: they fail lazily, with the pip command).
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from bps_assets.container import Container
from bps_assets.errors import MissingDependencyError
from bps_assets.lod_section import HEADER_KEY, levels as section_levels
from bps_assets.nav import load_navmesh
from bps_assets.packed_scene import KIND, read_lod_level, read_packed_scene

from ..render.mips import sensor_mips
from ..render.protocol import RenderOptions
from ..render.shading_data import build_shading_data
from .cache import CacheOptions, SceneCache
from .footprint import decoded_scan_bytes, navmesh_nbytes, scene_footprint
from .loader import SceneSource
from .lod_levels import choice


def packed_scene_footprint(path: str, navmesh_path: str | None = None, options=None) -> dict:
    """What a packed scene would hold resident for a sensor (``options``: RenderOptions; None: the
    default 64x64, HFOV 90), by part, under the Embree renderer (CPU) and the Warp backend's
    estimate (GPU), beside its decoded size: {"decoded_scan": int, "embree": {...}, "warp": {...},
    "level": the converter LOD level that sensor loads (-1: the full mesh), "reason": why
    (``lod_levels.choice``), "levels": per level, the full mesh first, {"level", "max_error"
    (None: full), "triangles", "embree", "warp" (totals)}} (footprints as ``scene_footprint``; a
    composed scene: ``composed_footprint``). Reads the file (and the navmesh, if given)."""
    opts = replace(options or RenderOptions(), threads=1)
    with Container(path, KIND) as c:
        header = dict(c.header)
    level, reason = choice(opts, header, path)
    errors = [x["max_error"] for x in section_levels(path, header)] if HEADER_KEY in header else []
    nav = navmesh_nbytes(load_navmesh(navmesh_path)) if navmesh_path else 0
    full = read_packed_scene(path)
    rows, out = [], {}
    for i in [-1, *range(len(errors))]:
        ps = full if i < 0 else read_lod_level(path, i)
        fp = _footprints(ps, path, opts, nav)
        rows.append({"level": i, "max_error": None if i < 0 else errors[i], "triangles": int(ps.indices.shape[0]),
                     **{k: sum(v.values()) for k, v in fp.items()}})
        if i == level:
            out = fp
    return {"decoded_scan": decoded_scan_bytes(full), **out, "level": level, "reason": reason, "levels": rows}


def _footprints(ps, path: str, opts, nav: int) -> dict:
    """{"embree": footprint, "warp": footprint} of packed scene ``ps`` (at its ``lod``) for ``opts``."""
    from ..render.embree import EmbreeRenderer
    from ..render.warp_backend import warp_accel_breakdown

    sd = sensor_mips(build_shading_data(ps, path), opts)
    nv, nt = int(ps.positions.shape[0]), int(ps.indices.shape[0])
    r = EmbreeRenderer(opts)
    try:
        cpu = scene_footprint(sd, r, nv, nt, nav, ps.lod)
    finally:
        r.close()
    return {"embree": cpu,
            "warp": scene_footprint(sd, SimpleNamespace(accel_breakdown=warp_accel_breakdown), nv, nt, nav, ps.lod)}


def composed_footprint(path: str, navmesh_path: str | None = None, options=None) -> dict:
    """What a composed scene holds resident alone in a scene cache, by part (its report's
    ``resident_footprint``: stage, instance table and structures, each shared asset once), beside
    its decoded size, as ``packed_scene_footprint``: {"decoded_scan", "embree", "warp"} (Warp on
    its CPU device: the bytes it charges on CUDA too; left out without Warp), for the sensor of
    ``options`` (RenderOptions; None: the default 64x64, HFOV 90)."""
    from ..render.embree import EmbreeRenderer

    def alone(make) -> dict:
        r = make()
        try:
            with SceneCache([SceneSource("info", path, navmesh_path)], r, 1,
                            CacheOptions(slots=1, prefetch=False, loader_threads=1)) as cache:
                cache.start(refuse=True)
                return cache.take_report().resident_footprint
        finally:
            r.close()

    opts = replace(options or RenderOptions(), threads=1)
    out = {"decoded_scan": decoded_scan_bytes(read_packed_scene(path)),
           "embree": alone(lambda: EmbreeRenderer(opts))}
    try:
        from ..render.warp_backend import WarpRenderer
        out["warp"] = alone(lambda: WarpRenderer(opts, device="cpu"))
    except MissingDependencyError:
        pass   # Warp is optional: without it the GPU column is left out, as the docstring says
    return out
