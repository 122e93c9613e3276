"""One front door from a file to a ``NavMesh``, chosen by the file's content (magic bytes).

``navmesh_from_file(path, settings)``: Detour navmesh sets (habitat ``.navmesh``, Recast Demo's
and go-detour's tiled ``.bin``) and single ``DNAV`` tiles are imported, bps navmeshes loaded,
scans (glTF / PLY / OBJ / packed scenes) built from ``navmesh_input(path)`` (a composed scene's
stage and STATIC instances; another scan's triangles after the up-axis check: preprocess builds
from the same). ``open_navmesh(path)`` is the same for queries,
where a scan is refused (it has no navmesh until one is built). The extension is only a hint:
``readers.detect.resolve_kind`` refuses a content / extension mismatch with both named.
"""
from __future__ import annotations

import dataclasses
import os

from ..errors import NavError, UnsupportedFormatError
from ..readers.detect import TILE_CACHE_MESSAGE, describe, describe_file, detect_kind, resolve_kind
from .settings import NavSettings



def checked(nav, path):
    """``nav`` once ``validate.check_navmesh`` passed (load_navmesh checks its own)."""
    from .validate import check_navmesh

    check_navmesh(nav, path)
    return nav


def _kind(path) -> str | None:
    kind = resolve_kind(path)
    if kind == "tile-cache":
        raise UnsupportedFormatError(path, TILE_CACHE_MESSAGE)
    return kind


def navmesh_from_file(path: str | os.PathLike, settings: NavSettings | None = None,
                      dataset: str | None = None, force_up: bool = False, up: str | None = None,
                      keep_agent: bool = False):
    """Import, load or build the navmesh of ``path``. ``settings`` None: an imported Detour
    file keeps the agent it was built for, a scan is built with the defaults. A Detour file's
    polygons are already eroded for its own agent: with ``settings``, one built for another
    agent radius or height is a NavError naming both values (``settings.refuse_other_agent``),
    unless ``keep_agent`` (no agent was asked for), which takes the file's. A scan is read in
    the frame of ``dataset``'s preset, its up axis overridden by ``up`` (``transforms.frame``
    options; a packed scene keeps its own frame). One that looks read with the wrong up axis is
    an ``UpAxisError`` unless ``force_up`` (``scan_checks``). A built or imported navmesh
    records ``path`` (``source_file``: its resolved path and sha256)."""
    from ..container import source_record
    from .build import build_navmesh
    from .detour import import_detour, read_detour_navmesh
    from .grid import load_navmesh
    from .scan_checks import footprint_area
    from .settings import DEFAULT_SETTINGS, refuse_other_agent

    kind = _kind(path)
    if kind == "bps-navmesh":
        return load_navmesh(path)
    if kind in ("detour-set", "detour-set-be", "detour-tile"):
        dm = read_detour_navmesh(path)
        if settings is not None:
            own = dm.nav_settings()
            if keep_agent:   # the file's own agent: nothing to refuse
                settings = dataclasses.replace(settings, agent_radius=own.agent_radius,
                                               agent_height=own.agent_height)
            else:
                refuse_other_agent(path, own, settings)
        nav = checked(import_detour(dm, settings), path)
    else:
        settings = settings or DEFAULT_SETTINGS
        v, t = navmesh_input(path, settings.max_slope, force_up, dataset, up=up)
        nav = build_navmesh((v, t), settings, source=os.path.basename(os.fspath(path)))
        nav.source_info["footprint_area"] = footprint_area(v, t)   # for the no-floor warning
    nav.source_file = source_record(path)   # which file, not only its name (``navmesh --overwrite``)
    return nav


def navmesh_input(path: str | os.PathLike, max_slope: float, force_up: bool = False,
                  dataset: str | None = None, triangles=None, up: str | None = None):
    """(vertices f64 [V,3], triangles i64 [T,3]) a navmesh of the scene ``path`` is built from,
    for ``bps-assets navmesh`` and preprocess alike. A composed packed scene: its stage and STATIC
    instances (``scene_dataset.packing.navmesh_triangles``, habitat-sim's rule; no up-axis check:
    the dataset's ``up`` / ``front`` fix its frame). Any other scan: all its triangles in the
    habitat frame, refused (``UpAxisError``) when they look read with the wrong up axis (the
    packed scene's own, else the frame of ``dataset`` and ``up``) unless ``force_up``.
    ``triangles``: ``path``'s (vertices, triangles) already read by the caller
    (``build.scene_triangles``), not read again."""
    from ..transforms.frame import up_axis
    from .build import frame_options, scene_triangles
    from .scan_checks import require_up_axis

    if _kind(path) == "bps-scene":
        from ..container import Container
        from ..scene_dataset.packing import is_composed, navmesh_triangles

        if is_composed(path):
            return navmesh_triangles(path)
        with Container(path) as c:
            own = (c.header.get("frame") or {}).get("up")
        axis = own if own in ("y", "z") else None
    else:
        axis = up_axis(frame_options(dataset, up))
    v, t = triangles if triangles is not None else scene_triangles(path, dataset, up)[:2]
    require_up_axis(v, t, axis, path, max_slope, force_up)
    return v, t


def open_navmesh(path: str | os.PathLike):
    """A navmesh to query: a bps navmesh, or an imported Detour file."""
    from .detour import import_detour, read_detour_navmesh
    from .grid import load_navmesh

    kind = _kind(path)
    if kind in ("detour-set", "detour-set-be", "detour-tile"):
        return checked(import_detour(path), path)
    if kind in ("glb", "gltf", "ply", "obj", "bps-scene"):
        if detect_kind(path) is None:   # kind came from the extension alone: say what the bytes are
            raise NavError(path, f"is not a navmesh, and {describe_file(path)}")
        raise NavError(path, f"is a {describe(kind)}, not a navmesh: build one with "
                             "`bps-assets navmesh`")
    return load_navmesh(path)
