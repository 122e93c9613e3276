"""ObjectNav episodes for the env: habitat ObjectNav v1 files (``ObjectNavFileEpisodes``, checked
on each scene's navmesh) and episodes generated per scene visit from the scene's semantics
(``SampledObjectNav``), both served by the dataset supply (episodes/dataset.py) as episode dicts
with an ``EpisodeGoal`` each: the field is the distance to the nearest view point of any object
of the category (one field row per category and scene visit) and the goal id is the category's
task id.

``SampledObjectNav``: when a scene arrives (loader thread) its goal objects and view points are
built once (``build_goals``: ray casting over the packed scene's mesh) and ``episodes_per_visit``
episodes drawn with habitat's generator rules (``generate_objectnav_episodes``), seeded by
(seed, scene, visit). Semantics are checked only on the scenes served: sampling needs them (the
split's unannotated scenes are left out with a warning); an episode file's scenes need them
only for the ``semantic`` sensor, which the env checks where it sets the sensors up
(``env.world.check_semantic_sensor``). ``objectnav_supply``: the task's ``TaskSpec.supply``.
"""
from __future__ import annotations

from bps_assets.nav.geodesic import NEAR_EXACT
from bps_assets.nav.objectnav_files import ObjectNavDataset, check_on_navmesh, goals_key

from ..episodes.dataset import DatasetEpisodes, EpisodeGoal
from ..episodes.files import GoalFileEpisodes, mapped_file
from ..episodes.supply import DEFAULTS, SupplyOptions, _SceneState


def objectnav_episode_dicts(ds: ObjectNavDataset, episodes: list[dict]) -> tuple[list[dict], dict]:
    """``episodes`` of ``ds`` as the dataset supply's dicts (``goals`` = the category's goal objects,
    ``ds.goals_of``: position, view points; the first one's position is where the supply puts the
    episode's goal point) and their goals ({episode id: ``EpisodeGoal``(every view point of the
    category, the category's goals key, its task id)}; the episodes of one category share one
    array of its view points). Episodes whose category has no view point are left out."""
    out, goals, points = [], {}, {}
    for e in episodes:
        key = goals_key(e["scene_id"], e["object_category"])
        pts = points.get(key)
        if pts is None:
            pts = points[key] = ds.view_points_of(e)
        if len(pts) == 0:
            continue
        eid = str(e["episode_id"])
        out.append({"episode_id": eid, "scene_id": e["scene_id"],
                    "start_position": e["start_position"], "start_rotation": e["start_rotation"],
                    "goals": ds.goals_of(e), "object_category": e["object_category"]})
        goals[eid] = EpisodeGoal(pts, key, ds.task_category_id(e))
    return out, goals


class ObjectNavFileEpisodes(GoalFileEpisodes):
    """A habitat ObjectNav v1 file's episodes (``ds``: the dataset; ``raw_by_scene``: scene name
    -> its raw episodes), checked against each scene's navmesh when the scene arrives
    (``GoalFileEpisodes``), then served as the dataset supply serves PointNav's."""

    WHAT = "ObjectNav"
    check_on_navmesh = staticmethod(check_on_navmesh)
    episode_dicts = staticmethod(objectnav_episode_dicts)

    @property
    def max_goal_id(self) -> int | None:
        """The file's largest task category id (habitat's ObjectGoalSensor space high)."""
        ids = self.ds.category_to_task_category_id.values()
        return max(int(i) for i in ids) if ids else None

    @property
    def goal_categories(self) -> dict:
        """The file's ``category_to_task_category_id``."""
        return {str(k): int(v) for k, v in self.ds.category_to_task_category_id.items()}

    def scene_dataset(self, raw: list[dict]) -> ObjectNavDataset:
        """The dataset of episodes ``raw`` and only their categories' goals."""
        keys = {goals_key(e["scene_id"], e["object_category"]) for e in raw}
        return ObjectNavDataset(raw, {k: v for k, v in self.ds.goals_by_category.items() if k in keys},
                                self.ds.category_to_task_category_id,
                                self.ds.category_to_scene_annotation_category_id)


class SampledObjectNav(DatasetEpisodes):
    """ObjectNav episodes generated per scene visit (module docstring). ``scene_paths``: scene
    name -> packed scene file; ``categories``: category name -> task id (habitat's
    objectnav_hm3d map by default; kept as ``goal_categories``)."""

    def __init__(self, scene_paths: dict, seed: int, worker, options: SupplyOptions = DEFAULTS,
                 categories: dict | None = None, episodes_per_visit: int = 200, near_gate: float = NEAR_EXACT):
        super().__init__({}, seed, worker, options, near_gate=near_gate)
        self.scene_paths = dict(scene_paths)
        if categories is None:
            from bps_assets.readers.semantic_categories import objectnav_hm3d
            categories = objectnav_hm3d()
        self.goal_categories = {str(k): int(v) for k, v in categories.items()}
        self.max_goal_id = max(self.goal_categories.values(), default=None)
        self.episodes_per_visit = int(episodes_per_visit)

    def _start(self, st: _SceneState, inline: bool) -> None:
        from bps_assets.nav.objectnav_episodes import build_goals, generate_objectnav_episodes, semantic_scene

        nm = st.mesh.navmesh
        verts, tris, tri_object, table = semantic_scene(self.scene_paths[st.name])
        cats = dict(self.goal_categories)
        gbc = build_goals(nm, verts, tris, tri_object, table, st.name, cats)
        seed = int(st.rng.integers(2**63 - 1))
        eps = generate_objectnav_episodes(nm, gbc, st.name, self.episodes_per_visit, seed)
        ds = ObjectNavDataset(eps, gbc, cats, {})
        self.episodes_by_scene[st.name], self.goals[st.name] = objectnav_episode_dicts(ds, eps)
        super()._start(st, inline)


def scene_semantics_error(path) -> str | None:
    """Why the packed scene at ``path`` cannot serve ObjectNav (no object annotations), or None
    (``scenes.checks.semantic_objects``: from the header alone)."""
    from ..scenes.checks import semantic_objects

    if semantic_objects(path) <= 0:
        return "scene has no semantic annotations (objects): ObjectNav needs a scene preprocessed with its semantics"
    return None


def goal_set(name: str | None) -> dict:
    """The named goal category set (``EpisodeConfig.categories``; None: "hm3d")."""
    from bps_assets.readers.semantic_categories import goal_categories

    return goal_categories(name or "hm3d")


def check_file_categories(path, have: dict, name: str | None) -> None:
    """A ConfigError naming the episode file when ``categories=name`` was asked for and the
    file's task map is another (None: the file's map is taken as it is)."""
    from bps_assets.errors import ConfigError

    if name is not None and have != goal_set(name):
        raise ConfigError(path, f"its category_to_task_category_id {have} is not categories={name!r}'s "
                                f"{goal_set(name)}")


def note_served(entries, sensors=()) -> None:
    """One note naming the scenes an episode file uses (``entries``) without semantic
    annotations: a file's goals, view points and category map are its own (habitat-lab's
    ObjectNav reads no scene annotation either), so such scenes serve it. With the ``semantic``
    sensor (in ``sensors``) no note: the env refuses them (``env.world.check_semantic_sensor``)."""
    import logging

    from ..scenes.checks import unannotated

    plain = [] if "semantic" in sensors else unannotated(entries)
    if plain:
        logging.getLogger(__name__).info("%d of the episode file's %d scenes have no semantic annotations (the "
                                         "file's goals do not need them): %s", len(plain), len(entries),
                                         ", ".join(e.name for e in plain))


def annotated_scenes(request) -> list:
    """The split's entries (``request``: ``tasks.spec.ScenesRequest``, before ``scene_shard``) a
    sampled supply may serve: those whose scene has semantics; the others are left out with one
    warning (from ``request.announce``'s process) saying how many of the split's (real HM3D
    annotates part of each split); none annotated is an InputError naming the first scene's file
    and the manifest and split. An episode file's scenes are checked by its supply instead."""
    import logging

    from bps_assets.errors import InputError

    from ..scenes.checks import unannotated

    entries = request.entries
    if request.config.episodes.source not in (None, "sample") or not entries:
        return entries
    what = f"{request.manifest.path} (split {request.split!r})"
    left = unannotated(entries)
    out = {id(e) for e in left}
    kept = [e for e in entries if id(e) not in out]
    if not kept:
        raise InputError(entries[0].scene, f"scene has no semantic annotations (objects), nor has any of the "
                                           f"{len(entries)} scenes of {what}: ObjectNav needs scenes "
                                           f"preprocessed with their semantics")
    if left and request.announce:
        logging.getLogger(__name__).warning(
            "%s: %d of %d scenes have no semantic annotations and are left out of sampled episodes (first: %s)",
            what, len(left), len(entries), left[0].scene)
    return kept


def objectnav_supply(request):
    """ObjectNav's episode supply and the scenes it serves: a habitat ObjectNav v1 file
    (``episodes=PATH``) mapped onto the manifest's scenes, or episodes generated per scene
    visit (None / "sample"). ``request``: ``tasks.spec.SupplyRequest``."""
    from bps_assets.errors import ConfigError
    from bps_assets.pipeline.habitat_episodes import map_habitat_objectnav

    c, entries, manifest = request.config, request.entries, request.manifest
    src = c.episodes.source
    if src in (None, "sample"):   # entries: annotated_scenes' (the world drops the others before sharding)
        return SampledObjectNav({e.name: str(e.scene) for e in entries}, c.seed, request.worker,
                                c.episodes.supply, near_gate=request.near_gate,
                                categories=goal_set(c.episodes.categories)), entries
    if src == "dataset":
        raise ConfigError(None, "task='objectnav': pass episodes=PATH (an ObjectNav v1 split file) or 'sample'")
    mapped = mapped_file(src, manifest, map_habitat_objectnav)   # read once within an eval's episodes_read_once
    supply, served = ObjectNavFileEpisodes.supply(request, mapped, mapped.objectnav)
    check_file_categories(src, supply.goal_categories, c.episodes.categories)
    note_served(served, c.sensors.kinds)
    return supply, served
