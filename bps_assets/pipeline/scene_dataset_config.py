"""A habitat scene dataset config (``*.scene_dataset_config.json``) as a source description.

habitat-sim's config names its stages under ``stages.paths``: per file extension, glob patterns
or folders relative to the config file (``".glb": ["*/*.basis.glb"]``); ``.json`` entries name
stage configs (``*.stage_config.json``, whose ``render_asset`` is relative to them).
``stages.default_attributes.up`` gives the up axis (habitat's default is Y). A stage's navmesh:
``navmesh_instances[handle]`` when the handle is the stage's name, else the file beside the
stage with its last extension replaced (``X.basis.glb`` -> ``X.basis.navmesh``), as habitat-sim
looks for it. Only stages are read (objects, articulated objects, lighting and scene instances
are ignored), so stage-only datasets (HM3D, Gibson, MP3D, habitat test scenes) preprocess
without a ``data_manifests`` entry. Scene names are habitat's ``scene_from_scene_path`` (file
name up to the first dot, also the episode content file's name); two stages with one name are
an error. Every scene is in split ``all``, subset ``train``; ``datasets.load_dataset(PATH)``
makes the ``Dataset``, named by the config's absolute path so worker processes find it again.
"""
from __future__ import annotations

import functools
import glob
import os
from pathlib import Path

from ..errors import DatasetError, InputError, ResourceLimitError
from ..habitat_names import habitat_scene_name
from ..scene_dataset.config_json import SCENE_DATASET_CONFIG_SUFFIX, SUFFIX, load_json

SPLIT = "all"
UP_AXES = {(0, 1, 0): "y", (0, 0, 1): "z"}


def _read_json(path: Path) -> dict:
    """A config or stage config through ``config_json.load_json`` (the one capped reader); a
    file it cannot read is a DatasetError here too: without it the dataset has no scenes. A file
    over the cap is the reader's own ResourceLimitError (the file, its cap), as in ``habitat``."""
    try:
        return load_json(path, prefix="not a readable JSON file", encoding="utf-8")
    except ResourceLimitError:
        raise
    except InputError as e:
        raise DatasetError(path, e.detail if e.detail == "no such file"
                           else f"not a readable JSON file: {e.detail}") from None


def _inside(base: Path, p: Path, cfg: Path, what: str) -> str:
    """``p`` relative to ``base`` as a POSIX path; a path leaving ``base`` is an error."""
    try:
        return p.resolve().relative_to(base).as_posix()
    except ValueError:
        raise DatasetError(cfg, f"{what} {p} is outside the config's folder {base}") from None


def _expand(base: Path, pattern: str, ext: str, cfg: Path) -> list[Path]:
    """A ``paths`` entry: a folder (its files ending in ``ext``) or a glob pattern."""
    if not isinstance(pattern, str) or not pattern or os.path.isabs(pattern):
        raise DatasetError(cfg, f"stages.paths[{ext!r}]: {pattern!r} is not a relative path or pattern")
    full = base / pattern
    if full.is_dir():
        return sorted(p for p in full.iterdir() if p.is_file() and p.name.endswith(ext))
    return sorted(Path(p) for p in glob.glob(str(full), recursive=True)
                  if os.path.isfile(p) and p.endswith(ext))


def _up_axis(attrs, where: Path, default: str) -> str:
    up = attrs.get("up") if isinstance(attrs, dict) else None
    if up is None:
        return default
    try:
        return UP_AXES[tuple(int(x) if float(x) == int(x) else x for x in up)]
    except (KeyError, TypeError, ValueError, OverflowError):  # int(inf): OverflowError
        raise DatasetError(where, f"up {up!r}: only [0,1,0] (Y-up) and [0,0,1] (Z-up) stages "
                                  f"are supported") from None


def read_stages(config: str | os.PathLike, semantic: dict | None = None
                ) -> tuple[dict[str, tuple[str, str | None]], str]:
    """``({name: (stage, navmesh or None)}, up_axis)`` of a scene dataset config; paths are
    POSIX paths relative to the config's folder. No stage at all is an error. ``semantic``: a
    dict that receives ``{name: (semantic_asset, semantic_descriptor_filename)}`` of the stage
    configs naming both (habitat-sim's StageAttributes keys; ``house_filename`` is the older
    name of the second), paths relative to the config's folder."""
    cfg = Path(config).expanduser().resolve()
    base = cfg.parent
    d = _read_json(cfg)
    stages = d.get("stages", {})
    paths = stages.get("paths", {}) if isinstance(stages, dict) else None
    if not isinstance(paths, dict):
        raise DatasetError(cfg, "stages.paths must be an object {extension: [patterns]}")
    up = _up_axis(stages.get("default_attributes"), cfg, "y")
    renders: list[Path] = []
    for ext, patterns in paths.items():
        if not isinstance(patterns, list):
            raise DatasetError(cfg, f"stages.paths[{ext!r}] must be a list")
        for pat in patterns:
            if ext == ".json":  # stage configs: their render_asset is the scene
                for sc in _expand(base, pat, SUFFIX["stages"], cfg):
                    sd = _read_json(sc)
                    asset = sd.get("render_asset")
                    if not isinstance(asset, str) or not asset:
                        raise DatasetError(sc, "stage config without a render_asset")
                    if _up_axis(sd, sc, up) != up:
                        raise DatasetError(sc, "a stage with another up axis than the dataset's")
                    renders.append(sc.parent / asset)
                    desc = sd.get("semantic_descriptor_filename", sd.get("house_filename"))
                    if semantic is not None and isinstance(sd.get("semantic_asset"), str) and isinstance(desc, str):
                        semantic[habitat_scene_name(asset)] = (
                            _inside(base, sc.parent / sd["semantic_asset"], sc, "semantic_asset"),
                            _inside(base, sc.parent / desc, sc, "semantic_descriptor_filename"))
            else:
                renders += _expand(base, pat, ext, cfg)
    instances = d.get("navmesh_instances", {})
    if not isinstance(instances, dict):
        raise DatasetError(cfg, "navmesh_instances must be an object {handle: path}")
    out: dict[str, tuple[str, str | None]] = {}
    for r in renders:
        rel = _inside(base, r, cfg, "stage")
        name = habitat_scene_name(rel)
        if not name:
            raise DatasetError(cfg, f"stage {rel}: no name (file name starts with a dot)")
        if name in out and out[name][0] != rel:
            raise DatasetError(cfg, f"two stages named {name!r}: {out[name][0]} and {rel}")
        nav = instances.get(name)
        if isinstance(nav, str) and nav:
            nav_rel = _inside(base, base / nav, cfg, f"navmesh_instances[{name!r}]")
        else:
            nav_rel = _inside(base, Path(os.path.splitext(str(base / rel))[0] + ".navmesh"), cfg, "navmesh")
        out[name] = (rel, nav_rel)
    if not out:
        raise DatasetError(cfg, "names no stage files (stages.paths matched nothing)")
    return dict(sorted(out.items())), up


@functools.lru_cache(maxsize=4)
def _named_semantics(config: str, _mtime_ns: int, _size: int) -> dict:
    """The annotation pairs a scene dataset config's stage configs name, read once per process
    and config version (preprocess asks once per scene: one read, not one per scene)."""
    named: dict = {}
    read_stages(config, named)
    return named


def semantic_for(scene: str | os.PathLike, dataset_name: str):
    """The annotation pair of ``scene`` (a ``SemanticSource``) or None: the files a scene
    dataset config's stage config names, else the pair habitat finds beside the scan."""
    from ..readers.semantic_files import SemanticSource, find_semantic

    if str(dataset_name).endswith(SCENE_DATASET_CONFIG_SUFFIX):
        st = os.stat(dataset_name)
        pair = _named_semantics(str(Path(dataset_name).resolve()), st.st_mtime_ns, st.st_size).get(habitat_scene_name(scene))
        if pair is not None:
            base = source_root(dataset_name)
            mesh, table = (str(base / p) for p in pair)
            fmt = "mp3d" if mesh.endswith(".ply") else "hm3d"
            return SemanticSource(fmt, mesh, table)
    return find_semantic(scene)


def source_root(config: str | os.PathLike) -> Path:
    """The folder a config's paths are relative to (the source root to preprocess)."""
    return Path(config).expanduser().resolve().parent
