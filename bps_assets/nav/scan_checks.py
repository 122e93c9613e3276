"""Checks of a navmesh against the scan it is built from: wrong up axis (refused), no floor (warned).

**Up axis** (``up_axis_problem``): the scan's horizontal area under the up axis given (faces
within ``max_slope`` of it, floors and tops facing up, ceilings facing down) against the same under
the other axis. Refused when the other axis has ``up_ratio`` times as much (and at least
``up_min_area`` m^2), unless the scene as given is open to the sky (less facing down than
``closed_share`` of what faces up) or, for ``convert``, is no room: under ``up_min_given`` m^2
horizontal (a lone sheet), or its bounding box's second-largest side under ``room_extent`` m (an
object: a wardrobe on its back looks like a Z-up room). ``UpAxisError`` names the ``--up`` to pass;
``force`` accepts the scan as given. The ratios measured on synth and real scans, and why one box room is
ambiguous: docs/NAVMESH.md section 9.

**No floor** (``floor_problem``): a warning when the navigable area is under ``floor_share`` of the
scan's footprint (``footprint_area``: the x/z area its geometry covers), or when no island reaches
``floor_island`` m^2 (only table tops and ledges are walkable).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UpAxisError


@dataclass(frozen=True)
class ScanCheckOptions:
    """Thresholds of the up-axis refusal and the no-floor warning (module docstring)."""
    up_ratio: float = 1.25       # refuse when horizontal area under the other axis >= this x the given's
    up_min_area: float = 2.0     # m^2 up-facing under the other axis, at least (objects are not judged)
    up_min_given: float = 0.0    # m^2 horizontal as given, at least (convert: a lone sheet is no room on its side)
    room_extent: float = 0.0     # m: bounding box's second-largest side, at least (convert: objects are not judged)
    closed_share: float = 0.5    # refuse only when facing down is >= this x facing up as given
    floor_share: float = 0.3     # warn when navigable area < this x the footprint
    floor_island: float = 2.0    # m^2: warn when no island is this large
    footprint_cell: float = 0.25  # m: the footprint's sampling grid


DEFAULTS = ScanCheckOptions()
CONVERT_CHECKS = ScanCheckOptions(up_min_given=1.0, room_extent=3.0)   # `convert`: packs objects too
_OTHER = {"y": "z", "z": "y"}


def horizontal_areas(vertices, triangles, up: str, max_slope: float = 45.0) -> tuple[tuple, tuple]:
    """((facing up, facing down) under ``up``, the same under the other axis) in m^2: the areas
    of the faces within ``max_slope`` of the axis, facing it and facing away. For a scan in the
    habitat frame read with up axis ``up`` ("y": as is; "z": (x, y, z) -> (x, z, -y))."""
    v = np.asarray(vertices, np.float64).reshape(-1, 3)
    t = np.asarray(triangles, np.int64).reshape(-1, 3)
    if len(t) == 0:
        return (0.0, 0.0), (0.0, 0.0)
    p = v[t]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    a = np.linalg.norm(n, axis=1)
    ok = np.isfinite(a) & (a > 0)
    n, a = n[ok] / a[ok, None], a[ok] / 2
    c = math.cos(math.radians(max_slope))
    # the other reading's up in this frame: a Y-up file's +z, a Z-up file's +y (now habitat's -z)
    alt = np.array([0.0, 0.0, 1.0]) if up == "y" else np.array([0.0, 0.0, -1.0])
    sides = lambda d: (float(a[d >= c].sum()), float(a[d <= -c].sum()))  # noqa: E731
    return sides(n[:, 1]), sides(n @ alt)


def _second_side(vertices, triangles) -> float:
    """m: the second-largest side of the bounding box of the vertices triangles use (either
    reading of the up axis has the same sides: a room has two of at least 3 m, furniture not)."""
    v = np.asarray(vertices, np.float64).reshape(-1, 3)
    t = np.asarray(triangles, np.int64).reshape(-1)
    if len(t) == 0:
        return 0.0
    u = v[np.unique(t)]
    return float(np.sort(u.max(0) - u.min(0))[1])


def up_axis_problem(vertices, triangles, up: str, max_slope: float = 45.0,
                    options: ScanCheckOptions = DEFAULTS) -> str | None:
    """The one-line reason the scan looks read with the wrong up axis, or None."""
    if up not in _OTHER or _second_side(vertices, triangles) < options.room_extent:
        return None
    cur, alt = horizontal_areas(vertices, triangles, up, max_slope)
    here, there = max(cur), max(alt)
    if there < options.up_min_area or there < options.up_ratio * here or here < options.up_min_given:
        return None
    if min(cur) < options.closed_share * max(cur):
        return None   # open to the sky as given (no ceiling): a wrong reading of rooms is closed
    other = _OTHER[up]
    return (f"the scan looks {other.upper()}-up, not {up.upper()}-up: pass --up {other} (or --force to build "
            f"it as given): {there:.1f} m^2 of floor or ceiling if {other.upper()} is up, {here:.1f} m^2 if "
            f"{up.upper()} is (its navmesh would stand on walls)")


def require_up_axis(vertices, triangles, up: str, source=None, max_slope: float = 45.0, force: bool = False,
                    options: ScanCheckOptions = DEFAULTS) -> None:
    """``UpAxisError`` naming ``source`` when ``up_axis_problem`` finds one, unless ``force``."""
    if force:
        return
    why = up_axis_problem(vertices, triangles, up, max_slope, options)
    if why is not None:
        raise UpAxisError(source, why)


def footprint_area(vertices, triangles, options: ScanCheckOptions = DEFAULTS) -> float:
    """m^2 of the x/z plane the scan covers: cells of ``footprint_cell`` whose centre lies in some
    triangle's x/z projection (floor or ceiling: a scan without a floor still has its footprint)."""
    from .grid import grid_frame
    from .raster import rasterize_centres

    v = np.asarray(vertices, np.float64).reshape(-1, 3)
    t = np.asarray(triangles, np.int64).reshape(-1, 3)
    if len(t) == 0:
        return 0.0
    cs = options.footprint_cell
    p = v[t]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    t = t[np.abs(n[:, 1]) > 0.1 * np.linalg.norm(n, axis=1)]   # walls cover no x/z area: skipped
    if len(t) == 0:
        return 0.0
    used = v[np.unique(t)]
    origin, D, W = grid_frame(used.min(0), used.max(0), cs, None, "scene vertex bounds")
    r, c, _, _ = rasterize_centres(v, t, origin, cs, D, W)
    return float(np.unique(r * W + c).size * cs * cs)


def floor_problem(navigable_area: float, largest_island: float, footprint: float,
                  options: ScanCheckOptions = DEFAULTS) -> str | None:
    """The no-floor warning for these figures (m^2), or None. ``verify`` calls it on the figures
    preprocess recorded."""
    if not footprint or footprint <= 0 or not navigable_area or navigable_area <= 0:
        return None
    if largest_island < options.floor_island:
        return (f"no floor? the largest walkable island is {largest_island:.1f} m^2 (of {navigable_area:.1f} m^2 "
                f"on the scan's {footprint:.0f} m^2 footprint): only tops and ledges are walkable")
    share = navigable_area / footprint
    if share < options.floor_share:
        return (f"no floor? only {navigable_area:.1f} m^2 walkable on the scan's {footprint:.0f} m^2 footprint "
                f"({share:.0%} < {options.floor_share:.0%}): holes in the floor, or the wrong up axis")
    return None


__all__ = ["ScanCheckOptions", "DEFAULTS", "CONVERT_CHECKS", "horizontal_areas", "up_axis_problem", "require_up_axis",
           "footprint_area", "floor_problem"]
