"""The preprocessed-dataset manifest: write, read, merge (schema: docs/manifest.schema.json).

A manifest lists, for one dataset split, every scene's source files, outputs (packed scene,
navmesh, episodes: path relative to the manifest's directory, size, sha256, format version)
and stats. The runtime opens it with :func:`load_manifest`; ``bps-assets verify`` checks it;
``bps-assets manifest merge`` joins shard manifests.

Reading checks what the runtime relies on (format and version, field types, relative paths
that stay inside the manifest's directory) and raises one typed error naming the file.
``navmesh_settings`` / ``agent_mismatch``: the agent the navmeshes were built for, which a
task's agent must match.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..container import atomic_write
from ..errors import (ConfigError, CorruptFileError, FormatVersionError, InputError, OutputExistsError,
                      is_int, is_real)
from ..json_input import parse_json
from ..hashing import settings_fingerprint

FORMAT = "bps-dataset-manifest"
FORMAT_VERSION = 1
MAX_MANIFEST_BYTES = 512 << 20  # ~1M scenes; a manifest is JSON read whole
OUTPUT_ROLES = ("scene", "navmesh", "episodes")


def new_manifest(*, dataset: str, split: str, subsets: list[str], settings: dict, shard: dict | None,
                 source_root: str | None, scenes: dict, missing: list, episodes: dict) -> dict:
    """A manifest document (dict) stamped with the format, tool version, UTC creation time and
    the settings' fingerprint."""
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "tool": {"name": "bps", "version": __version__},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "dataset": dataset, "split": split, "subsets": list(subsets),
        "source_root": source_root,
        "settings": settings, "settings_fingerprint": settings_fingerprint(settings),
        "shard": shard,
        "missing": list(missing),
        "episodes": episodes,
        "scenes": scenes,
    }


def write_manifest(doc: dict, path: str | os.PathLike, overwrite: bool = True) -> Path:
    """Write ``doc`` as JSON to ``path`` atomically (temp file then rename) and return the path;
    OutputExistsError when it exists and not ``overwrite``."""
    path = Path(path)
    data = (json.dumps(doc, indent=1) + "\n").encode()
    atomic_write(path, lambda f: f.write(data), overwrite=overwrite)
    return path


def content_sha256(doc: dict) -> str:
    """sha256 of what a manifest's dataset holds: every scene's subset, status and outputs'
    sha256s, and the episode files' sha256s. Not its creation time, timings or source paths, so
    a rerun of preprocess that changed no output keeps it (what a resumed training run checks)."""
    scenes = {name: {"subset": e.get("subset"), "status": e.get("status"),
                     "outputs": {role: o.get("sha256") for role, o in (e.get("outputs") or {}).items()}}
              for name, e in doc.get("scenes", {}).items()}
    episodes = {split: (o or {}).get("sha256") for split, o in (doc.get("episodes") or {}).items()}
    return settings_fingerprint({"scenes": scenes, "episodes": episodes})


def source_links(scene: str, sources: dict) -> list[tuple[str, str, str, str]]:
    """(scene, role, path, target) of each source record of ``scene`` that resolves through a
    symlink outside the source folder (its ``link_target``)."""
    return [(scene, role, str(s.get("path")), str(s["link_target"])) for role, s in (sources or {}).items()
            if isinstance(s, dict) and s.get("link_target")]


def source_links_line(links: list[tuple[str, str, str, str]]) -> str:
    """One line for ``links`` (``source_links``'s, of one scene or many): their count and the
    first as an example; the manifest keeps every target (habitat users link data/ routinely)."""
    n, scenes = len(links), len({x[0] for x in links})
    scene, role, path, target = links[0]
    return (f"{n} source file{'s' * (n != 1)}{f' of {scenes} scenes' if scenes > 1 else ''} "
            f"resolve{'s' * (n == 1)} through a symlink outside the source folder (each target is the "
            f"manifest's sources.*.link_target; --strict refuses them), e.g. {scene}: source {role} {path} -> {target}")


# ------------------------------------------------------------------------------ reading

@dataclass(frozen=True)
class SceneEntry:
    """One scene of a manifest. Paths are absolute. ``os.fspath(entry)`` is the packed scene,
    so an entry can be passed wherever a scene path is expected."""

    name: str
    subset: str
    status: str
    scene: Path | None
    navmesh: Path | None
    episodes: Path | None
    stats: dict = field(default_factory=dict, repr=False)
    outputs: dict = field(default_factory=dict, repr=False)  # role -> record (relative paths)
    error: str | None = None

    def __fspath__(self) -> str:
        if self.scene is None:
            raise InputError(None, f"scene {self.name!r} has no packed scene ({self.status})")
        return str(self.scene)


class Manifest:
    """A loaded manifest. ``root`` is the directory its relative paths are resolved against."""

    def __init__(self, doc: dict, path: Path):
        self.doc = doc
        self.path = path
        self.root = path.parent

    # -- top-level facts
    dataset = property(lambda self: self.doc["dataset"])
    split = property(lambda self: self.doc["split"])
    settings = property(lambda self: self.doc["settings"])
    shard = property(lambda self: self.doc.get("shard"))
    tool_version = property(lambda self: self.doc["tool"]["version"])

    @property
    def subsets(self) -> list[str]:
        """The subsets the manifest was made for."""
        return list(self.doc.get("subsets", []))

    @property
    def missing(self) -> list[dict]:
        """The scenes of the split whose source files were not found (dicts as recorded)."""
        return list(self.doc.get("missing", []))

    def resolve(self, rel: str) -> Path:
        """A path recorded in the manifest (relative to its folder) as an absolute path."""
        return self.root / rel

    def _entry(self, name: str, e: dict) -> SceneEntry:
        outs = e.get("outputs", {})

        def p(role):
            o = outs.get(role)
            return self.resolve(o["path"]) if o else None

        return SceneEntry(name, e.get("subset", ""), e.get("status", ""), p("scene"), p("navmesh"),
                          p("episodes"), dict(e.get("stats", {})), outs, e.get("error"))

    def scenes(self, subset: str | None = None, status: str | None = "ok") -> list[SceneEntry]:
        """Scenes of ``subset`` ("train", "val", "test"; None: all) with ``status`` ("ok": the
        usable ones; None: all, including failed), in manifest (name) order."""
        out = []
        for name, e in self.doc["scenes"].items():
            if subset is not None and e.get("subset") != subset:
                continue
            if status is not None and e.get("status") != status:
                continue
            out.append(self._entry(name, e))
        return out

    def scene(self, name: str) -> SceneEntry:
        """The entry of scene ``name`` whatever its status; InputError naming the manifest if it
        has no such scene."""
        e = self.doc["scenes"].get(name)
        if e is None:
            raise InputError(self.path, f"has no scene {name!r}")
        return self._entry(name, e)

    def names(self, subset: str | None = None) -> list[str]:
        """Names of the usable (status "ok") scenes of ``subset`` (None: all), in manifest order."""
        return [s.name for s in self.scenes(subset)]

    def episodes_path(self, subset: str) -> Path | None:
        """The habitat v1 episode dataset file of ``subset`` (its ``content/`` beside it)."""
        e = self.doc.get("episodes", {}).get(subset)
        return self.resolve(e["path"]) if e else None

    def files(self) -> list[tuple[str, str, dict]]:
        """(scene, role, record) for every output file of every ok scene."""
        return [(n, role, o) for n, e in self.doc["scenes"].items() if e.get("status") == "ok"
                for role, o in e.get("outputs", {}).items()]

    def output_bytes(self) -> int:
        """Bytes of the ok scenes' output files, each file once (a composed dataset's shared
        assets are listed by every scene that uses them)."""
        return unique_bytes(o for _, _, o in self.files())

    def __len__(self):
        return len(self.scenes())

    def __repr__(self):
        return f"Manifest({str(self.path)!r}, {self.dataset}/{self.split}, {len(self)} scenes)"


def unique_bytes(records) -> int:
    """The sum of the ``size`` of manifest output records, each ``path`` counted once."""
    sizes = {}
    for o in records:
        if isinstance(o, dict):
            sizes[o.get("path")] = o.get("size", 0) or 0
    return sum(sizes.values())


def navmesh_settings(manifest: "Manifest"):
    """The ``NavSettings`` every navmesh of ``manifest`` was made for (agent radius and height,
    max climb and slope, cells), as preprocess recorded them (``settings.nav``; imported
    .navmesh files for another agent were replaced by built ones), or None when the manifest
    records none (a manifest written by another backend)."""
    from ..nav.settings import NavSettings

    nav = (manifest.settings or {}).get("nav")
    return NavSettings.from_dict(nav) if isinstance(nav, dict) else None


def agent_mismatch(manifest: "Manifest", agent_radius: float, agent_height: float) -> str | None:
    """One line saying how the navmeshes' agent (``navmesh_settings``) differs from the
    task's ``agent_radius`` / ``agent_height`` (m) by more than ``nav.settings.AGENT_TOLERANCE``,
    or None when they match or the manifest records no agent: what the runtime refuses a dataset
    with."""
    from ..nav.settings import agent_diffs   # here: reading a manifest needs no nav package

    nav = navmesh_settings(manifest)
    if nav is None:
        return None
    diffs = [f"{what} {has:g} m, not {want:g} m" for what, has, want in
             agent_diffs(nav.agent_radius, nav.agent_height, agent_radius, agent_height)]
    if not diffs:
        return None
    return (f"{manifest.path}: its navmeshes were built for another agent ({'; '.join(diffs)}): "
            f"preprocess again with --agent-radius {agent_radius:g} --agent-height {agent_height:g}")


def _bad(path, msg):
    return CorruptFileError(path, f"not a valid bps manifest: {msg}")


def _check_rel(path, rel, where):
    if not isinstance(rel, str) or not rel:
        raise _bad(path, f"{where}: path missing")
    if rel.startswith("/") or ".." in rel.split("/") or "\\" in rel or ":" in rel.split("/")[0]:
        raise _bad(path, f"{where}: path {rel!r} must be relative and stay inside the manifest's directory")


# JSON kinds of the fields the readers use (docs/manifest.schema.json); a key absent here is
# not read, so it is not checked. "path" entries are relative paths (``_check_rel``).
_KIND_TEST = {
    "string": lambda v: isinstance(v, str), "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list), "null": lambda v: v is None,
    "integer": is_int, "number": is_real, "count": lambda v: is_int(v) and v >= 0,
}
_TOP = {"tool": "object", "created": "string", "dataset": "string", "split": "string",
        "subsets": "array", "source_root": "string|null", "settings": "object",
        "settings_fingerprint": "string", "shard": "object|null", "merged_from": "array",
        "missing": "array", "episodes": "object", "scenes": "object"}
_SCENE = {"subset": "string", "error": "string|null", "fingerprint": "string", "sources": "object",
          "outputs": "object", "stats": "object"}
_FILE = {"size": "count", "sha256": "string", "format": "string", "format_version": "integer",
         "content_version": "integer", "count": "count|null"}
_SOURCE = {"path": "string", "size": "count", "sha256": "string", "link_target": "string"}
_STATS = {"triangles": "count", "instance_triangles": "count", "texture_bytes": "count",
          "navigable_area": "number|null", "islands": "count|null", "navmesh_source": "string|null",
          "largest_island": "number", "footprint_area": "number", "floor_warning": "string",
          "episodes_where": "string", "navmesh_note": "string", "agent": "object",
          "episodes": "count|null", "semantic_error": "string", "objects": "count", "semantic": "object",
          "seconds": "number", "convert_seconds": "number", "navmesh_seconds": "number",
          "episodes_seconds": "number", "warnings": "array"}
_SETTINGS = {"convert": "object", "nav": "object", "episode_options": "object", "preprocess": "object"}


def _json_kind(v) -> str:
    for name, typ in (("null", type(None)), ("a boolean", bool), ("a string", str), ("an object", dict),
                      ("an array", list), ("a number", (int, float))):
        if isinstance(v, typ):
            return name
    return type(v).__name__


_KIND_NAME = {"string": "a string", "object": "an object", "array": "an array", "null": "null",
              "integer": "an integer", "number": "a number", "count": "a non-negative integer"}


def _kind_error(path, where: str, v, kind: str) -> CorruptFileError:
    shown = json.dumps(v, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    want = " or ".join(_KIND_NAME[k] for k in kind.split("|"))
    return _bad(path, f"{where} is {_json_kind(v)} ({shown}), not {want}")


def _check_kinds(path, obj, kinds: dict, where: str, required=()) -> None:
    """Each key of ``kinds`` present in the object ``obj`` holds a value of its JSON kind(s)."""
    for key in required:
        if key not in obj:
            raise _bad(path, f"{where}{key} missing")
    for key, kind in kinds.items():
        if key in obj and not any(_KIND_TEST[k](obj[key]) for k in kind.split("|")):
            raise _kind_error(path, f"{where}{key}", obj[key], kind)


def _check_items(path, items, where: str, kinds: dict, required=()) -> None:
    for i, x in enumerate(items):
        if not isinstance(x, dict):
            raise _kind_error(path, f"{where}[{i}]", x, "object")
        _check_kinds(path, x, kinds, f"{where}[{i}].", required)


def _check_file(path, rec, where: str) -> None:
    if not isinstance(rec, dict):
        raise _kind_error(path, where, rec, "object")
    _check_rel(path, rec.get("path"), where)
    _check_kinds(path, rec, _FILE, f"{where}.", required=("size", "sha256"))


def check_manifest(doc, path=None) -> None:
    """The structural checks :func:`load_manifest` does (the JSON Schema says more): format and
    version, the JSON kind of every field a reader uses, relative paths; CorruptFileError naming
    the file and the field otherwise."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(path, f"'format' is not {FORMAT!r}")
    v = doc.get("format_version")
    if not is_int(v):
        raise _bad(path, "'format_version' missing")
    if v != FORMAT_VERSION:
        raise FormatVersionError(path, f"manifest format version {v} is not supported "
                                       f"(this build reads {FORMAT_VERSION})")
    _check_kinds(path, doc, _TOP, "", required=("dataset", "split", "settings", "scenes", "tool"))
    _check_kinds(path, doc["tool"], {"name": "string", "version": "string"}, "tool.", required=("version",))
    _check_kinds(path, doc["settings"], _SETTINGS, "settings.")
    for i, s in enumerate(doc.get("subsets", [])):
        if not isinstance(s, str):
            raise _kind_error(path, f"subsets[{i}]", s, "string")
    _check_items(path, doc.get("missing", []), "missing", {"name": "string", "subset": "string"})
    _check_items(path, doc.get("merged_from", []), "merged_from", {"path": "string", "shard": "object|null"})
    shard = doc.get("shard")
    if shard is not None:
        _check_kinds(path, shard, {"index": "count", "count": "count"}, "shard.", required=("index", "count"))
        if not shard["index"] < shard["count"]:
            raise _bad(path, f"shard.index {shard['index']} is not below shard.count {shard['count']}")
    for name, e in doc["scenes"].items():
        where = f"scenes.{name}"
        if not isinstance(e, dict) or e.get("status") not in ("ok", "failed"):
            raise _bad(path, f"scene {name!r}: bad entry or status")
        _check_kinds(path, e, _SCENE, f"{where}.")
        outs = e.get("outputs", {})
        if e["status"] == "ok" and not {"scene", "navmesh"} <= set(outs):
            raise _bad(path, f"scene {name!r}: an ok scene needs 'scene' and 'navmesh' outputs")
        for role, o in outs.items():
            _check_file(path, o, f"{where}.outputs.{role}")
        for role, s in e.get("sources", {}).items():
            if not isinstance(s, dict):
                raise _kind_error(path, f"{where}.sources.{role}", s, "object")
            _check_kinds(path, s, _SOURCE, f"{where}.sources.{role}.")
        _check_kinds(path, e.get("stats", {}), _STATS, f"{where}.stats.")
        for i, w in enumerate(e.get("stats", {}).get("warnings", [])):  # lines the summary prints
            if not isinstance(w, str):
                raise _kind_error(path, f"{where}.stats.warnings[{i}]", w, "string")
    for sub, e in doc.get("episodes", {}).items():
        _check_file(path, e, f"episodes.{sub}")


def load_manifest(path: str | os.PathLike) -> Manifest:
    """Read and check a manifest (a file, or a directory holding ``manifest.json``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "manifest.json"
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise InputError(p, "no such manifest") from None
    if size > MAX_MANIFEST_BYTES:
        raise _bad(p, f"{size} bytes exceed the cap of {MAX_MANIFEST_BYTES}")
    try:
        doc = parse_json(p.read_bytes(), p, "JSON", unique_keys=True)
    except InputError as e:
        raise _bad(p, e.detail.replace("not valid JSON", "invalid JSON", 1)) from None
    check_manifest(doc, p)
    return Manifest(doc, p.resolve())


# ------------------------------------------------------------------------------ merging

def _rebase(rel: str, src_dir: Path, dst_dir: Path) -> str:
    if src_dir == dst_dir:
        return rel
    return Path(os.path.relpath(src_dir / rel, dst_dir)).as_posix()


def merge_manifests(paths, out: str | os.PathLike, overwrite: bool = False,
                    allow_partial: bool = False) -> Manifest:
    """Join shard manifests into one at ``out`` (paths rebased to its directory); with
    ``allow_partial``, the shards not given are recorded as ``absent_shards``.

    Refuses (ConfigError) manifests of different datasets, splits, settings, tool or format
    versions, shard counts; duplicate shards or scenes; and an incomplete set of shards
    unless ``allow_partial``.
    """
    if not paths:
        raise ConfigError(None, "manifest merge: no shard manifests given")
    out = Path(out).resolve()
    if out.exists() and not overwrite:
        raise OutputExistsError(out, "already exists (pass --overwrite to replace it)")
    mans = [load_manifest(p) for p in paths]
    for m in mans:
        # paths in a manifest stay inside its directory: the merged one must sit above the shards
        if out.parent != m.root and out.parent not in m.root.parents:
            common = Path(os.path.commonpath([str(x.root) for x in mans]))
            raise ConfigError(out, f"the merged manifest must be in a directory containing every shard's "
                                   f"outputs ({m.root} is not inside {out.parent}); e.g. -o {common / 'manifest.json'}")
    first = mans[0]
    keys = ("dataset", "split", "settings_fingerprint", "format_version")
    for m in mans[1:]:
        for k in keys:
            if m.doc.get(k) != first.doc.get(k):
                raise ConfigError(m.path, f"cannot merge: {k} {m.doc.get(k)!r} differs from "
                                          f"{first.doc.get(k)!r} in {first.path}")
        if m.tool_version != first.tool_version:
            raise ConfigError(m.path, f"cannot merge: made by bps {m.tool_version}, {first.path} by "
                                      f"bps {first.tool_version}")
    shards = [m.shard for m in mans]
    if any(s is None for s in shards):
        if len(mans) > 1:
            bad = next(m for m in mans if m.shard is None)
            raise ConfigError(bad.path, "cannot merge: not a shard manifest (no 'shard' field)")
        count, absent = 1, []
    else:
        counts = {s["count"] for s in shards}
        if len(counts) != 1:
            raise ConfigError(None, f"cannot merge: shard counts differ ({sorted(counts)})")
        count = counts.pop()
        idx = [s["index"] for s in shards]
        dup = {i for i in idx if idx.count(i) > 1}
        if dup:
            raise ConfigError(None, f"cannot merge: shard(s) {sorted(dup)} given twice")
        absent = sorted(set(range(count)) - set(idx))
        if absent and not allow_partial:
            raise ConfigError(None, f"cannot merge: shard(s) {absent} of {count} missing "
                                    "(pass --allow-partial to merge what is there)")
    scenes: dict[str, dict] = {}
    missing, episodes, subsets = [], {}, []
    for m in mans:
        for name, e in m.doc["scenes"].items():
            if name in scenes:
                raise ConfigError(m.path, f"cannot merge: scene {name!r} is in two shard manifests")
            e = json.loads(json.dumps(e))
            for o in e.get("outputs", {}).values():
                o["path"] = _rebase(o["path"], m.root, out.parent)
            scenes[name] = e
        missing += m.missing
        for sub, ep in m.doc.get("episodes", {}).items():
            episodes.setdefault(sub, {**ep, "path": _rebase(ep["path"], m.root, out.parent)})
        subsets += [s for s in m.subsets if s not in subsets]
    order = [s for s in ("train", "val", "test") if s in subsets]
    doc = new_manifest(dataset=first.dataset, split=first.split, subsets=order, settings=first.settings,
                       shard=None, source_root=first.doc.get("source_root"),
                       scenes=dict(sorted(scenes.items())),
                       missing=sorted(missing, key=lambda x: x.get("name", "")), episodes=episodes)
    doc["tool"] = dict(first.doc["tool"])
    doc["merged_from"] = [{"path": _rebase(m.path.name, m.root, out.parent),
                           "shard": m.shard} for m in mans]
    if absent:  # --allow-partial: these shards' scenes are neither listed nor counted missing
        doc["absent_shards"] = {"count": count, "index": absent}
    write_manifest(doc, out, overwrite=overwrite)   # a merge racing to `out` gets OutputExistsError
    return load_manifest(out)
