"""Scenes found in the source tree rather than listed: index-rule splits (HM3D) and datasets
described by a habitat scene dataset config.

HM3D ships 1,000 scans in ``hm3d/{split}/{index}-{ID}/{ID}.basis.glb``; its manifest names
the splits by folder and index range (``SplitRule``), not by id. Every file below the layout's
top folder is classified: a scan (matches ``layout.scene``), its navmesh, a companion, or a
stray file. A file that looks like a scan (ends like ``layout.scene``) but does not match it
-- an ID folder without its index, a scan in no split folder, or an index outside every range
of its folder -- is a ``DatasetError`` naming the path: a half-renamed tree must not silently
lose scans.

The scene list, and so the shard partition, comes from the files found; every node of a
sharded run must see the same tree.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import DatasetError
from .datasets import Dataset, Layout


@dataclass(frozen=True)
class FoundScan:
    name: str
    folder: str | None
    index: int | None
    index_text: str | None  # as written in the folder name (``00800``)
    rel_scene: str


def _suffix(template: str) -> str:
    """The fixed file-name ending of a template (``.basis.glb``)."""
    return template.rsplit("}", 1)[-1]


def classify_files(files: list[str], dataset: Dataset, root: Path | None = None):
    """Sort ``files`` (POSIX paths relative to the source root) of an index-rule dataset into
    ``(scans, navmeshes, stray)``: ``scans`` a list of ``FoundScan``, ``navmeshes`` the set of
    (folder, index text, name) that have a navmesh. Raises ``DatasetError`` on a scan outside the
    layout or outside every split."""
    lay: Layout = dataset.layout
    scene_rx, nav_rx = lay.pattern(lay.scene), lay.pattern(lay.navmesh)
    comp_rx = [lay.pattern(c) for c in lay.companions]
    rules = dataset.all_rules()
    folders = sorted({r.folder for r in rules})
    suffix = _suffix(lay.scene)
    scans, navs, stray = [], set(), []

    def where(rel):
        return rel if root is None else root / rel

    for rel in files:
        m = scene_rx.match(rel)
        if m:
            g = m.groupdict()
            folder, index = g.get("split"), int(g["index"]) if "index" in g else None
            if folder is not None and folder not in folders:
                raise DatasetError(where(rel), f"scan in folder {folder!r}, which is no split of "
                                               f"{dataset.name} (split folders: {', '.join(folders)})")
            if index is not None and not any(r.covers(folder, index) for r in rules):
                ranges = ", ".join(r.describe(len(g["index"])) for r in rules if r.folder == folder)
                raise DatasetError(where(rel), f"scan index {g['index']} is outside every split of "
                                               f"folder {folder!r} ({ranges})")
            scans.append(FoundScan(g["scene"], folder, index, g.get("index"), rel))
            continue
        m = nav_rx.match(rel)
        if m:
            g = m.groupdict()
            navs.add((g.get("split"), g.get("index"), g["scene"]))
            continue
        if any(c.match(rel) for c in comp_rx):
            continue
        if rel.endswith(suffix):
            raise DatasetError(where(rel), f"a scan outside the layout {lay.scene} (an ID folder "
                                           f"without its index, or not under a split folder?)")
        stray.append(rel)
    return scans, navs, stray


@dataclass
class Discovered:
    """The scenes of one split found in the tree: ``scenes`` maps a name to (subset, scene
    path, navmesh path or None), paths relative to the source root."""

    subsets: tuple[str, ...]
    scenes: dict[str, tuple[str, str, str | None]]
    other_split: list[str]
    stray: list[str]
    missing: list[tuple[str, str]]


def discover_split(dataset: Dataset, split: str, files: list[str], subsets=None,
                   root: Path | None = None) -> Discovered:
    """The scans of index-rule split ``split`` among ``files`` (``subsets``: only these)."""
    lay = dataset.layout
    rules = {sub: r for sub, r in dataset.split_rules(split).items()
             if subsets is None or sub in subsets}
    scans, navs, stray = classify_files(files, dataset, root)
    chosen: dict[str, tuple[str, FoundScan]] = {}
    other = set()
    for s in scans:
        sub = next((k for k, r in rules.items() if r.covers(s.folder, s.index)), None)
        if sub is None:
            other.add(s.name)
            continue
        if s.name in chosen:
            first = chosen[s.name][1].rel_scene
            raise DatasetError(s.rel_scene if root is None else root / s.rel_scene,
                               f"scan id {s.name} appears twice in split {split!r} (also {first})")
        chosen[s.name] = (sub, s)
    scenes = {}
    for name, (sub, s) in sorted(chosen.items()):
        nav = None
        if (s.folder, s.index_text, name) in navs:
            nav = lay.navmesh_path(name, s.folder, s.index_text)
        scenes[name] = (sub, s.rel_scene, nav)
    return Discovered(tuple(x for x in ("train", "val", "test") if x in rules), scenes,
                      sorted(other - set(chosen)), stray, [])


def listed_files(dataset: Dataset, split: str, root: Path, subsets=None) -> Discovered:
    """The scenes of a dataset given as explicit files (a scene dataset config) that exist
    under ``root``; the others are missing. A navmesh that is not there is None."""
    subset_of = dataset.scene_subsets(split, subsets)
    scenes, missing = {}, []
    for name, sub in sorted(subset_of.items()):
        rel_scene, rel_nav = dataset.scene_files[name]
        if not (root / rel_scene).is_file():
            missing.append((name, sub))
            continue
        if rel_nav is not None and not (root / rel_nav).is_file():
            rel_nav = None
        scenes[name] = (sub, rel_scene, rel_nav)
    return Discovered(tuple(x for x in ("train", "val", "test") if x in set(subset_of.values())),
                      scenes, [], [], missing)
