"""Which scenes of a split are under a source root, and which of them this shard processes.

A source root is the directory holding the dataset's layout, habitat-style (e.g.
``data/scene_datasets`` with ``gibson/Adrian.glb`` and ``gibson/Adrian.navmesh`` inside), or the
layout directory itself (``.../gibson``). Every file under the layout's top directory is
classified: a scene of the split (with its navmesh and companions), a known scene of another
split (``other_split``: not processed, not a problem), a scene-shaped file whose id the dataset
does not know (``unknown``), or anything else (``stray``); split scenes without their scene file
are ``missing``. Shards: ``Shard(i, n)`` takes every n-th scene, from the i-th, of the split's
scene list sorted by name. The list comes from ``data_manifests`` (not from the files found), so
every node computes the same partition whatever its view of the tree; shards differ in size by
at most one scene. Datasets whose scenes are found rather than listed (index-rule splits such as
HM3D's, habitat scene dataset configs) are planned by ``discover``; their partition is over the
scans found, so all nodes must see the same tree.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, DatasetError
from .datasets import Dataset, Layout
from .discover import discover_split, listed_files


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based, as SLURM_ARRAY_TASK_ID with --array=0-N-1)."""

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ConfigError(None, f"bad shard {self.index}/{self.count}: need 0 <= I < N")

    @classmethod
    def parse(cls, text: str | None) -> "Shard | None":
        """A shard from ``I/N`` or ``slurm`` (this SLURM array task); None for None. ConfigError on
        anything else, or for ``slurm`` outside a job array."""
        if text is None:
            return None
        if text.strip().lower() == "slurm":  # this SLURM array task (any --array=A-B range)
            env = os.environ
            try:
                i, lo = int(env["SLURM_ARRAY_TASK_ID"]), int(env.get("SLURM_ARRAY_TASK_MIN", 0))
                n = int(env["SLURM_ARRAY_TASK_COUNT"])
            except (KeyError, ValueError):
                raise ConfigError(None, "--shard slurm: not inside a SLURM job array "
                                        "(SLURM_ARRAY_TASK_ID / _COUNT unset)") from None
            return cls(i - lo, n)
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not m:
            raise ConfigError(None, f"bad --shard {text!r}: expected I/N, e.g. 0/8 (I from 0 to N-1)")
        return cls(int(m.group(1)), int(m.group(2)))

    def select(self, names) -> list[str]:
        """This shard's share of ``names``: every N-th name of the sorted list, from index I."""
        return sorted(names)[self.index::self.count]

    def __str__(self):
        return f"{self.index}/{self.count}"


@dataclass
class SceneSource:
    """One scene found under the source root. Paths are absolute; ``rel_*`` are POSIX paths
    relative to the source root (what the manifest records)."""

    name: str
    subset: str
    scene: Path
    navmesh: Path | None
    rel_scene: str
    rel_navmesh: str | None

    @property
    def root(self) -> Path:
        """The source root (``scene`` without its ``rel_scene`` part)."""
        return self.scene.parents[len(Path(self.rel_scene).parts) - 1]


@dataclass
class Plan:
    """What one preprocessing run will do: the split's scenes in this shard, the ones found
    under the source root, and what was missing, of another split, unknown or stray."""
    dataset: Dataset
    split: str
    src_root: Path
    shard: Shard | None
    subsets: tuple[str, ...]
    selected: list[str] = field(default_factory=list)          # split scenes in this shard
    scenes: list[SceneSource] = field(default_factory=list)    # ... whose scene file exists
    missing: list[tuple[str, str]] = field(default_factory=list)  # (scene, subset)
    other_split: list[str] = field(default_factory=list)       # known scenes of other splits
    unknown: list[str] = field(default_factory=list)           # rel paths, ids not in the dataset
    stray: list[str] = field(default_factory=list)             # rel paths matching no pattern
    held: dict[str, str] = field(default_factory=dict)         # {scene: subset}, every shard, file found

    @property
    def subset_of(self) -> dict[str, str]:
        """``{scene: subset}`` for the planned split and subsets."""
        return self.dataset.scene_subsets(self.split, self.subsets)


def _classifier(layout: Layout):
    # companions first: gibson/{scene}.glb also matches the annotation gibson/X.semantic.glb
    # (as scene 'X.semantic'), which is scene X's companion
    pats = [("companion", layout.pattern(c)) for c in layout.companions]
    pats += [("scene", layout.pattern(layout.scene)), ("navmesh", layout.pattern(layout.navmesh))]

    def classify(rel: str):
        for role, p in pats:
            m = p.match(rel)
            if m:
                return role, m.group("scene")
        return None, None

    return classify


def resolve_root(src_root: str | os.PathLike, layout: Layout) -> Path:
    """The directory that holds ``layout.top``; accepts that directory or the top one itself."""
    root = Path(src_root).expanduser()
    if not root.is_dir():
        raise DatasetError(root, "source root is not a directory")
    if (root / layout.top).is_dir():
        return root.resolve()
    if root.resolve().name == layout.top:
        return root.resolve().parent
    raise DatasetError(root, f"no {layout.top}/ directory here (expected the habitat layout "
                             f"{layout.scene}, e.g. data/scene_datasets)")


def scan(root: Path, layout: Layout) -> list[str]:
    """Every file below ``root/layout.top`` as a POSIX path relative to ``root``, sorted."""
    out = []
    top = root / layout.top
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        out.extend(f"{rel_dir}/{f}" for f in filenames)
    return sorted(out)


def make_plan(src_root, dataset: Dataset, split: str | None = None, shard: Shard | None = None,
              subsets=None) -> Plan:
    """Find the scenes of ``split`` (optionally one shard, optionally some subsets) under
    ``src_root``. Never raises for missing or extra files: they are listed in the Plan (but a
    scan-like file outside an index-rule layout, e.g. HM3D's, is a DatasetError: ``discover``)."""
    split = dataset.default_split if split is None else split
    if dataset.discovered(split) or dataset.scene_files:  # scenes found, not listed (HM3D, configs)
        return _plan_found(src_root, dataset, split, shard, subsets)
    subset_of = dataset.scene_subsets(split, subsets)  # raises on an unknown split
    subsets = tuple(s for s in ("train", "val", "test") if s in set(subset_of.values()))
    root = resolve_root(src_root, dataset.layout)
    plan = Plan(dataset, split, root, shard, subsets)
    plan.selected = (shard or Shard()).select(subset_of)

    classify = _classifier(dataset.layout)
    present: dict[str, set[str]] = {}
    other, unknown = set(), []
    for rel in scan(root, dataset.layout):
        role, name = classify(rel)
        if role is None:
            plan.stray.append(rel)
        elif name not in dataset.scenes and name not in subset_of:
            unknown.append(rel)
        elif name not in subset_of:
            other.add(name)
        else:
            present.setdefault(name, set()).add(role)
    plan.held = {n: subset_of[n] for n, roles in present.items() if "scene" in roles}
    plan.other_split = sorted(other)
    plan.unknown = unknown

    lay = dataset.layout
    for name in plan.selected:
        roles = present.get(name, set())
        if "scene" not in roles:
            plan.missing.append((name, subset_of[name]))
            continue
        rel_nav = lay.navmesh_path(name) if "navmesh" in roles else None
        plan.scenes.append(SceneSource(
            name=name, subset=subset_of[name], scene=root / lay.scene_path(name),
            navmesh=None if rel_nav is None else root / rel_nav,
            rel_scene=lay.scene_path(name), rel_navmesh=rel_nav,
        ))
    # a scene only in another shard is neither missing nor processed here
    return plan


def _plan_found(src_root, dataset: Dataset, split: str, shard: Shard | None, subsets) -> Plan:
    """make_plan for scenes found in the tree (index rules) or named by a scene dataset
    config: the scene list is what is there (``discover``)."""
    root = resolve_root(src_root, dataset.layout)
    if dataset.scene_files:
        found = listed_files(dataset, split, root, subsets)
    else:
        found = discover_split(dataset, split, scan(root, dataset.layout), subsets, root)
    plan = Plan(dataset, split, root, shard, found.subsets, other_split=found.other_split,
                stray=found.stray, missing=found.missing)
    plan.selected = (shard or Shard()).select(list(found.scenes) + [n for n, _ in found.missing])
    plan.held = {n: sub for n, (sub, _, _) in found.scenes.items()}
    for name in plan.selected:
        if name not in found.scenes:
            continue
        sub, rel_scene, rel_nav = found.scenes[name]
        plan.scenes.append(SceneSource(
            name=name, subset=sub, scene=root / rel_scene,
            navmesh=None if rel_nav is None else root / rel_nav,
            rel_scene=rel_scene, rel_navmesh=rel_nav))
    plan.missing = [(n, s) for n, s in found.missing if n in set(plan.selected)]
    return plan
