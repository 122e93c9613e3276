"""PointNav episodes: habitat-lab's generator rules on a ``NavMesh``, habitat's v1 dataset files.

Generation follows habitat-lab's ``generate_pointnav_episode`` (pointnav_generator.py): sample a
target; skip it if its island radius is < 1.5 m; try up to 10 sources; a source is compatible
when |dy| <= 0.5 m, the geodesic distance is finite and in [1, 30] m, its island radius is
>= 1.5 m, and -- if geodesic/euclidean < 1.1 -- a uniform draw is <= 20 * (ratio - 0.98)^2.
The first compatible source makes an episode with a random yaw. Both ends lie on the largest
indoor island (``nav.indoor``) unless ``all_islands``; ``stats["where"]`` says where episodes
start. A seeded numpy ``Generator`` reproduces a dataset exactly on any machine (docs/DECISIONS.md);
``shortest_paths`` are not generated (habitat's Gibson / MP3D files have none).

Files (``write_pointnav_dataset`` / ``read_pointnav_dataset``): habitat's PointNav v1 layout,
``DIR/SPLIT/SPLIT.json.gz`` = ``{"episodes": []}`` and one ``DIR/SPLIT/content/{scene}.json.gz``
per scene; habitat's own files (episodes in the split file, or content files) read the same way.
"""
from __future__ import annotations

import bisect
import gzip
import json
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ..container import atomic_write
from ..errors import ConfigError, InputError, NavError, OutputExistsError, ResourceLimitError
from .episode_stream import STREAMED, stream_document
from .episode_table import EpisodeTable, first_repeat, text_id
from ..habitat_names import habitat_scene_name
from ..safe_paths import content_scenes_dir
from .indoor import describe_islands, episode_islands
from .pose import yaw_quaternion


# ------------------------------------------------------------------------------ options
@dataclass(frozen=True)
class EpisodeOptions:
    """habitat-lab's ``generate_pointnav_episode`` parameters (same defaults)."""

    closest_dist_limit: float = 1.0        # m, shortest allowed geodesic distance
    furthest_dist_limit: float = 30.0      # m, longest allowed geodesic distance
    geodesic_to_euclid_min_ratio: float = 1.1  # below it episodes are kept with p=20(r-.98)^2
    max_height_difference: float = 0.5     # m, |start.y - goal.y| (same floor)
    island_radius_limit: float = 1.5       # m, both ends on islands at least this wide
    number_retries_per_target: int = 10    # sources tried per target
    goal_radius: float | None = 0.2        # written in goals[0].radius (habitat-lab: 0.2)
    max_targets_per_episode: int = 2000    # give up (NavError) after n * this many targets
    batch_targets: int = 64                # targets drawn per batch (speed only)
    # False: both ends on the largest indoor island (habitat's newer generators, nav.indoor);
    # True: on any island (habitat-lab's pointnav_generator)
    all_islands: bool = False

    def __post_init__(self):
        if not 0 <= self.closest_dist_limit <= self.furthest_dist_limit:
            raise ConfigError(None, "episodes: need 0 <= closest_dist_limit <= furthest_dist_limit")
        if self.number_retries_per_target < 1 or self.batch_targets < 1 \
                or self.max_targets_per_episode < 1:
            raise ConfigError(None, "episodes: retries, batch and target limits must be >= 1")
        if self.goal_radius is not None and not self.goal_radius >= 0:
            raise ConfigError(None, "episodes: goal_radius must be >= 0 or None")


DEFAULTS = EpisodeOptions()

_DATASET_SCENE_ID = {
    "gibson": "gibson/{name}.glb",
    "mp3d": "mp3d/{name}/{name}.glb",
    "generic": "{name}.glb",
}
DEFAULT_SCENE_PATH_PREFIX = "data/scene_datasets/"  # habitat strips it when reading


def habitat_scene_id(dataset: str, name: str) -> str:
    """habitat's ``scene_id`` for scene ``name`` of ``dataset`` (gibson, mp3d, generic)."""
    try:
        return _DATASET_SCENE_ID[dataset].format(name=name)
    except KeyError:
        raise ConfigError(None, f"unknown dataset {dataset!r} "
                                f"(one of {', '.join(_DATASET_SCENE_ID)})") from None


def scene_seed(seed: int, scene_name: str) -> int:
    """A per-scene seed, so a scene's episodes do not depend on the other scenes listed."""
    return int(np.random.SeedSequence([int(seed) & (2**63 - 1),
                                       zlib.crc32(scene_name.encode())]).generate_state(1)[0])


# --------------------------------------------------------------------------- generation
def ratio_sample_rate(ratio: np.ndarray) -> np.ndarray:
    """habitat's chance of keeping a candidate whose geodesic / euclid ratio is below the minimum
    (the draw must not exceed it)."""
    return 20.0 * (ratio - 0.98) ** 2


def _geodesic_from(navmesh, target: np.ndarray, sources: np.ndarray,
                   limit: float) -> np.ndarray:
    """Geodesic distances from ``target`` [3] to each of ``sources`` [k,3] (inf beyond ``limit``).

    Measured from the goal, like the runtime's distance-to-goal field, so ``info`` agrees with
    the d0 the env computes. A distance field cut off at ``limit`` keeps big scenes cheap
    (100 episodes on a 4100 m^2 mesh: 209 s with whole-scene fields).
    """
    if hasattr(navmesh, "distance_field") and hasattr(navmesh, "distance_at"):
        field = navmesh.distance_field(target, limit=limit)
        return np.asarray(navmesh.distance_at(field, sources), dtype=np.float64).reshape(-1)
    a = np.repeat(target[None, :], len(sources), axis=0)
    return np.asarray(navmesh.geodesic_distance(a, sources), dtype=np.float64).reshape(-1)


def generate_episodes(navmesh, scene_id: str, n: int, seed: int,
                      options: EpisodeOptions = DEFAULTS,
                      stats: dict | None = None) -> list[dict]:
    """``n`` PointNav episodes on ``navmesh`` with habitat-lab's generator rules.

    ``navmesh`` needs ``sample_navigable_point(n, seed)``, ``island_radius(p)`` and
    ``geodesic_distance(a, b)`` (or ``distance_field`` + ``distance_at``), all over [N,3]
    arrays in the habitat frame. Episodes are dicts in habitat's v1 JSON shape, ids "0".."n-1".
    ``stats``, if given, receives counters (targets, candidates, rejections by reason).
    Raises ``NavError`` when the navmesh cannot yield ``n`` episodes (e.g. too small).
    """
    if n < 0:
        raise ConfigError(None, f"episodes: n must be >= 0, got {n}")
    o = options
    rng = np.random.default_rng(seed)
    islands = episode_islands(navmesh, o.all_islands)
    island = None if islands is None else islands[0]
    st = dict(targets=0, target_island_too_small=0, candidates=0, rejected_dy=0,
              rejected_island=0, rejected_euclidean=0, geodesic_queries=0,
              rejected_unreachable=0, rejected_range=0, rejected_ratio=0, episodes=0)
    episodes: list[dict] = []
    k = o.number_retries_per_target
    max_targets = max(1, n) * o.max_targets_per_episode
    while len(episodes) < n:
        if st["targets"] >= max_targets:
            raise NavError(None, f"{scene_id}: only {len(episodes)} of {n} episodes after "
                                 f"{st['targets']} targets (navmesh too small or too "
                                 f"fragmented for the generator's rules?)")
        b = o.batch_targets
        on = {} if island is None else {"island": island}
        targets = np.asarray(navmesh.sample_navigable_point(b, seed=_subseed(rng), **on), np.float64)
        sources = np.asarray(navmesh.sample_navigable_point(b * k, seed=_subseed(rng), **on),
                             np.float64).reshape(b, k, 3)
        t_rad = np.asarray(navmesh.island_radius(targets), np.float64).reshape(b)
        s_rad = np.asarray(navmesh.island_radius(sources.reshape(-1, 3)),
                           np.float64).reshape(b, k)
        draws = rng.random((b, k))   # the ratio test's uniform draw, one per candidate
        angles = rng.uniform(0.0, 2.0 * np.pi, size=b)
        for i in range(b):
            if len(episodes) >= n:
                break
            st["targets"] += 1
            t = targets[i]
            if not np.all(np.isfinite(t)) or not t_rad[i] >= o.island_radius_limit:
                st["target_island_too_small"] += 1
                continue
            s = sources[i]
            st["candidates"] += k
            euclid = np.linalg.norm(s - t, axis=1)
            ok_dy = np.abs(s[:, 1] - t[1]) <= o.max_height_difference
            ok_isl = s_rad[i] >= o.island_radius_limit
            ok_euc = euclid <= o.furthest_dist_limit  # geodesic >= euclidean
            cheap = ok_dy & ok_isl & ok_euc & np.all(np.isfinite(s), axis=1)
            st["rejected_dy"] += int(np.sum(~ok_dy))
            st["rejected_island"] += int(np.sum(ok_dy & ~ok_isl))
            st["rejected_euclidean"] += int(np.sum(ok_dy & ok_isl & ~ok_euc))
            if not cheap.any():
                continue
            idx = np.flatnonzero(cheap)
            geo = _geodesic_from(navmesh, t, s[idx], o.furthest_dist_limit + 1.0)
            st["geodesic_queries"] += len(idx)
            chosen = None
            for j, g in zip(idx, geo):  # habitat's order: the first compatible source wins
                why = distance_rejection(g, euclid[j], draws[i, j], o.closest_dist_limit,
                                         o.furthest_dist_limit, o.geodesic_to_euclid_min_ratio)
                if why:
                    st[why] += 1
                    continue
                chosen = (j, float(g))
                break
            if chosen is None:
                continue
            j, g = chosen
            a = float(angles[i])
            episodes.append(make_episode(
                episode_id=len(episodes), scene_id=scene_id, start_position=s[j],
                start_rotation=yaw_quaternion(a),
                goal_position=t, geodesic_distance=g, goal_radius=o.goal_radius))
    st["episodes"] = len(episodes)
    st["where"] = where_episodes_start(navmesh, islands, episodes, o.all_islands)
    if stats is not None:
        stats.update(st)
    return episodes


def where_episodes_start(navmesh, islands, episodes, all_islands: bool = False) -> str:
    """One line for the user: the islands episodes were drawn on and the heights of their
    starts (a navmesh whose floor is missing shows it here: starts on table tops)."""
    on = describe_islands(navmesh, islands, all_islands) if hasattr(navmesh, "span_island") else "the navmesh"
    if not episodes:
        return f"no episodes (on {on})"
    y = np.sort([e["start_position"][1] for e in episodes])
    levels = np.split(y, np.flatnonzero(np.diff(y) > 0.5) + 1)  # levels: gaps over 0.5 m
    shown = ", ".join(f"{float(np.median(v)) + 0.0:.1f} ({len(v)})" for v in levels[:6])
    return f"episodes on {on}; starts at y = {shown + (', ...' if len(levels) > 6 else '')} m (count)"


def in_distance_range(geodesic, closest: float, furthest: float):
    """habitat's distance limits: the geodesic distance is finite and in [closest, furthest]
    (element-wise over an array; the runtime's per-visit sampler filters its starts with it)."""
    return np.isfinite(geodesic) & (geodesic >= closest) & (geodesic <= furthest)


def ratio_kept(geodesic, euclid, draw, min_ratio: float):
    """habitat's rejection of near-straight episodes: kept when geodesic / euclid >= ``min_ratio``
    or, below it, when ``draw`` (uniform in [0, 1)) <= 20 (ratio - 0.98)^2 (element-wise; the
    runtime's per-visit sampler draws with it)."""
    ratio = geodesic / np.maximum(euclid, 1e-9)
    return (ratio >= min_ratio) | (draw <= ratio_sample_rate(ratio))


def distance_rejection(geodesic: float, euclid: float, draw: float, closest: float, furthest: float,
                       min_ratio: float) -> str | None:
    """habitat's distance tests of an episode candidate (PointNav and ObjectNav generators): the
    stats key of the first failed one (``rejected_unreachable``, ``rejected_range``:
    ``in_distance_range``, ``rejected_ratio``: ``ratio_kept``), or None when the candidate is kept."""
    if not np.isfinite(geodesic):
        return "rejected_unreachable"
    if not in_distance_range(geodesic, closest, furthest):
        return "rejected_range"
    if not ratio_kept(geodesic, euclid, draw, min_ratio):
        return "rejected_ratio"
    return None


def _subseed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**63 - 1))


def make_episode(episode_id, scene_id: str, start_position, start_rotation, goal_position,
                 geodesic_distance: float, goal_radius: float | None = 0.2,
                 info: Mapping[str, Any] | None = None) -> dict:
    """One episode in habitat's PointNav v1 JSON shape."""
    inf = {"geodesic_distance": float(geodesic_distance)}
    if info:
        inf.update(info)
    return {
        "episode_id": str(episode_id),
        "scene_id": scene_id,
        "start_position": [float(x) for x in start_position],
        "start_rotation": [float(x) for x in start_rotation],
        "info": inf,
        "goals": [{"position": [float(x) for x in goal_position],
                   "radius": None if goal_radius is None else float(goal_radius)}],
        "shortest_paths": None,
        "start_room": None,
    }


# -------------------------------------------------------------------------------- files
MAX_JSON_BYTES = 1 << 30  # decompressed size cap for one episode file (real ones: tens of MB)
# Counts refused as the raw text is read, each piece counted before it is decoded, and again,
# exactly, as episodes and goals are decoded (a key written with JSON escapes): a file over them
# costs at most the caps' worth of parsed episodes (the parse holds ~1.5-2x the JSON). MP3D
# ObjectNav v1 has 2.63M train episodes over 56 scenes (~47k per content file); no habitat v1
# file of ours or theirs comes near.
MAX_EPISODES_PER_FILE = 500_000
MAX_VIEW_POINTS_PER_FILE = 1_000_000
CONTENT_DIR = "content"
SUFFIX = ".json.gz"


def split_file(out_dir: str | os.PathLike, split: str) -> Path:
    """Path of split ``split``'s episode file in a habitat v1 PointNav dataset folder
    (``OUT/SPLIT/SPLIT.json.gz``)."""
    return Path(out_dir) / split / f"{split}{SUFFIX}"


def split_file_of(path: str | os.PathLike) -> Path:
    """THE rule of which file a habitat v1 dataset given as ``path`` is read from (every reader,
    hence the runtime, and the CLI): a file itself; a split folder its own ``SPLIT/SPLIT.json.gz``;
    a ``content/`` folder its split folder's (habitat's layout ``SPLIT/SPLIT.json.gz`` +
    ``SPLIT/content/SCENE.json.gz``), unless it holds a ``content.json.gz`` of its own: so a
    content folder holding a scene literally named "content" is read as that scene's file, by
    design. "." and ".." are made absolute first (the rule reads the folder's own name)."""
    p = Path(path)
    if not p.is_dir():
        return p

    def named(q: Path) -> Path:   # "." / "..": made absolute, so that the folder's own name decides
        return Path(os.path.abspath(q)) if q.name in ("", "..") else q

    p = named(p)
    if p.name == CONTENT_DIR and not (p / f"{CONTENT_DIR}{SUFFIX}").exists():
        p = named(p.parent)   # "content" typed inside the split folder: its parent is "."
    return split_file(p.parent, p.name)


class _NotJson(TypeError):
    """json.dumps's ``default`` protocol: an object it cannot write (a bug of the caller's data)."""


def _as_json(o):
    if hasattr(o, "to_json"):   # arrays read from a file (objectnav_files.ViewPoints)
        return o.to_json()
    raise _NotJson(f"{type(o).__name__} is not JSON serializable")


def _gz_json_bytes(obj) -> bytes:
    raw = json.dumps(obj, separators=(", ", ": "), default=_as_json).encode()
    return gzip.compress(raw, compresslevel=6, mtime=0)  # mtime=0: reproducible bytes


def write_pointnav_dataset(out_dir: str | os.PathLike, split: str,
                           episodes_by_scene: Mapping[str, Iterable[dict]],
                           scene_path_fn: Callable[[str], str] | None = None,
                           overwrite: bool = False) -> list[Path]:
    """Write habitat's PointNav v1 layout under ``out_dir/split``; returns the files written.

    ``episodes_by_scene`` maps a scene name (the content file's name) to its episodes;
    ``scene_path_fn(name)``, if given, sets every episode's ``scene_id`` (e.g.
    ``lambda s: f"gibson/{s}.glb"``). Every episode is validated first. Existing files are an
    ``OutputExistsError`` unless ``overwrite``; with ``overwrite`` the split is replaced,
    including content files of scenes no longer listed. Each file is written atomically.
    """
    check_split_name(split)
    content = Path(out_dir) / split / CONTENT_DIR
    docs: dict[str, dict] = {}
    for scene, eps in episodes_by_scene.items():
        check_scene_name(scene)
        eps = [dict(e) for e in eps]
        if scene_path_fn is not None:
            for e in eps:
                e["scene_id"] = scene_path_fn(scene)
        for i, e in enumerate(eps):
            validate_episode(e, i, content / f"{scene}{SUFFIX}")
        docs[scene] = {"episodes": eps}
    return write_split(out_dir, split, docs, {"episodes": []}, overwrite)


def check_split_name(split: str) -> None:
    """``ConfigError`` unless ``split`` is a plain folder name."""
    if not split or "/" in split or split in (".", ".."):
        raise ConfigError(None, f"bad split name {split!r}")


def check_scene_name(scene: str) -> None:
    """``ConfigError`` unless ``scene`` can name a content file."""
    if not scene or "/" in scene or scene.startswith("."):
        raise ConfigError(None, f"bad scene name {scene!r}")


def write_split(out_dir: str | os.PathLike, split: str, docs_by_scene: Mapping[str, dict],
                split_doc: dict, overwrite: bool = False) -> list[Path]:
    """Write ``OUT/SPLIT/content/{scene}.json.gz`` (one JSON document per scene, already
    validated) and ``OUT/SPLIT/SPLIT.json.gz`` (``split_doc``), each atomically; returns the
    split file then the content files. ``OutputExistsError`` unless ``overwrite``, which also
    removes content files of scenes no longer listed."""
    content = Path(out_dir) / split / CONTENT_DIR
    targets = [split_file(out_dir, split)] + [content / f"{s}{SUFFIX}" for s in docs_by_scene]
    stale = []
    if content.is_dir():
        stale = [p for p in content.glob(f"*{SUFFIX}") if p not in targets]
    if not overwrite:
        for p in targets + stale:
            if p.exists():
                raise OutputExistsError(p, "already exists (pass overwrite / --overwrite "
                                           "to replace the split)")
    written = []
    for scene, doc in docs_by_scene.items():
        p = content / f"{scene}{SUFFIX}"
        data = _gz_json_bytes(doc)
        atomic_write(p, lambda f, d=data: f.write(d), overwrite=True)
        written.append(p)
    for p in stale:  # only reachable with overwrite=True
        p.unlink()
    data = _gz_json_bytes(split_doc)
    atomic_write(targets[0], lambda f: f.write(data), overwrite=True)
    written.insert(0, targets[0])
    return written


def read_json(path: Path, what: str = "PointNav", items: dict | None = None) -> dict:
    """A dataset file's top-level members (gzip or plain, size-capped), parsed as a stream
    (``episode_stream``); ``InputError`` unless it is an object with an ``episodes`` list.
    ``items``: the members handed to callbacks as they are decoded (``stream_document``), which
    then come back as ``STREAMED``; ``episodes`` not among them: collected into the returned dict's
    list.
    The file is read once: its counts (``CountCaps``) are checked on each piece as it is read,
    before the piece is decoded, and the episodes again, exactly, as each is decoded (before its
    callback): a key written with JSON escapes escapes the first count, not the second."""
    eps: list | None = None
    if items is None or "episodes" not in items:   # streamed either way: the exact count sees them
        eps = []
        items = dict(items or {}, episodes=("list", lambda i, e: eps.append(e)))
    items = dict(items, episodes=_capped_episodes(path, *items["episodes"]))
    doc = stream_document(path, what, MAX_JSON_BYTES, items, check=CountCaps(path))
    if "episodes" not in doc or not (doc["episodes"] is STREAMED or isinstance(doc["episodes"], list)):
        raise InputError(path, f'not a {what} dataset: expected {{"episodes": [...]}}')
    if eps is not None and doc["episodes"] is STREAMED:
        doc["episodes"] = eps
    return doc


def _capped_episodes(path, shape: str, cb) -> tuple:
    """``(shape, cb)`` of the streamed ``episodes`` with the cap checked on each decoded one (its
    index: the streamed list is the file's only one). No ``*args``: ~100 ns an episode more."""
    cap = MAX_EPISODES_PER_FILE
    if shape == "list+text":
        def counted(i, value, text):
            if i >= cap:
                raise _over_cap(path, i + 1, cap, "episodes")
            cb(i, value, text)
    else:
        def counted(i, value):
            if i >= cap:
                raise _over_cap(path, i + 1, cap, "episodes")
            cb(i, value)
    return shape, counted


def _over_cap(path, n: int, cap: int, what_n: str) -> ResourceLimitError:
    return ResourceLimitError(path, f"at least {n} {what_n} in one file, more than the cap of {cap} "
                                   "(docs/FORMAT.md); split the file per scene")


class FileCaps:
    """The count caps of one file (read when made: tests lower them): ``add(k, n)`` counts ``n``
    more episodes (``k`` = ``EPISODES``) or view points (``VIEW_POINTS``); ``ResourceLimitError``
    naming the file once a count passes its cap. The goal readers count decoded view points."""

    EPISODES, VIEW_POINTS = 0, 1
    NAMES = ("episodes", "view points")

    def __init__(self, path):
        self.path, self.counts = path, [0, 0]
        self.caps = [MAX_EPISODES_PER_FILE, MAX_VIEW_POINTS_PER_FILE]

    def add(self, k: int, n: int = 1) -> None:
        """Count ``n`` more of kind ``k``; ``ResourceLimitError`` over its cap."""
        self.counts[k] += n
        if self.counts[k] > self.caps[k]:
            raise _over_cap(self.path, self.counts[k], self.caps[k], self.NAMES[k])


class CountCaps(FileCaps):
    """Called with each piece of a file's raw text in order: ``ResourceLimitError`` as soon as
    the text so far holds more episodes or view points than the caps (upper bounds: a key could
    sit inside a string; a key cut between two pieces is counted once; a key written with JSON
    escapes is not counted here, but when decoded: ``read_json``, ``FileCaps``)."""

    KEYS = (b'"episode_id"', b'"agent_state"')   # in FileCaps.NAMES's order

    def __init__(self, path):
        super().__init__(path)
        self.tail = b""

    def __call__(self, piece: bytes) -> None:
        data = self.tail + piece
        for k, key in enumerate(self.KEYS):
            self.add(k, data.count(key) - self.tail.count(key))
        self.tail = data[-16:]


def as_number(x) -> float | None:
    """``x`` as a float, or None when it is not a JSON number or lies beyond float range (a
    400-digit integer literal: ``float`` of it raises ``OverflowError``)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return None
    try:
        return float(x)
    except OverflowError:
        return None


def finite_number(x) -> bool:
    """True when ``x`` is a JSON number that is finite as a float."""
    f = as_number(x)
    return f is not None and math.isfinite(f)


def _at_least_zero(x) -> bool:
    f = as_number(x)
    return f is not None and f >= 0


def _vec(v, n: int) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == n and all(finite_number(x) for x in v)


def validate_episode(e, i: int, path, need_goals: bool = True) -> dict:
    """Check one episode dict (habitat's v1 fields); ``InputError`` naming file and episode.
    ``need_goals=False``: ``goals`` may be empty (ObjectNav files keep them per category)."""
    if not isinstance(e, dict):
        raise InputError(path, f"episode {i}: not an object")
    eid = e.get("episode_id")
    where = f"episode {i} (id {eid!r})"

    def bad(msg):
        raise InputError(path, f"{where}: {msg}")

    if not isinstance(eid, (str, int)) or isinstance(eid, bool):
        bad("episode_id must be a string")
    if not isinstance(e.get("scene_id"), str) or not e["scene_id"]:
        bad("scene_id must be a non-empty string")
    if not _vec(e.get("start_position"), 3):
        bad("start_position must be 3 finite numbers")
    rot = e.get("start_rotation")
    if not _vec(rot, 4):
        bad("start_rotation must be 4 finite numbers [x, y, z, w]")
    if abs(math.sqrt(sum(x * x for x in rot)) - 1.0) > 1e-2:
        bad("start_rotation is not a unit quaternion")
    goals = e.get("goals", [] if not need_goals else None)
    if not isinstance(goals, list) or (need_goals and not goals):
        bad("goals must be a non-empty list" if need_goals else "goals must be a list")
    for g in goals:
        if not isinstance(g, dict) or not _vec(g.get("position"), 3):
            bad("each goal needs a position of 3 finite numbers")
        r = g.get("radius")
        if r is not None and not _at_least_zero(r):
            bad("goal radius must be null or a number >= 0")
    info = e.get("info")
    if info is not None:
        if not isinstance(info, dict):
            bad("info must be an object")
        gd = info.get("geodesic_distance")
        if gd is not None and not _at_least_zero(gd):
            bad("info.geodesic_distance must be a number >= 0")
    if e.get("shortest_paths") is not None and not isinstance(e["shortest_paths"], list):
        bad("shortest_paths must be null or a list")
    return e


def check_unique_ids(seen: dict, e: dict, i: int, path) -> None:
    """``InputError`` when ``e``'s (scene, episode_id) was already read (``seen`` maps each to
    the file and index it came from): an evaluation counts each episode once, so a repeated id
    would hide episodes, and habitat's episode iterator would run one of them twice."""
    key = (e["scene_id"], str(e["episode_id"]))
    if key in seen:
        raise _repeat_error(key, path, i, *seen[key])
    seen[key] = (path, i)


def check_table_unique_ids(table: EpisodeTable, starts: list[tuple[int, Path]]) -> None:
    """``check_unique_ids`` over a whole table (``starts``: (first row, file) of each file read
    into it, in order): the same error for the first repeated id, without a dict of every id."""
    rep = first_repeat(table)
    if rep is None:
        return
    rows = [r for r, _ in starts]
    (r0, f0), (r1, f1) = (starts[bisect.bisect_right(rows, k) - 1] for k in rep)
    raise _repeat_error((table.scene_ids[rep[1]], table.ids[rep[1]]), f1, rep[1] - r1, f0, rep[0] - r0)


def _repeat_error(key, path, i, f0, i0) -> InputError:
    return InputError(path, f"episode {i} (id {key[1]!r}): episode_id repeats episode {i0}"
                            f"{'' if Path(f0) == Path(path) else f' of {f0}'} in scene {key[0]!r}; "
                            "ids must be unique per scene")


def read_pointnav_dataset(path: str | os.PathLike, scenes: Iterable[str] | None = None,
                          scenes_dir: str | None = None) -> list[dict]:
    """Episodes of a habitat PointNav v1 dataset (ours or habitat's own files).

    ``path``: the split file (``.../SPLIT/SPLIT.json.gz``), its folder, its ``content/`` folder,
    or one content file (``split_file_of``). As in habitat: when a ``content/`` folder sits
    beside the split file, the episodes come from its ``{scene}.json.gz`` files (only ``scenes``
    if given; ``content_scenes_path`` in the split file is honoured); otherwise from the split
    file itself (filtered by ``scenes`` when given).
    With ``scenes_dir``, ``scene_id`` loses a ``data/scene_datasets/`` prefix and is joined to
    it, like habitat's loader. Episodes are validated (``InputError`` naming file and episode);
    ``episode_id`` comes back as a string (an ``IntEpisodeId`` where the file has an integer).
    """
    return _read_pointnav(path, scenes, scenes_dir, None)


def read_pointnav_table(path: str | os.PathLike, scenes: Iterable[str] | None = None,
                        scenes_dir: str | None = None) -> EpisodeTable:
    """``read_pointnav_dataset``'s episodes as an ``EpisodeTable`` (each kept as its JSON text:
    ~1x the file's bytes in memory instead of ~4x as dicts); same checks and errors."""
    return _read_pointnav(path, scenes, scenes_dir, EpisodeTable())


def _read_pointnav(path, scenes, scenes_dir, table: EpisodeTable | None):
    wanted = None if scenes is None else set(scenes)
    seen: dict = {}
    names: dict = {}
    per_file: dict = {}

    def items_for(f):
        eps = per_file.setdefault(f, [] if table is None else EpisodeTable())

        def episode(i, e, text=None):   # checked as decoded; the file's dict is kept (no copy)
            validate_episode(e, i, f)
            sid = names.setdefault(e["scene_id"], e["scene_id"])   # one string per scene
            if table is not None:   # ids checked once the table is whole (check_table_unique_ids)
                eps.append(text, text_id(e["episode_id"]), sid)
                return
            check_unique_ids(seen, e, i, f)
            e["episode_id"], e["scene_id"] = text_id(e["episode_id"]), sid
            eps.append(e)

        return {"episodes": ("list" if table is None else "list+text", episode)}

    files = dataset_files(path, scenes, items_for=items_for)
    if table is not None:
        starts = []
        for f, _ in files:
            starts.append((len(table), f))
            table.extend(per_file.pop(f))
        check_table_unique_ids(table, starts)
        if wanted is not None and len(files) == 1:
            table = table.take([k for k, sid in enumerate(table.scene_ids) if habitat_scene_name(sid) in wanted])
        join_table_scenes_dir(table, scenes_dir)
        return table
    out = []
    for f, d in files:
        for e in per_file.pop(f):
            if wanted is not None and len(files) == 1 and \
                    habitat_scene_name(e["scene_id"]) not in wanted:
                continue
            if scenes_dir is not None:
                e["scene_id"] = join_scenes_dir(scenes_dir, e["scene_id"])
            out.append(e)
    return out


def join_scenes_dir(scenes_dir: str, scene_id: str) -> str:
    """habitat's loader rule: drop a ``data/scene_datasets/`` prefix, join to ``scenes_dir``."""
    if scene_id.startswith(DEFAULT_SCENE_PATH_PREFIX):
        scene_id = scene_id[len(DEFAULT_SCENE_PATH_PREFIX):]
    return os.path.join(scenes_dir, scene_id)


def join_table_scenes_dir(table: EpisodeTable, scenes_dir: str | None) -> None:
    """``join_scenes_dir`` on every scene id of ``table``, in place (once per distinct id);
    nothing when ``scenes_dir`` is None."""
    if scenes_dir is not None:
        joined = {sid: join_scenes_dir(scenes_dir, sid) for sid in set(table.scene_ids)}
        table.scene_ids = [joined[sid] for sid in table.scene_ids]


def dataset_files(path: str | os.PathLike, scenes: Iterable[str] | None = None,
                  what: str = "PointNav", items_for=None) -> list[tuple[Path, dict]]:
    """(file, JSON document) of every file of a habitat v1 dataset, the split file first.

    ``path``: the split file (``.../SPLIT/SPLIT.json.gz``), its folder, its ``content/`` folder
    or one content file (``split_file_of``). When a ``content/`` folder (``content_scenes_path``)
    sits beside the split file, its ``{scene}.json.gz`` files follow (only ``scenes`` if given; a
    missing one is an ``InputError``); otherwise the split file alone holds the episodes. ``items_for(file)``: the
    file's streamed members (``read_json``'s ``items``), each file parsed as its turn comes."""
    p = split_file_of(path)
    items_for = items_for or (lambda f: None)
    doc = read_json(p, what, items_for(p))
    wanted = None if scenes is None else set(scenes)
    pattern = doc.get("content_scenes_path", "{data_path}/content/{scene}.json.gz")
    if not isinstance(pattern, str) or "{scene}" not in pattern:
        raise InputError(p, "content_scenes_path must be a string containing {scene}")
    content_dir, post = content_scenes_dir(p, pattern)  # only {data_path}, {scene}; stays inside
    if p.parent.name == CONTENT_DIR or not content_dir.is_dir():
        return [(p, doc)]
    names = sorted(f.name[: -len(post)] for f in content_dir.iterdir()
                   if f.name.endswith(post) and not f.name.startswith("."))
    if wanted is not None:
        missing = wanted - set(names)
        if missing:
            raise InputError(content_dir, f"no content file for scene(s) "
                                          f"{', '.join(sorted(missing))}")
        names = [s for s in names if s in wanted]
    files = [(p, doc)]  # a split file may carry episodes too
    files += [(f, read_json(f, what, items_for(f))) for f in (content_dir / f"{s}{post}" for s in names)]
    return files





__all__ = ["EpisodeOptions", "DEFAULTS", "generate_episodes", "make_episode",
           "write_pointnav_dataset", "read_pointnav_dataset", "read_pointnav_table", "validate_episode", "check_table_unique_ids",
           "habitat_scene_id", "scene_seed", "split_file", "split_file_of", "write_split", "dataset_files", "read_json",
           "check_split_name", "check_scene_name", "join_scenes_dir", "join_table_scenes_dir", "as_number", "finite_number", "distance_rejection", "in_distance_range", "ratio_kept",
           "ratio_sample_rate",
           "where_episodes_start"]
