"""Write a ``ComposedScene``: each asset once into the dataset's asset library, the scene as
its stage plus an instance table (docs/FORMAT.md 5.7); read one back unflattened.

``pack_scene(scene, dst, assets_dir)``: every asset not yet in ``assets_dir`` is converted
there as ``KEY.bps`` (its own coordinates). An existing one is kept when it is intact (header,
section CRCs, padding) and its header says it was converted from the same source bytes with the
same converter settings and tool version (else re-converted), so scenes sharing an object
library convert each asset once per output folder and option set; parallel workers racing on
one asset each write it whole and atomically (``container.atomic_write``). The stage is
converted with its transform applied, the instance table stored beside it.
``read_composed(path)``: ``(stage PackedScene, InstanceTable, [asset paths])`` for an
instanced renderer; ``navmesh_triangles(path)``: the world-space triangles a navmesh is built
from (the stage and the STATIC instances, rigid or articulated: habitat-sim's rule).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from .. import composed_section as cs
from ..container import Container
from ..errors import BpsError, DatasetError, is_int
from ..hashing import settings_fingerprint, sha256_file
from ..packed_scene import (DEFAULTS, SUFFIX as ASSET_SUFFIX, convert_file, convert_scene, read_packed_scene,
                            settings_json)
from .model import ComposedScene


def _asset_options(options):
    return dataclasses.replace(options, dataset="generic", up="y")


def pack_assets(scene: ComposedScene, assets_dir: Path, options=DEFAULTS,
                fresh_since: float | None = None, stale=()) -> list[dict]:
    """Convert the scene's assets missing from ``assets_dir`` or not current there (``_current``);
    ``[{key, path, source, converted, triangles}]`` (triangles: None for an asset no instance
    uses). ``fresh_since`` (an mtime on the output file system's clock): also re-convert every
    asset written before it (preprocess ``--force``: each asset once per run). ``stale``: asset
    file names to re-convert whatever they look like (a resume check found them damaged)."""
    assets_dir.mkdir(parents=True, exist_ok=True)
    used = {i.asset for i in scene.instances}   # the stage lives in the scene file itself
    opts = _asset_options(options)
    fingerprint = settings_fingerprint(settings_json(opts))  # the same for every asset
    out = []
    for k, a in enumerate(scene.assets):
        dst = assets_dir / f"{a.key}{ASSET_SUFFIX}"
        made, tris = False, None
        if k in used:
            h = None if dst.name in stale else _current(dst, a.path, fingerprint, fresh_since)
            if h is None:
                res = convert_file(a.path, dst, opts, overwrite=True, scene_id=a.key, semantic=None)
                made, tris = True, res.stats["triangles_out"]
            else:
                tris = _triangles(h)
        out.append({"key": a.key, "path": f"../assets/{dst.name}", "source": os.path.realpath(a.path), "converted": made,
                    "triangles": tris})
    return out


def _current(dst: Path, src: Path, fingerprint: str, fresh_since: float | None = None) -> dict | None:
    """``dst``'s header when ``dst`` exists, was written at or after ``fresh_since`` (when given),
    was converted from ``src`` as it is now (the sha256 in its header) by this tool version with
    the settings whose fingerprint is ``fingerprint`` (the one preprocess keys scenes on,
    ``hashing.settings_fingerprint``, over the converter settings in its header) and is intact as
    far as a resumed scene's own outputs are checked (section CRCs, padding:
    ``pipeline.resume_check``); else None. The header fields are compared first: an asset to be
    re-converted anyway pays no CRC pass."""
    from .. import __version__
    try:
        if fresh_since is not None and dst.stat().st_mtime < fresh_since:
            return None
        with Container(dst, "SCEN") as c:
            h = c.header
            conv = h.get("converter") if isinstance(h.get("converter"), dict) else {}
            settings = conv.get("settings")
            if not isinstance(settings, dict) or conv.get("version") != __version__ or \
                    settings_fingerprint(settings) != fingerprint or \
                    (h.get("source") or {}).get("sha256") != sha256_file(src)[0]:
                return None
            c.check_checksums()
            c.check_padding()
    except (OSError, BpsError):
        return None
    return h


def pack_scene(scene: ComposedScene, dst: str | os.PathLike, assets_dir: str | os.PathLike,
               options=DEFAULTS, overwrite: bool = False, fresh_since: float | None = None,
               stale=()) -> dict:
    """Write the composed scene ``dst`` (and its missing or stale assets: ``pack_assets``);
    returns statistics."""
    from ..readers import load

    dst, assets_dir = Path(dst), Path(assets_dir)
    if assets_dir.resolve().parent != dst.resolve().parent.parent:
        raise DatasetError(dst, "the asset library must be the folder 'assets' beside the scene's folder")
    if scene.stage is None:
        raise DatasetError(scene.source, "the scene has no stage to pack (a stand-in stage is needed)")
    bad = cs.semantic_id_problem([i.semantic_id for i in scene.instances], [i.name for i in scene.instances])
    if bad:   # before any asset is written: the runtime could not load the scene
        raise DatasetError(scene.source, bad)
    entries = pack_assets(scene, assets_dir, options, fresh_since, set(stale))
    stage_path = scene.assets[scene.stage.asset].path
    doc = load(stage_path)
    m = scene.stage.transform
    for mesh in doc.meshes:   # the stage in world space: the scene file's own geometry
        mesh.positions = (mesh.positions.astype(np.float64) @ m[:3, :3].T + m[:3, 3]).astype(np.float32)
        if mesh.normals is not None:
            nrm = mesh.normals.astype(np.float64) @ np.linalg.inv(m[:3, :3])
            nrm /= np.maximum(np.linalg.norm(nrm, axis=1, keepdims=True), 1e-12)
            mesh.normals = nrm.astype(np.float32)
        if np.linalg.det(m[:3, :3]) < 0:
            mesh.indices = mesh.indices[:, ::-1].copy()
    inst = scene.instances
    cats = sorted({i.category for i in inst if i.category})
    header = {"instances": len(inst), "assets": [{k: e[k] for k in ("key", "path", "source")} for e in entries],
              "categories": cats, "names": [i.name for i in inst], "kinds": [i.kind for i in inst], "motion_types": list(cs.MOTION_TYPES),
              "stage": {"template": scene.stage.name, "source": os.path.realpath(stage_path),
                        "transform": scene.stage.transform.tolist()},
              "source": os.path.realpath(scene.source), "navmesh": str(scene.navmesh) if scene.navmesh else None,
              "skipped": scene.skipped, "notes": scene.notes,
              # always written (null: none), so a reader tells a file packed before the key
              "navmesh_unknown": scene.navmesh_unknown or None,
              "navmesh_missing": scene.navmesh_missing or None}
    arrays = {
        "instance_asset": np.array([i.asset for i in inst], np.int32),
        "instance_transform": np.array([i.transform for i in inst], np.float64).reshape(-1, 4, 4),
        "instance_semantic": np.array([i.semantic_id for i in inst], np.int32),
        "instance_category": np.array([cats.index(i.category) if i.category else -1 for i in inst], np.int32),
        "instance_motion": np.array([cs.MOTION_TYPES.index(i.motion_type) for i in inst], np.uint8),
        "instance_group": np.array([max(i.group, 0) for i in inst], np.int32),
    }
    # resolved, as every packed file's source (docs/FORMAT.md): one file from any working folder
    info = {"path": os.path.realpath(scene.source), "format": "habitat-scene-instance"}
    res = convert_scene(doc, dst, _asset_options(options), overwrite=overwrite, scene_id=scene.name,
                        source_info=info, extra=(cs.HEADER_KEY, header, arrays))
    st = dict(res.stats)
    used = sorted({inst[k].asset for k in range(len(inst))})
    st["instance_triangles"] = sum(entries[i.asset]["triangles"] for i in inst)   # what instancing draws besides the stage
    st.update(instances=len(inst), assets=len(used), assets_converted=sum(e["converted"] for e in entries),
              skipped_instances=len(scene.skipped),
              asset_files=[f"{assets_dir.name}/{Path(entries[k]['path']).name}" for k in used])
    return st


def _triangles(header: dict) -> int:
    n = (header.get("counts") or {}).get("triangles", 0)
    return n if is_int(n) else 0


def read_composed(path: str | os.PathLike, sections=None):
    """``(stage, InstanceTable, [asset file paths])`` of a composed scene file, not flattened."""
    stage = read_packed_scene(path, sections, expand=False)
    with Container(path, "SCEN") as c:
        table = cs.read_table(path, c)
    return stage, table, [cs.asset_path(path, a) for a in table.header["assets"]]


def is_composed(path: str | os.PathLike) -> bool:
    """True when ``path`` is a packed scene with an instance table."""
    with Container(path, "SCEN") as c:
        return cs.HEADER_KEY in c.header


# habitat-sim bakes into a recomputed navmesh (include_static_objects) the stage plus every
# rigid object AND every articulated object whose motion type is STATIC; KINEMATIC and DYNAMIC
# ones are left out (src/esp/sim/Simulator.cpp, Simulator::getJoinedMesh, called by
# Simulator::recomputeNavMesh)
NAVMESH_MOTIONS = ("STATIC",)


def navmesh_triangles(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(vertices f64 [V,3], triangles i64 [T,3]) of what a navmesh is built from: the stage and
    the instances (rigid objects and articulated links) whose motion type is STATIC."""
    stage, table, _ = read_composed(path, ["positions", "indices"])
    flat = cs.expand(stage, table, ["positions", "indices"],
                     lambda p, s: read_packed_scene(p, s, expand=False), motions=NAVMESH_MOTIONS)
    return flat.positions.astype(np.float64), flat.indices.astype(np.int64)
