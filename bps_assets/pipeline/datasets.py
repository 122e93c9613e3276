"""The known datasets (Gibson, Matterport3D, HM3D) as data: ``data_manifests/*.json``.

Each file names a dataset's on-disk layout (habitat's: ``gibson/NAME.glb``,
``mp3d/ID/ID.glb`` or ``hm3d/{split}/{index}-ID/ID.basis.glb``, with the ``.navmesh`` beside
the scene), its splits with their subsets (train / val / test) and per-scene facts (quality,
stats); schema: ``data_manifests/README.md``. Layout templates name up to three fields:
``{scene}`` (the scene id, required), ``{split}`` (a split folder) and ``{index}`` (a number in
the folder name); ``layout.fields`` gives each field's regular expression. A subset of a split
is a list of scene ids, or a rule ``{"folder": F, "index": [LO, HI]}``: every scan under split
folder F whose index is in LO..HI (HM3D ships 1,000 scans nobody can list without the data).

A habitat scene dataset config, or a folder of scans that belongs to no known dataset
(``load_scan_folder``), is a dataset too, of one split ``all``. Where the files are found:
``bps_assets.manifests_location``.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import DatasetError, did_you_mean
from ..json_input import parse_json
from ..manifests_location import ENV_VAR, manifests_dir  # noqa: F401  (ENV_VAR: re-exported)
from ..scene_dataset.config_json import SCENE_DATASET_CONFIG_SUFFIX
from .scene_dataset_config import SPLIT as CONFIG_SPLIT, read_stages

SUBSETS = ("train", "val", "test")
MAX_MANIFEST_BYTES = 64 << 20  # a dataset file is data we ship, but keep reads bounded
FIELDS = ("scene", "split", "index")
DEFAULT_FIELDS = {"scene": r"[^/]+?", "split": r"[^/]+", "index": r"[0-9]+"}
_FIELD_RX = re.compile(r"\{([^{}]*)\}")


def _template_fields(template: str) -> list[str]:
    return _FIELD_RX.findall(template)


@dataclass(frozen=True)
class Layout:
    """Where a scene's files live, relative to a source root: templates with ``{scene}`` (the
    scene id) and optionally ``{split}`` (split folder) and ``{index}`` (index in the folder
    name); ``fields`` overrides a field's regular expression (e.g. ``index``: ``[0-9]{5}``)."""

    scene: str
    navmesh: str
    companions: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()

    @property
    def top(self) -> str:
        """The first path component shared by all scenes (``gibson`` / ``mp3d`` / ``hm3d``)."""
        return self.scene.split("/", 1)[0]

    @property
    def field_names(self) -> set[str]:
        return set(_template_fields(self.scene))

    def field_regex(self, name: str) -> str:
        return dict(self.fields).get(name, DEFAULT_FIELDS[name])

    def _format(self, template: str, scene: str, split, index) -> str:
        if "{split}" in template and split is None or "{index}" in template and index is None:
            raise DatasetError(None, f"layout {template!r} needs the split folder and index of "
                                     f"scene {scene!r}")
        return template.format(scene=scene, split=split, index=index)

    def scene_path(self, scene: str, split: str | None = None, index: str | None = None) -> str:
        return self._format(self.scene, scene, split, index)

    def navmesh_path(self, scene: str, split: str | None = None, index: str | None = None) -> str:
        return self._format(self.navmesh, scene, split, index)

    def companion_paths(self, scene: str, split: str | None = None,
                        index: str | None = None) -> list[str]:
        return [self._format(c, scene, split, index) for c in self.companions]

    def pattern(self, template: str) -> re.Pattern:
        """``template`` as a regular expression over a relative POSIX path: one named group
        per field; a field named twice must repeat the same text."""
        rx, pos, seen = "", 0, set()
        for m in _FIELD_RX.finditer(template):
            rx += re.escape(template[pos:m.start()])
            name = m.group(1)
            rx += f"(?P={name})" if name in seen else f"(?P<{name}>{self.field_regex(name)})"
            seen.add(name)
            pos = m.end()
        return re.compile(rx + re.escape(template[pos:]) + r"\Z")


@dataclass(frozen=True)
class SplitRule:
    """A subset found in the source tree: the scans under split folder ``folder`` whose
    ``{index}`` lies in ``lo..hi`` (inclusive)."""

    folder: str
    lo: int
    hi: int

    def covers(self, folder: str, index: int) -> bool:
        return folder == self.folder and self.lo <= index <= self.hi

    def describe(self, width: int = 5) -> str:
        return f"{self.folder}/ {self.lo:0{width}d}-{self.hi:0{width}d}"


@dataclass(frozen=True)
class Dataset:
    """A dataset description: its scenes, splits and subsets, file layout and up axis (see
    ``load_dataset`` and docs/PIPELINE.md)."""
    name: str
    description: str
    up_axis: str
    layout: Layout
    default_split: str
    splits: dict[str, dict[str, list[str]]]
    scenes: dict[str, dict] = field(repr=False)
    split_descriptions: dict[str, str] = field(default_factory=dict, repr=False)
    path: Path | None = None
    rules: dict[str, dict[str, SplitRule]] = field(default_factory=dict, repr=False)
    # explicit scene files ({name: (scene, navmesh or None)}, relative to the source root),
    # for a dataset described by a habitat scene dataset config rather than a layout
    scene_files: dict[str, tuple[str, str | None]] = field(default_factory=dict, repr=False)

    def _check_split(self, name: str | None) -> str:
        name = self.default_split if name is None else name
        if name not in self.splits:
            raise DatasetError(self.path, f"dataset {self.name!r} has no split {name!r}"
                               f"{_suggest(name, self.splits)}")
        return name

    def discovered(self, name: str | None = None) -> bool:
        """True when split ``name``'s scenes are found in the source tree (index rules)."""
        return bool(self.rules.get(self._check_split(name)))

    def split_rules(self, name: str | None = None) -> dict[str, SplitRule]:
        """``{subset: SplitRule}`` of a discovered split (empty for a listed one)."""
        return dict(self.rules.get(self._check_split(name), {}))

    def all_rules(self) -> list[SplitRule]:
        """Every index rule of every discovered split."""
        return [r for sub in self.rules.values() for r in sub.values()]

    def subset_counts(self, name: str | None = None) -> dict[str, int]:
        """``{subset: scene count}`` of a split; an index rule counts its index range (HM3D
        numbers its scans without gaps)."""
        name = self._check_split(name)
        rules = self.rules.get(name, {})
        return {s: (rules[s].hi - rules[s].lo + 1) if s in rules else len(v)
                for s, v in self.splits[name].items()}

    def split(self, name: str | None = None) -> dict[str, list[str]]:
        """``{subset: [scene, ...]}`` of split ``name`` (default split when None); a discovered
        split lists no scenes here (see ``split_rules``)."""
        name = self._check_split(name)
        return {s: list(v) for s, v in self.splits[name].items() if v}

    def splits_holding(self, names) -> list[tuple[str, int]]:
        """``[(split, how many of names it lists)]`` for the listed splits holding any of
        ``names``, most first, then smallest split first: the split to preprocess them with."""
        names = set(names)
        found = [(s, sum(n in names for v in self.splits[s].values() for n in v)) for s in self.splits
                 if not self.rules.get(s)]
        found = [(s, n) for s, n in found if n]
        return sorted(found, key=lambda x: (-x[1], sum(len(v) for v in self.splits[x[0]].values())))

    def scene_subsets(self, split: str | None = None, subsets=None) -> dict[str, str]:
        """``{scene: subset}`` for the split, limited to ``subsets`` (e.g. ("train", "val"))."""
        out = {}
        for sub, names in self.split(split).items():
            if subsets is not None and sub not in subsets:
                continue
            for n in names:
                out[n] = sub
        return out


def _suggest(name: str, known) -> str:
    known = sorted(known)
    close = did_you_mean(name, known, cutoff=0.5, sep=", ")
    return f" ({close})" if close else f" (known: {', '.join(known)})"


def _parse_layout(path: Path, lay: dict) -> Layout:
    fields = lay.get("fields", {})
    if not isinstance(fields, dict) or set(fields) - set(FIELDS):
        raise DatasetError(path, f"layout.fields: an object over {', '.join(FIELDS)}")
    for k, v in fields.items():
        try:
            if not isinstance(v, str) or re.compile(v).groups:
                raise re.error("a string without groups")
        except re.error as e:
            raise DatasetError(path, f"layout.fields.{k}: bad regular expression {v!r} ({e})") from None
    layout = Layout(lay["scene"], lay["navmesh"], tuple(lay.get("companions", ())),
                    tuple(sorted(fields.items())))
    if "{scene}" not in layout.scene or "/" not in layout.scene or layout.scene.startswith("{"):
        raise DatasetError(path, "layout.scene must be a relative path template with {scene} "
                                 "under a fixed top folder")
    for t in (layout.scene, layout.navmesh, *layout.companions):
        bad = set(_template_fields(t)) - set(FIELDS)
        if bad or not set(_template_fields(t)) <= layout.field_names:
            raise DatasetError(path, f"layout template {t!r}: fields must be among those of "
                                     f"layout.scene ({', '.join(sorted(layout.field_names))})")
    return layout


def _parse_subset(path: Path, split: str, sub: str, v, layout: Layout):
    """A subset entry: a list of ids, or an index rule (``{"folder", "index": [lo, hi]}``)."""
    if isinstance(v, list):
        return list(v), None
    where = f"splits.{split}.{sub}"
    if not isinstance(v, dict) or set(v) != {"folder", "index"}:
        raise DatasetError(path, f"{where}: a list of scene ids or {{\"folder\", \"index\"}}")
    if not {"split", "index"} <= layout.field_names:
        raise DatasetError(path, f"{where}: an index rule needs {{split}} and {{index}} in layout.scene")
    rng = v["index"]
    if not (isinstance(rng, list) and len(rng) == 2 and all(type(x) is int for x in rng)
            and 0 <= rng[0] <= rng[1]):
        raise DatasetError(path, f"{where}.index: [lo, hi] with 0 <= lo <= hi")
    if not isinstance(v["folder"], str) or not re.fullmatch(layout.field_regex("split"), v["folder"]):
        raise DatasetError(path, f"{where}.folder: {v['folder']!r} is not a split folder name")
    return [], SplitRule(v["folder"], rng[0], rng[1])


def _parse(path: Path) -> Dataset:
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise DatasetError(path, "dataset file larger than the 64 MiB cap")
    d = parse_json(path.read_bytes(), path, error=DatasetError, encoding="utf-8")
    try:
        layout = _parse_layout(path, d["layout"])
        splits: dict[str, dict[str, list[str]]] = {}
        rules: dict[str, dict[str, SplitRule]] = {}
        for k, v in d["splits"].items():
            splits[k] = {}
            for sub in SUBSETS:
                ids, rule = _parse_subset(path, k, sub, v.get(sub, []), layout)
                splits[k][sub] = ids
                if rule is not None:
                    rules.setdefault(k, {})[sub] = rule
            if k in rules and any(splits[k].values()):
                raise DatasetError(path, f"split {k!r} mixes scene lists and index rules")
        ds = Dataset(
            name=d["name"], description=d.get("description", ""), up_axis=d.get("up_axis", "z"),
            layout=layout, default_split=d["default_split"], splits=splits,
            scenes=d.get("scenes", {}), split_descriptions=d.get("split_descriptions", {}), path=path,
            rules=rules,
        )
    except (KeyError, TypeError, AttributeError) as e:
        raise DatasetError(path, f"malformed dataset file (missing or wrong field {e})") from None
    if ds.default_split not in ds.splits:
        raise DatasetError(path, f"default_split {ds.default_split!r} is not one of its splits")
    if ds.up_axis not in ("y", "z"):
        raise DatasetError(path, f"up_axis {ds.up_axis!r}: expected y or z")
    return ds


@lru_cache(maxsize=None)
def _load_cached(path: str, mtime_ns: int) -> Dataset:
    return _parse(Path(path))


def list_datasets() -> list[str]:
    """Names of the known datasets (the ``*.json`` files of :func:`manifests_dir`)."""
    return sorted(p.stem for p in manifests_dir().glob("*.json"))


def load_dataset(name: str) -> Dataset:
    """The dataset called ``name``; an unknown name is a DatasetError suggesting known ones.

    A path to a habitat ``*.scene_dataset_config.json`` is a dataset too (its stages:
    ``load_scene_dataset_config``); its name is the config's path. So is ``scans:FOLDER``
    (every scan under FOLDER: ``load_scan_folder``)."""
    if str(name).endswith(SCENE_DATASET_CONFIG_SUFFIX):
        return load_scene_dataset_config(name)
    if str(name).startswith(SCAN_FOLDER_PREFIX):
        return load_scan_folder(str(name)[len(SCAN_FOLDER_PREFIX):])
    d = manifests_dir()
    p = d / f"{name}.json"
    if not name or "/" in name or not p.is_file():
        raise DatasetError(None, f"unknown dataset {name!r}{_suggest(name, list_datasets())}")
    return _load_cached(str(p), p.stat().st_mtime_ns)


SCAN_FOLDER_PREFIX = "scans:"
SCAN_SUFFIXES = (".glb", ".gltf", ".ply", ".obj")


def scan_folder_name(folder: str | os.PathLike) -> str:
    """The dataset name of a folder of scans (``load_dataset`` takes it): ``scans:ABSPATH``."""
    return SCAN_FOLDER_PREFIX + str(Path(folder).expanduser().resolve())


def _scan_paths(root: Path) -> list[str]:
    """Scan files under ``root`` (relative, POSIX), hidden folders skipped. Symlinked folders are
    followed (as a dataset's layout is); one whose target is inside ``root`` or was already
    walked is skipped (its scans are found once, by their real path: no loop, no duplicate)."""
    rels, seen = [], {str(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        keep = []
        for d in sorted(d for d in dirnames if not d.startswith(".")):
            p = Path(dirpath) / d
            real = os.path.realpath(p)
            if p.is_symlink() and (real == str(root) or real.startswith(str(root) + os.sep)) or real in seen:
                continue
            seen.add(real)
            keep.append(d)
        dirnames[:] = keep
        rel_dir = Path(dirpath).relative_to(root)
        rels += [(rel_dir / f).as_posix() for f in sorted(filenames) if f.lower().endswith(SCAN_SUFFIXES)]
    return rels


def scan_names(rels: list[str], root: str | os.PathLike | None = None) -> dict[str, str]:
    """{scene name: scan} for the scans ``rels`` (paths relative to one folder), every scan
    named, each name distinct, by the first rule that gives it a name no other scan takes:
    its file name up to the first dot (habitat's rule); its path less the last extension with
    ``/`` -> ``__`` and ``.`` -> ``_`` (``a/room.glb`` -> ``a__room``); the same with the
    extension (``a__room_glb``). ``DatasetError`` naming both scans when none is left."""
    from ..habitat_names import habitat_scene_name

    rules = (habitat_scene_name,
             lambda r: r.rsplit(".", 1)[0].replace("/", "__").replace(".", "_"),
             lambda r: r.replace("/", "__").replace(".", "_"))
    names: dict[str, str] = {}
    left = list(rels)
    for rule in rules:
        cand = {r: rule(r) for r in left}
        counts = Counter(cand.values())
        for r in list(left):
            n = cand[r]
            if n and counts[n] == 1 and n not in names:
                names[n] = r
                left.remove(r)
    if left:
        r, n = left[0], rules[-1](left[0])
        other = names.get(n) or next(o for o in left if o != r and rules[-1](o) == n)
        raise DatasetError(Path(root or ".") / r, f"no scene name of its own: it and {Path(root or '.') / other} "
                                                  "map to the same names (rename one of them)")
    return names


def load_scan_folder(folder: str | os.PathLike) -> Dataset:
    """Every scan (``SCAN_SUFFIXES``) under ``folder``, at any depth, symlinked folders
    followed (``_scan_paths``), as a ``Dataset`` of one split ``all`` whose scenes are all
    ``train`` (name: ``scan_folder_name``), Y-up (glTF's; ``preprocess --up z`` for Z-up
    scans). Scene names: ``scan_names`` (habitat's file name up to the first dot, the path when
    scans share it). The navmesh is the ``.navmesh`` beside a scan (last extension replaced),
    as habitat finds it."""
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise DatasetError(root, "not a folder of scans")
    rels = _scan_paths(root)
    if not rels:
        raise DatasetError(root, f"no scan ({', '.join(SCAN_SUFFIXES)}) under this folder")
    files = {}
    for name, rel in scan_names(rels, root).items():
        nav = rel.rsplit(".", 1)[0] + ".navmesh"
        files[name] = (rel, nav if (root / nav).is_file() else None)
    return Dataset(
        name=scan_folder_name(root), description=f"every scan under {root}", up_axis="y",
        layout=Layout("./{scene}", "./{scene}.navmesh"), default_split=CONFIG_SPLIT,
        splits={CONFIG_SPLIT: {"train": sorted(files), "val": [], "test": []}},
        scenes={n: {} for n in files}, split_descriptions={CONFIG_SPLIT: "every scan under the folder"},
        path=root, scene_files=files)


def load_scene_dataset_config(config: str | os.PathLike) -> Dataset:
    """The scenes of a habitat scene dataset config as a ``Dataset`` (name: the config's
    absolute path) whose split ``all`` holds every scene as a ``train`` scene: its scene
    instances when it names any (composed scenes, ``scene_dataset.habitat.scene_files``), else
    its stages (``scene_dataset_config`` module); its source root is the config's folder."""
    cfg = Path(config).expanduser().resolve()
    if not cfg.name.endswith(SCENE_DATASET_CONFIG_SUFFIX):
        raise DatasetError(cfg, f"not a habitat scene dataset config (*{SCENE_DATASET_CONFIG_SUFFIX})")
    from ..scene_dataset.habitat import scene_files  # composed: the scene instances are the scenes

    files = scene_files(cfg)
    up = "y"
    if not files:
        files, up = read_stages(cfg)
    return Dataset(
        name=str(cfg), description=f"habitat scene dataset config {cfg.name}", up_axis=up,
        layout=Layout("./{scene}", "./{scene}.navmesh"), default_split=CONFIG_SPLIT,
        splits={CONFIG_SPLIT: {"train": list(files), "val": [], "test": []}},
        scenes={n: {} for n in files}, split_descriptions={CONFIG_SPLIT: "every stage of the config"},
        path=cfg, scene_files=files)
