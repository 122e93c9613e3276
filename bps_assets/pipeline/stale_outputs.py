"""Outputs of scenes an ``--overwrite`` preprocess run no longer holds, removed after it.

An ``--overwrite`` run replaces its manifest; a scene the earlier manifest listed that this run
does not process (its scan gone from the source, or outside the new split / subsets) would keep
its files in OUT_ROOT, and habitat-lab's PointNav dataset (``content_scenes=["*"]`` lists the
content folder) would still load that scene's episodes. After the run (``run_dropping_stale``)
those files are removed: only the ``scene``, ``navmesh`` and ``episodes`` outputs the earlier
manifest recorded, each at the path preprocess itself writes for that scene (``paths``) inside
OUT_ROOT's own output folders, for a valid scene and subset name (else skipped, with a line), never a file another manifest in OUT_ROOT (another shard's) lists, nor a composed scene's shared
``asset:`` files (other scenes may use them); and the scene's completion record. Nothing else
in OUT_ROOT is touched.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import BpsError
from ..json_input import parse_json
from ..nav.episodes import check_scene_name, check_split_name

Paths = Callable[[str, str], dict]   # (scene, subset) -> {role: path under OUT_ROOT} (preprocess.output_paths)

ROLES = ("scene", "navmesh", "episodes")
FOLDERS = ("scenes", "navmeshes", "episodes")   # the only folders of OUT_ROOT files are removed from


def _scenes(manifest: Path) -> dict:
    """``scenes`` of a manifest, {} when it is absent or unreadable (nothing is then removed)."""
    try:
        doc = parse_json(manifest.read_bytes(), manifest, encoding="utf-8")
    except Exception:   # absent, unreadable, not JSON: it vouches for nothing
        return {}
    scenes = doc.get("scenes") if isinstance(doc, dict) else None
    return scenes if isinstance(scenes, dict) else {}


def _bad_name(name, subset) -> str | None:
    """Why a manifest's scene or subset name cannot name an output (None when it can)."""
    try:
        check_scene_name(name if isinstance(name, str) else "")
        check_split_name(subset)
    except BpsError as e:
        return e.detail
    return None


def recorded_outputs(manifest: Path, paths: Paths, log=None) -> dict[str, list[str]]:
    """{scene: [relative paths]} of the ``ROLES`` outputs ``manifest`` records, each only where
    it is the path preprocess writes for that scene and subset (``paths``) and the names are
    valid (a bad one is skipped, with a line to ``log``)."""
    out: dict[str, list[str]] = {}
    for name, entry in _scenes(manifest).items():
        outs = entry.get("outputs") if isinstance(entry, dict) else None
        if not isinstance(outs, dict):
            continue
        why = _bad_name(name, str(entry.get("subset")))
        if why:
            if log:
                log(f"  {manifest}: scene {name!r} skipped, its outputs are not removed ({why})")
            continue
        ours = paths(name, str(entry.get("subset")))
        out[name] = [rec["path"] for role, rec in outs.items()
                     if role in ROLES and isinstance(rec, dict) and rec.get("path") == ours[role]]
    return out


def _inside_outputs(out_root: Path, rel: str) -> bool:
    """True when ``out_root/rel`` (``out_root`` resolved) resolves into one of its output folders."""
    p = (out_root / rel).resolve()   # out_root is resolved: a linked-in folder leads out of it
    return any(p.is_relative_to(out_root / f) and p != out_root / f for f in FOLDERS)


def run_dropping_stale(out_root: Path, manifest: Path, overwrite: bool, run: Callable, log, paths: Paths,
                       record: Callable[[str], Path]):
    """``run()`` (a preprocess run writing ``manifest``); with ``overwrite``, then remove the
    outputs of scenes the earlier ``manifest`` listed that the run did not process (module
    docstring), and their completion records (``record(name)``). Returns ``run()``'s result."""
    out_root = Path(out_root).resolve()
    before = recorded_outputs(manifest, paths, log) if overwrite else {}
    res = run()
    held = {r.name for r in res.results if r.status != "missing"}
    stale = {n: rels for n, rels in before.items() if n not in held and rels}
    if not stale:
        return res
    others = set()   # what other manifests here (other shards) vouch for stays
    for m in out_root.glob("manifest*.json"):
        if m.resolve() != Path(manifest).resolve():
            others.update(p for ps in recorded_outputs(m, paths).values() for p in ps)
    removed = []
    for name, rels in sorted(stale.items()):
        for rel in rels:
            p = out_root / rel
            if rel in others or not p.is_file() or p.is_symlink():
                continue
            if not _inside_outputs(out_root, rel):
                if log:
                    log(f"  not removed: {p} lies outside {out_root}'s output folders")
                continue
            p.unlink()
            removed.append(name)
    for name in set(removed):   # its completion record vouches for files that are gone
        record(name).unlink(missing_ok=True)
    if removed and log:
        names = sorted(set(removed))
        log(f"  removed the outputs of {len(names)} scene(s) no longer in this run (--overwrite): "
            f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
    return res


__all__ = ["recorded_outputs", "run_dropping_stale"]
