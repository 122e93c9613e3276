"""Check a preprocessed dataset (manifest mode) or a source tree (source mode).

Manifest mode, per output file: exists, has the recorded size and sha256, and (packed files)
opens as a container of the recorded kind and a supported version; ``deep`` also decompresses
every section and checks its CRC (episode files: gunzip and a streamed parse under their caps).
Files are checked in a thread pool, largest first; hashing runs at disk speed (see
benchmarks/bench_pipeline.py).

Manifest mode also refuses a scene whose navmesh does not fit it (``scene_checks``) and a
manifest without any ok scene.

Source mode: which scenes of a split are missing under a source root, which files are not
part of the dataset (unknown scene ids, stray files), which scenes have no ``.navmesh``, which
have half an annotation pair (e.g. ``.semantic.txt`` without ``.semantic.glb``: preprocess would
drop their semantics; a broken pair fails the check like a missing scene).
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..composed_section import HEADER_KEY, asset_path, check_expanded_totals, read_table
from ..container import Container
from ..errors import BpsError, ConfigError, CorruptFileError, FormatVersionError
from ..safe_paths import link_escape
from ..hashing import default_jobs, recorded_hash_problem, recorded_size_problem
from .manifest import load_manifest, source_links, source_links_line
from .scene_checks import entry_problems, floor_warnings

STATE_DIR = ".bps-state"  # preprocess's run state and lock files (preprocess.STATE_DIR)


@dataclass
class FileResult:
    """The check of one file: its scene (None for a file outside any scene), role, path, size and
    the problems and warnings found."""
    scene: str | None
    role: str
    path: str
    size: int = 0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # a navmesh's ``fit_points``, sampled by --deep's load of it: the fit check reads it no more
    # (None again once the fit check used them)
    fit_points: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self):
        """True when the file has no problem (warnings allowed)."""
        return not self.problems


@dataclass
class SceneReport:
    """The checks of one manifest scene and its files."""
    name: str
    subset: str
    status: str
    files: list[FileResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self):
        """True when neither the scene nor any of its files has a problem."""
        return not self.problems and all(f.ok for f in self.files)


@dataclass
class VerifyReport:
    """Result of ``verify_manifest``: one SceneReport per scene, the files outside scenes,
    warnings, and the bytes checked and time taken."""
    manifest: str
    deep: bool
    scenes: list[SceneReport]
    extra_files: list[FileResult]
    warnings: list[str]
    bytes: int
    seconds: float
    problems: list[str] = field(default_factory=list)  # the manifest's own (no usable scene)

    @property
    def ok(self):
        """True when every scene and every other file checked is ok, and some scene is usable."""
        return not self.problems and all(s.ok for s in self.scenes) and all(f.ok for f in self.extra_files)

    def to_json(self) -> dict:
        """The report as a JSON object (the CLI's ``--json`` output)."""
        return {
            "manifest": self.manifest, "deep": self.deep, "ok": self.ok,
            "bytes": self.bytes, "seconds": round(self.seconds, 3),
            "scenes": [{"name": s.name, "subset": s.subset, "status": s.status, "ok": s.ok,
                        "problems": s.problems + [f"{f.role}: {p}" for f in s.files for p in f.problems]}
                       for s in self.scenes],
            "files": [{"path": f.path, "ok": f.ok, "problems": f.problems} for f in self.extra_files],
            "warnings": self.warnings, "problems": self.problems,
        }


def _supported_content_versions() -> dict[str, int]:
    """Container kind -> the content version this build reads (for kinds whose reader is here)."""
    from ..nav.grid import KIND as NKIND, VERSION as NVERSION
    from ..packed_scene import KIND, SCENE_FORMAT_VERSION

    return {KIND: SCENE_FORMAT_VERSION, NKIND: NVERSION}


def _check_content_version(p: Path, kind: str, header: dict, rec: dict) -> None:
    cv = header.get("scene_format_version", header.get("version"))
    if "content_version" in rec and cv != rec["content_version"]:
        raise CorruptFileError(p, f"content version {cv!r} differs from the manifest's {rec['content_version']!r}")
    want = _supported_content_versions().get(kind)
    if want is not None and cv is not None and cv != want:
        raise FormatVersionError(p, f"{kind} content version {cv} is not supported (this build reads {want})")


def _deep_check_packed(p: Path, kind: str, header: dict) -> np.ndarray | None:
    """Everything the kind's reader checks (declared sizes against the header's counts, every
    index range, computed without int64 wrap-around), then a streamed decode of the sections
    that reader does not read (bounded memory whatever they declare). A scene's sections are
    read once: each LOD level adds its own geometry only. A composed scene is checked as its
    file stores it (stage, instance table, the asset files it names: ``_check_instances``), not
    flattened. A file whose header declares no content version (test doubles) gets the
    container-level checks only; real outputs always declare one, and the manifest's
    ``content_version`` must match it. Returns a navmesh's ``fit_points`` (else None)."""
    read_sections: tuple = ()
    points = None
    if kind == "SCEN" and "scene_format_version" in header:
        from ..lod_section import levels
        from ..packed_scene import STORED_SECTIONS, read_packed_scene, with_lod_geometry

        ps = read_packed_scene(p, threads=1, expand=False)
        for i in range(len(levels(p, header))):  # each level's own checks (docs/FORMAT.md 5.8)
            with_lod_geometry(ps, i)
        if HEADER_KEY in header:
            _check_instances(p)
        read_sections = STORED_SECTIONS
    elif kind == "NAVM" and "format" in header:
        from ..nav.grid import load_navmesh
        from ..nav.validate import fit_points

        points = fit_points(load_navmesh(p))
        read_sections = ("height", "neighbors", "island", "island_area", "island_radius")
    with Container(p, kind) as c:
        c.verify(deep=True, skip=[n for n in read_sections if n in c.sections])
    return points


def _check_instances(p: Path) -> None:
    """A composed scene's instance table (every check of ``composed_section``), each asset
    file it uses opens as a packed scene of a supported version, and the flattened scene's
    totals fit (``check_expanded_totals``, from the headers' counts summed over the instances).
    The assets' sections are checked as the manifest's own files, not again here."""
    from ..packed_scene import KIND, section_rows

    with Container(p, KIND) as c:
        table = read_table(p, c)
        rows = section_rows(p, c.header)
        totals = [rows["positions_q"], rows["indices"], rows["material_color"]]
    uses = np.bincount(table.asset, minlength=len(table.header["assets"]))
    for a in np.flatnonzero(uses).tolist():
        asset = asset_path(p, table.header["assets"][a])
        with Container(asset, KIND) as c:
            _check_content_version(asset, KIND, c.header, {})
            rows = section_rows(asset, c.header)
        for i, k in enumerate(("positions_q", "indices", "material_color")):
            totals[i] += int(uses[a]) * rows[k]
    check_expanded_totals(p, *totals)


def _check_navmesh_header(p: Path, header: dict) -> None:
    """The cheap part of the navmesh load checks: origin and cell size finite, in range and
    consistent with the grid's shape (``nav.validate``)."""
    from ..nav.validate import check_navmesh_header

    try:
        origin, cs, shape = list(header["origin"]), float(header["cell_size"]), list(header["shape"])
        ok = len(origin) == 2 and len(shape) == 3
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise CorruptFileError(p, "bad navmesh header: shape / cell_size / origin")
    check_navmesh_header(p, origin, cs, shape)


def _check_file(root: Path, scene: str | None, role: str, rec: dict, deep: bool,
                strict: bool = False) -> FileResult:
    r = FileResult(scene, role, rec.get("path", "?"))
    p = root / r.path
    out = link_escape(root, p)
    if out is not None:
        msg = f"{r.path}: resolves through a symlink to {out}, outside the dataset folder {root}"
        if strict:
            r.problems.append(msg + " (refused: --strict)")
            return r
        r.warnings.append(msg)
    size, problem = recorded_size_problem(p, rec.get("size"))
    r.size = size or 0
    if problem is None and "sha256" in rec:
        try:
            problem = recorded_hash_problem(p, rec["sha256"])
        except BpsError as e:
            r.problems.append(str(e))
            return r
    if problem is not None:
        r.problems.append(f"{r.path}: {problem}")
        return r
    fmt = rec.get("format")
    try:
        if isinstance(fmt, str) and len(fmt) == 4 and fmt.isupper():
            with Container(p, fmt) as c:
                _check_content_version(p, fmt, c.header, rec)
                header = c.header
            if deep:
                r.fit_points = _deep_check_packed(p, fmt, header)
            elif fmt == "NAVM" and "format" in header:
                _check_navmesh_header(p, header)
        elif fmt == "habitat-pointnav-v1" and deep:
            # streamed, one episode at a time, under the episode files' caps (nav.episodes.read_json)
            from ..nav.episodes import read_json

            n = [0]
            read_json(p, "PointNav", {"episodes": ("list", lambda i, e: n.__setitem__(0, i + 1))})
            if "count" in rec and rec["count"] is not None and n[0] != rec["count"]:
                raise CorruptFileError(p, f"{n[0]} episodes, manifest says {rec['count']}")
    except BpsError as e:
        r.problems.append(str(e))
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:  # gzip / json
        r.problems.append(f"{r.path}: {type(e).__name__}: {e}")
    return r


def running_preprocess(out_root: Path) -> Path | None:
    """The lock file of a preprocess run writing ``out_root`` now (it holds its lock until it
    ends, kill -9 included), or None. Its files are being rewritten: checking them then reports
    sizes and hashes that are only in flux."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no way to tell; check as usual
        return None
    try:
        locks = sorted((out_root / STATE_DIR).glob("*.lock"))
    except OSError:
        return None
    for lock in locks:
        try:
            with open(lock, "rb") as f:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:
                    return lock
        except OSError:
            continue
    return None


def verify_manifest(path, deep: bool = False, jobs: int | None = None, strict: bool = False) -> VerifyReport:
    """Check every output the manifest at ``path`` lists. Raises only if the manifest itself
    cannot be read, or a preprocess run holds the lock of its folder (ConfigError: verify once it
    ends); every file-level problem is in the report. A file that resolves outside the
    manifest's folder through a symlink is a warning, and with ``strict`` a problem."""
    t0 = time.perf_counter()
    m = load_manifest(path)
    lock = running_preprocess(m.root)
    if lock is not None:
        raise ConfigError(m.root, f"a preprocess run holds the lock ({lock.name}) and is rewriting these "
                                  "files: verify once it has finished")
    scenes: list[SceneReport] = []
    work, links = [], []
    for name, e in m.doc["scenes"].items():
        sr = SceneReport(name, e.get("subset", ""), e.get("status", ""))
        if sr.status != "ok":
            sr.problems.append(f"preprocess failed: {e.get('error') or 'unknown error'}")
        sr.problems.extend(entry_problems(e))
        found = source_links(name, e.get("sources"))   # inputs outside the source folder
        if strict:
            sr.problems += [f"{name}: source {role} {src} resolves through a symlink to {target}, "
                            "outside the source folder (refused: --strict)" for _, role, src, target in found]
        else:
            links += found
        scenes.append(sr)
        for role, rec in (e.get("outputs") or {}).items():
            work.append((sr, role, rec))
    extra = []
    for sub, rec in (m.doc.get("episodes") or {}).items():
        work.append((None, f"episodes[{sub}]", rec))

    def size_of(item):
        return item[2].get("size", 0) or 0

    # a file several scenes list (a shared asset) is checked once, under the first scene
    # listing it; every scene listing it gets that check's problems (same record only: a
    # scene recording another size or hash for the path gets its own check)
    first = {}
    for item in work:
        first.setdefault(_record_key(item[2]), item)
    todo = sorted(first.values(), key=size_of, reverse=True)
    jobs = default_jobs() if jobs is None else max(1, jobs)

    def run(item):
        sr, role, rec = item
        return _check_file(m.root, sr.name if sr else None, role, rec, deep, strict)

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(todo) or 1))) as ex:
        results = list(ex.map(run, todo))
    done = {_record_key(item[2]): fr for item, fr in zip(todo, results)}
    for sr, role, rec in work:
        fr = done[_record_key(rec)]
        if fr.scene != (sr.name if sr else None) or fr.role != role:
            fr = replace(fr, scene=sr.name if sr else None, role=role, problems=list(fr.problems),
                         warnings=list(fr.warnings))
        (sr.files if sr is not None else extra).append(fr)
    _check_fit(m, scenes, jobs)
    order = {"scene": 0, "navmesh": 1, "episodes": 2}
    for sr in scenes:
        sr.files.sort(key=lambda f: order.get(f.role, 9))
    warnings = [w for f in results for w in f.warnings] + ([source_links_line(links)] if links else [])
    warnings += floor_warnings(m.doc["scenes"])
    if m.missing:
        warnings.append(f"{len(m.missing)} scene(s) of split {m.split!r} were missing from the source at "
                        f"preprocess time: {', '.join(x.get('name', '?') for x in m.missing[:8])}"
                        + (" ..." if len(m.missing) > 8 else ""))
    if m.shard:
        warnings.append(f"this is the manifest of shard {m.shard['index']}/{m.shard['count']} only "
                        "(merge the shards with `bps-assets manifest merge`)")
    problems = []
    if not scenes and m.shard and m.missing:  # a shard of a partial download: the merge decides
        warnings.append(f"shard {m.shard['index']}/{m.shard['count']} holds no scene: its {len(m.missing)} "
                        "scene(s) are missing from the source (the merged manifest must hold some)")
    elif not any(sr.status == "ok" for sr in scenes):
        problems.append(f"no usable scene: {len(m.scenes(status='failed'))} failed, {len(m.missing)} missing "
                        "from the source (nothing to train on; see the preprocess summary)")
    return VerifyReport(str(m.path), deep, scenes, extra, warnings,
                        sum(f.size for f in results), time.perf_counter() - t0, problems)


def _record_key(rec) -> str:
    """One key per distinct output record (path, size, hash, format): files checked once."""
    return json.dumps(rec, sort_keys=True, default=str)


def _check_fit(m, scenes: list[SceneReport], jobs: int) -> None:
    """A scene whose navmesh lies outside its bounds (``scene_checks.navmesh_fit``: another
    scene's .navmesh, e.g. from a bps before preprocess checked it) is a problem; only scenes
    whose files are intact are checked, from the navmesh's ``fit_points`` where ``--deep``
    sampled them (the navmesh is decoded once), else from a load of it."""
    from .scene_checks import navmesh_fit

    todo = []
    for sr in scenes:
        outs = (m.doc["scenes"][sr.name].get("outputs") or {})
        if sr.status == "ok" and sr.ok and "scene" in outs and "navmesh" in outs:
            pts = next((f.fit_points for f in sr.files if f.role == "navmesh"), None)
            todo.append((sr, m.resolve(outs["navmesh"]["path"]), m.resolve(outs["scene"]["path"]), pts))
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(todo) or 1))) as ex:
        found = list(ex.map(lambda t: navmesh_fit(t[0].name, t[1], t[2], t[3]), todo))
    for (sr, *_), msg in zip(todo, found):
        if msg is not None:
            sr.problems.append(msg.split(": ", 1)[1] + " (rerun preprocess with --force to build one)")
    for sr in scenes:   # used: not kept in the report
        for f in sr.files:
            f.fit_points = None


def format_report(rep: VerifyReport, verbose: bool = False) -> str:
    """The report as text: each failing scene (every scene with ``verbose``) with its problems,
    then warnings and a one-line verdict."""
    lines = []
    for s in rep.scenes:
        if s.ok and not verbose:
            continue
        mark = "ok  " if s.ok else "FAIL"
        roles = " ".join(f"{f.role}{'' if f.ok else '!'}" for f in s.files)
        lines.append(f"{mark} {s.name} ({s.subset}) {roles}".rstrip())
        for p in s.problems + [p for f in s.files for p in f.problems]:
            lines.append(f"       {p}")
    for f in rep.extra_files:
        if not f.ok:
            lines.append(f"FAIL {f.role}: " + "; ".join(f.problems))
    if any(not f.ok for s in rep.scenes for f in s.files):
        lines.append("(a file role marked ! has the problem listed under it: scene! = the packed "
                     "scene, navmesh!, episodes!)")
    for w in rep.warnings:
        lines.append(f"warning: {w}")
    for p in rep.problems:
        lines.append(f"FAIL manifest: {p}")
    nbad = sum(not s.ok for s in rep.scenes) + sum(not f.ok for f in rep.extra_files)
    nfiles = sum(len(s.files) for s in rep.scenes) + len(rep.extra_files)
    speed = rep.bytes / rep.seconds / 1e6 if rep.seconds > 0 else 0.0
    verdict = "OK" if rep.ok else f"FAILED ({nbad} problem scene(s)/file(s))"
    lines.append(f"{verdict}: {len(rep.scenes)} scenes, {nfiles} files, {rep.bytes / 1e6:.1f} MB "
                 f"{'deep-' if rep.deep else ''}checked in {rep.seconds:.2f} s ({speed:.0f} MB/s) — {rep.manifest}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ source mode

@dataclass
class SourceReport:
    """Result of ``verify_source``: which scenes of a split were found under the source root
    and which were missing, lacked a navmesh, or matched nothing known."""
    dataset: str
    split: str
    src_root: str
    expected: int
    found: list[str]
    missing: list[tuple[str, str]]
    no_navmesh: list[str]
    other_split: list[str]
    unknown: list[str]
    stray: list[str]
    broken_semantics: list[tuple[str, str]] = field(default_factory=list)  # (scene, error)

    @property
    def ok(self):
        """True when no scene of the split is missing and no annotation pair is half there."""
        return not self.missing and not self.broken_semantics

    def to_json(self) -> dict:
        """The report as a JSON object (the CLI's ``--json`` output)."""
        return {"dataset": self.dataset, "split": self.split, "src_root": self.src_root,
                "ok": self.ok, "expected": self.expected, "found": len(self.found),
                "missing": [{"name": n, "subset": s} for n, s in self.missing],
                "no_navmesh": self.no_navmesh, "other_split": len(self.other_split),
                "unknown": self.unknown, "stray": self.stray,
                "broken_semantics": [{"name": n, "error": e} for n, e in self.broken_semantics]}


def verify_source(src_root, dataset: str, split: str | None = None, subsets=None) -> SourceReport:
    """Check a source tree against a dataset description before preprocessing: plans
    ``split`` (default: the dataset's) without converting anything."""
    from .datasets import load_dataset
    from .plan import make_plan

    ds = load_dataset(dataset)
    plan = make_plan(src_root, ds, split, None, subsets)
    return SourceReport(ds.name, plan.split, str(plan.src_root), len(plan.selected),
                        [s.name for s in plan.scenes], plan.missing,
                        [s.name for s in plan.scenes if s.navmesh is None],
                        plan.other_split, plan.unknown, plan.stray,
                        _broken_semantics(plan.scenes, dataset))


def _broken_semantics(scenes, dataset: str) -> list[tuple[str, str]]:
    """(scene, error) of the scenes whose annotation pair is half there (what preprocess would
    convert without semantics, with a warning)."""
    from ..errors import BpsError
    from .scene_dataset_config import semantic_for

    out = []
    for s in scenes:
        try:
            semantic_for(s.scene, dataset)
        except BpsError as e:
            out.append((s.name, str(e)))
    return out


def format_source_report(rep: SourceReport, limit: int = 50) -> str:
    """The source report as text, each listing cut at ``limit`` entries."""
    def listing(title, items):
        out = [f"{title} ({len(items)}):"]
        out += [f"  {x}" for x in items[:limit]]
        if len(items) > limit:
            out.append(f"  ... {len(items) - limit} more (use --json for all)")
        return out

    lines = []
    if rep.missing:
        lines += listing("missing scenes", [f"{n} ({s})" for n, s in rep.missing])
    if rep.unknown:
        lines += listing("unexpected: scene files not in the dataset", rep.unknown)
    if rep.stray:
        lines += listing("unexpected: stray files", rep.stray)
    if rep.no_navmesh:
        lines += listing("scenes without a .navmesh (built, not imported)", rep.no_navmesh)
    if rep.broken_semantics:
        lines += listing("scenes with half an annotation pair (preprocess converts them without semantics)",
                         [f"{n}: {e}" for n, e in rep.broken_semantics])
    verdict = "OK" if rep.ok else "INCOMPLETE"
    lines.append(f"{verdict}: {rep.dataset} split {rep.split!r}: {len(rep.found)}/{rep.expected} scenes "
                 f"present, {len(rep.missing)} missing, {len(rep.unknown) + len(rep.stray)} unexpected "
                 f"file(s), {len(rep.other_split)} scene(s) of other splits ignored"
                 + (f", {len(rep.broken_semantics)} half annotation pair(s)" if rep.broken_semantics else "")
                 + f" — {rep.src_root}")
    return "\n".join(lines)
