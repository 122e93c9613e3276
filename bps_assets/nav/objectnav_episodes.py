"""ObjectNav episodes from a semantic scene: goals (objects with view points) and episodes with
habitat's ObjectNav generator rules (``generate_objectnav_episode`` / ``is_compatible_episode``).

Goals: every object of a wanted category with at least one view point (``view_points.py``) is
a goal; ``goals_by_category`` maps ``goals_key(scene_id, category)`` to them. Episodes, one
category after another in sorted order (round robin): draw a navigable start; keep it when its
island radius is >= 1.5 m, (``same_floor``) some view point of the category lies within 0.5 m
of its height, the geodesic distance ``d`` to the nearest view point of any goal of the category
is finite and in [``closest_dist_limit``, ``furthest_dist_limit``], and -- when
``d / euclid < geodesic_to_euclid_min_ratio`` (euclid: to the closest goal's position) -- a
uniform draw is <= 20 (ratio - 0.98)^2. The start gets a uniform random yaw; ``info`` records
``geodesic_distance``, ``euclidean_distance`` and ``closest_goal_object_id``. Distances come from
one multi-source field per goal (``NavMesh.distance_field_to_any`` over its view points), the
field the runtime uses for distance to goal. A seeded ``numpy.random.Generator`` makes a scene's
episodes a function of (scene, seed, options).
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from ..errors import ConfigError, NavError
from ..raycast import RayCaster
from ..semantics import SemanticTable
from .episodes import distance_rejection
from .indoor import episode_islands
from .objectnav_files import ObjectNavDataset, goals_key, make_object_goal, make_objectnav_episode
from .pose import yaw_quaternion
from .view_points import DEFAULTS as VP_DEFAULTS, ViewPointOptions, object_view_points



@dataclass(frozen=True)
class ObjectNavOptions:
    """habitat's ObjectNav generator parameters (``closest_dist_limit``: PointNav's 1 m, not the
    generator's 0.2 m default, so no episode starts inside the 0.1 m success zone's reach)."""

    closest_dist_limit: float = 1.0
    furthest_dist_limit: float = 30.0
    geodesic_to_euclid_min_ratio: float = 1.05
    island_radius_limit: float = 1.5
    same_floor: bool = True
    same_floor_dy: float = 0.5
    retries_per_episode: int = 1000      # starts drawn per episode before a category is given up
    batch: int = 128                     # starts drawn at once (speed only)
    view_points: ViewPointOptions = field(default=VP_DEFAULTS)
    all_islands: bool = False            # False: starts on the largest indoor island (nav.indoor)

    def __post_init__(self):
        if not 0 <= self.closest_dist_limit <= self.furthest_dist_limit:
            raise ConfigError(None, "objectnav: need 0 <= closest_dist_limit <= furthest_dist_limit")
        if self.retries_per_episode < 1 or self.batch < 1:
            raise ConfigError(None, "objectnav: retries_per_episode and batch must be >= 1")


DEFAULTS = ObjectNavOptions()


def task_table(table: SemanticTable, categories: Iterable[str] | None) -> SemanticTable:
    """``table`` with each category named as the task ``categories`` name it: a name they lack
    becomes the mpcat40 name ``semantic_categories.map_raw`` gives it when they have that one
    (ReplicaCAD's lexicon ``indoor_plant`` -> ``plant``, ``tv_screen`` -> ``tv_monitor``);
    ``categories`` None (every named category) keeps every name. Rows keep their indices, so a
    renamed category's annotation id is still the scene's own."""
    if categories is None:
        return table
    from ..readers.semantic_categories import map_raw, mpcat40

    wanted, names = set(categories), mpcat40()

    def task_name(c: str) -> str:
        m = map_raw(c) if c and c not in wanted else -1
        return names[m] if m >= 0 and names[m] in wanted else c

    renamed = [task_name(c) for c in table.categories]
    return table if renamed == table.categories else dataclasses.replace(table, categories=renamed)


def build_goals(navmesh, vertices: np.ndarray, triangles: np.ndarray, tri_object: np.ndarray,
                table: SemanticTable, scene_id: str, categories: Iterable[str] | None = None,
                options: ObjectNavOptions = DEFAULTS, stats: Counter | None = None) -> dict[str, list[dict]]:
    """``goals_by_category`` of one scene: every object of ``categories`` (default: all named
    ones) that has a view point, keyed by ``goals_key``; objects without one are counted in
    ``stats["objects_without_view_points"]``. ``tri_object`` [T]: instance id per triangle."""
    st = stats if stats is not None else Counter()
    tri_object = np.asarray(tri_object)
    if tri_object.shape != (len(triangles),):
        raise ConfigError(None, f"{scene_id}: tri_object has {tri_object.shape} entries for "
                                f"{len(triangles)} triangles")
    wanted = None if categories is None else set(categories)
    table = task_table(table, wanted)
    caster = RayCaster(vertices, triangles, "ObjectNav view points")
    out: dict[str, list[dict]] = {}
    for row in range(len(table)):
        cat = table.category_name(row)
        if not cat or (wanted is not None and cat not in wanted):
            continue
        st["objects"] += 1
        vps = object_view_points(navmesh, caster, tri_object, table, row, options.view_points, st)
        if not vps:
            st["objects_without_view_points"] += 1
            continue
        aabb = np.asarray(table.aabb[row], np.float64)
        name = table.raw_names[row] if row < len(table.raw_names) else None
        region = int(table.region[row])
        out.setdefault(goals_key(scene_id, cat), []).append(make_object_goal(
            (aabb[:3] + aabb[3:]) / 2, table.habitat_id(row), cat, vps, object_name=name or None,
            room_id=None if region < 0 else str(region)))
    return out


GIVEN_UP = {"category": "categories_given_up", "goal": "goals_given_up"}   # stats key per unit


@dataclass
class GoalSet:
    """Goals an episode may end at (ObjectNav: a category's objects; InstanceImageNav: one
    object), with what start sampling needs of them."""

    name: str
    goals: list
    fields: list            # per goal: distance field to its nearest view point
    vp_y: np.ndarray        # heights of every view point of the category
    positions: np.ndarray   # [G, 3] goal positions


def prepare_goal_set(navmesh, name: str, goals: list, limit: float) -> GoalSet:
    """The ``GoalSet`` of ``goals``: one distance field (``limit`` m) per goal over its view points."""
    fields = []
    for g in goals:
        pts = np.asarray([vp["agent_state"]["position"] for vp in g["view_points"]], np.float64)
        fields.append(navmesh.distance_field_to_any(pts, limit=limit))
    vp_y = np.asarray([vp["agent_state"]["position"][1] for g in goals for vp in g["view_points"]])
    return GoalSet(name, goals, fields, vp_y, np.asarray([g["position"] for g in goals], np.float64))


def generate_objectnav_episodes(navmesh, goals_by_category: Mapping[str, list[dict]], scene_id: str,
                                n: int, seed: int, options: ObjectNavOptions = DEFAULTS,
                                stats: Counter | None = None) -> list[dict]:
    """``n`` ObjectNav episodes (content-file dicts, ids "0".."n-1") over the categories of
    ``goals_by_category`` that belong to ``scene_id``, with habitat's rules (module doc).
    A category that yields no episode within its retry budget is dropped (counted in
    ``stats["categories_given_up"]``); ``NavError`` when no category is left."""
    if n < 0:
        raise ConfigError(None, f"objectnav episodes: n must be >= 0, got {n}")
    o = options
    st = stats if stats is not None else Counter()
    prefix = goals_key(scene_id, "")
    cats = sorted(k[len(prefix):] for k, v in goals_by_category.items() if k.startswith(prefix) and v)
    if n and not cats:
        raise NavError(None, f"{scene_id}: no goal object with a view point; no ObjectNav episode "
                             "can be made")
    sets = {c: goals_by_category[prefix + c] for c in cats}
    return episodes_in_turn(navmesh, sets, scene_id, n, np.random.default_rng(seed), o, st, "ObjectNav",
                            "category")


def episodes_in_turn(navmesh, sets: Mapping[str, list], scene_id: str, n: int, rng: np.random.Generator,
                     o: ObjectNavOptions, st: Counter, what: str, unit: str, finish=None) -> list[dict]:
    """``n`` episodes (ids "0".."n-1") from the goal sets ``sets`` (name -> goals, each a
    ``GoalSet`` named ``name``) taken in turn in sorted order, each by ``sample_episode``. A set
    that yields none is dropped (counted in ``st[GIVEN_UP[unit]]``); ``NavError`` when none is
    left. ``finish(name, episode)`` may complete each one (drawing from ``rng`` after its start)."""
    names = sorted(sets)
    islands = episode_islands(navmesh, o.all_islands)
    on = {} if islands is None else {"island": islands[0]}  # goals count only where reachable
    limit = o.furthest_dist_limit + 1.0
    prepared: dict[str, GoalSet] = {}
    episodes: list[dict] = []
    turn = 0
    while len(episodes) < n:
        if not names:
            raise NavError(None, f"{scene_id}: only {len(episodes)} of {n} {what} episodes; every "
                                 f"{unit} was given up (starts too close, too far or off-floor)")
        name = names[turn % len(names)]
        c = prepared.get(name)
        if c is None:
            c = prepared[name] = prepare_goal_set(navmesh, name, sets[name], limit)
        ep = sample_episode(navmesh, c, scene_id, len(episodes), rng, o, st, on)
        if ep is None:
            st[GIVEN_UP[unit]] += 1
            names.remove(name)
            continue
        episodes.append(ep if finish is None else finish(name, ep))
        turn += 1
    st["episodes"] += len(episodes)
    return episodes


def sample_episode(navmesh, c: GoalSet, scene_id: str, index: int, rng: np.random.Generator,
                   o: ObjectNavOptions, st: Counter, on: dict | None = None) -> dict | None:
    """One episode ending at any goal of ``c`` by the module doc's start rules (``index``: its id),
    or None when ``o.retries_per_episode`` starts give none. ``on``: ``sample_navigable_point``'s
    island restriction (``{"island": i}``), or none."""
    tried = 0
    while tried < o.retries_per_episode:
        b = min(o.batch, o.retries_per_episode - tried)
        tried += b
        src = np.asarray(navmesh.sample_navigable_point(b, seed=int(rng.integers(0, 2**63 - 1)), **(on or {})),
                         np.float64)
        draws = rng.random(b)
        yaws = rng.uniform(0.0, 2.0 * np.pi, size=b)
        st["starts"] += b
        ok = np.asarray(navmesh.island_radius(src), np.float64).reshape(-1) >= o.island_radius_limit
        st["rejected_island"] += int(np.count_nonzero(~ok))
        if o.same_floor:
            floor = (np.abs(src[:, None, 1] - c.vp_y[None, :]) < o.same_floor_dy).any(1)
            st["rejected_floor"] += int(np.count_nonzero(ok & ~floor))
            ok &= floor
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            continue
        d_goal = np.stack([np.asarray(navmesh.distance_at(f, src[idx]), np.float64).reshape(-1)
                           for f in c.fields], 1)  # [k, G]
        for k, i in enumerate(idx):  # habitat's order: the first compatible start wins
            g = int(np.argmin(d_goal[k]))
            d = float(d_goal[k, g])
            euclid = float(np.linalg.norm(src[i] - c.positions[g]))
            why = distance_rejection(d, euclid, draws[i], o.closest_dist_limit, o.furthest_dist_limit,
                                     o.geodesic_to_euclid_min_ratio)
            if why:
                st[why] += 1
                continue
            a = float(yaws[i])
            return make_objectnav_episode(
                index, scene_id, src[i], yaw_quaternion(a), c.name,
                info={"geodesic_distance": d, "euclidean_distance": euclid,
                      "closest_goal_object_id": c.goals[g]["object_id"]})
    return None


def category_maps(table: SemanticTable, categories: Mapping[str, int] | None = None
                  ) -> tuple[dict[str, int], dict[str, int]]:
    """(category_to_task_category_id, category_to_scene_annotation_category_id): ``categories``
    (name -> task id; default: the table's named categories numbered in sorted order) and each
    name's index in ``table.categories`` as ``task_table`` names them (-1 when the table lacks
    it; the first of several scene categories given one task name)."""
    table = task_table(table, categories)
    if categories is None:
        names = sorted({table.category_name(i) for i in range(len(table))} - {""})
        categories = {nm: i for i, nm in enumerate(names)}
    ann = {nm: (table.categories.index(nm) if nm in table.categories else -1) for nm in categories}
    return {k: int(v) for k, v in categories.items()}, ann


def objectnav_scene(navmesh, vertices, triangles, tri_object, table: SemanticTable, scene_id: str,
                    n: int, seed: int, categories: Mapping[str, int] | None = None,
                    options: ObjectNavOptions = DEFAULTS, stats: Counter | None = None) -> ObjectNavDataset:
    """One scene's ObjectNav dataset: goals of the ``categories`` map's categories (default:
    every named category of ``table``; those the scene lacks are counted in
    ``stats["categories_not_in_scene"]``), ``n`` episodes, and the two category maps."""
    st = stats if stats is not None else Counter()
    table = task_table(table, categories)
    task, ann = category_maps(table, categories)
    # packed scenes list every mpcat40 name in ``categories``: what a scene has is its objects'
    present = {table.category_name(i) for i in range(len(table))}
    st["categories_not_in_scene"] += sum(1 for c in task if c not in present)
    gbc = build_goals(navmesh, vertices, triangles, tri_object, table, scene_id, task, options, st)
    eps = generate_objectnav_episodes(navmesh, gbc, scene_id, n, seed, options, st)
    return ObjectNavDataset(eps, gbc, task, ann)


def semantic_scene(path) -> tuple[np.ndarray, np.ndarray, np.ndarray, SemanticTable]:
    """(vertices, triangles, tri_object, table) of a packed scene with object annotations
    (``PackedScene.semantics`` and its ``tri_object``, bps_assets/semantics.py's contract).
    ``InputError`` naming the file when the scene has none: ObjectNav needs objects."""
    from ..errors import InputError
    from ..packed_scene import read_packed_scene
    from ..semantic_section import FIELDS

    ps = read_packed_scene(path, sections=["positions", "indices", *FIELDS])   # not the textures
    table, tri_object = ps.semantics, ps.tri_object
    if table is None or tri_object is None or len(table) == 0:
        raise InputError(path, "scene has no semantic annotations (objects): ObjectNav episodes need "
                               "a scene preprocessed with its semantic annotation")
    return (np.asarray(ps.positions, np.float64), np.asarray(ps.indices, np.int64),
            np.asarray(tri_object), table)


__all__ = ["ObjectNavOptions", "DEFAULTS", "task_table", "build_goals", "GoalSet", "prepare_goal_set", "sample_episode",
           "episodes_in_turn",
           "generate_objectnav_episodes", "category_maps", "objectnav_scene", "semantic_scene"]
