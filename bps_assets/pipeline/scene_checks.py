"""Checks on a scene's outputs that the converters cannot make alone, with the likely cause.

- ``no_navigable_area``: a navmesh with no navigable area (nothing the agent can stand on) is
  an ``EmptySceneError``, not an "ok" scene that the runtime later quarantines. The cause is
  read from the packed scene: the floor faces sideways (the source's up axis is not the one
  assumed: a Y-up file under ``--dataset gibson``), the scene is an object rather than a room
  (small bounds), the cell size is too coarse for it (every island under ``region_min_size^2``
  cells is dropped), or no flat surface is wide and high enough for the agent. ``mesh_cause``:
  the same from triangles (``bps-assets navmesh`` on a scan).
- ``navmesh_fit``: ``nav.validate.navmesh_misfit`` of a scene's written files (a navmesh that
  does not belong to its scene: its walkable surface lies outside the scene's bounds, e.g.
  1.6 m below the floor). Preprocess builds one instead (``--navmesh auto``) or fails the scene
  (``import``); verify and the runtime refuse it.

Called by the pipeline (``backend``, ``preprocess``, ``verify``), the CLI, and at scene load.
"""
from __future__ import annotations

import os

from ..errors import BpsError, EmptySceneError, NavError, is_real
from ..nav.validate import fit_points, header_bounds, points_misfit

# a scene smaller than this (largest horizontal side, m) is an object, not a place to walk
OBJECT_SIZE = 2.0


def _face_directions(path) -> dict | None:
    """``_mesh_directions`` of the packed scene at ``path``; None if unreadable."""
    from ..packed_scene import read_packed_scene

    try:
        s = read_packed_scene(path, ["positions", "indices"])
    except BpsError:
        return None
    if s.indices is None or not len(s.indices):
        return None
    return _mesh_directions(s.positions, s.indices, s.header.get("frame", {}).get("up"))


def _mesh_directions(positions, indices, up) -> dict | None:
    """Area fractions of the triangles (habitat frame) by the axis their normal is closest to
    (``y`` up or down, ``x`` / ``z`` sideways), their bounds' size and the source's ``up``."""
    import numpy as np

    if not len(indices):
        return None
    positions = np.asarray(positions)
    p = positions[np.asarray(indices).astype(np.int64)]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]).astype(np.float64)
    area = np.linalg.norm(n, axis=1)
    total = float(area.sum())
    if total <= 0:
        return None
    axis = np.abs(n).argmax(1)
    frac = {a: float(area[axis == i].sum()) / total for i, a in enumerate("xyz")}
    lo, hi = positions.min(0), positions.max(0)
    return {"frac": frac, "size": [float(x) for x in hi - lo], "up": up}


def likely_cause(packed_scene: str | os.PathLike, settings=None) -> str:
    """Why the scene in ``packed_scene`` has nothing to navigate, in a few words, for a navmesh
    built with ``settings`` (``NavSettings``; None: the defaults)."""
    return _cause(_face_directions(packed_scene), settings)


def mesh_cause(positions, indices, up, settings=None) -> str:
    """``likely_cause`` of triangles (habitat frame) read from a source whose up axis was ``up``."""
    return _cause(_mesh_directions(positions, indices, up), settings)


def _cause(d: dict | None, settings) -> str:
    from ..nav.settings import DEFAULT_SETTINGS

    if d is None:
        return "the scene has no readable geometry"
    settings = settings or DEFAULT_SETTINGS
    up = d["up"]
    frac, (sx, sy, sz) = d["frac"], d["size"]
    if max(sx, sz) < OBJECT_SIZE:
        return f"it is {sx:.2f} x {sy:.2f} x {sz:.2f} m: an object rather than a scene?"
    # an island of fewer than region_min_size^2 cells is dropped: a coarse cell drops them all
    side = settings.region_min_size * settings.cell_size
    if side * side > sx * sz:
        return (f"the cell size {settings.cell_size:g} m is too coarse for it: islands under "
                f"{settings.region_min_size:g}^2 cells ({side * side:.3g} m^2) are dropped, and it covers "
                f"only {sx:.1f} x {sz:.1f} m; pass a smaller --cell-size (default {DEFAULT_SETTINGS.cell_size:g})")
    if frac["z"] > 1.5 * max(frac["y"], frac["x"]):
        # floor and ceiling (the largest flat surfaces) face +-z: the source's up axis became
        # the habitat frame's z, so the converter assumed the wrong one
        other = {"z": "y", "y": "z"}.get(up)
        hint = (f"the source is probably {other.upper()}-up, not {up.upper()}-up: pass --up {other}"
                if other else "the source's up axis is probably wrong: pass --up")
        return f"its floor faces sideways ({frac['z']:.0%} of the area faces +-z): {hint}"
    return (f"no upward surface is wide enough for the agent, or it has no head room "
            f"({frac['y']:.0%} of the area faces up or down; {sx:.1f} x {sy:.1f} x {sz:.1f} m)")


def no_navigable_area(scene: str, navigable_area, packed_scene, source=None,
                      settings=None) -> EmptySceneError | None:
    """The error (naming ``source``, else the packed scene) for a scene whose navmesh, built
    with ``settings`` (None: the defaults), has no navigable area, or None if it has some."""
    if navigable_area is None or (isinstance(navigable_area, (int, float)) and navigable_area > 0):
        return None
    where = "" if source else f"scene {scene}: "  # a source path already names the scene
    return EmptySceneError(source or packed_scene, f"{where}the navmesh has no navigable area "
                                                   f"({likely_cause(packed_scene, settings)})")


def scene_bounds(packed_scene) -> tuple | None:
    """``(lo, hi)`` of a packed scene's bounds (its header; nothing else is read), or None when
    the header has none."""
    from ..container import Container

    with Container(packed_scene) as c:
        return header_bounds(c.header)


def navmesh_fit(scene: str, navmesh_path, packed_scene, points=None) -> str | None:
    """``navmesh_misfit`` of the packed navmesh at ``navmesh_path`` against the packed scene's
    bounds, prefixed with the scene's name; None if it fits or either file cannot tell.
    ``points``: the navmesh's ``fit_points`` when the caller has them (then it is not read)."""
    from ..nav import load_navmesh

    try:
        bounds = scene_bounds(packed_scene)
        if bounds is not None and points is None:
            points = fit_points(load_navmesh(navmesh_path))
    except (BpsError, NavError):
        return None
    msg = points_misfit(points, bounds)   # None without bounds
    return None if msg is None else f"scene {scene}: {msg}"


def entry_problems(entry: dict) -> list[str]:
    """Problems ``verify`` reports for a manifest entry marked ok: a navmesh with no navigable
    area (written by a bps before this check existed, or by hand)."""
    area = (entry.get("stats") or {}).get("navigable_area")
    if entry.get("status") == "ok" and isinstance(area, (int, float)) and not area > 0:
        return [f"navmesh has no navigable area ({area}): nothing to navigate (rerun preprocess "
                "with --force to get the likely cause)"]
    return []


def floor_warnings(scenes: dict) -> list[str]:
    """``verify``'s no-floor warnings (``nav.scan_checks.floor_problem``) for the ok scenes of a
    manifest whose preprocess recorded the figures (footprint, largest island)."""
    from ..nav.scan_checks import floor_problem

    out = []
    for name, e in scenes.items():
        st = e.get("stats") or {}
        fig = [st.get(k) for k in ("navigable_area", "largest_island", "footprint_area")]
        if e.get("status") != "ok" or not all(is_real(x) for x in fig):
            continue
        w = floor_problem(*fig)
        if w:
            out.append(f"scene {name}: {w}")
    return out
