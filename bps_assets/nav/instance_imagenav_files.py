"""InstanceImageNav episode files: habitat-lab's InstanceImageNav-v1 layout
(``InstanceImageNavDatasetV1``), read, validated and written.

Layout (spec: docs/TASKS.md): ``DIR/SPLIT/SPLIT.json.gz`` = ``{"episodes": []}``; per scene
``DIR/SPLIT/content/{scene}.json.gz`` = ``{"episodes": [...], "goals": {key: goal}}``. An episode
names its goal instance by ``goal_object_id`` (a string) and its goal image by ``goal_image_id``
(an index into the goal's ``image_goals``); ``key = goal_key(scene_id, goal_object_id)``. A goal
is an ObjectNav goal (``objectnav_files.validate_goal``: position, object_id, view_points, ...)
plus ``object_surface_area`` and ``image_goals``: cameras ``{"position", "rotation" [x, y, z, w],
"hfov" (degrees), "image_dimensions" [H, W], "frame_coverage", "object_coverage"}`` placed in the
world (not on the agent). Caps, checked before anything is kept: ``MAX_IMAGE_GOALS`` cameras per
goal, image sides <= ``MAX_IMAGE_SIDE``. Every failure is one ``InputError`` naming the file and
the episode or goal.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from ..errors import InputError, is_int
from .episode_table import EpisodeTable
from .episodes import (_vec, finite_number, check_scene_name, check_split_name, check_table_unique_ids, dataset_files,
                       FileCaps, join_table_scenes_dir, validate_episode, write_split, SUFFIX, CONTENT_DIR)
from .episode_stream import STREAMED
from .objectnav_files import (NO_GOALS, NavmeshCheck, ViewPoints, episodes_on_navmesh, goals_on_navmesh, make_objectnav_episode,
                              problem_counter, validate_goal, view_point_positions)

WHAT = "InstanceImageNav"
MAX_IMAGE_GOALS = 1024      # cameras per goal (habitat's released files hold tens)
MAX_IMAGE_SIDE = 4096       # px, either side of a goal image (the env's resolution cap)


def goal_key(scene_id: str, goal_object_id) -> str:
    """habitat's ``InstanceImageGoalNavEpisode.goal_key``: the scene file's base name without a
    trailing ``.glb``, then ``.basis``, ``"_"``, the goal object id."""
    sid = os.path.basename(scene_id)
    for ext in (".glb", ".basis"):
        if sid.endswith(ext):
            sid = sid[: -len(ext)]
    return f"{sid}_{goal_object_id}"


@dataclass
class InstanceImageNavDataset:
    """Episodes (habitat dicts, ``goals`` empty: a list, or an ``EpisodeTable`` as read) and
    their goals by ``goal_key``, as in ``InstanceImageNavDatasetV1``."""

    episodes: list[dict] = field(default_factory=list)
    goals: dict[str, dict] = field(default_factory=dict)

    def goal_of(self, episode: dict) -> dict:
        """The goal instance of ``episode``."""
        return self.goals[goal_key(episode["scene_id"], episode["goal_object_id"])]

    def image_goal_of(self, episode: dict) -> dict:
        """The camera of ``episode``'s goal image (``image_goals[goal_image_id]``)."""
        return self.goal_of(episode)["image_goals"][episode["goal_image_id"]]

    def view_points_of(self, episode: dict) -> np.ndarray:
        """float64 [V, 3]: the goal's view point positions (``distance_to: VIEW_POINTS``)."""
        return view_point_positions(self.goal_of(episode)["view_points"])


# ------------------------------------------------------------------------------ building
def make_image_goal(position, rotation, hfov: float, image_dimensions, frame_coverage: float | None = None,
                    object_coverage: float | None = None) -> dict:
    """One ``InstanceImageParameters``: a camera at ``position`` (world), ``rotation`` [x, y, z, w],
    ``hfov`` degrees, ``image_dimensions`` (height, width), and what it sees of the object."""
    def num(x):
        return None if x is None else float(x)

    return {"position": [float(x) for x in position], "rotation": [float(x) for x in rotation],
            "hfov": float(hfov), "image_dimensions": [int(image_dimensions[0]), int(image_dimensions[1])],
            "frame_coverage": num(frame_coverage), "object_coverage": num(object_coverage)}


def make_instance_goal(object_goal: dict, image_goals: list[dict], object_surface_area: float | None) -> dict:
    """One ``InstanceImageGoal``: an ObjectNav goal (``objectnav_files.make_object_goal``) with its
    goal cameras and the object's surface area (m^2)."""
    return dict(object_goal, image_goals=list(image_goals),
                object_surface_area=None if object_surface_area is None else float(object_surface_area))


def make_instance_imagenav_episode(episode_id, scene_id: str, start_position, start_rotation,
                                   goal_object_id, goal_image_id: int, object_category: str | None,
                                   info: Mapping | None = None) -> dict:
    """One ``InstanceImageGoalNavEpisode`` as stored in a content file (``goals`` empty)."""
    e = make_objectnav_episode(episode_id, scene_id, start_position, start_rotation, object_category, info)
    return dict(e, goal_object_id=str(goal_object_id), goal_image_id=int(goal_image_id))


# ------------------------------------------------------------------------------ validation
def validate_image_goal(p, where: str, path) -> dict:
    """Check one ``InstanceImageParameters`` dict; ``InputError`` naming the file and ``where``."""
    def bad(msg):
        raise InputError(path, f"{where}: {msg}")

    if not isinstance(p, dict):
        bad("image goal is not an object")
    if not _vec(p.get("position"), 3):
        bad("position must be 3 finite numbers")
    rot = p.get("rotation")
    if not _vec(rot, 4) or abs(math.sqrt(sum(x * x for x in rot)) - 1.0) > 1e-2:
        bad("rotation must be a unit quaternion of 4 finite numbers [x, y, z, w]")
    if not finite_number(p.get("hfov")) or not 0 < p["hfov"] < 180:
        bad(f"hfov must be a number of degrees in (0, 180), got {p.get('hfov')!r}")
    dims = p.get("image_dimensions")
    if not (isinstance(dims, (list, tuple)) and len(dims) == 2
            and all(is_int(d) for d in dims)):
        bad("image_dimensions must be [height, width] integers")
    if not all(1 <= d <= MAX_IMAGE_SIDE for d in dims):
        bad(f"image_dimensions {list(dims)} outside 1..{MAX_IMAGE_SIDE} px")
    for k in ("frame_coverage", "object_coverage"):
        v = p.get(k)
        if v is not None and not (finite_number(v) and 0 <= v <= 1):
            bad(f"{k} must be null or a number in [0, 1]")
    return p


def validate_instance_goal(g, where: str, path) -> dict:
    """Check one ``InstanceImageGoal``: its ObjectNav part, then its ``image_goals`` (at least
    one, at most ``MAX_IMAGE_GOALS``) and ``object_surface_area``."""
    validate_goal(g, where, path)
    cams = g.get("image_goals")
    if not isinstance(cams, list) or not cams:
        raise InputError(path, f"{where}: image_goals must be a non-empty list")
    if len(cams) > MAX_IMAGE_GOALS:
        raise InputError(path, f"{where}: {len(cams)} image_goals, more than the cap of {MAX_IMAGE_GOALS}")
    for j, p in enumerate(cams):
        validate_image_goal(p, f"{where} image_goals[{j}]", path)
    a = g.get("object_surface_area")
    if a is not None and not (finite_number(a) and a >= 0):
        raise InputError(path, f"{where}: object_surface_area must be null or a number >= 0")
    return g


def _check_episode(e, i: int, path, goals: Mapping[str, dict]) -> dict:
    """An episode's InstanceImageNav fields against the goals known so far; -> a copy with
    ``goal_object_id`` as a string."""
    oid = _episode_fields(e, i, path)
    _check_goal_ref(i, e["episode_id"], e["scene_id"], oid, e.get("goal_image_id"), goals, path)
    return dict(e, goal_object_id=str(oid), episode_id=str(e["episode_id"]), goals=[])


def _episode_fields(e, i: int, path):
    """The checks of one episode that need no goal (``validate_episode``, ``goal_object_id``,
    ``object_category``); -> its ``goal_object_id``."""
    validate_episode(e, i, path, need_goals=False)
    where = f"episode {i} (id {e.get('episode_id')!r})"
    oid = e.get("goal_object_id")
    if not isinstance(oid, (str, int)) or isinstance(oid, bool) or oid == "":
        raise InputError(path, f"{where}: goal_object_id must be a non-empty string")
    cat = e.get("object_category")
    if cat is not None and not isinstance(cat, str):
        raise InputError(path, f"{where}: object_category must be a string or null")
    return oid


def _check_goal_ref(i: int, eid, scene_id: str, oid, k, goals: Mapping[str, dict], path) -> None:
    """``InputError`` unless episode ``i``'s goal is among ``goals`` and ``k`` indexes its cameras."""
    where = f"episode {i} (id {eid!r})"
    key = goal_key(scene_id, oid)
    g = goals.get(key)
    if g is None:
        raise InputError(path, f"{where}: no goal {key!r} (goals has no entry for goal_object_id {oid!r} "
                               f"in scene {os.path.basename(scene_id)!r})")
    if not is_int(k) or not 0 <= k < len(g["image_goals"]):
        raise InputError(path, f"{where}: goal_image_id {k!r} is not an index into goal {key!r}'s "
                               f"{len(g['image_goals'])} image_goals")


def _check_goals(doc_goals, path) -> dict[str, dict]:
    if not isinstance(doc_goals, dict):
        raise InputError(path, "goals must be an object of goal key -> goal")
    for key, g in doc_goals.items():
        validate_instance_goal(g, f"goals[{key!r}]", path)
    return doc_goals


# ------------------------------------------------------------------------------ reading
def read_instance_imagenav_dataset(path: str | os.PathLike, scenes: Iterable[str] | None = None,
                                   scenes_dir: str | None = None) -> InstanceImageNavDataset:
    """An InstanceImageNav-v1 dataset (ours or habitat's own files) as habitat-lab's
    ``InstanceImageNavDatasetV1`` reads it: the split file, then its ``content/`` files (only
    ``scenes`` if given); goals gather over the files. Episodes keep their ``episode_id`` (as a
    string). ``InputError`` naming file and episode / goal for a malformed one, an episode whose
    goal key is not among the goals, or a ``goal_image_id`` out of range."""
    out = InstanceImageNavDataset(EpisodeTable(columns=("goal_object_id", "goals")))
    names: dict = {}
    starts: list = []
    per_file: dict = {}

    def items_for(f):
        eps, goals = per_file.setdefault(f, ([], {}))
        caps = FileCaps(f)   # the file's view points as decoded (its episodes: read_json)

        def goal(key, g):
            validate_instance_goal(g, f"goals[{key!r}]", f)
            caps.add(FileCaps.VIEW_POINTS, len(g["view_points"]))
            g["view_points"] = ViewPoints.from_dicts(g["view_points"])
            goals[key] = g

        def episode(i, e, text):   # checked, then kept as its text and what the goal check needs
            oid = _episode_fields(e, i, f)
            eps.append((text, e["episode_id"], names.setdefault(e["scene_id"], e["scene_id"]), oid,
                        e.get("goal_image_id")))

        return {"episodes": ("list+text", episode), "goals": ("map", goal)}

    for f, doc in dataset_files(path, scenes, WHAT, items_for):
        eps, goals = per_file.pop(f)
        if not eps and "goals" not in doc:
            continue  # habitat skips a file without episodes (the split file)
        if "goals" not in doc:
            raise InputError(f, f"not an {WHAT} file: episodes but no \"goals\" object")
        if doc["goals"] is not STREAMED:
            raise InputError(f, "goals must be an object of goal key -> goal")
        out.goals.update(goals)
        starts.append((len(out.episodes), f))
        for i, (text, eid, sid, oid, k) in enumerate(eps):
            _check_goal_ref(i, eid, sid, oid, k, out.goals, f)
            out.episodes.append(text, str(eid), sid, str(oid), NO_GOALS)
    check_table_unique_ids(out.episodes, starts)   # ids are unique per scene
    join_table_scenes_dir(out.episodes, scenes_dir)
    return out


# ------------------------------------------------------------------------------ writing
def write_instance_imagenav_dataset(out_dir: str | os.PathLike, split: str,
                                    by_scene: Mapping[str, InstanceImageNavDataset],
                                    overwrite: bool = False) -> list[Path]:
    """Write habitat's InstanceImageNav-v1 layout under ``out_dir/split``: per scene name a
    content file with its episodes and their goals; the split file holds no episodes.
    Everything is validated first (``InputError`` naming the content file and the episode);
    files are written atomically; existing ones need ``overwrite``."""
    check_split_name(split)
    docs = {}
    for scene, ds in by_scene.items():
        check_scene_name(scene)
        f = Path(out_dir) / split / CONTENT_DIR / f"{scene}{SUFFIX}"
        goals = _check_goals({k: dict(v) for k, v in ds.goals.items()}, f)
        eps = [_check_episode(e, i, f, goals) for i, e in enumerate(ds.episodes)]
        docs[scene] = {"episodes": eps, "goals": goals}
    return write_split(out_dir, split, docs, {"episodes": []}, overwrite)


# ------------------------------------------------------------------------------ navmesh check
def check_on_navmesh(ds: InstanceImageNavDataset, navmesh, path: str | os.PathLike | None = None,
                     strict: bool = False, max_y_delta: float = 0.5) -> NavmeshCheck:
    """ObjectNav's check (``objectnav_files.check_on_navmesh``) for one scene's InstanceImageNav
    episodes: view points off the navmesh dropped, then goals left without view points, then
    episodes whose start is off the navmesh or whose goal is gone; counted in ``.dropped``
    (``.dataset``: the ``InstanceImageNavDataset`` that remains), or (``strict``) the first one
    an ``InputError`` naming ``path``."""
    problem, dropped = problem_counter(path, strict)
    kept_goals = goals_on_navmesh({k: [g] for k, g in ds.goals.items()}, navmesh, problem, max_y_delta, "goals")
    goals = {k: v[0] for k, v in kept_goals.items() if v}
    kept = []
    for e in episodes_on_navmesh(ds.episodes, navmesh, problem, max_y_delta, goals=False):
        key = goal_key(e["scene_id"], e["goal_object_id"])
        if key not in goals:
            problem("episodes_without_goals", f"episode {e['episode_id']!r}: goal {key!r} has no view "
                                              "point on the navmesh")
            continue
        kept.append(e)
    return NavmeshCheck(InstanceImageNavDataset(kept, goals), dropped)


__all__ = ["InstanceImageNavDataset", "check_on_navmesh", "goal_key", "make_image_goal", "make_instance_goal",
           "make_instance_imagenav_episode", "validate_image_goal", "validate_instance_goal",
           "read_instance_imagenav_dataset", "write_instance_imagenav_dataset", "MAX_IMAGE_GOALS",
           "MAX_IMAGE_SIDE"]
