"""habitat's own PointNav episode files (e.g. ``pointnav_hm3d_v1/val/val.json.gz`` with one
``content/{ID}.json.gz`` per scene), mapped onto the scenes of a preprocessed manifest.

An episode names its scene by habitat's ``scene_id``: a path relative to
``data/scene_datasets`` (``hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb``; the prefix may
be written out). It is matched first against the source path each manifest scene was converted
from (exact: the same scan), then by habitat's scene name (file name up to the first dot), which
is how habitat names content files and how our manifests name HM3D scenes; so val episodes map
onto a manifest made from ``val`` and onto one made from ``minival`` for the scenes it holds.

``map_habitat_episodes(PATH, manifest).by_scene`` maps manifest name -> episodes (what the
runtime's ``make(..., episodes=PATH)`` uses); episodes of scenes the manifest lacks are an
``InputError`` unless ``allow_unmatched`` (then counted in ``.unmatched``). ObjectNav v1 files:
``map_habitat_objectnav`` maps the same way and keeps the dataset in ``.objectnav``;
InstanceImageNav-v1 files: ``map_habitat_instance_imagenav``, the dataset in ``.goal_instances``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import InputError
from ..habitat_names import habitat_scene_name
from ..nav.episode_table import EpisodeTable
from ..nav.episodes import DEFAULT_SCENE_PATH_PREFIX, read_pointnav_table
from ..nav.instance_imagenav_files import InstanceImageNavDataset, read_instance_imagenav_dataset
from ..nav.objectnav_files import ObjectNavDataset, read_objectnav_dataset


@dataclass
class MappedEpisodes:
    """Episodes grouped by manifest scene name (in file order within a scene)."""

    by_scene: dict[str, list[dict]] = field(default_factory=dict)
    unmatched: dict[str, int] = field(default_factory=dict)  # scene_id -> episodes dropped
    objectnav: ObjectNavDataset | None = None  # ObjectNav files: goals_of(ep), category maps
    goal_instances: InstanceImageNavDataset | None = None  # InstanceImageNav files: goal_of(ep), cameras

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.by_scene.values())


def _strip_prefix(scene_id: str) -> str:
    sid = scene_id.replace("\\", "/")
    i = sid.find(DEFAULT_SCENE_PATH_PREFIX)
    return sid[i + len(DEFAULT_SCENE_PATH_PREFIX):] if i >= 0 else sid.lstrip("./")


def scene_lookup(manifest, subset: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(source path -> name, habitat scene name -> name) over the manifest's usable scenes."""
    by_path, by_name = {}, {}
    for s in manifest.scenes(subset):
        src = manifest.doc["scenes"][s.name].get("sources", {}).get("scene", {}).get("path")
        if src:
            by_path[src] = s.name
        by_name.setdefault(habitat_scene_name(src) if src else s.name, s.name)
        by_name.setdefault(s.name, s.name)
    return by_path, by_name


def map_habitat_episodes(path: str | os.PathLike, manifest, subset: str | None = None,
                         allow_unmatched: bool = False) -> MappedEpisodes:
    """Read habitat's PointNav v1 episodes at ``path`` (split file, its folder or content folder
    (``nav.episodes.split_file_of``), or a content file; ``content/`` and ``content_scenes_path``
    as habitat reads them) and group them by the ``manifest`` scene each ``scene_id`` names
    (``subset``: only that subset's scenes).
    ``manifest``: a ``Manifest`` or a path to one. Each scene's episodes: an ``EpisodeTable``."""
    return _map(path, read_pointnav_table(path), manifest, subset, allow_unmatched)


def map_habitat_objectnav(path: str | os.PathLike, manifest, subset: str | None = None,
                          allow_unmatched: bool = False) -> MappedEpisodes:
    """``map_habitat_episodes`` for ObjectNav v1 files (``read_objectnav_dataset``): episodes by
    manifest scene, and ``.objectnav`` for their goals (``goals_of``, ``view_points_of``) and
    category maps. Check each scene's episodes against its navmesh with
    ``nav.objectnav_files.check_on_navmesh`` before use."""
    ds = read_objectnav_dataset(path)
    out = _map(path, ds.episodes, manifest, subset, allow_unmatched)
    out.objectnav = ds
    return out


def map_habitat_instance_imagenav(path: str | os.PathLike, manifest, subset: str | None = None,
                                  allow_unmatched: bool = False) -> MappedEpisodes:
    """``map_habitat_episodes`` for InstanceImageNav-v1 files (``read_instance_imagenav_dataset``):
    episodes by manifest scene, and ``.goal_instances`` for their goals (``goal_of``,
    ``image_goal_of``, ``view_points_of``)."""
    ds = read_instance_imagenav_dataset(path)
    out = _map(path, ds.episodes, manifest, subset, allow_unmatched)
    out.goal_instances = ds
    return out


def _map(path, episodes, manifest, subset, allow_unmatched) -> MappedEpisodes:
    if not hasattr(manifest, "scenes"):
        from .manifest import load_manifest

        manifest = load_manifest(manifest)
    by_path, by_name = scene_lookup(manifest, subset)
    out = MappedEpisodes()
    table = episodes if isinstance(episodes, EpisodeTable) else None
    scene_ids = table.scene_ids if table is not None else [e["scene_id"] for e in episodes]
    names, picked = {}, {}
    for k, sid in enumerate(scene_ids):
        name = names.get(sid, False)
        if name is False:
            name = names[sid] = by_path.get(_strip_prefix(sid)) or by_name.get(habitat_scene_name(sid))
        if name is None:
            if not allow_unmatched:
                eid = table.ids[k] if table is not None else episodes[k]["episode_id"]
                raise InputError(path, f"episode {eid!r}: scene {sid!r} is not a scene of "
                                       f"{manifest.path} (subset {subset or 'any'}; "
                                       f"{len(by_name)} scenes there)")
            out.unmatched[sid] = out.unmatched.get(sid, 0) + 1
            continue
        picked.setdefault(name, []).append(k)
    for name, idx in picked.items():
        out.by_scene[name] = table.take(idx) if table is not None else [episodes[k] for k in idx]
    return out
