"""The known datasets (Gibson, Matterport3D) as data: ``data_manifests/*.json``.

Each file names a dataset's on-disk layout (habitat's: ``gibson/NAME.glb`` or
``mp3d/ID/ID.glb`` with the ``.navmesh`` beside the scene), its splits with their subsets
(train / val / test) and per-scene facts (quality, stats). The schema is described in
``data_manifests/README.md``.

Where the files are found: ``bps_assets.manifests_location``.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import DatasetError
from ..manifests_location import ENV_VAR, manifests_dir  # noqa: F401  (ENV_VAR: re-exported)

SUBSETS = ("train", "val", "test")
MAX_MANIFEST_BYTES = 64 << 20  # a dataset file is data we ship, but keep reads bounded


@dataclass(frozen=True)
class Layout:
    """Where a scene's files live, relative to a source root (``{scene}`` is the scene id)."""

    scene: str
    navmesh: str
    companions: tuple[str, ...] = ()

    @property
    def top(self) -> str:
        """The first path component shared by all scenes (``gibson`` / ``mp3d``)."""
        return self.scene.split("/", 1)[0]

    def scene_path(self, scene: str) -> str:
        return self.scene.format(scene=scene)

    def navmesh_path(self, scene: str) -> str:
        return self.navmesh.format(scene=scene)

    def companion_paths(self, scene: str) -> list[str]:
        return [c.format(scene=scene) for c in self.companions]


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    up_axis: str
    layout: Layout
    default_split: str
    splits: dict[str, dict[str, list[str]]]
    scenes: dict[str, dict] = field(repr=False)
    split_descriptions: dict[str, str] = field(default_factory=dict, repr=False)
    path: Path | None = None

    def split(self, name: str | None = None) -> dict[str, list[str]]:
        """``{subset: [scene, ...]}`` of split ``name`` (default split when None)."""
        name = self.default_split if name is None else name
        if name not in self.splits:
            raise DatasetError(self.path, f"dataset {self.name!r} has no split {name!r}"
                               f"{_suggest(name, self.splits)}")
        return {s: list(v) for s, v in self.splits[name].items() if v}

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
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:
        return f" (did you mean {', '.join(repr(c) for c in close)}?)"
    return f" (known: {', '.join(known)})"


def _parse(path: Path) -> Dataset:
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise DatasetError(path, "dataset file larger than the 64 MiB cap")
    try:
        d = json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(path, f"not valid JSON: {e}") from None
    try:
        lay = d["layout"]
        layout = Layout(lay["scene"], lay["navmesh"], tuple(lay.get("companions", ())))
        if "{scene}" not in layout.scene or "/" not in layout.scene:
            raise DatasetError(path, "layout.scene must be a relative path template with {scene}")
        splits = {k: {s: list(v.get(s, [])) for s in SUBSETS} for k, v in d["splits"].items()}
        ds = Dataset(
            name=d["name"], description=d.get("description", ""), up_axis=d.get("up_axis", "z"),
            layout=layout, default_split=d["default_split"], splits=splits,
            scenes=d.get("scenes", {}), split_descriptions=d.get("split_descriptions", {}), path=path,
        )
    except (KeyError, TypeError, AttributeError) as e:
        raise DatasetError(path, f"malformed dataset file (missing or wrong field {e})") from None
    if ds.default_split not in ds.splits:
        raise DatasetError(path, f"default_split {ds.default_split!r} is not one of its splits")
    return ds


@lru_cache(maxsize=None)
def _load_cached(path: str, mtime_ns: int) -> Dataset:
    return _parse(Path(path))


def list_datasets() -> list[str]:
    """Names of the known datasets (the ``*.json`` files of :func:`manifests_dir`)."""
    return sorted(p.stem for p in manifests_dir().glob("*.json"))


def load_dataset(name: str) -> Dataset:
    """The dataset called ``name``; an unknown name is a DatasetError suggesting known ones."""
    d = manifests_dir()
    p = d / f"{name}.json"
    if not name or "/" in name or not p.is_file():
        raise DatasetError(None, f"unknown dataset {name!r}{_suggest(name, list_datasets())}")
    return _load_cached(str(p), p.stat().st_mtime_ns)
