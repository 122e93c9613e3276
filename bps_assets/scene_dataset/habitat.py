"""Read a habitat scene dataset config and its scene instances into ``ComposedScene`` objects.

Rules (read in habitat-sim's esp/metadata managers, physics/PhysicsManager.cpp, RigidObject.cpp,
sim/Simulator.cpp; written out in docs/PIPELINE.md "Composed scenes"): templates from each
section's ``paths`` / ``configs`` / ``default_attributes`` (paths relative to the file naming
them), looked up by handle, name, path, then substring; a rigid object oriented by ``up`` /
``front``, scaled (config x uniform x non-uniform), its origin moved to ``-scale x COM`` or its
box centre, placed by ``translation`` (that point, or the asset origin when COM-corrected:
``asset_local``) and ``rotation`` [w, x, y, z]; the stage oriented and scaled at the origin; an
articulated object's links posed by ``urdf``; unset ``motion_type``: DYNAMIC (as Bullet creates
objects); semantic id from the config, category from the dataset's lexicon (else the config's
``category``). Every missing template / stage / render asset / URDF / URDF mesh of a scene is
one ``MissingAssetsError`` (or dropped into ``scene.skipped``); NaN / inf / mistyped values,
zero scales, more than ``MAX_INSTANCES`` instances (counted before parsing, links before placing)
and URDF cycles are DatasetErrors. Lighting, physics, ``units_to_meters``, stage ``origin``: ignored.
"""
from __future__ import annotations

import functools
import glob
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..composed_section import MAX_INSTANCES, MOTION_TYPES
from ..errors import DatasetError, InputError, is_real
from ..habitat_names import habitat_scene_name
from .model import ComposedScene, Instance, affine, frame_matrix, quat_wxyz_matrix
from . import urdf as _urdf
from .config_json import SUFFIX, load_json, read_capped

SCENE_INSTANCE_SUFFIX = SUFFIX["scene_instances"]
HABITAT_UP, HABITAT_FRONT = (0.0, 1.0, 0.0), (0.0, 0.0, -1.0)


class MissingAssetsError(DatasetError):
    """Files or templates a scene instance needs are missing; ``missing`` lists every one as
    ``{"scene", "instance", "template", "kind", "missing"}``."""

    def __init__(self, path, missing: list[dict]):
        self.missing = missing
        shown = "; ".join(f"{m['instance']}: {m['kind']} {m['missing']}" for m in missing[:20])
        more = f" (and {len(missing) - 20} more)" if len(missing) > 20 else ""
        super().__init__(path, f"{len(missing)} missing asset(s): {shown}{more} "
                               f"(--skip-missing-assets drops those instances)")


@dataclass
class Template:
    """One template: its handle (config path or name), short name, attributes and the folder
    its relative paths resolve against."""

    handle: str
    name: str
    attrs: dict
    base: Path


@dataclass
class DatasetConfig:
    """A scene dataset config's templates and named instances (paths absolute)."""

    path: Path
    stages: dict[str, Template] = field(default_factory=dict)
    objects: dict[str, Template] = field(default_factory=dict)
    articulated: dict[str, Template] = field(default_factory=dict)
    scenes: dict[str, Path] = field(default_factory=dict)
    scene_defaults: dict = field(default_factory=dict)
    navmeshes: dict[str, Path] = field(default_factory=dict)
    semantic_descriptors: dict[str, Path] = field(default_factory=dict)
    urdfs: dict[Path, "_urdf.Urdf"] = field(default_factory=dict, repr=False)

    def urdf(self, path: Path) -> "_urdf.Urdf":
        """``urdf.read_urdf(path)``, parsed once per resolved path for this dataset read."""
        key = Path(path).resolve()
        if key not in self.urdfs:
            self.urdfs[key] = _urdf.read_urdf(path)
        return self.urdfs[key]

    def lookup(self, table: dict[str, Template], name: str) -> Template | None:
        """habitat's lookup: exact handle, short name, path (relative to the config), substring."""
        if not name:
            return None
        if name in table:
            return table[name]
        by_name = [t for t in table.values() if t.name == name]
        if by_name:
            return by_name[0]
        p = os.path.normpath(self.path.parent / name)
        for t in table.values():
            if t.handle == p or os.path.splitext(t.handle)[0] == p or t.handle.startswith(p + "."):
                return t
        hits = sorted((h for h in table if name in h), key=lambda h: (len(h), h))
        return table[hits[0]] if hits else None

    def lexicon(self) -> dict[int, str]:
        """{semantic id: category} of the first semantic lexicon (``classes: [{name, id}]``)."""
        return _lexicon(tuple(str(p) for p in self.semantic_descriptors.values()))


@functools.lru_cache(maxsize=8)
def _lexicon(paths: tuple[str, ...]) -> dict[int, str]:
    for p in paths:
        try:
            d = load_json(Path(p))
        except (DatasetError, InputError):   # a missing / bad lexicon: categories from the configs
            continue
        classes = d.get("classes")
        if isinstance(classes, list):
            return {int(c["id"]): str(c["name"]) for c in classes
                    if isinstance(c, dict) and isinstance(c.get("id"), int) and "name" in c}
    return {}


def _expand(base: Path, pattern: str, suffix: str, cfg: Path) -> list[Path]:
    if not isinstance(pattern, str) or not pattern or os.path.isabs(pattern):
        raise DatasetError(cfg, f"paths: {pattern!r} is not a relative path or pattern")
    hits = [Path(p) for p in glob.glob(str(base / pattern), recursive=True)]
    out = []
    for h in hits:
        if h.is_dir():
            out += [p for p in h.iterdir() if p.is_file() and p.name.endswith(suffix)]
        elif h.is_file() and h.name.endswith(suffix):
            out.append(h)
    return sorted(set(out))


def _template(path: Path, overrides: dict, defaults: dict, cfg_dir: Path, name: str | None = None) -> Template:
    attrs = load_json(path) if path.suffix == ".json" else {"render_asset": path.name}
    merged = {**defaults, **attrs}
    base = path.parent
    for k, v in overrides.items():  # dataset-config overrides: paths relative to the dataset config
        merged[k] = str(cfg_dir / v) if k in ("render_asset", "urdf_filepath") and isinstance(v, str) else v
    short = path.name.split(".", 1)[0] if path.suffix == ".json" else path.name
    return Template(str(path), name or short, merged, base)


def read_dataset_config(config: str | os.PathLike) -> DatasetConfig:
    """Parse a ``*.scene_dataset_config.json`` (templates of every kind, scene instances, named
    navmeshes and semantic descriptors)."""
    cfg = Path(config).expanduser().resolve()
    d = load_json(cfg)
    base = cfg.parent
    out = DatasetConfig(cfg)
    for kind, table in (("stages", out.stages), ("objects", out.objects), ("articulated_objects", out.articulated)):
        sec = d.get(kind, {})
        if not isinstance(sec, dict):
            raise DatasetError(cfg, f"{kind} must be an object")
        defaults = sec.get("default_attributes", {}) if isinstance(sec.get("default_attributes"), dict) else {}
        for ext, pats in (sec.get("paths") or {}).items():
            if not isinstance(pats, list):
                raise DatasetError(cfg, f"{kind}.paths[{ext!r}] must be a list")
            suffix = SUFFIX[kind] if ext == ".json" else ext
            for pat in pats:
                for p in _expand(base, pat, suffix, cfg):
                    t = _template(p, {}, defaults, base)
                    if kind == "articulated_objects" and ext == ".json" and "urdf_filepath" not in t.attrs:
                        continue  # such an ao config only adds user data to the URDF of its name
                    if kind == "articulated_objects":
                        t.attrs.setdefault("urdf_filepath", p.name)
                    table[t.handle] = t
        for i, c in enumerate(sec.get("configs") or []):
            if not isinstance(c, dict) or not isinstance(c.get("template_handle", c.get("original_file")), str):
                raise DatasetError(cfg, f"{kind}.configs[{i}]: needs template_handle or original_file")
            attrs = c.get("attributes", {}) if isinstance(c.get("attributes"), dict) else {}
            handle = c.get("template_handle") or c["original_file"]
            if isinstance(c.get("original_file"), str):
                t = _template(base / c["original_file"], attrs, defaults, base, name=handle)
            else:
                merged = {**defaults, **{k: (str(base / v) if k in ("render_asset", "urdf_filepath") and isinstance(v, str) else v)
                                         for k, v in attrs.items()}}
                t = Template(handle, handle, merged, base)
            table[handle] = t
    si = d.get("scene_instances", {}) if isinstance(d.get("scene_instances"), dict) else {}
    out.scene_defaults = si.get("default_attributes", {}) if isinstance(si.get("default_attributes"), dict) else {}
    for ext, pats in (si.get("paths") or {}).items():
        for pat in pats if isinstance(pats, list) else []:
            for p in _expand(base, pat, SCENE_INSTANCE_SUFFIX, cfg):
                name = habitat_scene_name(p.name)
                if name in out.scenes and out.scenes[name] != p:
                    raise DatasetError(cfg, f"two scene instances named {name!r}: {out.scenes[name]} and {p}")
                out.scenes[name] = p
    nav = d.get("navmesh_instances", {})
    for k, v in (nav.items() if isinstance(nav, dict) else ()):
        if isinstance(v, str) and k != "paths":
            out.navmeshes[k] = Path(os.path.normpath(base / v))
    ssd = d.get("semantic_scene_descriptor_instances", {})
    for k, v in (ssd.items() if isinstance(ssd, dict) else ()):
        if isinstance(v, str):
            out.semantic_descriptors[k] = Path(os.path.normpath(base / v))
    out.scenes = dict(sorted(out.scenes.items()))
    return out


# ------------------------------------------------------------------------------ values

def _vec(inst: dict, key: str, n: int, default, where: str, path: Path) -> np.ndarray:
    v = inst.get(key, default)
    try:
        a = np.array(v, np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):   # OverflowError: an int beyond float range
        raise DatasetError(path, f"{where}: {key} {v!r} is not {n} numbers") from None
    if a.shape != (n,):
        raise DatasetError(path, f"{where}: {key} {v!r} is not {n} numbers")
    if not np.isfinite(a).all():
        raise DatasetError(path, f"{where}: {key} {v!r} is not finite")
    return a


def _scale(inst: dict, where: str, path: Path) -> np.ndarray:
    s = float(_vec(inst, "uniform_scale", 1, [1.0], where, path)[0])
    ns = _vec(inst, "non_uniform_scale", 3, [1.0, 1.0, 1.0], where, path)
    out = s * ns
    if (out == 0).any():
        raise DatasetError(path, f"{where}: zero scale (uniform_scale {s:g}, non_uniform_scale {ns.tolist()})")
    return out


def _rotation(inst: dict, where: str, path: Path) -> np.ndarray:
    q = _vec(inst, "rotation", 4, [1.0, 0.0, 0.0, 0.0], where, path)
    if not np.linalg.norm(q) > 1e-8:
        raise DatasetError(path, f"{where}: rotation {q.tolist()} is not a quaternion (norm 0)")
    return quat_wxyz_matrix(q)


def _orientation(attrs: dict, where: str, path: Path) -> np.ndarray:
    up = _vec(attrs, "up", 3, HABITAT_UP, where, path)
    front = _vec(attrs, "front", 3, HABITAT_FRONT, where, path)
    if abs(float(np.dot(up, front))) > 1e-6 or not np.linalg.norm(up) or not np.linalg.norm(front):
        raise DatasetError(path, f"{where}: up {up.tolist()} and front {front.tolist()} are not orthogonal")
    return frame_matrix(up, front)


def _semantic_id(t: Template, where: str, path: Path) -> int:
    """A template's ``semantic_id``: a whole number in 0..2^31-1 (stored as int32), else a DatasetError."""
    v = t.attrs.get("semantic_id", 0)
    if v is None:
        return 0
    if not is_real(v) or not 0 <= v < 2**31 or int(v) != v:
        raise DatasetError(path, f"{where}: template {t.name} semantic_id {v!r} is not a whole number in 0..2^31-1 "
                                 f"({t.handle})")
    return int(v)


def _motion(inst: dict, default: str) -> str:
    m = str(inst.get("motion_type", default) or default).upper()
    return m if m in MOTION_TYPES else default


def _asset_path(t: Template, key: str = "render_asset") -> Path | None:
    v = t.attrs.get(key)
    return Path(os.path.normpath(t.base / v)) if isinstance(v, str) and v else None


@functools.lru_cache(maxsize=1024)
def asset_bounds(path: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(min, max) of a render asset's vertices in its own coordinates (cached per process)."""
    from ..readers import load

    lo, hi = load(path).bounds()
    return tuple(float(x) for x in lo), tuple(float(x) for x in hi)


def _key(path: Path, root: Path) -> str:
    """A file-name-safe id of an asset: its path relative to the dataset config's folder."""
    p = Path(os.path.normpath(path))
    try:
        rel = p.relative_to(root).as_posix()
    except ValueError:
        rel = p.as_posix().lstrip("/")
    return rel.replace("../", "up__").replace("/", "__")


def _entries(d: dict, key: str, path: Path) -> list[tuple[int, str, dict, str]]:
    """``[(index, where, entry, template_name)]`` of one instance list of a scene instance."""
    items = d.get(key) or []
    if not isinstance(items, list):
        raise DatasetError(path, f"{key} must be a list")
    out = []
    for i, inst in enumerate(items):
        if not isinstance(inst, dict):
            raise DatasetError(path, f"{key}[{i}]: not an object")
        out.append((i, f"{key}[{i}]", inst, str(inst.get("template_name", ""))))
    return out


def _template_file(ds: DatasetConfig, table, tname: str, key: str, what: str, where: str, miss, inputs: set):
    """(template, its file) or (template or None, None) after reporting what is missing."""
    t = ds.lookup(table, tname)
    f = _asset_path(t, key) if t else None
    if t is not None and Path(t.handle).is_file() and Path(t.handle).suffix == ".json":
        inputs.add(Path(t.handle))
    if t is None:
        miss(f"{where} {tname}", tname, what, tname)
    elif f is None or not f.is_file():
        miss(f"{where} {tname}", tname, {"render_asset": "render_asset", "urdf_filepath": "URDF"}[key], f)
        f = None
    return t, f


def read_scene_instance(ds: DatasetConfig, name: str, skip_missing: bool = False,
                        bounds=asset_bounds) -> ComposedScene:
    """The scene instance ``name`` of ``ds`` resolved (module docstring). ``bounds(path)``
    gives an asset's box (for objects whose config gives no ``COM``)."""
    path = ds.scenes.get(name)
    if path is None:
        raise DatasetError(ds.path, f"no scene instance named {name!r}")
    raw = read_capped(path)
    # before parsing: a huge file costs its bytes, not its objects (every instance names a
    # template; an entry may hold up to 3 nested objects, e.g. user_defined)
    n, objs = raw.count(b'"template_name"'), raw.count(b"{")
    if n > MAX_INSTANCES or objs > 4 * MAX_INSTANCES:
        raise DatasetError(path, f"{max(n, objs // 4)} instances exceed the cap of {MAX_INSTANCES} per scene")
    d = load_json(path, raw)
    root = ds.path.parent
    sc = ComposedScene(name, path)
    missing: list[dict] = []
    inputs: set[Path] = {ds.path}
    lex = ds.lexicon()
    scene_origin = str(d.get("translation_origin", "")).lower()

    def miss(where, template, kind, what):
        missing.append({"scene": name, "instance": where, "template": template, "kind": kind, "missing": str(what)})

    if "default_lighting" in d:
        sc.notes.append("default_lighting ignored (lighting is not part of packed scenes)")
    nav = d.get("navmesh_instance")
    if isinstance(nav, str) and nav:
        sc.navmesh = ds.navmeshes.get(nav)
        if sc.navmesh is None:
            sc.navmesh_unknown = nav
            sc.notes.append(unknown_navmesh_note(name, nav))
        elif not sc.navmesh.is_file():
            sc.navmesh_missing, sc.navmesh = str(sc.navmesh), None
            sc.notes.append(missing_navmesh_note(name, sc.navmesh_missing))
    ssd = d.get("semantic_scene_instance", ds.scene_defaults.get("semantic_scene_instance"))
    if isinstance(ssd, str) and ssd:
        ssd = ssd.replace("%%CONFIG_NAME_AS_ASSET_FILENAME%%", name)
        sc.semantic_scene = ds.semantic_descriptors.get(ssd) or Path(os.path.normpath(root / ssd))

    st = d.get("stage_instance")
    if isinstance(st, dict):
        tname = str(st.get("template_name", ""))
        where = "stage_instance"
        t = ds.lookup(ds.stages, tname) if tname and tname.upper() != "NONE" else None
        if tname and tname.upper() != "NONE":
            asset = _asset_path(t) if t else None
            if t is None:
                miss(where, tname, "stage template", tname)
            elif asset is None or not asset.is_file():
                miss(where, tname, "stage render_asset", asset)
            else:
                s = _vec(t.attrs, "scale", 3, [1, 1, 1], where, path) * _scale(st, where, path)
                m = affine(scale=s) @ affine(_orientation(t.attrs, where, path))
                sc.stage = Instance(t.name, sc.asset_index(_key(asset, root), asset), m, kind="stage")

    objs = _entries(d, "object_instances", path)
    arts = _entries(d, "articulated_object_instances", path)
    if len(objs) + len(arts) > MAX_INSTANCES:   # group ids are entry indices (skipped entries too)
        raise DatasetError(path, f"{len(objs) + len(arts)} instance entries exceed the cap of {MAX_INSTANCES} "
                                 "per scene")
    for i, where, inst, tname in objs:
        t, asset = _template_file(ds, ds.objects, tname, "render_asset", "object template", where, miss, inputs)
        if asset is None:
            continue
        rot, trans = _rotation(inst, where, path), _vec(inst, "translation", 3, [0, 0, 0], where, path)
        scale = _vec(t.attrs, "scale", 3, [1, 1, 1], where, path) * _scale(inst, where, path)
        if (scale == 0).any():
            raise DatasetError(path, f"{where}: zero scale {scale.tolist()} (template {tname})")
        local = affine(scale=scale) @ affine(_orientation(t.attrs, where, path))
        if "COM" in t.attrs:
            shift = -scale * _vec(t.attrs, "COM", 3, [0, 0, 0], where, path)
        else:
            lo, hi = bounds(str(asset))
            corners = np.array([[x, y, z, 1.0] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
            c = (local @ corners.T).T[:, :3]
            shift = -(c.min(0) + c.max(0)) / 2
        origin = str(inst.get("translation_origin", "")).lower()
        corrected = origin == "asset_local" or (scene_origin == "asset_local" and origin != "com")
        if corrected:
            trans = trans - rot @ shift
        m = affine(rot, trans) @ affine(trans=shift) @ local
        sid = _semantic_id(t, where, path)
        ud = t.attrs.get("user_defined") if isinstance(t.attrs.get("user_defined"), dict) else {}
        cat = lex.get(sid) or str(t.attrs.get("category") or ud.get("category") or "")
        # unset: habitat-sim leaves a rigid object as created, DYNAMIC under Bullet physics
        sc.instances.append(Instance(t.name, sc.asset_index(_key(asset, root), asset), m, "object",
                                     _motion(inst, "DYNAMIC"), sid, cat, group=i))

    # the cap before any link is placed: each URDF read once (``ds.urdf``) and its mesh visuals
    # counted, so many instances of a many-link URDF cost one parse, not a transform per link
    aos, total, checked = [], len(sc.instances), {}
    for i, where, inst, tname in arts:
        t, up = _template_file(ds, ds.articulated, tname, "urdf_filepath", "articulated object template", where, miss, inputs)
        if up is None:
            continue
        inputs.add(up)
        u = ds.urdf(up)
        if up not in checked:   # (mesh count, missing meshes) once per URDF
            meshes = _urdf.mesh_paths(u)
            checked[up] = len(meshes), [(ln, mp) for ln, mp in meshes if not mp.is_file()]
        n_meshes, lost = checked[up]
        for ln, mp in lost:
            miss(f"{where} {tname} link {ln}", tname, "URDF mesh", mp)
        if not lost:
            aos.append((i, where, inst, tname, t, u))
            total += n_meshes
    if total > MAX_INSTANCES:
        raise DatasetError(path, f"{total} instances (links counted) exceed the cap of {MAX_INSTANCES} per scene")
    for i, where, inst, tname, t, u in aos:
        rot, trans = _rotation(inst, where, path), _vec(inst, "translation", 3, [0, 0, 0], where, path)
        s = float(_vec(inst, "uniform_scale", 1, [1.0], where, path)[0]) * \
            float(_vec(t.attrs, "uniform_scale", 1, [1.0], f"{where} template {tname}", path)[0])
        if s == 0:
            raise DatasetError(path, f"{where}: zero uniform_scale")
        pose = inst.get("initial_joint_pose", [])
        if isinstance(pose, dict):  # habitat also accepts {joint name: value}; order as written
            pose = list(pose.values())
        pose = _vec({"p": pose}, "p", len(pose), [], where, path) if pose else []
        order = str(inst.get("link_order") or t.attrs.get("link_order") or "tree_traversal").lower()
        visuals, skipped = _urdf.link_visuals(u, pose, s, "urdf_order" if order == "urdf_order" else "tree_traversal")
        if skipped:
            sc.notes.append(f"{where} {tname}: {skipped} primitive (non-mesh) link visual(s) not rendered")
        base = affine(rot, trans)
        sid = _semantic_id(t, where, path)
        # unset motion_type: DYNAMIC, as habitat-sim's Bullet creates an articulated object
        # (physics/bullet/BulletArticulatedObject.h, its constructor)
        for ln, mp, m in visuals:
            sc.instances.append(Instance(f"{tname}/{ln}", sc.asset_index(_key(mp, root), mp), base @ m,
                                         "articulated", _motion(inst, "DYNAMIC"), sid, lex.get(sid, tname), group=len(objs) + i))
    sc.inputs = sorted(inputs | {a.path for a in sc.assets})
    if missing:
        if not skip_missing:
            raise MissingAssetsError(path, missing)
        sc.skipped = missing
    return sc


def unknown_navmesh_note(scene: str, handle: str) -> str:
    """What a scene naming a ``navmesh_instance`` handle its dataset's ``navmesh_instances`` lacks
    gets: habitat-sim's lookup (MetadataMediator::getFilePathForHandle) warns and loads none."""
    return (f"scene {scene}: navmesh_instance {handle!r} is not a key of the dataset's navmesh_instances: "
            "no navmesh to import (habitat-sim warns and loads none)")


def missing_navmesh_note(scene: str, path: str) -> str:
    """What a scene whose ``navmesh_instance`` handle names a file that is not there gets:
    habitat-sim (Simulator.cpp, its navmesh load) warns that the file was not found and loads none."""
    return (f"scene {scene}: its navmesh_instance file {path} does not exist: no navmesh to import "
            "(habitat-sim warns and loads none)")


def scene_files(config: str | os.PathLike) -> dict[str, tuple[str, str | None]]:
    """``{scene instance name: (its file, its navmesh_instance file or None)}``, POSIX paths
    relative to the config's folder (the preprocess plan of a composed dataset)."""
    ds = read_dataset_config(config)
    root = ds.path.parent
    out = {}
    for name, p in ds.scenes.items():
        d = load_json(p)
        nav = d.get("navmesh_instance")
        navp = ds.navmeshes.get(nav) if isinstance(nav, str) and nav else None
        navp = navp if navp is not None and navp.is_file() else None   # missing: read_scene_instance's note
        rel_nav = os.path.relpath(os.path.normpath(navp), root) if navp is not None else None
        out[name] = (os.path.relpath(p, root).replace(os.sep, "/"),
                     rel_nav.replace(os.sep, "/") if rel_nav and not rel_nav.startswith("..") else None)
    return out


def scene_inputs(config: str | os.PathLike, name: str) -> list[Path]:
    """Every file scene instance ``name`` is made from besides its own file (the dataset config,
    template configs, render assets, URDFs and their meshes; the missing ones left out), without
    reading any asset: what a resumed preprocess fingerprints."""
    sc = read_scene_instance(read_dataset_config(config), name, skip_missing=True,
                             bounds=lambda p: ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)))
    return [p for p in sc.inputs if p.is_file()]
