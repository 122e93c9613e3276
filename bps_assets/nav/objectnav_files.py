"""ObjectNav episode files: habitat-lab's ObjectNav v1 layout (``ObjectNavDatasetV1``), read,
validated, written; and a check of a dataset against a scene's navmesh.

Layout (spec: docs/TASKS.md): ``DIR/SPLIT/SPLIT.json.gz`` = ``{"episodes": [],
"category_to_task_category_id": {...}, "category_to_scene_annotation_category_id": {...}}`` and
per scene ``DIR/SPLIT/content/{scene}.json.gz`` = the same two maps plus ``"episodes"`` (each with
``object_category`` and ``goals: []``) and ``"goals_by_category"``: ``"{basename(scene_id)}_
{category}"`` -> goal objects (``position``, ``object_id``, ``object_category``, ``view_points``:
``[{"agent_state": {"position", "rotation"}, "iou"}]``). Files that keep the goals inside the
episodes instead (habitat's ``dedup_goals`` input) and the old ``category_to_mp3d_category_id``
key are read too. Every failure is one ``InputError`` naming the file and the episode / goal.

``check_on_navmesh`` drops what a navmesh cannot use (view points and starts off it, goals left
without view points, episodes left without goals) and counts each kind, or raises in strict mode.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from ..errors import InputError, ResourceLimitError, is_int
from .episode_stream import STREAMED
from .episode_table import EpisodeTable
from .episodes import (_vec, finite_number, check_scene_name, check_table_unique_ids, check_split_name, dataset_files,
                       FileCaps, join_table_scenes_dir, read_json, split_file_of, validate_episode, write_split, SUFFIX,
                       CONTENT_DIR)

WHAT = "ObjectNav"
# habitat's objectgoal is an int64 in [0, max id]; its own files use 0..20 (MP3D) and 0..5 (HM3D)
MAX_CATEGORY_ID = 2**31 - 1
MAX_OBJECT_ID = 2**31 - 1   # semantic object ids of HM3D / MP3D scans are small non-negative ints
MAX_VIEW_POINTS_PER_GOAL = 20_000   # MP3D / HM3D ObjectNav v1 goals have hundreds at most
CATEGORY_MAPS = ("category_to_task_category_id", "category_to_scene_annotation_category_id")
NO_GOALS: list = []   # an episode's ``goals`` as read (its category's are in goals_by_category); copied on access


def goals_key(scene_id: str, category: str) -> str:
    """habitat's ``ObjectGoalNavEpisode.goals_key``: ``"{basename(scene_id)}_{category}"``."""
    return f"{os.path.basename(scene_id)}_{category}"


class ViewPoints:
    """A goal's ``view_points`` as arrays (what a file's list of ``ObjectViewLocation`` dicts is
    read into: ~60 bytes a point instead of ~700 as dicts): ``positions`` float64 [V, 3],
    ``rotations`` [V, 4] (NaN: none given), ``iou`` [V] (NaN: null). A read-only sequence of
    habitat's dicts (made on access), equal to such a list; ``to_json()`` for writers."""

    __slots__ = ("positions", "rotations", "iou")

    def __init__(self, positions, rotations, iou):
        self.positions, self.rotations, self.iou = positions, rotations, iou

    @classmethod
    def from_dicts(cls, vps: list) -> "ViewPoints":
        """From a validated list of view point dicts (``validate_goal``)."""
        n = len(vps)
        pos, rot, iou = np.empty((n, 3)), np.full((n, 4), np.nan), np.full(n, np.nan)
        for k, vp in enumerate(vps):
            st = vp["agent_state"]
            pos[k] = st["position"]
            if st.get("rotation") is not None:
                rot[k] = st["rotation"]
            if vp.get("iou") is not None:
                iou[k] = vp["iou"]
        return cls(pos, rot, iou)

    def subset(self, keep) -> "ViewPoints":
        """The view points where ``keep`` (bool [V]) is true."""
        return ViewPoints(self.positions[keep], self.rotations[keep], self.iou[keep])

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, k: int) -> dict:
        rot = self.rotations[k]
        return {"agent_state": {"position": self.positions[k].tolist(),
                                "rotation": None if np.isnan(rot[0]) else rot.tolist()},
                "iou": None if np.isnan(self.iou[k]) else float(self.iou[k])}

    def __iter__(self):
        return (self[k] for k in range(len(self)))

    def to_json(self) -> list[dict]:
        """habitat's list of dicts."""
        return list(self)

    def __eq__(self, other):
        if isinstance(other, ViewPoints):
            other = other.to_json()
        return self.to_json() == other if isinstance(other, list) else NotImplemented

    __hash__ = None


def view_point_positions(vps) -> np.ndarray:
    """float64 [V, 3]: the positions of a goal's view points (``ViewPoints`` or habitat's dicts)."""
    if isinstance(vps, ViewPoints):
        return vps.positions
    return np.asarray([vp["agent_state"]["position"] for vp in vps], np.float64).reshape(-1, 3)


@dataclass
class ObjectNavDataset:
    """Episodes (habitat v1 dicts, ``goals`` empty, ``object_category`` set: a list, or an
    ``EpisodeTable`` as read), their goals by ``goals_key`` and the two category maps, as in
    ``ObjectNavDatasetV1``."""

    episodes: list[dict] = field(default_factory=list)
    goals_by_category: dict[str, list[dict]] = field(default_factory=dict)
    category_to_task_category_id: dict[str, int] = field(default_factory=dict)
    category_to_scene_annotation_category_id: dict[str, int] = field(default_factory=dict)

    def goals_of(self, episode: dict) -> list[dict]:
        """The goal objects of ``episode`` (every object of its category in its scene)."""
        return self.goals_by_category.get(goals_key(episode["scene_id"], episode["object_category"]), [])

    def view_points_of(self, episode: dict) -> np.ndarray:
        """float64 [V, 3]: the positions of every view point of every goal of ``episode`` (what
        habitat's ``DistanceToGoal`` with ``distance_to: VIEW_POINTS`` measures to)."""
        pts = [view_point_positions(g["view_points"]) for g in self.goals_of(episode)]
        return np.concatenate(pts) if pts else np.zeros((0, 3))

    def task_category_id(self, episode: dict) -> int:
        """The ``objectgoal`` observation of ``episode`` (habitat's TASK_CATEGORY_ID goal spec)."""
        return int(self.category_to_task_category_id[episode["object_category"]])


# ------------------------------------------------------------------------------ building
def make_view_point(position, rotation, iou: float | None) -> dict:
    """One ``ObjectViewLocation``: an agent state (position on the navmesh, [x, y, z, w]
    rotation) from which the object is seen, and its visibility score ``iou``."""
    return {"agent_state": {"position": [float(x) for x in position],
                            "rotation": [float(x) for x in rotation]},
            "iou": None if iou is None else float(iou)}


def make_object_goal(position, object_id: int, object_category: str, view_points: list[dict],
                     object_name: str | None = None, room_id: str | None = None,
                     radius: float | None = None) -> dict:
    """One ``ObjectGoal`` in habitat's JSON shape (``position``: the object's AABB centre)."""
    return {"position": [float(x) for x in position], "radius": radius,
            "object_id": int(object_id), "object_name": object_name, "object_name_id": None,
            "object_category": object_category, "room_id": room_id, "room_name": None,
            "view_points": list(view_points)}


def make_objectnav_episode(episode_id, scene_id: str, start_position, start_rotation,
                           object_category: str, info: Mapping | None = None) -> dict:
    """One ``ObjectGoalNavEpisode`` as stored in a content file (``goals`` empty)."""
    return {"episode_id": str(episode_id), "scene_id": scene_id,
            "start_position": [float(x) for x in start_position],
            "start_rotation": [float(x) for x in start_rotation],
            "info": dict(info or {}), "goals": [], "start_room": None, "shortest_paths": None,
            "object_category": object_category}


# ------------------------------------------------------------------------------ validation
def _check_maps(doc: dict, path) -> tuple[dict, dict] | None:
    """The two category maps of a document (None when it has neither), checked as habitat's
    ``from_json`` asserts them: same keys, int values."""
    task = doc.get(CATEGORY_MAPS[0])
    ann = doc.get(CATEGORY_MAPS[1], doc.get("category_to_mp3d_category_id"))
    if task is None and ann is None:
        return None
    for name, m in ((CATEGORY_MAPS[0], task), (CATEGORY_MAPS[1], ann)):
        if not isinstance(m, dict) or not all(isinstance(k, str) and is_int(v) for k, v in m.items()):
            raise InputError(path, f"{name} must be an object of category name -> integer id")
    # task ids are the objectgoal observation (0..max); a scene annotation id of -1 is habitat's
    # "no such category in the annotation" (its own HM3D maps carry it)
    for name, m, lo in ((CATEGORY_MAPS[0], task, 0), (CATEGORY_MAPS[1], ann, -1)):
        bad = next(((k, v) for k, v in m.items() if not lo <= v <= MAX_CATEGORY_ID), None)
        if bad is not None:
            raise InputError(path, f"{name}[{bad[0]!r}] = {bad[1]}: ids are in {lo}..{MAX_CATEGORY_ID}")
    if len(set(task.values())) != len(task):
        shared = sorted({v for v in task.values() if list(task.values()).count(v) > 1})
        raise InputError(path, f"{CATEGORY_MAPS[0]} gives two categories one task id ({shared[0]}: "
                               f"{sorted(k for k, v in task.items() if v == shared[0])}); the objectgoal "
                               "observation could not tell them apart")
    if set(task) != set(ann):
        raise InputError(path, f"{CATEGORY_MAPS[0]} and {CATEGORY_MAPS[1]} name different "
                               f"categories: {sorted(set(task) ^ set(ann))}")
    return task, ann


def validate_goal(g, where: str, path) -> dict:
    """Check one ``ObjectGoal`` dict; ``InputError`` naming the file and ``where``."""
    def bad(msg):
        raise InputError(path, f"{where}: {msg}")

    if not isinstance(g, dict):
        bad("goal is not an object")
    if not _vec(g.get("position"), 3):
        bad("goal position must be 3 finite numbers")
    oid = g.get("object_id")
    if oid is None:
        bad("goal object_id is missing")
    if not (isinstance(oid, str) or (is_int(oid) and 0 <= oid <= MAX_OBJECT_ID)):
        bad(f"goal object_id {oid!r}: expected an integer in 0..{MAX_OBJECT_ID} (or a string)")
    if not isinstance(g.get("object_category"), (str, type(None))):
        bad("goal object_category must be a string")
    vps = g.get("view_points")
    if isinstance(vps, ViewPoints):
        return g   # made from checked dicts (read_objectnav_dataset)
    if not isinstance(vps, list):
        bad(f"goal {g.get('object_id')!r}: view_points must be a list")
    if len(vps) > MAX_VIEW_POINTS_PER_GOAL:
        raise ResourceLimitError(path, f"{where}: goal {oid!r} has {len(vps)} view points, more than the "
                                       f"cap of {MAX_VIEW_POINTS_PER_GOAL} (docs/FORMAT.md)")
    for k, vp in enumerate(vps):
        st = vp.get("agent_state") if isinstance(vp, dict) else None
        if not isinstance(st, dict) or not _vec(st.get("position"), 3):
            bad(f"goal {g.get('object_id')!r} view point {k}: agent_state.position must be 3 "
                "finite numbers")
        rot = st.get("rotation")
        if rot is not None and not _vec(rot, 4):
            bad(f"goal {g.get('object_id')!r} view point {k}: agent_state.rotation must be 4 "
                "finite numbers [x, y, z, w]")
        iou = vp.get("iou")
        if iou is not None and not finite_number(iou):
            bad(f"goal {g.get('object_id')!r} view point {k}: iou must be a number or null")
    return g


# ------------------------------------------------------------------------------ reading
def read_objectnav_dataset(path: str | os.PathLike, scenes: Iterable[str] | None = None,
                           scenes_dir: str | None = None) -> ObjectNavDataset:
    """An ObjectNav v1 dataset (ours or habitat's own files) as habitat-lab's
    ``ObjectNavDatasetV1`` reads it: the split file, then its ``content/`` files (only
    ``scenes`` if given). Each episode's id is its index in its file, as a string, as habitat's
    ``from_json`` sets it (the file's own ``episode_id`` is checked, then only named in errors),
    and gets ``object_category`` from its first goal when absent, and always in a file without
    ``goals_by_category`` (habitat's ``dedup_goals`` sets it from goals[0]); ``.episodes``
    is an ``EpisodeTable`` (each episode kept as its JSON text, a dict made on access). Raises
    ``InputError`` naming file and episode for a malformed episode or goal, an episode whose
    category is not in the category maps, or one whose scene holds no goal of its category."""
    out = ObjectNavDataset(EpisodeTable(columns=("object_category", "goals")))
    maps_seen, names, starts = False, {}, []
    per_file: dict = {}

    def items_for(f):
        eps, gbc, dedup = per_file.setdefault(f, ([], {}, {}))
        caps = FileCaps(f)   # the file's view points as decoded (its episodes: read_json)

        def goal(key, j, g):
            if j is None:   # the member is not a non-empty list
                if not isinstance(g, list):
                    raise InputError(f, f"goals_by_category[{key!r}] must be a list")
                gbc.setdefault(key, [])
                return
            gbc.setdefault(key, []).append(_read_goal(g, f"goals_by_category[{key!r}][{j}]", f, caps))

        def episode(i, e, text):   # checked, then kept as its text and the fields checked below
            validate_episode(e, i, f, need_goals=False)
            cat = own = e.get("object_category")
            if e.get("goals"):   # habitat's dedup_goals input: the goals ride in the episodes
                first = e["goals"][0].get("object_category")
                # dedup_goals sets the category to goals[0]'s, whatever the episode says
                cat = first if isinstance(first, str) and first else cat
                key = goals_key(e["scene_id"], cat)
                if key not in dedup:
                    dedup[key] = [_read_goal(g, f"episode {i} goals[{j}]", f, caps) for j, g in enumerate(e["goals"])]
                else:   # a later copy: dropped, but decoded (and counted in the raw text) all the same
                    caps.add(FileCaps.VIEW_POINTS, _view_point_count(e["goals"]))
            sid = names.setdefault(e["scene_id"], e["scene_id"])   # one string object per distinct value
            eps.append((text, e["episode_id"], sid, *(names.setdefault(c, c) if isinstance(c, str) else c
                                                      for c in (cat, own)), bool(e.get("goals"))))

        return {"episodes": ("list+text", episode), "goals_by_category": ("map_of_lists", goal)}

    for f, doc in dataset_files(path, scenes, WHAT, items_for):
        eps, gbc, dedup = per_file.pop(f)
        maps = _check_maps(doc, f)
        if maps is not None:
            if maps_seen and (maps[0] != out.category_to_task_category_id):
                raise InputError(f, f"{CATEGORY_MAPS[0]} differs from an earlier file's of this dataset")
            out.category_to_task_category_id, out.category_to_scene_annotation_category_id = maps
            maps_seen = True
        if eps and not maps_seen:
            raise InputError(f, f"no {CATEGORY_MAPS[0]} in this file or the split file")
        dedup_input = doc.get("goals_by_category") is None
        if dedup_input:   # absent (or null): the goals ride in the episodes
            for i, (_, eid, _, _, _, has_goals) in enumerate(eps):
                if not has_goals:
                    raise InputError(f, f"episode {i} (id {eid!r}): goals must be a non-empty list")
            gbc = dedup
        elif doc["goals_by_category"] is not STREAMED:
            raise InputError(f, "goals_by_category must be an object of key -> goal list")
        out.goals_by_category.update(gbc)
        starts.append((len(out.episodes), f))
        for i, (text, eid, sid, cat, own, _) in enumerate(eps):
            cat = cat if dedup_input or own is None else own   # with goals_by_category: the episode's own
            where = f"episode {i} (id {eid!r})"
            if not isinstance(cat, str) or not cat:
                raise InputError(f, f"{where}: object_category is missing")
            if cat not in out.category_to_task_category_id:
                raise InputError(f, f"{where}: category {cat!r} is not in {CATEGORY_MAPS[0]}")
            key = goals_key(sid, cat)
            if not out.goals_by_category.get(key):
                raise InputError(f, f"{where}: no goal of category {cat!r} in scene "
                                    f"{os.path.basename(sid)!r} (goals_by_category has no {key!r})")
            out.episodes.append(text, str(i), sid, cat, NO_GOALS)   # habitat's id: the index in its file
    check_table_unique_ids(out.episodes, starts)   # on the scene ids as read, as habitat's
    join_table_scenes_dir(out.episodes, scenes_dir)
    return out


def read_category_map(path: str | os.PathLike) -> dict[str, int] | None:
    """The ``category_to_task_category_id`` that ``read_objectnav_dataset(path)`` takes (the first
    file's with maps: the split file's, else a content file's), checked as it checks them, with
    episodes and goals skipped as parsed, not kept: the split file alone when it has the maps
    (habitat's and ours do). None when no file has them; ``InputError`` as the reader's."""
    def maps_only(_file):   # dataset_files' per-file hook: episodes and goals parsed, dropped
        return {"episodes": ("list", _ignore), "goals_by_category": ("map_of_lists", _ignore)}

    split = split_file_of(path)
    maps = _check_maps(read_json(split, WHAT, maps_only(split)), split)
    if maps is None:   # the maps ride in the content files: the first that has them
        maps = next((m for f, doc in dataset_files(path, None, WHAT, maps_only)[1:]
                     if (m := _check_maps(doc, f)) is not None), None)
    return None if maps is None else {str(k): int(v) for k, v in maps[0].items()}


def _ignore(*_):
    return None


def _view_point_count(goals: list) -> int:
    """The view points of a list of goals as decoded (not checked: those of the goals kept are)."""
    return sum(len(g["view_points"]) for g in goals if isinstance(g, dict) and isinstance(g.get("view_points"), list))


def _read_goal(g, where: str, path, caps: FileCaps) -> dict:
    """A goal dict of a file, checked (``validate_goal``), its view points counted against the
    file's cap (``caps``) and made ``ViewPoints``."""
    validate_goal(g, where, path)
    caps.add(FileCaps.VIEW_POINTS, len(g["view_points"]))
    g["view_points"] = ViewPoints.from_dicts(g["view_points"])
    return g


# ------------------------------------------------------------------------------ writing
def write_objectnav_dataset(out_dir: str | os.PathLike, split: str,
                            by_scene: Mapping[str, ObjectNavDataset],
                            category_to_task_category_id: Mapping[str, int],
                            category_to_scene_annotation_category_id: Mapping[str, int] | None = None,
                            overwrite: bool = False, per_scene_annotation: bool = False) -> list[Path]:
    """Write habitat's ObjectNav v1 layout under ``out_dir/split``: per scene name a content
    file with its episodes, its ``goals_by_category`` and the two category maps; the split file
    holds the maps and no episodes. ``category_to_scene_annotation_category_id`` defaults to the
    task map. ``per_scene_annotation``: each content file carries its own dataset's annotation
    map instead (-1 for a category it lacks), and the split file the value all scenes share (-1
    where they differ). Everything is validated first (``InputError`` naming the content file and
    the episode); files are written atomically; existing ones need ``overwrite``."""
    check_split_name(split)
    task = {str(k): int(v) for k, v in category_to_task_category_id.items()}
    ann = task if category_to_scene_annotation_category_id is None else \
        {str(k): int(v) for k, v in category_to_scene_annotation_category_id.items()}
    own = {scene: {k: int(ds.category_to_scene_annotation_category_id.get(k, -1)) for k in task}
           for scene, ds in by_scene.items()} if per_scene_annotation else {}
    if own:   # habitat reads the split file's maps, then each content file's (the last one wins)
        ann = {k: (v.pop() if len(v := {m[k] for m in own.values()}) == 1 else -1) for k in task}
    maps = {CATEGORY_MAPS[0]: task, CATEGORY_MAPS[1]: ann}
    content = Path(out_dir) / split / CONTENT_DIR
    docs = {}
    for scene, ds in by_scene.items():
        check_scene_name(scene)
        doc = {"episodes": [dict(e, goals=[]) for e in ds.episodes],
               "goals_by_category": {k: list(v) for k, v in ds.goals_by_category.items()},
               **maps, **({CATEGORY_MAPS[1]: own[scene]} if own else {})}
        f = content / f"{scene}{SUFFIX}"
        _check_maps(doc, f)
        for key, goals in doc["goals_by_category"].items():
            for j, g in enumerate(goals):
                validate_goal(g, f"goals_by_category[{key!r}][{j}]", f)
        for i, e in enumerate(doc["episodes"]):
            validate_episode(e, i, f, need_goals=False)
            cat = e.get("object_category")
            where = f"episode {i} (id {e.get('episode_id')!r})"
            if cat not in task:
                raise InputError(f, f"{where}: category {cat!r} is not in {CATEGORY_MAPS[0]}")
            if not doc["goals_by_category"].get(goals_key(e["scene_id"], cat)):
                raise InputError(f, f"{where}: no goal of category {cat!r} in its scene")
        docs[scene] = doc
    return write_split(out_dir, split, docs, {"episodes": [], **maps}, overwrite)


# ------------------------------------------------------------------------------ navmesh check
@dataclass
class NavmeshCheck:
    """What ``check_on_navmesh`` dropped, by kind, and the dataset that remains."""

    dataset: ObjectNavDataset
    dropped: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        """One line: the counts of what was dropped ("" when nothing was)."""
        return ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(self.dropped.items()) if n)


def problem_counter(path, strict: bool):
    """(``problem(kind, message)``, the Counter it fills): counts each kind, or (``strict``)
    raises the first message as an ``InputError`` naming ``path``."""
    dropped: Counter = Counter()

    def problem(kind: str, msg: str):
        if strict:
            raise InputError(path, msg)
        dropped[kind] += 1

    return problem, dropped


def goals_on_navmesh(goals_by_key: Mapping[str, list[dict]], navmesh, problem, max_y_delta: float = 0.5,
                     label: str = "goals_by_category") -> dict[str, list[dict]]:
    """Each key's goals with only their view points on the navmesh; a goal left without any is
    dropped. ``problem(kind, message)`` is told of each (``view_points_off_navmesh``,
    ``goals_without_view_points``; ``label``: the file's name of the goal table)."""
    goals_out: dict[str, list[dict]] = {}
    for key, goals in goals_by_key.items():
        kept_goals = []
        for g in goals:
            vps = g["view_points"]
            pos = view_point_positions(vps)
            on = np.asarray(navmesh.is_navigable(pos, max_y_delta), bool).reshape(-1) if len(vps) else \
                np.zeros(0, bool)
            for k in np.flatnonzero(~on):
                problem("view_points_off_navmesh", f"{label}[{key!r}] object "
                        f"{g['object_id']!r}: view point {k} at {pos[k].round(3).tolist()} is off "
                        "the navmesh")
            if not on.any():
                problem("goals_without_view_points", f"{label}[{key!r}] object "
                        f"{g['object_id']!r}: no view point on the navmesh")
                continue
            kept_goals.append(dict(g, view_points=vps.subset(on) if isinstance(vps, ViewPoints) else
                                   [vp for vp, ok in zip(vps, on) if ok]))
        goals_out[key] = kept_goals
    return goals_out


def check_on_navmesh(ds: ObjectNavDataset, navmesh, path: str | os.PathLike | None = None,
                     strict: bool = False, max_y_delta: float = 0.5) -> NavmeshCheck:
    """Check one scene's episodes against its navmesh (habitat's ``is_navigable`` with
    ``max_y_delta``). View points off the navmesh are dropped, then goals left without view
    points, then episodes whose start is off the navmesh or whose category has no goal left;
    each is counted in ``.dropped`` (keys ``view_points_off_navmesh``, ``goals_without_view_
    points``, ``starts_off_navmesh``, ``episodes_without_goals``). ``strict``: the first such
    problem is an ``InputError`` naming ``path``, the episode or goal, and the position."""
    problem, dropped = problem_counter(path, strict)
    goals_out = goals_on_navmesh(ds.goals_by_category, navmesh, problem, max_y_delta)
    kept = []
    for e in episodes_on_navmesh(ds.episodes, navmesh, problem, max_y_delta, goals=False):
        where = f"episode {e['episode_id']!r}"
        if not goals_out.get(goals_key(e["scene_id"], e["object_category"])):
            problem("episodes_without_goals", f"{where}: no goal of category "
                                              f"{e['object_category']!r} has a view point on the navmesh")
            continue
        kept.append(e)
    out = ObjectNavDataset(kept, goals_out, dict(ds.category_to_task_category_id),
                           dict(ds.category_to_scene_annotation_category_id))
    return NavmeshCheck(out, dropped)


def episodes_on_navmesh(episodes: list[dict], navmesh, problem, max_y_delta: float = 0.5,
                        goals: bool = True) -> list[dict]:
    """The episodes whose start (and, with ``goals``, every ``goals[].position``: PointNav /
    ImageNav) is on the navmesh; ``problem(kind, message)`` is told of each other one
    (``starts_off_navmesh``, ``goals_off_navmesh``)."""
    def on(points):
        pts = np.asarray(points, np.float64).reshape(-1, 3)
        return np.asarray(navmesh.is_navigable(pts, max_y_delta), bool).reshape(-1) if len(pts) else \
            np.zeros(0, bool)

    s_ok = on([e["start_position"] for e in episodes])
    kept = []
    for e, ok in zip(episodes, s_ok):
        where = f"episode {e['episode_id']!r}"
        if not ok:
            problem("starts_off_navmesh", f"{where}: start {np.round(e['start_position'], 3).tolist()} "
                                          "is off the navmesh")
            continue
        if goals:
            g_ok = on([g["position"] for g in e["goals"]])
            if not g_ok.all():
                k = int(np.flatnonzero(~g_ok)[0])
                problem("goals_off_navmesh", f"{where}: goal {k} at "
                                             f"{np.round(e['goals'][k]['position'], 3).tolist()} is off the navmesh")
                continue
        kept.append(e)
    return kept


def check_pointnav_on_navmesh(episodes: list[dict], navmesh, path: str | os.PathLike | None = None,
                              strict: bool = False, max_y_delta: float = 0.5) -> tuple[list[dict], Counter]:
    """PointNav / ImageNav episodes of one scene against its navmesh: (the usable episodes,
    counts of ``starts_off_navmesh`` / ``goals_off_navmesh``); ``strict``: ``InputError`` naming
    ``path``, the episode and the position instead."""
    problem, dropped = problem_counter(path, strict)
    return episodes_on_navmesh(episodes, navmesh, problem, max_y_delta), dropped


__all__ = ["ObjectNavDataset", "read_category_map", "check_pointnav_on_navmesh", "episodes_on_navmesh", "goals_key", "make_view_point", "make_object_goal",
           "goals_on_navmesh", "problem_counter",
           "make_objectnav_episode", "validate_goal", "read_objectnav_dataset",
           "write_objectnav_dataset", "check_on_navmesh", "NavmeshCheck", "CATEGORY_MAPS"]
