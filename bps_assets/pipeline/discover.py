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


def plan_discovered(plan, files: list[str]):
    """Fill ``plan`` (a ``plan.Plan`` of an index-rule split) from the files found."""
    from .plan import SceneSource

    ds, lay = plan.dataset, plan.dataset.layout
    rules = {sub: r for sub, r in ds.split_rules(plan.split).items()
             if plan.subsets is None or sub in plan.subsets}
    scans, navs, plan.stray = classify_files(files, ds, plan.src_root)
    chosen: dict[str, tuple[str, FoundScan]] = {}
    other = set()
    for s in scans:
        sub = next((k for k, r in rules.items() if r.covers(s.folder, s.index)), None)
        if sub is None:
            other.add(s.name)
            continue
        if s.name in chosen:
            raise DatasetError(plan.src_root / s.rel_scene, f"scan id {s.name} appears twice in split "
                                                            f"{plan.split!r} (also {chosen[s.name][1].rel_scene})")
        chosen[s.name] = (sub, s)
    plan.subsets = tuple(x for x in ("train", "val", "test") if x in rules)
    plan.other_split = sorted(other - set(chosen))
    plan.selected = (plan.shard or _one()).select(chosen)
    for name in plan.selected:
        sub, s = chosen[name]
        rel_nav = None
        if (s.folder, s.index_text, name) in navs:
            rel_nav = lay.navmesh_path(name, s.folder, s.index_text)
        plan.scenes.append(SceneSource(
            name=name, subset=sub, scene=plan.src_root / s.rel_scene,
            navmesh=None if rel_nav is None else plan.src_root / rel_nav,
            rel_scene=s.rel_scene, rel_navmesh=rel_nav))
    return plan


def plan_listed_files(plan):
    """Fill ``plan`` for a dataset given as explicit scene files (a scene dataset config)."""
    from .plan import SceneSource

    ds = plan.dataset
    subset_of = ds.scene_subsets(plan.split, plan.subsets)
    plan.subsets = tuple(x for x in ("train", "val", "test") if x in set(subset_of.values()))
    plan.selected = (plan.shard or _one()).select(subset_of)
    for name in plan.selected:
        rel_scene, rel_nav = ds.scene_files[name]
        if not (plan.src_root / rel_scene).is_file():
            plan.missing.append((name, subset_of[name]))
            continue
        if rel_nav is not None and not (plan.src_root / rel_nav).is_file():
            rel_nav = None
        plan.scenes.append(SceneSource(
            name=name, subset=subset_of[name], scene=plan.src_root / rel_scene,
            navmesh=None if rel_nav is None else plan.src_root / rel_nav,
            rel_scene=rel_scene, rel_navmesh=rel_nav))
    return plan


def _one():
    from .plan import Shard

    return Shard()
