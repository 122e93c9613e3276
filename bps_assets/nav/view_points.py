"""ObjectNav view points: navigable agent states from which an object is seen, scored as
habitat's ObjectNav generator scores them (``build_goal``), with ``bps_assets.raycast`` for its
semantic sensor.

Rule (docs/TASKS.md): candidates lie on a ``grid_step`` grid over the object's AABB grown by
``max_distance`` in x and z, at the AABB centre's height; a candidate farther than
``max_distance`` from the AABB is "too far"; one with no navmesh surface from ``down_search``
below to 2 m above is "down unnavigable"; the rest are snapped to the navmesh and turned to face
the AABB centre (yaw only). Its score ``iou`` is the sum over camera pitches (-30, 0, +30 deg:
habitat's LOOK_DOWN, LOOK_UP, LOOK_UP) of the fraction of semantic-sensor pixels whose first
hit is a triangle of the object (sensor ``sensor_height`` above the snapped point, ``hfov``,
``width`` x ``height``). Kept: ``iou > keep_threshold`` (habitat: 0.001) on an island of radius
>= ``island_radius_limit``, best first. Only the pixels inside the object's projected AABB are
traced: the others cannot see it, so the score equals a full render's at a fraction of the rays.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..raycast import RayCaster
from ..semantics import SemanticTable, object_ids
from .pose import yaw_quaternion


@dataclass(frozen=True)
class ViewPointOptions:
    """habitat's ``build_goal`` parameters; the sensor is ``objectnav_hm3d``'s at 1/4 size."""

    grid_step: float = 0.25           # m between candidates (habitat's ``cell_size`` argument)
    max_distance: float = 1.0         # m, candidate to object AABB (habitat: to its OBB)
    down_search: float = 2.0          # m searched below a candidate for a navmesh surface
    sensor_height: float = 0.88       # m above the agent's feet
    hfov: float = 79.0                # degrees
    width: int = 160                  # px (habitat's 640 x 480 / 4: same fractions)
    height: int = 120
    pitches: tuple = (-30.0, 0.0, 30.0)  # degrees, the views summed into the score
    keep_threshold: float = 0.001     # iou above which a view point is kept
    island_radius_limit: float = 1.5  # m, view points on smaller islands are dropped

    def __post_init__(self):
        if not (self.grid_step > 0 and self.max_distance >= 0 and self.width > 0 and self.height > 0
                and 0 < self.hfov < 180):
            raise ConfigError(None, "view points: need grid_step > 0, max_distance >= 0, a positive "
                                    "image size and 0 < hfov < 180")


DEFAULTS = ViewPointOptions()


def yaw_facing(direction) -> float:
    """Yaw (radians about +Y) that turns the agent's forward (-Z) towards ``direction`` (x/z)."""
    return math.atan2(-float(direction[0]), -float(direction[2]))


def camera_basis(yaw: float, pitch: float) -> np.ndarray:
    """[3, 3] camera-to-world rotation: yaw about +Y, then pitch about the camera's +X
    (positive looks up, habitat's LOOK_UP)."""
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    return ry @ rx


def _pixel_window(aabb: np.ndarray, eye: np.ndarray, rot: np.ndarray, o: ViewPointOptions):
    """(row0, row1, col0, col1) of the pixels the AABB can cover; the whole image when a corner
    lies behind the camera, None when it is entirely behind."""
    lo, hi = aabb[:3], aabb[3:]
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    cam = (corners - eye) @ rot  # world -> camera (rot is orthonormal)
    depth = -cam[:, 2]
    if np.all(depth <= 1e-6):
        return None
    if np.any(depth <= 1e-6):
        return 0, o.height, 0, o.width
    tx = math.tan(math.radians(o.hfov) / 2)
    ty = tx * o.height / o.width
    u = (cam[:, 0] / depth / tx + 1) / 2 * o.width        # column coordinate
    v = (1 - cam[:, 1] / depth / ty) / 2 * o.height       # row coordinate (row 0 at the top)
    c0, c1 = int(np.clip(np.floor(u.min()), 0, o.width)), int(np.clip(np.ceil(u.max()), 0, o.width))
    r0, r1 = int(np.clip(np.floor(v.min()), 0, o.height)), int(np.clip(np.ceil(v.max()), 0, o.height))
    return r0, r1, c0, c1


def object_coverage(caster: RayCaster, tri_object: np.ndarray, object_id: int, aabb: np.ndarray,
                    eye, yaw: float, pitch: float, o: ViewPointOptions = DEFAULTS) -> float:
    """Fraction of the semantic sensor's pixels (pinhole, pixel centres) that see
    ``object_id`` first, from ``eye`` at ``yaw`` / ``pitch`` (radians)."""
    eye = np.asarray(eye, np.float64)
    rot = camera_basis(yaw, pitch)
    win = _pixel_window(np.asarray(aabb, np.float64), eye, rot, o)
    if win is None:
        return 0.0
    r0, r1, c0, c1 = win
    if r1 <= r0 or c1 <= c0:
        return 0.0
    tx = math.tan(math.radians(o.hfov) / 2)
    ty = tx * o.height / o.width
    cols = (np.arange(c0, c1) + 0.5) / o.width * 2 - 1
    rows = 1 - (np.arange(r0, r1) + 0.5) / o.height * 2
    xx, yy = np.meshgrid(cols * tx, rows * ty)
    d = np.stack([xx.ravel(), yy.ravel(), -np.ones(xx.size)], 1) @ rot.T
    ids = object_ids(tri_object, caster.first_hit(np.broadcast_to(eye, d.shape), d))
    return float(np.count_nonzero(ids == object_id)) / (o.width * o.height)


def _aabb_distance(aabb: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Euclidean distance from points [N, 3] to the box (0 inside)."""
    d = np.maximum(np.maximum(aabb[:3] - p, 0), p - aabb[3:])
    return np.linalg.norm(d, axis=1)


def _has_surface_below(navmesh, pts: np.ndarray, below: float) -> np.ndarray:
    """habitat's ``down_is_navigable``: a navmesh surface within 2 m of the point, or in the
    ``below`` metres under it (searched in 0.5 m windows, like its 5 cm steps with
    ``is_navigable``'s 0.5 m tolerance)."""
    ok = np.asarray(navmesh.is_navigable(pts, 2.0), bool).reshape(-1)
    q = pts.copy()
    steps = int(math.ceil(below / 0.5))
    for _ in range(steps):
        if ok.all():
            break
        q[:, 1] -= 0.5
        ok |= np.asarray(navmesh.is_navigable(q, 0.5), bool).reshape(-1)
    return ok


def object_view_points(navmesh, caster: RayCaster, tri_object: np.ndarray, table: SemanticTable,
                       row: int, o: ViewPointOptions = DEFAULTS,
                       stats: Counter | None = None) -> list[dict]:
    """The view points of object ``table.ids[row]``, best ``iou`` first, as
    ``objectnav_files.make_view_point`` dicts (empty when none qualifies). ``stats`` counts
    candidates and rejections by habitat's reasons (too_far, down_unnavigable, not_seen,
    small_island)."""
    from .objectnav_files import make_view_point

    st = stats if stats is not None else Counter()
    aabb = np.asarray(table.aabb[row], np.float64)
    oid = int(table.ids[row])
    centre = (aabb[:3] + aabb[3:]) / 2
    half = (aabb[3:] - aabb[:3]) / 2 + o.max_distance
    eps = 1e-5
    xs = np.arange(-half[0], half[0] + eps, o.grid_step) + centre[0]
    zs = np.arange(-half[2], half[2] + eps, o.grid_step) + centre[2]
    gx, gz = np.meshgrid(xs, zs, indexing="ij")
    cand = np.stack([gx.ravel(), np.full(gx.size, centre[1]), gz.ravel()], 1)
    st["candidates"] += len(cand)
    near = _aabb_distance(aabb, cand) <= o.max_distance
    st["too_far"] += int(np.count_nonzero(~near))
    cand = cand[near]
    down = _has_surface_below(navmesh, cand, o.down_search) if len(cand) else np.zeros(0, bool)
    st["down_unnavigable"] += int(np.count_nonzero(~down))
    cand = cand[down]
    snapped = np.asarray(navmesh.snap_point(cand), np.float64).reshape(-1, 3)
    good = np.all(np.isfinite(snapped), axis=1)
    st["down_unnavigable"] += int(np.count_nonzero(~good))
    snapped = snapped[good]
    out = []
    if len(snapped) == 0:
        return out
    radius = np.asarray(navmesh.island_radius(snapped), np.float64).reshape(-1)
    for p, rad in zip(snapped, radius):
        yaw = yaw_facing(centre - p)
        eye = p + [0.0, o.sensor_height, 0.0]
        iou = sum(object_coverage(caster, tri_object, oid, aabb, eye, yaw, math.radians(a), o)
                  for a in o.pitches)
        if not iou > 0:
            st["not_seen"] += 1
        elif not rad >= o.island_radius_limit:
            st["small_island"] += 1
        elif iou > o.keep_threshold:
            out.append(make_view_point(p, yaw_quaternion(yaw), iou))
        else:
            st["not_seen"] += 1
    out.sort(key=lambda vp: -vp["iou"])  # stable: equal scores keep grid order
    st["view_points"] += len(out)
    return out


__all__ = ["ViewPointOptions", "DEFAULTS", "object_coverage", "object_view_points",
           "camera_basis", "yaw_facing"]
