"""The known datasets (Gibson, Matterport3D) as data: ``data_manifests/*.json``.

Each file names a dataset's on-disk layout (habitat's: ``gibson/NAME.glb`` or
``mp3d/ID/ID.glb`` with the ``.navmesh`` beside the scene), its splits with their subsets
(train / val / test) and per-scene facts (quality, stats). The schema is described in
``data_manifests/README.md``.

Where the files are found, first hit wins:
1. ``$BPS_DATA_MANIFESTS`` (a directory), for a user's own dataset files;
2. ``data_manifests/`` at the repository root (a source checkout / editable install);
3. the copy a wheel installs as data files (``<prefix>/share/bps/data_manifests``), found
   through the installed distribution's file list (any install scheme), else beside the
   prefix or the package (``pip install --target``).
"""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import DatasetError

ENV_VAR = "BPS_DATA_MANIFESTS"
SHARE = "share/bps/data_manifests"  # the wheel's data-files location, under the install prefix
SUBSETS = ("train", "val", "test")
MAX_MANIFEST_BYTES = 64 << 20  # a dataset file is data we ship, but keep reads bounded


def _candidate_dirs() -> list[Path]:
    dirs = []
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env))
    here = Path(__file__).resolve().parents[2]  # the repo root, or the site-packages dir
    dirs.append(here / "data_manifests")
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            dist = distribution("bps")
        except PackageNotFoundError:
            dist = None
        for f in (dist.files or []) if dist is not None else []:
            if f.name.endswith(".json") and f.parent.name == "data_manifests":
                dirs.append(Path(dist.locate_file(f)).resolve().parent)
                break
    except Exception:  # pragma: no cover - metadata of a broken install: fall through
        pass
    # where the data files land when the recorded paths are off (pip install --target)
    import sysconfig

    dirs += [Path(sysconfig.get_path("data")) / SHARE, here / SHARE]
    return dirs


def manifests_dir() -> Path:
    """The directory holding the dataset files (see the module docstring for the order)."""
    for d in _candidate_dirs():
        if d.is_dir() and any(d.glob("*.json")):
            return d
    raise DatasetError(None, "cannot find data_manifests/ (set $BPS_DATA_MANIFESTS to a directory "
                             "of dataset files, or reinstall bps)")


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
