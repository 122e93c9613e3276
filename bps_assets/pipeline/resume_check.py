"""What a resumed preprocess checks before it keeps a scene's earlier outputs.

A completion record vouches for outputs that were complete when it was written; it cannot
vouch for what happened to them since (a disk error, a copy cut short, a file replaced by
garbage of the same size). So before a scene is skipped as up to date, every output it keeps
is checked (on a thread pool), and a scene with a damaged output is redone:

- default (cheap): the recorded size; for packed files (SCEN / NAVM) the header, kind, content
  version and identity (``identity_problem``), the CRC-32 of every section's stored bytes (4 MiB
  at a time, never decompressed) and the padding between them; other files (episodes, small)
  against the manifest's sha256;
- ``full`` (``--verify-kept``): the sha256 of every kept file against the record, as
  ``bps-assets verify`` does.

Why CRC-32 by default (speed figures): docs/DECISIONS.md.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping

from ..container import Container
from ..errors import BpsError
from ..hashing import default_jobs, sha256_file


def identity_problem(rec: Mapping, header: Mapping, entry: Mapping) -> str | None:
    """Why the packed output ``rec`` of the scene ``entry`` (its manifest entry), whose header is
    ``header``, is another scene's file (a copy of the right size and sound CRCs), or None. A
    packed scan records its source's sha256 (composed scenes record none: not judged); a built
    navmesh, the name of the packed scene it was built from (an imported one names its .navmesh)."""
    outs, srcs = entry.get("outputs"), entry.get("sources")
    if not isinstance(outs, Mapping):
        return None
    if rec is outs.get("scene") and rec.get("format") == "SCEN":   # not a composed scene's shared assets
        had = (header.get("source") or {}).get("sha256") if isinstance(header.get("source"), Mapping) else None
        want = ((srcs or {}).get("scene") or {}).get("sha256") if isinstance(srcs, Mapping) else None
        if isinstance(had, str) and isinstance(want, str) and had != want:
            return (f"{rec['path']}: packed from another source (sha256 {had[:12]}..., this scene's "
                    f"{want[:12]}...; scene id {header.get('scene_id')!r})")
    elif rec is outs.get("navmesh") and rec.get("format") == "NAVM":
        had = header.get("source")
        scene = outs.get("scene")
        want = Path(scene["path"]).name if isinstance(scene, Mapping) and isinstance(scene.get("path"), str) else None
        if isinstance(had, str) and had.endswith(".bps") and want and had != want:
            return f"{rec['path']}: built from {had}, not this scene's {want}"
    return None


def output_problem(out_root: Path, rec: Mapping, full: bool = False, entry: Mapping | None = None) -> str | None:
    """Why the recorded output ``rec`` (a manifest ``outputs`` entry) cannot be kept, or None.
    ``entry``: the scene's manifest entry, to check a packed file's identity against."""
    try:
        path = out_root / rec["path"]
        size = rec["size"]
    except (KeyError, TypeError):
        return "the completion record has no path/size for it"
    try:
        now = path.stat().st_size
    except FileNotFoundError:
        return f"{rec['path']}: missing"
    except OSError as e:
        return f"{rec['path']}: cannot stat ({e.strerror})"
    if now != size:
        return f"{rec['path']}: size {now} != recorded {size}"
    fmt = rec.get("format")
    packed = isinstance(fmt, str) and len(fmt) == 4 and fmt.isupper()
    try:
        if full or not packed:
            digest, _ = sha256_file(path)
            if digest != rec.get("sha256"):
                return f"{rec['path']}: sha256 differs from the record (damaged or replaced)"
            return None
        with Container(path, fmt) as c:
            h = c.header
            cv = h.get("scene_format_version", h.get("version"))
            if "content_version" in rec and cv != rec["content_version"]:
                return f"{rec['path']}: content version {cv!r} != recorded {rec['content_version']!r}"
            who = identity_problem(rec, h, entry) if isinstance(entry, Mapping) else None
            if who:
                return who
            c.check_checksums()
            c.check_padding()
    except BpsError as e:
        return str(e)
    return None


def problems_by_output(out_root: Path, entry: Mapping, full: bool = False,
                       shared: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """{output role: problem} of the outputs of ``entry`` that cannot be kept ("" for a record
    that lists no outputs). ``shared``: the problems of shared asset files already checked
    (``_shared_key`` -> problem or None), not checked again."""
    outs = entry.get("outputs") if isinstance(entry, Mapping) else None
    if not isinstance(outs, Mapping):
        return {"": "the completion record lists no outputs"}
    probs = {}
    for role, rec in outs.items():
        rec = rec if isinstance(rec, Mapping) else {}
        key = _shared_key(role, rec)
        probs[role] = shared[key] if shared is not None and key in shared else \
            output_problem(Path(out_root), rec, full, entry)
    return {role: p for role, p in probs.items() if p}


def _shared_key(role: str, rec: Mapping) -> str | None:
    # a composed scene's asset file (``asset:KEY``) is shared by the scenes using it and its check
    # does not depend on the scene (identity_problem judges only the scene and navmesh files)
    return json.dumps(rec, sort_keys=True, default=str) if role.startswith("asset:") else None


def check_many(out_root: Path, entries: Mapping[str, Mapping], full: bool = False,
               jobs: int | None = None) -> dict[str, list[str]]:
    """The problems (``problems_by_output``'s values) of many scenes on a thread pool:
    {name: problems} (empty list: keep).
    A shared asset file is checked once, however many of the scenes use it."""
    names = list(entries)
    if not names:
        return {}
    assets: dict[str, Mapping] = {}
    for n in names:
        outs = entries[n].get("outputs") if isinstance(entries[n], Mapping) else None
        for role, rec in (outs.items() if isinstance(outs, Mapping) else ()):
            key = _shared_key(role, rec) if isinstance(rec, Mapping) else None
            if key is not None:
                assets.setdefault(key, rec)
    jobs = default_jobs() if jobs is None else max(1, jobs)
    with ThreadPoolExecutor(max_workers=min(jobs, max(len(names), len(assets)))) as ex:
        keys = list(assets)
        shared = dict(zip(keys, ex.map(lambda k: output_problem(Path(out_root), assets[k], full), keys)))
        res = ex.map(lambda n: list(problems_by_output(out_root, entries[n], full, shared).values()), names)
        return dict(zip(names, res))
