"""Outputs of scenes an ``--overwrite`` preprocess run no longer holds, removed after it.

An ``--overwrite`` run replaces its manifest; a scene the earlier manifest listed that is no
longer in the split (its scan gone, outside the new split / subsets, or moved to another subset)
would keep its files in OUT_ROOT, and habitat-lab's PointNav dataset (``content_scenes=["*"]``)
would still load its episodes. After the run (``run_dropping_stale``) those files are removed:
only the ``scene``, ``navmesh`` and ``episodes`` outputs the earlier manifest recorded, each at
the path preprocess writes for that scene (``paths``) inside OUT_ROOT's output folders, for a
valid scene and subset name; never a path of a scene the split still holds in any shard
(``Plan.held``: by path, so a moved scene keeps its new outputs), nor a file another run's
manifest here (another dataset, split, subsets or source) lists, nor a composed scene's shared
``asset:`` files. A manifest of this split (a shard's, a merged one) vouches for nothing more. The
scene's completion record goes too. A file that cannot be removed does not stop the others:
an ``OutputWriteError`` names each one at the end (the manifest is already written).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import BpsError, OutputWriteError
from ..json_input import parse_json
from ..nav.episodes import check_scene_name, check_split_name

Paths = Callable[[str, str], dict]   # (scene, subset) -> {role: path under OUT_ROOT} (preprocess.output_paths)

ROLES = ("scene", "navmesh", "episodes")
FOLDERS = ("scenes", "navmeshes", "episodes")   # the only folders of OUT_ROOT files are removed from


def _doc(manifest: Path) -> dict:
    """The manifest, {} when it is absent or unreadable (it then vouches for nothing)."""
    try:
        doc = parse_json(manifest.read_bytes(), manifest, encoding="utf-8")
    except Exception:   # absent, unreadable, not JSON: it vouches for nothing
        return {}
    return doc if isinstance(doc, dict) else {}


def _scenes(doc: dict) -> dict:
    scenes = doc.get("scenes")
    return scenes if isinstance(scenes, dict) else {}


def _identity(doc: dict) -> tuple:
    """What makes two manifests runs of one split (their shards, or their merge)."""
    return tuple(str(doc.get(k)) for k in ("dataset", "split", "subsets", "source_root"))


def _bad_name(name, subset) -> str | None:
    """Why a manifest's scene or subset name cannot name an output (None when it can)."""
    try:
        check_scene_name(name if isinstance(name, str) else "")
        check_split_name(subset)
    except BpsError as e:
        return e.detail
    return None


def recorded_outputs(manifest: Path, paths: Paths, doc: dict | None = None, log=None) -> dict[str, list[str]]:
    """{scene: [relative paths]} of the ``ROLES`` outputs ``manifest`` records, each only where
    it is the path preprocess writes for that scene and subset (``paths``) and the names are
    valid (a bad one is skipped, with a line to ``log``)."""
    out: dict[str, list[str]] = {}
    for name, entry in _scenes(_doc(manifest) if doc is None else doc).items():
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
                       record: Callable[[str], Path], plan=None):
    """``run()`` (a preprocess run writing ``manifest``); with ``overwrite``, then remove the
    outputs of scenes the earlier ``manifest`` listed that the split (``plan.held``, every
    shard) no longer holds (module docstring), and their completion records (``record(name)``).
    Returns ``run()``'s result; ``OutputWriteError`` naming each file it could not remove."""
    out_root = Path(out_root).resolve()
    before = recorded_outputs(manifest, paths, log=log) if overwrite else {}
    res = run()
    held_scenes = dict(plan.held) if plan is not None else {}
    for r in res.results:   # what this run processed is held whatever the plan says
        if r.status != "missing":
            held_scenes.setdefault(r.name, r.subset)
    held = {p for n, sub in held_scenes.items() for p in paths(n, sub).values()}
    stale = {n: [p for p in rels if p not in held] for n, rels in before.items()}
    stale = {n: rels for n, rels in stale.items() if rels}
    if not stale:
        return res
    ident = None if plan is None else _identity({"dataset": plan.dataset.name, "split": plan.split,
                                                  "subsets": list(plan.subsets), "source_root": str(plan.src_root)})
    others = set()   # what another run's manifest here (another dataset, split, ...) vouches for stays
    for m in out_root.glob("manifest*.json"):
        if m.resolve() == Path(manifest).resolve():
            continue
        doc = _doc(m)
        if ident is not None and _identity(doc) == ident:
            continue   # this split's (a shard's, a merged) manifest: the split decides what is held
        others.update(p for ps in recorded_outputs(m, paths, doc).values() for p in ps)
    removed, failed = [], []
    for name, rels in sorted(stale.items()):
        for rel in rels:
            p = out_root / rel
            if rel in others or not p.is_file() or p.is_symlink():
                continue
            if not _inside_outputs(out_root, rel):
                if log:
                    log(f"  not removed: {p} lies outside {out_root}'s output folders")
                continue
            try:
                p.unlink()
            except OSError as e:   # finish the others; reported below
                failed.append(f"{p} ({e.strerror or e})")
                continue
            removed.append(name)
    for name in set(removed):   # its completion record vouches for files that are gone
        try:
            record(name).unlink(missing_ok=True)
        except OSError as e:
            failed.append(f"{record(name)} ({e.strerror or e})")
    if removed and log:
        names = sorted(set(removed))
        log(f"  removed the outputs of {len(names)} scene(s) no longer in this run (--overwrite): "
            f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
    if failed:
        raise OutputWriteError(out_root, f"the manifest {Path(manifest).name} was written, but "
                                         f"{len(failed)} output(s) of scenes no longer in this run could "
                                         f"not be removed (--overwrite): {'; '.join(failed)}")
    return res


def overwrite_hint(n_scenes: int) -> str:
    """The end of a refusal to replace another run's manifest: what ``--overwrite`` then does."""
    return (f"use another OUT_ROOT, or pass --overwrite, which removes the outputs of its {n_scenes} "
            "scene(s) not in this run")


__all__ = ["overwrite_hint", "recorded_outputs", "run_dropping_stale"]
