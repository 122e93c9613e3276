"""Preprocess a dataset split: every scene -> packed scene + navmesh (+ PointNav episodes).

Outputs under OUT_ROOT (manifest paths are relative to it; the layout: docs/PIPELINE.md):
``manifest.json`` (``manifest.shard-I-of-N.json`` with --shard), ``scenes/NAME.bps``,
``navmeshes/NAME.navmesh.bps``, ``episodes/pointnav/SUBSET/`` (habitat v1) and the resume
bookkeeping in ``.bps-state/`` (``scenes/NAME.json`` records, ``logs/NAME.log`` tracebacks).

Resume: a scene's completion record is written (atomically) only after every output is written
(atomically) and hashed, and deleted before the scene is redone, so after any interruption, even
kill -9, records exist exactly for complete scenes. A rerun skips a scene whose fingerprint
(sources' sha256s, settings, tool version) matches its record and whose outputs pass
``resume_check``; everything else is redone. Failures: each scene runs in a worker process
(``in_process`` is for debuggers and tests); an exception or a dying worker fails that scene
only (error in the summary and manifest, traceback in the log). Missing scenes of the split are
reported (manifest ``missing``, summary), not fatal, unless ``require_all`` (``--require-all``).
"""
from __future__ import annotations

import dataclasses

import gzip
import json
import multiprocessing
import os
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..container import atomic_write, make_dirs, remove_stale_temps
from ..errors import AnnotationError, BpsError, ConfigError, DatasetError, InterruptedRun, NavError, OutputExistsError, UpAxisError
from ..errors import InputError, ResourceLimitError
from ..json_input import parse_json
from ..safe_paths import link_escape
from ..transforms.frame import UP_AXES
from . import manifest as mf
from .backend import NAVMESH_MODES, Backend, container_info
from .datasets import load_dataset
from ..host import available_cores
from ..hashing import settings_fingerprint, sha256_file
from .memory_budget import available_memory, detour_import_bytes, workers_for
from .plan import Plan, SceneSource, Shard, make_plan
from .resume_check import check_many, problems_by_output
from .stale_outputs import overwrite_hint, run_dropping_stale

STATE_DIR = ".bps-state"


@dataclass(frozen=True)
class PreprocessOptions:
    """What to produce. ``workers`` None: all usable cores. ``episodes``: PointNav episodes per
    scene (0: none). ``subsets``: limit to some subsets of the split (None: all). ``force``:
    redo up-to-date scenes too, and build on scans that look read with the wrong up axis
    (``nav.scan_checks``). ``overwrite``: accept a non-empty OUT_ROOT without an earlier
    run, or replacing the manifest of another run (another dataset or split, or ok scenes this
    run would drop: another source root or subsets). ``up``: the sources' up axis (``y`` / ``z``) instead of the dataset's.
    ``nav``: the navmesh settings (agent radius and height, cell size...; an imported .navmesh
    made for another agent is replaced by a built one). ``convert``: converter settings
    (``ConvertOptions`` fields, e.g. ``{"max_texture": 1024}``). Both are recorded in the
    manifest's ``settings``; a scene made with other settings is redone.
    ``strict``: an unreadable annotation pair beside a scan (else the scene has no semantic
    section and a warning), or a ``.navmesh`` that auto mode would replace by a built one
    (unreadable, made for another agent or another scene) fails the scene instead."""

    navmesh: str = "auto"
    episodes: int = 0
    episode_seed: int = 0
    workers: int | None = None
    require_all: bool = False
    redone: dict = field(default_factory=dict)  # scene -> why its kept outputs were not kept
    rules_changed: dict = field(default_factory=dict)  # what of label_rules changed -> scenes redone for it
    overwrite: bool = False
    subsets: tuple[str, ...] | None = None
    force: bool = False  # redo every scene, even up-to-date ones
    verify_kept: bool = False  # full sha256 of kept outputs (default: header + section CRCs)
    in_process: bool = False  # run scenes in this process (debuggers, tests); a crash ends the run
    up: str | None = None
    strict: bool = False
    nav: object | None = None  # NavSettings of built navmeshes (None: nav.DEFAULT_SETTINGS)
    convert: dict = field(default_factory=dict)  # ConvertOptions fields over the dataset's preset
    skip_missing_assets: bool = False  # composed scenes: drop instances with missing files (listed in the manifest)

    def __post_init__(self):
        if self.up is not None and self.up not in UP_AXES:
            raise ConfigError(None, f"up axis {self.up!r} is not one of {', '.join(UP_AXES)}")
        if self.navmesh not in NAVMESH_MODES:
            raise ConfigError(None, f"navmesh mode {self.navmesh!r} is not one of {', '.join(NAVMESH_MODES)}")
        if self.episodes < 0:
            raise ConfigError(None, "episodes per scene must be >= 0")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(None, "workers must be >= 1")
        if self.convert:
            from ..packed_scene import ConvertOptions
            from ..transforms.textures import check_options

            known = {f.name for f in dataclasses.fields(ConvertOptions)} - {"dataset", "up"}
            bad = sorted(set(self.convert) - known)
            if bad:
                raise ConfigError(None, f"converter setting(s) {', '.join(bad)} unknown (known: {', '.join(sorted(known))})")
            check_options(dataclasses.replace(ConvertOptions(), **self.convert).texture_options())


DEFAULTS = PreprocessOptions()


@dataclass
class SceneResult:
    """Outcome of one scene in a preprocessing run (status "ok", "skipped", "failed" or
    "missing") with its manifest entry or error."""
    name: str
    subset: str
    status: str  # "ok" | "skipped" (up to date) | "failed" | "missing"
    entry: dict | None = None  # the manifest entry (ok / skipped / failed)
    error: str | None = None
    seconds: float = 0.0


@dataclass
class PreprocessResult:
    """Outcome of a preprocessing run: the manifest written, the plan, and one SceneResult per
    scene."""
    manifest_path: Path
    plan: Plan
    results: list[SceneResult] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: str) -> int:
        """Number of scenes with ``status``."""
        return sum(r.status == status for r in self.results)

    @property
    def ok(self) -> bool:
        """True when no scene failed (and, with ``require_all``, none was missing)."""
        return self.count("failed") == 0 and not (self.require_all and self.count("missing"))

    require_all: bool = False
    redone: dict = field(default_factory=dict)  # scene -> why its kept outputs were not kept


# ------------------------------------------------------------------------------ layout

def output_paths(name: str, subset: str) -> dict[str, str]:
    """``{role: path}`` of a scene's outputs, relative to the output root (what the manifest
    records)."""
    return {"scene": f"scenes/{name}.bps", "navmesh": f"navmeshes/{name}.navmesh.bps",
            "episodes": f"episodes/pointnav/{subset}/content/{name}.json.gz"}


def subset_index_path(subset: str) -> str:
    """The habitat episode index file of ``subset``, relative to the output root."""
    return f"episodes/pointnav/{subset}/{subset}.json.gz"


def manifest_name(shard: Shard | None) -> str:
    """The manifest's file name: ``manifest.json``, or one per shard."""
    if shard is None:
        return "manifest.json"
    return f"manifest.shard-{shard.index}-of-{shard.count}.json"


def _record_path(out_root: Path, name: str) -> Path:
    return out_root / STATE_DIR / "scenes" / f"{name}.json"


def _read_record(out_root: Path, name: str) -> dict | None:
    p = _record_path(out_root, name)
    try:
        rec = parse_json(p.read_bytes(), p, encoding="utf-8")
    except (OSError, InputError):
        return None  # absent or unreadable (or nested too deeply): the scene is simply not done
    return rec if isinstance(rec, dict) and isinstance(rec.get("entry"), dict) else None


def _write_json(path: Path, obj, gz: bool = False) -> None:
    data = json.dumps(obj, indent=None if gz else 1).encode()
    if gz:
        data = gzip.compress(data, mtime=0)
    atomic_write(path, lambda f: f.write(data), overwrite=True)


def _stat(p: Path) -> list[int]:
    st = p.stat()
    return [st.st_size, st.st_mtime_ns]


# ------------------------------------------------------------------------------ one scene

@dataclass
class SceneTask:
    """Everything a worker needs to preprocess one scene."""
    src: SceneSource
    out_root: Path
    dataset: str
    options: PreprocessOptions
    settings: dict
    backend: Backend


def _sources(task: SceneTask, old: dict | None) -> dict[str, dict]:
    """The scene's source files with sha256, reusing the old record's hash when size and mtime
    are unchanged."""
    old_src = (old or {}).get("entry", {}).get("sources", {})
    old_stat = (old or {}).get("source_stat", {})
    files = {"scene": (task.src.scene, task.src.rel_scene)}
    if task.src.navmesh is not None and task.options.navmesh != "build":
        files["navmesh"] = (task.src.navmesh, task.src.rel_navmesh)
    from .scene_dataset_config import semantic_for  # the scan's annotation pair, if any
    try:
        sem = semantic_for(task.src.scene, task.dataset)
    except BpsError:  # half a pair: the conversion reports it (stats.semantic_error)
        sem = None
    for role, p in (sem.files() if sem is not None else {}).items():
        rel = Path(os.path.normpath(Path(task.src.rel_scene).parent / os.path.relpath(p, task.src.scene.parent)))
        files[role] = (Path(p), rel.as_posix())
    if task.src.rel_scene.endswith(".scene_instance.json"):  # a composed scene: every file it is made of
        files.update({r: (p, r[len("input:"):]) for r, p in _composed_inputs(task.dataset, task.src.name).items()})
    out = {}
    root = task.src.root
    for role, (p, rel) in files.items():
        target = link_escape(root, p)   # the symlink rule of every input (docs/PIPELINE.md)
        if target is not None and task.options.strict:
            raise InputError(p, f"resolves through a symlink to {target}, outside the source folder {root} "
                                "(refused: --strict)")
        st = _stat(p)
        prev = old_src.get(role)
        if prev and old_stat.get(role) == st and prev.get("path") == rel:
            out[role] = dict(prev)
        else:
            digest, size = sha256_file(p)
            out[role] = {"path": rel, "size": size, "sha256": digest}
        out[role].pop("link_target", None)
        if target is not None:   # accepted, and the manifest names where it really is
            out[role]["link_target"] = str(target)
        out[role]["_stat"] = st
    return out


def label_rules(sources: dict, settings: dict) -> dict:
    """The rules an annotated scene's ids and categories follow beyond its sources and settings
    (part of its ``fingerprint``, kept in its record): MP3D scenes the id rule; other annotated
    scenes without ``--label-table`` the built-in label table's digest; {} for the others."""
    table = str(sources.get("semantic_table", {}).get("path", ""))
    if table.endswith(".house"):  # MP3D: C records carry their mpcat40, no table maps them
        from ..readers.semantic_mp3d import ID_RULE  # MP3D ids changed: those scenes only redo

        return {"mp3d_ids": ID_RULE}
    if table and not (settings.get("convert") or {}).get("label_table"):
        from ..readers.semantic_categories import builtin_table_digest  # raw labels: an edit redoes

        return {"builtin_labels": builtin_table_digest()}
    return {}


def fingerprint(sources: dict, settings: dict, rules: dict | None = None) -> str:
    """SHA-256 over a scene's source hashes, the settings' fingerprint, the tool version and its
    ``label_rules`` (``rules``: those, else the current ones): kept outputs are reused only while
    it is unchanged."""
    doc = {"sources": {r: s["sha256"] for r, s in sorted(sources.items())},
           "settings": settings_fingerprint(settings), "tool_version": __version__,
           **(label_rules(sources, settings) if rules is None else rules)}
    return settings_fingerprint(doc)


RULE_NAMES = {"builtin_labels": "the built-in label table", "mp3d_ids": "MP3D's id rule"}


def rules_changed(rec: dict, sources: dict, settings: dict) -> str:
    """What of ``label_rules`` alone changed since the scene's record was written ("" when its
    fingerprint differs otherwise, or not at all): its fingerprint under the rules the record
    keeps (records from before they were kept: none) is the one it holds."""
    now, then = label_rules(sources, settings), rec.get("rules") or {}
    if now == then or not isinstance(then, dict) or rec.get("fingerprint") != fingerprint(sources, settings, then):
        return ""
    return " and ".join(RULE_NAMES[k] for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k))


def _recorded_stats(src, sources: dict) -> dict | None:
    """The stats now of the files a scene's record lists (their paths relative to the source
    root), as ``source_stat`` holds them; None when one cannot be read."""
    root = src.root
    try:
        return {r: _stat(root / e["path"]) for r, e in sources.items()}
    except (OSError, KeyError, TypeError):
        return None


def _remove_stale_temps(out_root: Path, rels) -> None:
    # only this scene's atomic_write temps, and only those no live writer holds (another shard
    # may be writing its own scenes into the same OUT_ROOT, or a worker still running after a
    # pool break): container.remove_stale_temps takes each temp's lock first
    for rel in rels:
        remove_stale_temps(out_root / rel)


def _file_entry(out_root: Path, rel: str, packed: bool) -> dict:
    digest, size = sha256_file(out_root / rel)
    e = {"path": rel, "size": size, "sha256": digest}
    if packed:
        e.update(container_info(out_root / rel))
    return e


def _on_scan(e: BpsError, scan) -> BpsError:
    """``e`` (the same type and problem) naming the scan the user gave instead of our packed copy."""
    return type(e)(scan, e.detail)


def process_scene(task: SceneTask) -> SceneResult:
    """Do one scene (in a worker process). Never raises for a scene-level failure."""
    t0 = time.perf_counter()
    src, out_root, opts = task.src, task.out_root, task.options
    name = src.name
    rels = output_paths(name, src.subset)
    before = None   # the outputs before this attempt, when they are of the same sources and settings
    try:
        # before converting, name the scan (a composed scene's reason, its navmesh_instance
        # handle, is read from the converted scene by the backend)
        if opts.navmesh == "import" and src.navmesh is None and not src.rel_scene.endswith(".scene_instance.json"):
            raise InputError(src.scene, "--navmesh import: the scene has no .navmesh beside it "
                                        "(--navmesh auto builds one when there is none)")
        old = _read_record(out_root, name)
        sources = _sources(task, old)
        fp = fingerprint(sources, task.settings)
        damaged = problems_by_output(out_root, old["entry"], opts.verify_kept) \
            if old and not opts.force and old.get("fingerprint") == fp else {"": "redo"}
        if not damaged:
            # touched but unchanged sources: refresh the record's stat, keep the outputs
            if old.get("source_stat") != {r: s["_stat"] for r, s in sources.items()}:
                old["source_stat"] = {r: s.pop("_stat") for r, s in sources.items()}
                _write_json(_record_path(out_root, name), old)
            return SceneResult(name, src.subset, "skipped", old["entry"], seconds=time.perf_counter() - t0)
        # the old record stops vouching for the outputs before any of them is touched
        _record_path(out_root, name).unlink(missing_ok=True)
        _remove_stale_temps(out_root, rels.values())
        if opts.episodes == 0:  # episodes of an earlier run with other settings are not ours now
            (out_root / rels["episodes"]).unlink(missing_ok=True)
        # same sources and settings: its outputs are not stale, and a failed redo keeps them, unless
        # the check found one of them damaged (a partial set, e.g. episodes without their navmesh)
        if old and old.get("fingerprint") == fp and not set(damaged) & set(rels):
            before = _output_stats(out_root, rels)
        source_stat = {r: s.pop("_stat") for r, s in sources.items()}

        stats: dict = {}
        links = mf.source_links(name, sources)
        if links:   # one line however many (a linked data/ links every file)
            stats["warnings"] = [mf.source_links_line(links)]
        t = time.perf_counter()
        # shared assets that failed the check (with --verify-kept: their sha256) are re-converted
        # even where their own header and CRCs look fine (another backend is never asked)
        outs = old["entry"].get("outputs") if old else None
        stale = sorted(Path(str(outs[r].get("path", ""))).name for r in damaged
                       if r.startswith("asset:") and isinstance(outs[r], dict))
        conv = task.backend.convert(src.scene, out_root / rels["scene"], name, task.dataset,
                                    **({"stale_assets": stale} if stale else {}))
        stats.update(conv)
        stats["convert_seconds"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        navsrc = src.navmesh if opts.navmesh != "build" else None
        # --strict: a .navmesh that auto would replace (unreadable, another agent's or scene's)
        # fails the scene instead, as under --navmesh import
        mode = "import" if opts.strict and navsrc is not None else opts.navmesh
        try:
            nav = task.backend.navmesh(mode, out_root / rels["scene"], navsrc, out_root / rels["navmesh"])
        except UpAxisError as e:
            raise _on_scan(e, src.scene) from None
        except ResourceLimitError as e:   # the build's caps (grid cells) name the packed copy too
            packed = out_root / rels["scene"]
            if e.path not in (str(packed), packed.name):
                raise
            raise _on_scan(e, src.scene) from None
        stats["navmesh_source"] = nav.get("source")
        if nav.get("agent"):
            stats["agent"] = nav["agent"]
        stats["navigable_area"] = nav.get("navigable_area")
        stats["islands"] = nav.get("islands")
        for key in ("largest_island", "footprint_area"):   # verify's no-floor check reads them
            if nav.get(key) is not None:
                stats[key] = nav[key]
        if nav.get("warning"):   # not in "warnings": --strict does not fail a scene for it
            stats["floor_warning"] = nav["warning"]
        if nav.get("note"):
            stats["navmesh_note"] = nav["note"]
        stats["navmesh_seconds"] = round(time.perf_counter() - t, 3)
        _check_scene(task, out_root, rels, stats, nav.get("fit_points"))
        outputs = {"scene": _file_entry(out_root, rels["scene"], True),
                   "navmesh": _file_entry(out_root, rels["navmesh"], True)}
        for rel in stats.pop("asset_files", None) or ():  # a composed scene's shared asset files
            outputs[f"asset:{Path(rel).stem}"] = _file_entry(out_root, rel, True)
        if opts.episodes > 0:
            t = time.perf_counter()
            ep = task.backend.episodes(out_root / rels["navmesh"], name, task.dataset, opts.episodes,
                                       opts.episode_seed, out_root / rels["episodes"],
                                       scene_id=src.rel_scene)
            outputs["episodes"] = _file_entry(out_root, rels["episodes"], False)
            outputs["episodes"].update({"format": "habitat-pointnav-v1", "count": ep.get("count")})
            stats["episodes"] = ep.get("count")
            if ep.get("where"):
                stats["episodes_where"] = ep["where"]
            stats["episodes_seconds"] = round(time.perf_counter() - t, 3)
        stats["seconds"] = round(time.perf_counter() - t0, 3)
        entry = {"subset": src.subset, "status": "ok", "fingerprint": fp, "sources": sources,
                 "outputs": outputs, "stats": stats}
        _write_json(_record_path(out_root, name),
                    {"fingerprint": fp, "rules": label_rules(sources, task.settings), "source_stat": source_stat,
                     "entry": entry})
        return SceneResult(name, src.subset, "ok", entry, seconds=stats["seconds"])
    except Exception as e:  # noqa: BLE001 - one scene's failure must not stop the others
        left = _discard_outputs(out_root, rels, before)
        msg = f"{type(e).__name__}: {e}" if not isinstance(e, OSError) or str(e) else repr(e)
        if isinstance(e, OSError):  # one line naming the file and the cause, not the raw repr
            msg = f"{e.filename or out_root}: {e.strerror or e}"
        if left:
            msg += f" (and could not remove its partial output {'; '.join(left)})"
        log = out_root / STATE_DIR / "logs" / f"{name}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"{name}: {msg}\n\n{traceback.format_exc()}")
        except OSError as le:  # the summary and the manifest still carry msg; say the log is missing
            msg += f" (no log: {le.strerror or le})"
        return _failed(src, msg, time.perf_counter() - t0)


def _check_scene(task: SceneTask, out_root: Path, rels: dict, stats: dict, fit_points=None) -> None:
    """Raise for a scene with nothing to navigate, or whose imported navmesh does not fit it
    (the backend builds one instead in auto mode: this is the net under any backend).
    ``fit_points``: the imported navmesh's, from which the file was written, when the backend
    gives them (then the written file is not decoded again)."""
    from . import scene_checks

    if stats.get("semantic_error"):  # its annotation pair is broken: PointNav-only, said so
        if task.options.strict:
            raise AnnotationError(task.src.scene, stats["semantic_error"] + " (--strict)")
        stats.setdefault("warnings", []).append("no semantic section: " + stats["semantic_error"])
    if stats.get("semantic_mismatch"):   # a part of the annotation does not fit the scan
        stats.setdefault("warnings", []).append(stats["semantic_mismatch"])
    name, packed = task.src.name, out_root / rels["scene"]
    built = stats.get("navmesh_source") != "imported"   # built with the run's settings
    err = scene_checks.no_navigable_area(name, stats.get("navigable_area"), packed, task.src.scene,
                                         task.options.nav if built else None)
    if err is not None:
        raise err
    if stats.get("navmesh_source") != "imported":
        return
    warning = scene_checks.navmesh_fit(name, out_root / rels["navmesh"], packed, fit_points)
    if warning is not None:
        raise NavError(task.src.navmesh, warning)


def _output_stats(out_root: Path, rels: dict) -> dict:
    """{rel: (inode, mtime, size) or None when absent}: tells whether an attempt wrote any."""
    out = {}
    for rel in rels.values():
        try:
            st = (out_root / rel).stat()
            out[rel] = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            out[rel] = None
    return out


def _discard_outputs(out_root: Path, rels: dict, before: dict | None = None) -> list[str]:
    """A failed scene leaves no half-made outputs behind (they would look done to a user or
    another tool; its record is already gone). ``before`` (``_output_stats`` before a redo of
    unchanged sources and settings, e.g. ``--force`` or a damaged shared asset): when the attempt
    wrote none of them, those earlier outputs are kept as they were. Returns "file: cause" for
    each one that stays."""
    _remove_stale_temps(out_root, rels.values())
    if before is not None and _output_stats(out_root, rels) == before:
        return []
    left = []
    for rel in rels.values():
        try:
            (out_root / rel).unlink(missing_ok=True)
        except OSError as e:
            left.append(f"{out_root / rel}: {e.strerror or e}")
    return left


def _failed(src: SceneSource, msg: str, seconds: float) -> SceneResult:
    entry = {"subset": src.subset, "status": "failed", "error": msg,
             "sources": {"scene": {"path": src.rel_scene}}, "outputs": {}, "stats": {}}
    return SceneResult(src.name, src.subset, "failed", entry, error=msg, seconds=seconds)


# ------------------------------------------------------------------------------ the run

def _check_out_root(out_root: Path, overwrite: bool) -> None:
    if out_root.exists() and not out_root.is_dir():
        raise OutputExistsError(out_root, "exists and is not a directory")
    if out_root.is_dir() and not (out_root / STATE_DIR).is_dir() and any(out_root.iterdir()) \
            and not overwrite:
        raise OutputExistsError(out_root, "is not empty and holds no earlier bps preprocess run "
                                          "(choose an empty directory, or pass --overwrite)")


def _check_manifest_target(path: Path, dataset: str, split: str, overwrite: bool,
                           plan: Plan | None = None) -> dict | None:
    """Refuse (unless ``overwrite``) to replace the manifest of another run: another dataset or
    split, or one with ok scenes this run's manifest would drop (another source root or
    subsets; scene files gone). Returns the old manifest (None if absent or overwritten)."""
    if not path.exists() or overwrite:
        return None
    try:
        old = parse_json(path.read_bytes(), path, encoding="utf-8")
    except (OSError, InputError):
        raise OutputExistsError(path, "exists and is not a bps manifest (pass --overwrite to replace it)") from None
    if not isinstance(old, dict) or (old.get("dataset"), old.get("split")) != (dataset, split):
        raise OutputExistsError(path, f"is the manifest of another run ({old.get('dataset')!r} split "
                                      f"{old.get('split')!r}); {overwrite_hint(len(old.get('scenes') or ()))}")
    if plan is None:
        return old
    scenes = old.get("scenes") if isinstance(old.get("scenes"), dict) else {}
    present = {s.name for s in plan.scenes}
    dropped = sorted(n for n, e in scenes.items() if isinstance(e, dict) and e.get("status") == "ok"
                     and n not in present)
    if not dropped:
        return old  # a rerun: a moved source root, or more scenes, resume by fingerprint
    diffs = []
    if old.get("source_root") not in (None, str(plan.src_root)):
        diffs.append(f"source root {old.get('source_root')} -> {plan.src_root}")
    if isinstance(old.get("subsets"), list) and old["subsets"] != list(plan.subsets):
        diffs.append(f"subsets {','.join(map(str, old['subsets']))} -> {','.join(plan.subsets)}")
    names = ", ".join(dropped[:5]) + (" ..." if len(dropped) > 5 else "")
    raise OutputExistsError(path, f"is the manifest of another run ({'; '.join(diffs + [''])}"
                                  f"{len(dropped)} of its {len(scenes)} scene(s) not in this run: {names}); "
                                  f"{overwrite_hint(len(dropped))}")


def _settings_changes(old: dict | None, settings: dict) -> list[str]:
    """Dotted names of the settings that differ from the earlier run's (every scene is redone)."""
    if not old or not isinstance(old.get("settings"), dict):
        return []

    def flat(d, pre=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{pre}{k}."))
            else:
                out[f"{pre}{k}"] = v
        return out

    a, b = flat(old["settings"]), flat(settings)
    return [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _run_pool(tasks: list[SceneTask], workers: int, on_done) -> None:
    """Run tasks on a process pool; rerun the in-flight ones in isolation if a worker dies."""
    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads (tqdm)
    pending = list(tasks)
    suspects: list[SceneTask] = []
    while pending:
        ex = ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=ctx,
                                 initializer=_worker_init, initargs=(os.getpid(),))
        futs = {}
        broken = False
        try:
            it = iter(pending)
            pending = []
            # keep at most 2 tasks per worker queued, so a broken pool loses few
            for t in it:
                futs[ex.submit(process_scene, t)] = t
                if len(futs) >= 2 * workers:
                    break
            while futs:
                done, _ = wait(futs, return_when=FIRST_COMPLETED)
                for f in done:
                    t = futs.pop(f)
                    try:
                        on_done(f.result())
                    except BrokenProcessPool:
                        broken = True
                        suspects.append(t)
                if broken:
                    suspects.extend(futs.values())
                    futs.clear()
                    pending = list(it)
                    break
                for t in it:
                    futs[ex.submit(process_scene, t)] = t
                    if len(futs) >= 2 * workers:
                        break
        except KeyboardInterrupt:
            _stop_workers(ex)
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
        if broken:
            # each suspect alone in a fresh process: only the culprit dies again
            for t in suspects:
                one = ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_worker_init,
                                          initargs=(os.getpid(),))
                try:
                    r = one.submit(process_scene, t).result()
                    if r.status == "skipped":
                        # the broken pool's worker finished this scene before the pool broke (it
                        # was planned as work to do): it was processed in this run
                        r = dataclasses.replace(r, status="ok")
                    on_done(r)
                except BrokenProcessPool:
                    on_done(_failed(t.src, "worker process died (crash or out of memory)", 0.0))
                except KeyboardInterrupt:
                    _stop_workers(one)
                    raise
                finally:
                    one.shutdown(wait=True)
            suspects = []


def _worker_init(parent: int) -> None:
    """Workers leave Ctrl-C to the parent (which stops them): a terminal's SIGINT reaches the
    whole process group, and each worker would print its own KeyboardInterrupt traceback. And
    a worker dies with its parent: after kill -9 of the run nothing else would end it (it
    would block for ever writing its result to a pipe no one reads)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _die_with_parent():   # not Linux: a thread watches for the parent's end
        import threading

        def watch():
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    if os.getppid() != parent:   # the parent died before the line above took effect
        os._exit(1)


def _die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent (the thread that started it) ends
    (prctl PR_SET_PDEATHSIG); False where that is not available."""
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0   # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def _restored_inputs(config: str, name: str, entry: dict) -> dict[str, Path]:
    """``{input:REL: path}`` of a composed scene made with instances skipped (their files were
    missing, so its record lists none of them): every input the scene has now, so a file the
    user has since restored is a new input and the scene is redone (the record alone cannot
    tell). Other scenes: {} (a missing input fails them; no record)."""
    stats = entry.get("stats")
    if not (isinstance(stats, dict) and stats.get("skipped_instances")):
        return {}
    return _composed_inputs(config, name)


def _composed_inputs(config: str, name: str) -> dict[str, Path]:
    """``{input:REL: path}`` of every file composed scene ``name`` is made of now (REL: relative
    to the dataset config's folder)."""
    from ..scene_dataset.habitat import scene_inputs

    root = Path(config).parent
    return {f"input:{Path(os.path.relpath(p, root)).as_posix()}": p for p in scene_inputs(config, name)}


def _stop_workers(ex: ProcessPoolExecutor) -> None:
    """Terminate a pool's workers now (their scenes' records are not written, so a rerun redoes
    them), instead of waiting for the scenes in flight to finish."""
    for p in list((getattr(ex, "_processes", None) or {}).values()):
        try:
            p.terminate()
        except (OSError, AttributeError):  # already gone: nothing left to stop
            continue


def _interrupted(out_root: Path, results: dict, tasks: list, since: float) -> InterruptedRun:
    # a worker may have written its scene's record before the interrupt reached us and before
    # its result did: count it too (the rerun skips it), so the line says what really finished
    late = sum(t.src.name not in results and _written_since(_record_path(out_root, t.src.name), since)
               for t in tasks)
    n_tasks = len(tasks)
    done = sum(r.status in ("ok", "failed") for r in results.values()) + late
    failed = sum(r.status == "failed" for r in results.values())
    skipped = sum(r.status == "skipped" for r in results.values())
    return InterruptedRun(out_root, f"interrupted: {done} of {n_tasks} scene(s) to process finished"
                                    f"{f' ({failed} failed)' if failed else ''}, {skipped} were already up to "
                                    "date; the manifest was not rewritten. Rerun the same command to "
                                    "resume: finished scenes are skipped")


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False


def preprocess(src_root, out_root, dataset: str = "gibson", split: str | None = None,
               options: PreprocessOptions = DEFAULTS, shard: Shard | None = None,
               backend: Backend | None = None, progress: bool | None = None,
               log=None) -> PreprocessResult:
    """Preprocess ``split`` of ``dataset`` from ``src_root`` into ``out_root``; write the
    manifest (``manifest.json``, or the shard manifest) and return the per-scene results.

    ``progress``: tqdm bar on stderr (None: when stderr is a terminal). ``log``: a callable
    taking one line of text (e.g. ``click.echo``) for the plan report, and a line per finished
    scene when there is no bar; None: silent.
    """
    t_start = time.perf_counter()
    ds = load_dataset(dataset)
    split = ds.default_split if split is None else split
    plan = make_plan(src_root, ds, split, shard, options.subsets)
    out_root = Path(out_root).resolve()
    top = plan.src_root / ds.layout.top
    if out_root == top or top in out_root.parents:
        raise ConfigError(out_root, f"OUT_ROOT must not be inside the source tree {top}")
    mpath = out_root / manifest_name(shard)
    if not plan.held:  # no scene of the split anywhere (a shard whose scans are all missing
        # while other shards hold some writes its manifest: its missing scenes are reported)
        raise DatasetError(plan.src_root, nothing_found(plan))
    _check_out_root(out_root, options.overwrite)
    old_manifest = _check_manifest_target(mpath, ds.name, split, options.overwrite, plan)
    if options.require_all and plan.missing:
        names = ", ".join(n for n, _ in plan.missing[:10]) + (" ..." if len(plan.missing) > 10 else "")
        raise DatasetError(plan.src_root, f"{len(plan.missing)} scene(s) of split {split!r} are missing "
                                          f"({names}) and --require-all was given")
    own = None   # the Backend's arguments when the run makes its own (--force remakes it below)
    if backend is None:
        own = dict(up=options.up, nav_settings=options.nav, convert_changes=options.convert,
                   force_up=options.force, skip_missing_assets=options.skip_missing_assets)
        backend = Backend(**own)
    settings = backend.settings(ds.name)
    settings["preprocess"] = {"navmesh": options.navmesh, "episodes": options.episodes,
                              "episode_seed": options.episode_seed}
    changes = _settings_changes(old_manifest, settings)
    if changes and log:
        log(f"  settings differ from the earlier run in {out_root} ({'; '.join(changes[:4])}"
            f"{' ...' if len(changes) > 4 else ''}): its scenes are redone")
    make_dirs(out_root / STATE_DIR / "scenes")  # OutputWriteError naming the folder, not a traceback
    lock = _lock_run(out_root / STATE_DIR / f"{mpath.stem}.lock")
    try:
        if options.force and own is not None:   # --force re-converts each shared asset once per run
            # (the run's start is written under the lock; the settings above do not depend on it)
            backend = Backend(**own, assets_since=_run_start(out_root / STATE_DIR / f"{mpath.stem}.started"))
        return run_dropping_stale(out_root, mpath, options.overwrite, lambda: _run(
            plan, ds, split, shard, options, backend, settings, out_root, mpath, progress, log, t_start), log,
            output_paths, lambda name: _record_path(out_root, name), plan)
    finally:
        lock.release()


def _run_start(marker: Path) -> float:
    """The run's start on the output file system's clock (the mtime of ``marker``, written now):
    what asset files' mtimes are compared with. The host's ``time.time()`` is not: a file server
    whose clock is behind it would make every asset look written before the run."""
    _write_json(marker, {"pid": os.getpid()})
    return marker.stat().st_mtime


def nothing_found(plan: Plan) -> str:
    """Why a run found no scene of its split, and what to pass instead: the splits the scene
    files found belong to, or how to preprocess scans the dataset does not know."""
    ds, what = plan.dataset, f"split {plan.split!r}" + (f" ({'/'.join(plan.subsets)})" if plan.subsets else "")
    if plan.shard is not None:
        what += f" shard {plan.shard}"
    msg = f"no scene of {ds.name} {what} found ({len(plan.missing)} missing)"
    fits = ds.splits_holding(plan.other_split)
    if fits and fits[0][0] == plan.split:  # found, but in other subsets of this split
        subs = sorted({s for s, names in ds.split(plan.split).items() if set(names) & set(plan.other_split)})
        return f"{msg}; the scene file(s) found are in its {'/'.join(subs)} subset(s): drop or change --subset"
    if fits:
        return (f"{msg}; the {len(plan.other_split)} scene file(s) found belong to split(s) "
                f"{', '.join(f'{s} ({n})' for s, n in fits[:4])}: pass --split {fits[0][0]}")
    if plan.unknown:
        return (f"{msg}; {len(plan.unknown)} scan(s) found are not {ds.name} scenes (e.g. {plan.unknown[0]}): "
                f"to preprocess scans {ds.name} does not list, move them to a folder of their own (no "
                f"{ds.layout.top}/ in it, not named {ds.layout.top}) and give that folder without --dataset")
    return f"{msg}; no scene file under {plan.src_root / ds.layout.top} (layout {ds.layout.scene})"


def _lock_run(path: Path):
    """Hold the run's lock (``run_lock``: released by the OS when the process dies, kill -9
    included): two runs of the same shard into one OUT_ROOT would redo each other's scenes."""
    from .run_lock import hold

    return hold(path, "preprocess", where=path.parent.parent, place=f"OUT_ROOT ({path.stem})", stacklevel=3)


def _run(plan, ds, split, shard, options, backend, settings, out_root, mpath, progress, log, t_start):
    say = log or (lambda s: None)
    say(f"{ds.name} split {split!r}{f' shard {shard}' if shard else ''}: {len(plan.selected)} scenes, "
        f"{len(plan.scenes)} found, {len(plan.missing)} missing under {plan.src_root}")
    if not plan.scenes:
        say(f"  none of this shard's scenes is under the source root; the split's {len(plan.held)} found "
            "scene(s) are in other shards")
    if plan.unknown or plan.stray:
        say(f"  {len(plan.unknown)} unknown scene file(s), {len(plan.stray)} stray file(s) ignored "
            f"(see `bps-assets verify --source`)")

    # quick skip check in the parent: record + unchanged source stat + intact outputs
    results: dict[str, SceneResult] = {}
    tasks, kept, by_rules = [], {}, {}
    for s in plan.scenes:
        task = SceneTask(s, out_root, ds.name, options, settings, backend)
        rec = None if options.force else _read_record(out_root, s.name)
        if rec is not None:
            files = {"scene": s.scene}
            if s.navmesh is not None and options.navmesh != "build":
                files["navmesh"] = s.navmesh
            srcs = rec["entry"].get("sources", {})
            # a composed scene's other inputs (config, templates, render assets, URDFs: _sources)
            files.update({r: Path(ds.name).parent / e.get("path", "") for r, e in srcs.items()
                          if r.startswith("input:") and isinstance(e, dict)})
            try:
                files.update(_restored_inputs(ds.name, s.name, rec["entry"]))
                stat_now = {r: _stat(p) for r, p in files.items()}
            except (OSError, BpsError):
                stat_now = None
            if (stat_now == rec.get("source_stat") and set(srcs) == set(files)
                    and rec.get("fingerprint") == fingerprint(srcs, settings)):
                kept[s.name] = (task, rec["entry"])
                continue
            # said before the work, not a silent redo (annotated scenes are checked in the workers)
            if (why := rules_changed(rec, srcs, settings)) and _recorded_stats(s, srcs) == rec.get("source_stat"):
                by_rules[why] = by_rules.get(why, 0) + 1
        tasks.append(task)
    damaged = {n: p for n, p in check_many(out_root, {n: e for n, (_, e) in kept.items()},
                                           options.verify_kept).items() if p}
    for n, (task, entry) in kept.items():  # a damaged kept output: redo the scene
        if n in damaged:
            tasks.append(task)
        else:
            results[n] = SceneResult(n, task.src.subset, "skipped", entry)
    if plan.scenes:
        say(f"  {len(results)} up to date, {len(tasks)} to process")
    for why, n in sorted(by_rules.items()):
        say(f"  {n} annotated scene(s) are redone: {why} changed")
    for n, probs in sorted(damaged.items()):
        say(f"  redoing {n}: kept output failed the resume check: {'; '.join(probs)}")

    workers = 1
    if not options.in_process:   # the pool's size (in process: none to size, no Detour file read)
        wanted = options.workers or available_cores()
        navs = [_navmesh_bytes(t) for t in tasks] if wanted > 1 else None   # each decoded again by its worker
        workers, why = workers_for([_source_bytes(t) for t in tasks], wanted, available_memory(), navs)
        if why and tasks:
            say(f"  {why}")
    bar = None
    if progress is None:
        progress = _stderr_isatty()
    if tasks and progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), unit="scene", desc="preprocess", dynamic_ncols=True)

    t_tasks, n_done, t_wall = time.perf_counter(), [0], time.time()

    def on_done(r: SceneResult):
        results[r.name] = r
        n_done[0] += 1
        nfail = sum(x.status == "failed" for x in results.values())
        if bar is not None:
            bar.set_postfix_str(f"{r.name} {r.status}" + (f", {nfail} failed" if nfail else ""))
            bar.update(1)
        elif log is not None:  # no bar (a log file, SLURM): a line per scene
            took = time.perf_counter() - t_tasks
            left = took / n_done[0] * (len(tasks) - n_done[0])
            # "skipped" here: a worker found the scene up to date after all (its kept outputs
            # pass the check now, e.g. a shared asset another scene re-converted)
            status = "up to date" if r.status == "skipped" else r.status
            say(f"  [{n_done[0]}/{len(tasks)}] {r.name} {status}" + (f" ({nfail} failed)" if nfail else "")
                + f"; {took:.0f} s so far, about {left:.0f} s left")

    try:
        if options.in_process:
            for t in tasks:
                on_done(process_scene(t))
        elif tasks:
            # even one worker is a separate process: a native crash must fail one scene only
            _run_pool(tasks, workers, on_done)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
            bar = None
        raise _interrupted(out_root, results, tasks, t_wall - 0.05) from None
    finally:
        if bar is not None:
            bar.close()

    for name, sub in plan.missing:
        results[name] = SceneResult(name, sub, "missing", error="scene file not found")
    ordered = [_strictly(results[n], options) for n in plan.selected if n in results]

    # habitat v1 index file per subset that has episodes ({"episodes": []} + content/)
    if options.episodes > 0:
        for sub in sorted({r.subset for r in ordered if r.entry and "episodes" in r.entry.get("outputs", {})}):
            _write_json(out_root / subset_index_path(sub), {"episodes": []}, gz=True)

    doc = mf.new_manifest(
        dataset=ds.name, split=split, subsets=list(plan.subsets), settings=settings,
        shard=None if shard is None else {"index": shard.index, "count": shard.count},
        source_root=str(plan.src_root),
        scenes={r.name: _manifest_entry(r) for r in ordered if r.entry is not None},
        missing=[{"name": n, "subset": s} for n, s in plan.missing],
        episodes={sub: {**_file_entry(out_root, subset_index_path(sub), False), "format": "habitat-pointnav-v1"}
                  for sub in plan.subsets
                  if (out_root / subset_index_path(sub)).is_file() and options.episodes > 0},
    )
    mf.write_manifest(doc, mpath)
    res = PreprocessResult(mpath, plan, ordered, time.perf_counter() - t_start,
                           require_all=options.require_all)
    res.redone, res.rules_changed = damaged, by_rules
    return res


def _strictly(r: SceneResult, options: PreprocessOptions) -> SceneResult:
    """Under ``strict`` an up-to-date scene whose record carries a warning (from an earlier,
    lenient run) fails like a scene processed now would."""
    st = (r.entry or {}).get("stats") or {}
    warnings = st.get("warnings") or ([st["navmesh_note"]] if st.get("navmesh_note") else None)
    if not (options.strict and r.status == "skipped" and warnings):
        return r
    msg = f"NavError: {warnings[0]} (--strict)"
    return SceneResult(r.name, r.subset, "failed", {**r.entry, "status": "failed", "error": msg}, error=msg)


def _manifest_entry(r: SceneResult) -> dict:
    e = dict(r.entry)
    e["sources"] = {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")}
                    for k, v in e.get("sources", {}).items()}
    return e


def _source_bytes(task: SceneTask) -> int:
    try:
        return os.path.getsize(task.src.scene)
    except OSError:  # unreadable now: the worker reports it; it needs no memory
        return 0


def _navmesh_bytes(task: SceneTask) -> int:
    """Estimated peak of importing the scene's Detour navmesh (0: none, or built instead)."""
    if task.src.navmesh is None or task.options.navmesh == "build":
        return 0
    return detour_import_bytes(task.src.navmesh)


def _stderr_isatty() -> bool:
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# ------------------------------------------------------------------------------ summary

def summary_table(res: PreprocessResult, max_rows: int = 200) -> str:
    """A plain-text table, one row per scene, then totals."""
    rows = [("scene", "subset", "status", "tris", "MB out", "navmesh", "area m2", "isl", "eps", "s", "error")]
    shown = [r for r in res.results if r.status != "missing"]
    # each file once: a composed dataset's shared assets are outputs of every scene using them
    tot_bytes = mf.unique_bytes(o for r in shown for o in ((r.entry or {}).get("outputs") or {}).values())
    for r in shown[:max_rows]:
        st = (r.entry or {}).get("stats", {})
        outs = (r.entry or {}).get("outputs", {})
        b = sum(o.get("size", 0) for o in outs.values())
        tris = st.get("triangles", "")   # a composed scene: its stage and every instance
        if isinstance(tris, int) and isinstance(st.get("instance_triangles"), int):
            tris += st["instance_triangles"]
        rows.append((r.name, r.subset, "up to date" if r.status == "skipped" else r.status, f"{tris}",
                     f"{b / 1e6:.2f}" if b else "", str(st.get("navmesh_source") or ""),
                     f"{st['navigable_area']:.1f}" if st.get("navigable_area") is not None else "",
                     str(st.get("islands", "") if st.get("islands") is not None else ""),
                     str(st.get("episodes", "")), f"{st['seconds']:.1f}" if "seconds" in st else "",
                     (r.error or (f"warning: {st['warnings'][0]}" if st.get("warnings") else "")
                      or (f"warning: {st['floor_warning']}" if st.get("floor_warning") else "")
                      or (f"note: {st['navmesh_note']}" if st.get("navmesh_note") else ""))[:300]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:-1], widths)) + ("  " + row[-1] if row[-1] else "")
             for row in rows] if shown else []   # a shard whose scenes are all missing: no table
    if len(shown) > max_rows:
        lines.append(f"... {len(shown) - max_rows} more scenes (see the manifest)")
    missing = [r.name for r in res.results if r.status == "missing"]
    if missing:
        lines.append(f"missing from the source ({len(missing)}): {' '.join(missing[:12])}"
                     + (" ..." if len(missing) > 12 else "") + "  (reported, not fatal: see --require-all)")
    unmatched = unmatched_summary(shown)
    if unmatched:
        lines.append(unmatched)
    counts = {s: res.count(s) for s in ("ok", "skipped", "failed", "missing")}
    lines.append(f"{counts['ok']} processed, {counts['skipped']} up to date, {counts['failed']} failed, "
                 f"{counts['missing']} missing; {tot_bytes / 1e6:.1f} MB of outputs (each file once); "
                 f"{res.seconds:.1f} s; "
                 f"manifest: {res.manifest_path}")
    return "\n".join(lines)


def unmatched_summary(results, shown: int = 8) -> str:
    """One line on the raw annotation labels no mpcat40 category was found for (objects of
    category -1), summed over the scenes' records; "" when there are none."""
    from collections import Counter

    n: Counter = Counter()
    scenes = objects = 0
    for r in results:
        sem = (r.entry or {}).get("stats", {}).get("semantic") or {}
        labels = sem.get("unmatched_labels") or {}
        scenes += bool(labels)
        objects += int(sem.get("unmatched_objects", 0) or sum(labels.values()))
        n.update({str(k): int(v) for k, v in labels.items()})
    if not n:
        return ""
    top = ", ".join(f"{k!r} {v}" for k, v in n.most_common(shown)) + (" ..." if len(n) > shown else "")
    return (f"unmatched annotation labels (no mpcat40 category, -1): {objects} objects in {scenes} scene(s); most "
            f"frequent: {top}  (habitat's own table: --label-table, docs/ASSETS.md)")


def result_json(res: PreprocessResult) -> dict:
    """The run's outcome as a JSON object (the CLI's ``--json`` output)."""
    return {"manifest": str(res.manifest_path), "seconds": round(res.seconds, 3),
            "counts": {s: res.count(s) for s in ("ok", "skipped", "failed", "missing")},
            "unknown": res.plan.unknown, "stray": res.plan.stray,
            "rules_changed": [{"what": why, "scenes": n} for why, n in sorted(res.rules_changed.items())],
            "scenes": [{"name": r.name, "subset": r.subset, "status": r.status, "error": r.error,
                        "stats": (r.entry or {}).get("stats", {})} for r in res.results]}
