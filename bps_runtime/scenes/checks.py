"""What a scene's load checks before the scene may be used (issue 26): its files are the ones
the manifest names, and what they bring is usable.

``Expected`` is what the manifest recorded for one scene (file sizes, the navmesh's sha256, the
source scan's sha256 that a packed scene's header repeats, the other scenes' file stems);
``expected_for(manifest, entry)`` builds it. The loader calls, on its own thread:
``check_files(source)`` before reading (sizes: one stat each; the navmesh's hash: it is small
and read whole anyway), ``check_scene_header(source, header)`` after the read (the header's
``source.sha256`` names the scan it was converted from), and ``check_navmesh(source, nav,
header)`` (``bps_assets.nav.validate.check_navmesh``: finite, in range; its header's ``source``
is not another scene's file; ``nav.validate.require_navmesh_fit``: it lies inside the
scene's bounds). Each failure is one typed error naming the file; the cache quarantines the
scene (or ``make()`` refuses it at start-up). The packed scene is not hashed here (its read
checks every section's CRC; ``verify --deep`` hashes it). ``semantic_objects(path)``: a scene's
object annotations, from its header alone; ``unannotated(entries)``: the entries with none.
"""
from __future__ import annotations

from dataclasses import dataclass

from bps_assets.errors import CorruptFileError, is_int
from bps_assets.habitat_names import habitat_scene_name


@dataclass(frozen=True)
class Expected:
    """The manifest's record of one scene's files (None: not recorded, not checked)."""
    scene_size: int | None = None
    source_sha256: str | None = None      # the scan the packed scene was converted from
    navmesh_size: int | None = None
    navmesh_sha256: str | None = None
    other_stems: frozenset = frozenset()  # file stems of the manifest's other scenes


def expected_for(manifest, entries) -> list[Expected]:
    """``Expected`` of each manifest entry (``manifest.scenes()`` items)."""
    stems = frozenset(habitat_scene_name(e.scene) for e in manifest.scenes(None) if e.scene)
    recs = manifest.doc.get("scenes") or {}
    out = []
    for e in entries:
        files, src = e.outputs or {}, ((recs.get(e.name) or {}).get("sources") or {}).get("scene") or {}
        scene, nav = files.get("scene") or {}, files.get("navmesh") or {}
        out.append(Expected(scene.get("size"), src.get("sha256"), nav.get("size"), nav.get("sha256"),
                            stems - {habitat_scene_name(e.scene)}))
    return out


def check_files(source) -> None:
    """Sizes of the scene's files, and the navmesh's sha256, against the manifest (the checks
    ``bps-assets verify`` lists, raised here: ``bps_assets.hashing``)."""
    from bps_assets.hashing import recorded_hash_problem, recorded_size_problem

    exp = source.expected
    if exp is None:
        return
    for path, size in ((source.scene_path, exp.scene_size), (source.navmesh_path, exp.navmesh_size)):
        problem = recorded_size_problem(path, size)[1] if path and size is not None else None
        if problem is not None:
            raise CorruptFileError(path, problem)
    if exp.navmesh_sha256 and source.navmesh_path:
        problem = recorded_hash_problem(source.navmesh_path, exp.navmesh_sha256)
        if problem is not None:
            raise CorruptFileError(source.navmesh_path, problem)


def check_scene_header(source, header: dict) -> None:
    """The packed scene was converted from the scan the manifest names (header ``source.sha256``)."""
    exp = source.expected
    got = ((header or {}).get("source") or {}).get("sha256")
    if exp is not None and exp.source_sha256 and got and got != exp.source_sha256:
        raise CorruptFileError(source.scene_path, f"header: converted from another scan than scene "
                                                  f"{source.scene_id!r}'s (header scene_id "
                                                  f"{header.get('scene_id')!r}): replaced by another scene's file?")


def check_navmesh(source, nav, header: dict) -> None:
    """The navmesh's values are usable, it was built for this scene, and it lies inside it."""
    from bps_assets.nav.validate import check_navmesh as check_values
    from bps_assets.nav.validate import header_bounds, require_navmesh_fit

    path = source.navmesh_path
    check_values(nav, path)
    exp = source.expected
    built_from = nav.source
    if exp is not None and built_from and habitat_scene_name(built_from) in exp.other_stems:
        raise CorruptFileError(path, f"header: built from {built_from!r}, another scene's file, not "
                                     f"scene {source.scene_id!r}'s: replaced by another scene's navmesh?")
    require_navmesh_fit(nav, header_bounds(header), path, source.scene_id)


def semantic_objects(path) -> int:
    """The object annotations of the packed scene at ``path`` (0: none), from its header alone
    (every rank may check every scene of a split at start): a plain scene's ``semantics`` object
    count, a composed scene's instance count (each instance group is an object once expanded);
    no section is read or decompressed."""
    from bps_assets.composed_section import HEADER_KEY as COMPOSED
    from bps_assets.container import read_header
    from bps_assets.packed_scene import KIND
    from bps_assets.semantic_section import header_counts

    hdr, secs, _ = read_header(path, KIND)
    comp = hdr.get(COMPOSED)
    if isinstance(comp, dict):
        objects = comp.get("instances", 0)
    else:
        counts = header_counts(path, hdr, secs["indices"].shape[0] if "indices" in secs else 0)
        objects = counts[0] if counts else 0
    return int(objects) if is_int(objects) else 0


def unannotated(entries) -> list:
    """The manifest entries (in order) whose scene has no object annotations (``semantic_objects``
    <= 0): the scenes the ``semantic`` sensor refuses, sampled ObjectNav leaves out and an
    ObjectNav episode file's note names. Header reads only."""
    return [e for e in entries if semantic_objects(e.scene) <= 0]
