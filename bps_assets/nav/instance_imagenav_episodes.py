"""InstanceImageNav episodes from a semantic scene: goal instances (objects with view points and
goal cameras) and episodes, for habitat-lab's InstanceImageNav-v1 files. habitat-lab ships no
generator: these rules are ours (docs/TASKS.md). Goals: objects of the wanted categories with
ObjectNav view points (``objectnav_episodes.build_goals``) and >= 1 accepted camera. Cameras:
``candidates`` draws per object (one seeded stream per object id): a floor point at a uniform
angle, ``distance`` m beyond the object's AABB, snapped to the navmesh (kept if it moves < 0.5 m);
the eye ``height`` above it; a uniform whole-degree ``hfov``; yaw at the AABB centre +-
``aim_jitter`` x half the HFOV, pitch at the centre (clamped). Scored with ``bps_assets.raycast``:
``frame_coverage`` = the fraction of pixels whose first hit is the object (at ``measure_width``
px), ``object_coverage`` = the fraction of ``surface_samples`` area-uniform points on the object
in the frame and first hit by the ray to them; kept when both reach their minimum, until
``image_goals_per_object``.
Episodes: goals in turn (sorted by key), ``goal_image_id`` uniform, the start by ObjectNav's rules
to that goal's view points (``objectnav_episodes.sample_episode``). A seed reproduces a scene.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from ..errors import ConfigError, NavError
from ..raycast import RayCaster
from ..semantics import SemanticTable, object_ids
from .instance_imagenav_files import (InstanceImageNavDataset, goal_key, make_image_goal,
                                      make_instance_goal, MAX_IMAGE_SIDE)
from .objectnav_episodes import ObjectNavOptions, build_goals, episodes_in_turn
from .pose import yaw_pitch_quaternion
from .view_points import ViewPointOptions, camera_basis, object_coverage, yaw_facing


@dataclass(frozen=True)
class InstanceImageNavOptions:
    """Goal-camera rules (module doc) and ObjectNav's view-point and start rules."""

    image_goals_per_object: int = 5
    candidates: int = 60                  # camera draws per object
    distance: tuple = (0.5, 3.0)          # m, floor point to the object's AABB (x / z)
    height: tuple = (0.8, 1.6)            # m, eye above the floor point
    hfov: tuple = (60.0, 120.0)           # degrees
    image_dimensions: tuple = (512, 512)  # (height, width) px written to the file
    aim_jitter: float = 0.25              # yaw off the object centre, x half the HFOV
    max_pitch_degrees: float = 45.0
    min_frame_coverage: float = 0.02
    min_object_coverage: float = 0.2
    measure_width: int = 96               # px wide the frame coverage is traced at (same aspect)
    surface_samples: int = 256
    # view points and starts: ObjectNav's rules, the view points seen by this task's sensor (the
    # instance_imagenav_hm3d_v2 agent's camera is 1.31 m above its feet)
    objectnav: ObjectNavOptions = field(default=ObjectNavOptions(view_points=ViewPointOptions(sensor_height=1.31)))

    def __post_init__(self):
        h, w = self.image_dimensions
        ok = (self.image_goals_per_object >= 1 and self.candidates >= 1 and self.surface_samples >= 1
              and 0 <= self.distance[0] <= self.distance[1] and 0 < self.height[0] <= self.height[1]
              and 0 < self.hfov[0] and math.ceil(self.hfov[0]) <= math.floor(self.hfov[1]) < 180
              and 1 <= h <= MAX_IMAGE_SIDE and 1 <= w <= MAX_IMAGE_SIDE and self.measure_width >= 1
              and self.aim_jitter >= 0
              and 0 <= self.max_pitch_degrees < 90)
        if not ok:
            raise ConfigError(None, "instance_imagenav: need counts >= 1, 0 <= distance lo <= hi, "
                                    "0 < height lo <= hi, a whole degree in 0 < hfov lo..hi < 180, image "
                                    f"sides in 1..{MAX_IMAGE_SIDE}, 0 <= max_pitch_degrees < 90")


DEFAULTS = InstanceImageNavOptions()


# ------------------------------------------------------------------------------ coverage
def surface_samples(vertices: np.ndarray, triangles: np.ndarray, n: int, rng: np.random.Generator):
    """(points [n, 3], total area m^2): area-uniform points on ``triangles``."""
    p = np.asarray(vertices, np.float64)[np.asarray(triangles)]
    area = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)
    total = float(area.sum())
    if not total > 0:
        return np.zeros((0, 3)), 0.0
    t = rng.choice(len(p), size=n, p=area / total)
    a, b = rng.random(n), rng.random(n)
    flip = a + b > 1   # fold the square onto the triangle
    a[flip], b[flip] = 1 - a[flip], 1 - b[flip]
    q = p[t]
    return q[:, 0] + a[:, None] * (q[:, 1] - q[:, 0]) + b[:, None] * (q[:, 2] - q[:, 0]), total


def visible_fraction(caster: RayCaster, tri_object: np.ndarray, object_id: int, points: np.ndarray,
                     eye, yaw: float, pitch: float, hfov_deg: float, aspect: float) -> float:
    """Fraction of ``points`` (on object ``object_id``) inside a pinhole frame (``hfov_deg``,
    ``aspect`` = height / width) and first hit by the ray from ``eye`` to them."""
    if len(points) == 0:
        return 0.0
    eye = np.asarray(eye, np.float64)
    d = points - eye
    cam = d @ camera_basis(yaw, pitch)
    depth = -cam[:, 2]
    tx = math.tan(math.radians(hfov_deg) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = (depth > 1e-6) & (np.abs(cam[:, 0]) <= tx * depth) & (np.abs(cam[:, 1]) <= tx * aspect * depth)
    if not inside.any():
        return 0.0
    hit = caster.intersect(np.broadcast_to(eye, d[inside].shape), d[inside])
    ids = object_ids(tri_object, np.asarray(hit["primID"]))
    # the direction's length is the point's distance: tfar ~ 1 at the point itself
    seen = (ids == object_id) & (np.asarray(hit["tfar"]) >= 1 - 1e-3)
    return float(np.count_nonzero(seen)) / len(points)


# ------------------------------------------------------------------------------ goal cameras
def goal_cameras(navmesh, caster: RayCaster, vertices: np.ndarray, triangles: np.ndarray,
                 tri_object: np.ndarray, table: SemanticTable, row: int, rng: np.random.Generator, o: InstanceImageNavOptions = DEFAULTS,
                 stats: Counter | None = None) -> tuple[list[dict], float]:
    """(accepted cameras as ``make_image_goal`` dicts, the object's surface area) of object
    ``table.ids[row]`` by the module doc's rules; ``stats`` counts ``cameras_off_navmesh``,
    ``cameras_low_frame_coverage``, ``cameras_low_object_coverage``, ``image_goals``."""
    st = stats if stats is not None else Counter()
    oid = int(table.ids[row])
    aabb = np.asarray(table.aabb[row], np.float64)
    centre = (aabb[:3] + aabb[3:]) / 2
    half = (aabb[3:] - aabb[:3]) / 2
    tris = np.flatnonzero(tri_object == oid)
    pts, area = surface_samples(vertices, np.asarray(triangles)[tris], o.surface_samples, rng)
    h, w = o.image_dimensions
    mh = max(1, round(o.measure_width * h / w))
    n = o.candidates
    ang = rng.uniform(0, 2 * math.pi, n)
    dist = rng.uniform(*o.distance, n)
    heights = rng.uniform(*o.height, n)
    # whole degrees (habitat's hfov may be an int): a renderer keeps one ray table per HFOV
    hfovs = rng.integers(math.ceil(o.hfov[0]), math.floor(o.hfov[1]) + 1, n).astype(np.float64)
    jitter = rng.uniform(-1, 1, n)
    # from the centre to the AABB's side along the draw's direction, then ``dist`` further
    c, s = np.cos(ang), np.sin(ang)
    with np.errstate(divide="ignore"):
        reach = np.minimum(np.where(np.abs(c) > 1e-9, half[0] / np.abs(c), np.inf),
                           np.where(np.abs(s) > 1e-9, half[2] / np.abs(s), np.inf))
    r = reach + dist
    floor = np.stack([centre[0] + r * c, np.full(n, aabb[1]), centre[2] + r * s], 1)
    snapped = np.asarray(navmesh.snap_point(floor), np.float64).reshape(-1, 3)
    ok = np.all(np.isfinite(snapped), 1)
    ok[ok] &= np.linalg.norm((snapped - floor)[ok][:, [0, 2]], axis=1) < 0.5
    cams: list[dict] = []
    for k in range(n):
        if len(cams) >= o.image_goals_per_object:
            break
        if not ok[k]:
            st["cameras_off_navmesh"] += 1
            continue
        eye = snapped[k] + [0.0, heights[k], 0.0]
        to = centre - eye
        yaw = yaw_facing(to) + jitter[k] * o.aim_jitter * math.radians(hfovs[k]) / 2
        lim = math.radians(o.max_pitch_degrees)
        pitch = min(lim, max(-lim, math.atan2(to[1], math.hypot(to[0], to[2]))))
        vo = ViewPointOptions(hfov=float(hfovs[k]), width=o.measure_width, height=mh)
        fc = object_coverage(caster, tri_object, oid, aabb, eye, yaw, pitch, vo)
        if fc < o.min_frame_coverage:
            st["cameras_low_frame_coverage"] += 1
            continue
        oc = visible_fraction(caster, tri_object, oid, pts, eye, yaw, pitch, float(hfovs[k]), h / w)
        if oc < o.min_object_coverage:
            st["cameras_low_object_coverage"] += 1
            continue
        cams.append(make_image_goal(eye, yaw_pitch_quaternion(yaw, pitch), hfovs[k], (h, w), fc, oc))
    st["image_goals"] += len(cams)
    return cams, area


# ------------------------------------------------------------------------------ goals, episodes
def build_instance_goals(navmesh, vertices: np.ndarray, triangles: np.ndarray, tri_object: np.ndarray,
                         table: SemanticTable, scene_id: str, categories: Iterable[str] | None = None,
                         seed: int = 0, options: InstanceImageNavOptions = DEFAULTS,
                         stats: Counter | None = None) -> dict[str, dict]:
    """``goals`` of one scene, by ``goal_key``: every object of ``categories`` (default: all named
    ones) with view points and at least one goal camera (others counted in ``stats`` as
    ``objects_without_view_points`` / ``objects_without_image_goals``). habitat-lab keys a goal by
    its object's id, so an object whose habitat id another object of the scene shares (composed
    scenes: one template's instances, or ids left 0) is no goal: counted as
    ``objects_with_shared_ids``, those ids listed in ``stats["shared_ids"]``."""
    st = stats if stats is not None else Counter()
    tri_object = np.asarray(tri_object)
    by_cat = build_goals(navmesh, vertices, triangles, tri_object, table, scene_id, categories,
                         options.objectnav, st)
    uses = Counter(table.habitat_id(r) for r in range(len(table)))
    row_of = {table.habitat_id(r): r for r in range(len(table))}   # used for ids of one row only
    caster = RayCaster(vertices, triangles, "InstanceImageNav goal cameras")
    out: dict[str, dict] = {}
    shared: set[int] = set()
    for g in sorted((g for gs in by_cat.values() for g in gs), key=lambda g: g["object_id"]):
        if uses[g["object_id"]] > 1:
            st["objects_with_shared_ids"] += 1
            shared.add(int(g["object_id"]))
            continue
        row = row_of[g["object_id"]]
        # one stream per object: a goal's cameras do not depend on the other objects
        rng = np.random.default_rng([seed, int(table.ids[row])])
        cams, area = goal_cameras(navmesh, caster, vertices, triangles, tri_object, table, row, rng, options, st)
        if not cams:
            st["objects_without_image_goals"] += 1
            continue
        out[goal_key(scene_id, g["object_id"])] = make_instance_goal(g, cams, area)
    if shared:
        st["shared_ids"] = sorted(shared | set(st.get("shared_ids", ())))
    return out


def generate_instance_imagenav_episodes(navmesh, goals: dict[str, dict], scene_id: str, n: int, seed: int,
                                        options: InstanceImageNavOptions = DEFAULTS,
                                        stats: Counter | None = None) -> list[dict]:
    """``n`` episodes (content-file dicts, ids "0".."n-1") over ``goals`` (module doc). A goal
    that yields no start within the retry budget is dropped (``stats["goals_given_up"]``);
    ``NavError`` when none is left."""
    if n < 0:
        raise ConfigError(None, f"instance_imagenav episodes: n must be >= 0, got {n}")
    o = options.objectnav
    st = stats if stats is not None else Counter()
    keys = sorted(goals)
    if n and not keys:
        raise NavError(None, f"{scene_id}: no goal object with view points and a goal camera; no "
                             "InstanceImageNav episode can be made")
    rng = np.random.default_rng(seed)

    def finish(key: str, ep: dict) -> dict:
        g = goals[key]
        ep["info"].pop("closest_goal_object_id", None)   # one goal: its id is goal_object_id
        return dict(ep, object_category=g["object_category"], goal_object_id=str(g["object_id"]),
                    goal_image_id=int(rng.integers(len(g["image_goals"]))))

    return episodes_in_turn(navmesh, {k: [goals[k]] for k in keys}, scene_id, n, rng, o, st,
                            "InstanceImageNav", "goal", finish)


def instance_imagenav_scene(navmesh, vertices, triangles, tri_object, table: SemanticTable, scene_id: str,
                            n: int, seed: int, categories: Iterable[str] | None = None,
                            options: InstanceImageNavOptions = DEFAULTS,
                            stats: Counter | None = None) -> InstanceImageNavDataset:
    """One scene's InstanceImageNav dataset: goals of ``categories`` (default: every named one)
    and ``n`` episodes."""
    st = stats if stats is not None else Counter()
    goals = build_instance_goals(navmesh, vertices, triangles, tri_object, table, scene_id, categories,
                                 seed, options, st)
    return InstanceImageNavDataset(generate_instance_imagenav_episodes(navmesh, goals, scene_id, n, seed,
                                                                       options, st), goals)


__all__ = ["InstanceImageNavOptions", "DEFAULTS", "surface_samples", "visible_fraction", "goal_cameras",
           "build_instance_goals", "generate_instance_imagenav_episodes", "instance_imagenav_scene"]
