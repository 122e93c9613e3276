"""One front door from a file to a ``NavMesh``, chosen by the file's content (magic bytes).

``navmesh_from_file(path, settings)``: Detour navmesh sets (habitat ``.navmesh``, Recast Demo's
and go-detour's tiled ``.bin``) and single ``DNAV`` tiles are imported, bps navmeshes loaded,
scans (glTF / PLY / OBJ / packed scenes) built. ``open_navmesh(path)`` is the same for queries,
where a scan is refused (it has no navmesh until one is built). The extension is only a hint:
``readers.detect.resolve_kind`` refuses a content / extension mismatch with both named.
"""
from __future__ import annotations

import os

from ..errors import NavError, UnsupportedFormatError
from ..readers.detect import TILE_CACHE_MESSAGE, describe, resolve_kind
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
                      dataset: str | None = None):
    """Import, load or build the navmesh of ``path``. ``settings`` None: an imported Detour
    file keeps the agent it was built for, a scan is built with the defaults."""
    from .build import build_navmesh
    from .detour import import_detour
    from .grid import load_navmesh
    from .settings import DEFAULT_SETTINGS

    kind = _kind(path)
    if kind in ("detour-set", "detour-set-be", "detour-tile"):
        return checked(import_detour(path, settings), path)
    if kind == "bps-navmesh":
        return load_navmesh(path)
    return build_navmesh(path, settings or DEFAULT_SETTINGS, dataset=dataset)


def open_navmesh(path: str | os.PathLike):
    """A navmesh to query: a bps navmesh, or an imported Detour file."""
    from .detour import import_detour
    from .grid import load_navmesh

    kind = _kind(path)
    if kind in ("detour-set", "detour-set-be", "detour-tile"):
        return checked(import_detour(path), path)
    if kind in ("glb", "gltf", "ply", "obj", "bps-scene"):
        raise NavError(path, f"is a {describe(kind)}, not a navmesh: build one with "
                             "`bps-assets navmesh`")
    return load_navmesh(path)
