"""`bps-assets convert` (scan files -> packed scenes) and `bps-assets info` (any packed file)."""
from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import click

from bps_assets.container import read_header, refuse_other_source
from bps_assets.errors import BpsError, CorruptFileError
from bps_assets.packed_scene import DEFAULTS, SUFFIX, ConvertOptions, convert_file, scene_id_for
from bps_assets.transforms.frame import DATASETS, UP_AXES
from bps_assets.transforms.reorder import CURVES
from bps_runtime.render.protocol import MAX_RESOLUTION, RenderOptions

from .options import Finite, convert_options


def _mb(n) -> str:
    return f"{n / 1e6:.2f} MB"


def _external_bytes(src: str) -> int:
    """Bytes of the files a ``.gltf`` names beside it (buffers, images): its scene's real size."""
    if not src.lower().endswith(".gltf"):
        return 0
    from bps_assets.readers.gltf_container import open_gltf

    g = open_gltf(src)
    total, seen = 0, set()
    for key in ("buffers", "images"):
        for i, item in enumerate(g.items(key)):
            uri = item.get("uri") if isinstance(item, dict) else None
            if isinstance(uri, str) and not uri.startswith("data:"):
                p = g.resolve_uri(uri, f"{key[:-1]} {i}")
                if p not in seen and p.is_file():
                    seen.add(p)
                    total += p.stat().st_size
    return total


def _up_check(src: str, options: ConvertOptions, force: bool):
    """The check ``navmesh`` and preprocess make of the scan's up axis (``UpAxisError`` naming
    ``src``, ``--up`` / ``--force`` to pass), made before the packed file is written, sparing a
    scene with nothing horizontal as given or smaller than a room (an object: ``CONVERT_CHECKS``);
    None with ``force``."""
    if force:
        return None
    from functools import partial

    from bps_assets.nav.scan_checks import CONVERT_CHECKS, require_up_axis
    from bps_assets.transforms.frame import up_axis

    return partial(require_up_axis, up=up_axis(options.frame_options()), source=src, options=CONVERT_CHECKS)


def _convert_one(src: str, dst: str, options: ConvertOptions, overwrite: bool, scene_id: str,
                 force: bool = False) -> dict:
    """Runs in a worker process: never raises, returns a picklable outcome."""
    try:
        res = convert_file(src, dst, options, overwrite=overwrite, scene_id=scene_id,
                           check_geometry=_up_check(src, options, force))
        out = res.to_json()
        out["bytes_in"] = out.get("bytes_in", 0) + _external_bytes(src)
        return {"ok": True, **out}
    except BpsError as e:
        return {"ok": False, "scene_id": scene_id, "source": src, "error": str(e), "exit_code": e.exit_code}
    except Exception as e:  # a reader bug must not take the other scenes down with it
        if os.environ.get("BPS_DEBUG"):
            import traceback
            traceback.print_exc()
        return {"ok": False, "scene_id": scene_id, "source": src, "exit_code": 1,
                "error": f"{src}: internal error ({type(e).__name__}: {e}); set BPS_DEBUG=1 for a traceback"}


def _line(r: dict) -> str:
    psnr = r.get("psnr_min")
    tex = f", {r['textures']} tex psnr>={psnr:.1f} dB" if psnr is not None else ""
    drop = f" ({r['dropped_triangles']} dropped)" if r.get("dropped_triangles") else ""
    sem = f", {r['semantic_objects']} objects ({r.get('semantic_format', '')})" if "semantic_objects" in r else ""
    if r.get("semantic_mismatch"):
        sem += f" (warning: {r['semantic_mismatch']})"
    return (f"{r['scene_id']}: triangles {r['triangles_in']} -> {r['triangles_out']}{drop}, "
            f"bytes {_mb(r['bytes_in'])} -> {_mb(r['bytes_out'])}{tex}{sem}, {r['seconds']:.2f} s -> {r['output']}")


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--out", "--outdir", "outdir", required=True, type=click.Path(file_okay=False, path_type=str),
              help="Directory for the packed files (OUTDIR/<scene>.bps; <scene>: the file name up to its "
                   "first dot, leading dots dropped; --overwrite replaces only one made from the same "
                   "resolved path or from the same bytes (sha256): another path with other bytes is refused).")
@click.option("--dataset", type=click.Choice(DATASETS), default=DEFAULTS.dataset, show_default=True,
              help="Source frame preset: gibson/mp3d are Z-up, generic is Y-up glTF. "
                   "mp3d also names scenes by their folder (mp3d/ID/ID.glb).")
@click.option("--up", type=click.Choice(UP_AXES), default=None,
              help="Override the preset's up axis of the source files.")
@convert_options
@click.option("--min-area", type=Finite(min=0), default=DEFAULTS.min_area, show_default=True,
              help="Clean: drop triangles smaller than this (m^2).")
@click.option("--keep-collapsed", is_flag=True,
              help="Weld: keep triangles whose corners weld into one vertex (dropped by default).")
@click.option("--reorder", "reorder_curve", type=click.Choice(CURVES), default=DEFAULTS.reorder_curve,
              show_default=True, help="Triangle order: a Morton curve, or the source's order.")
@click.option("--meshlet-max-vertices", type=click.IntRange(3, 255), default=DEFAULTS.meshlet_max_vertices,
              show_default=True, help="Meshlets: largest number of vertices per meshlet.")
@click.option("--meshlet-max-triangles", type=click.IntRange(1, 512), default=DEFAULTS.meshlet_max_triangles,
              show_default=True, help="Meshlets: largest number of triangles per meshlet.")
@click.option("--chunk-meshlets", type=click.IntRange(min=1), default=DEFAULTS.chunk_meshlets, show_default=True,
              help="Meshlets per culling chunk.")
@click.option("--zstd-level", type=click.IntRange(1, 22), default=DEFAULTS.zstd_level, show_default=True,
              help="zstd level of the geometry sections.")
@click.option("--workers", "--jobs", "-j", "jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes (--workers as preprocess and demo; --jobs, -j: the same).")
@click.option("--overwrite", is_flag=True, help="Replace existing output files.")
@click.option("--force", is_flag=True,
              help="Convert a scan that looks read with the wrong up axis as given (refused by default).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable results on stdout.")
def convert_cmd(inputs, outdir, dataset, up, max_texture, texture_format, mipmaps, position_error,
                allow_annotation_mismatch, uv_error,
                min_area, keep_collapsed, reorder_curve, meshlet_max_vertices, meshlet_max_triangles,
                chunk_meshlets, zstd_level, jobs, overwrite, force, as_json, lod, label_table):
    """Convert scan files (GLB/glTF/PLY/OBJ) into packed scenes, one OUTDIR/<scene>.bps each.

    A bad input is reported on one line and the others still convert; the exit status is
    non-zero if any input failed.
    """
    # every step's setting (bps_assets.packed_scene.ConvertOptions; defaults from its DEFAULTS)
    options = ConvertOptions(dataset=dataset, up=up, max_texture=max_texture, texture_format=texture_format,
                             mipmaps=mipmaps, position_error=position_error, uv_error=uv_error,
                             min_area=min_area, weld_drop_collapsed=not keep_collapsed,
                             reorder_curve=reorder_curve, meshlet_max_vertices=meshlet_max_vertices,
                             meshlet_max_triangles=meshlet_max_triangles, chunk_meshlets=chunk_meshlets,
                             zstd_level=zstd_level, allow_annotation_mismatch=allow_annotation_mismatch,
                             lod=lod, label_table=label_table)
    # option errors (e.g. --max-texture 1000) once, before any work
    from bps_assets.transforms.textures import check_options
    check_options(options.texture_options())

    jobs_list, results, seen = [], {}, {}
    for i, src in enumerate(inputs):
        if os.path.isdir(src):
            results[i] = {"ok": False, "scene_id": None, "source": src, "exit_code": 2,
                          "error": f"{src}: is a directory (give the scene files in it, e.g. "
                                   f"{os.path.join(src, '*.glb')})"}
            continue
        sid = scene_id_for(src, dataset)
        if sid in seen:
            results[i] = {"ok": False, "scene_id": sid, "source": src, "exit_code": 2,
                          "error": f"{src}: scene id {sid!r} already used by {inputs[seen[sid]]}"}
            continue
        dst = str(Path(outdir) / f"{sid}{SUFFIX}")
        if overwrite:  # --overwrite replaces this scan's own output, not another scan's of that name
            try:
                refuse_other_source(dst, src)
            except BpsError as e:
                results[i] = {"ok": False, "scene_id": sid, "source": src, "exit_code": e.exit_code,
                              "error": str(e)}
                continue
        seen[sid] = i
        jobs_list.append((i, src, dst, sid))

    def report(r):
        if r["ok"]:
            if not as_json:
                click.echo(_line(r))
        else:
            click.echo(f"error: {r['error']}", err=True)

    for r in results.values():
        report(r)
    if jobs > 1 and len(jobs_list) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(jobs_list))) as ex:
            futs = {ex.submit(_convert_one, src, dst, options, overwrite, sid, force): i
                    for i, src, dst, sid in jobs_list}
            for f in as_completed(futs):
                results[futs[f]] = r = f.result()
                report(r)
    else:
        for i, src, dst, sid in jobs_list:
            results[i] = r = _convert_one(src, dst, options, overwrite, sid, force)
            report(r)

    ordered = [results[i] for i in range(len(inputs))]
    failed = [r for r in ordered if not r["ok"]]
    if as_json:
        click.echo(json.dumps({"ok": not failed, "converted": len(ordered) - len(failed),
                               "failed": len(failed), "results": ordered}, indent=1))
    elif len(ordered) > 1:
        click.echo(f"{len(ordered) - len(failed)} converted, {len(failed)} failed", err=bool(failed))
    if failed:
        sys.exit(max(r.get("exit_code", 1) for r in failed))


def _fmt_value(v) -> str:
    s = json.dumps(v, separators=(",", ":"))
    return s if len(s) <= 110 else s[:107] + "..."


def _not_packed_hint(file) -> str:
    """What to run on a file that is not a packed one, by its content (a navmesh is no scan)."""
    import shlex

    from bps_assets.readers.detect import KINDS, detect_kind

    q = shlex.quote(str(file))
    family = KINDS.get(detect_kind(file), ("",))[0]
    if family == "navmesh":
        return f"this navmesh shows with `bps-assets nav info {q}`"
    if family in ("gltf", "ply", "obj"):
        return f"a scan converts with `bps-assets convert {q} -o OUTDIR`"
    return (f"a scan converts with `bps-assets convert {q} -o OUTDIR`, a habitat .navmesh shows with "
            f"`bps-assets nav info {q}`")


@click.command("info")
@click.argument("file", type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print header and section table as JSON.")
@click.option("--navmesh", "navmesh", type=click.Path(exists=True, dir_okay=False, path_type=str), default=None,
              help="The scene's navmesh, counted in its resident bytes (a packed scene).")
@click.option("--resolution", type=click.IntRange(1, MAX_RESOLUTION), default=RenderOptions.resolution[1],
              show_default=True, help="Sensor width in pixels (square) the resident bytes are for: it picks "
                                      "the converter LOD level a scene with --lod levels loads.")
@click.option("--hfov", type=Finite(0, 180, min_open=True, max_open=True), default=RenderOptions.hfov_deg,
              show_default=True, help="Sensor horizontal field of view (degrees) the resident bytes are for.")
@click.option("--lod", "lod", default="auto", show_default=True,
              help="The level the resident bytes are for: auto (the one the sensor loads), full, or a level index "
                   "(make(lod=...)).")
def info_cmd(file, as_json, navmesh, resolution, hfov, lod):
    """Show a packed file's header and section table (scenes, navmeshes: any container kind)."""
    try:
        header, sections, kind = read_header(file)
    except CorruptFileError as e:
        if "bad magic" not in e.detail:
            raise
        raise CorruptFileError(file, f"{e.detail}: `info` reads packed files (.bps); {_not_packed_hint(file)}") from None
    size = os.path.getsize(file)
    table = [{"name": s.name, "dtype": next(k for k, v in _dtype_names().items() if v == s.dtype),
              "shape": list(s.shape), "codec": s.codec, "filter": s.filter, "offset": s.offset,
              "stored_length": s.stored_length, "raw_length": s.raw_length, "crc32": s.crc32}
             for s in sections.values()]
    per_cat = _objects_per_category(file) if kind == "SCEN" and "semantics" in header else None
    unmatched = _unmatched_labels(file) if per_cat and "" in per_cat else {}
    insts = _instances(file) if kind == "SCEN" and "composed" in header else None
    sensor = _sensor(resolution, hfov, lod)
    resident = _resident(file, navmesh, insts is not None, sensor) if kind == "SCEN" else None
    if as_json:
        click.echo(json.dumps({"file": file, "kind": kind, "file_bytes": size, "header": header,
                               "sections": table, **({"objects_per_category": per_cat} if per_cat else {}),
                               **({"unmatched_labels": unmatched} if unmatched else {}),
                               **({"instances": insts} if insts is not None else {}),
                               **({"resident_bytes": resident} if resident else {})}, indent=1))
        return
    if insts is not None:
        click.echo(f"{file}: composed scene, {len(insts)} instances")
        for i in insts:
            t = i["transform"]
            click.echo(f"  [{i['index']}] {i['name']:<40} {i['motion_type']:<9} sem {i['semantic_id']:<4} "
                       f"{i['category'] or '-':<20} at ({t[0][3]:.3f}, {t[1][3]:.3f}, {t[2][3]:.3f})  {i['asset']}")
    click.echo(f"{file}: kind {kind}, {size} bytes, {len(table)} sections")
    for k, v in header.items():
        if k == "semantics" and per_cat is not None:
            n = sum(per_cat.values())
            click.echo(f"  objects: {n} in {len(per_cat)} categories (mpcat40)")
            for name, c in sorted(per_cat.items(), key=lambda kv: (-kv[1], kv[0])):
                click.echo(f"    {name or '(unmatched)':<20} {c}")
            if unmatched:
                click.echo("  unmatched labels (objects): " + ", ".join(f"{k!r} {v}" for k, v in unmatched.items()))
        elif k == "textures" and isinstance(v, list):
            click.echo(f"  textures: {len(v)}")
            for t in v:
                if isinstance(t, dict):
                    psnr = t.get("psnr_db")
                    click.echo(f"    [{t.get('index')}] {t.get('width')}x{t.get('height')} "
                               f"(source {t.get('src_width')}x{t.get('src_height')}) {t.get('format')} "
                               f"{t.get('levels')} levels {t.get('bytes')} B"
                               + (f", PSNR {psnr:.2f} dB" if isinstance(psnr, (int, float)) else "")
                               + (f"  {t.get('source')}" if t.get("source") else ""))
        elif isinstance(v, dict):
            click.echo(f"  {k}:")
            for k2, v2 in v.items():
                click.echo(f"    {k2}: {_fmt_value(v2)}")
        else:
            click.echo(f"  {k}: {_fmt_value(v)}")
    if resident:
        dec = resident["decoded_scan"]
        click.echo(f"  resident bytes (decoded scan {dec}: positions, indices, uvs, colours, RGBA8 level 0):")
        for who in ("embree", "warp"):
            if who not in resident:   # a composed scene without Warp installed
                continue
            parts = resident[who]
            total = sum(parts.values())
            click.echo(f"    {who:<6} {total:>11} ({total / max(dec, 1):.2f}x decoded): "
                       + ", ".join(f"{k} {v}" for k, v in parts.items()))
        if "reason" in resident:
            _echo_levels(resident, dec, sensor)
    click.echo(f"  {'section':<18} {'dtype':<5} {'shape':<16} {'codec':<5} {'filter':<13} "
               f"{'offset':>10} {'stored':>10} {'raw':>10} {'ratio':>6}")
    for t in table:
        ratio = t["raw_length"] / t["stored_length"] if t["stored_length"] else 0.0
        click.echo(f"  {t['name']:<18} {t['dtype']:<5} {str(t['shape']):<16} {t['codec']:<5} "
                   f"{t['filter']:<13} {t['offset']:>10} {t['stored_length']:>10} {t['raw_length']:>10} "
                   f"{ratio:>6.2f}")


def _instances(file) -> list[dict]:
    """Per instance of a composed scene: asset, 4x4 world transform (habitat frame), semantic
    id, category, motion type (docs/FORMAT.md 5.7)."""
    from bps_assets.scene_dataset.packing import read_composed

    _, t, _ = read_composed(file, ["positions"])
    h = t.header
    return [{"index": i, "name": h["names"][i], "kind": h["kinds"][i],
             "asset": h["assets"][int(t.asset[i])]["path"], "transform": t.transform[i].tolist(),
             "semantic_id": int(t.semantic[i]),
             "category": h["categories"][int(t.category[i])] if t.category[i] >= 0 else "",
             "motion_type": t.motion_type(i)} for i in range(t.count)]


def _sensor(resolution: int, hfov: float, lod: str):
    """The RenderOptions of ``info``'s sensor options (a bad ``--lod``: the ConfigError naming it)."""
    return RenderOptions(resolution=(resolution, resolution), hfov_deg=hfov, threads=1, lod=lod)


def _resident(file, navmesh, composed: bool, sensor) -> dict:
    """The scene's resident bytes by part (bps_runtime.scenes.file_footprint), Embree and Warp, for
    ``sensor``; a composed scene's as the scene cache holds it (each shared asset once)."""
    from bps_runtime.scenes.file_footprint import composed_footprint, packed_scene_footprint

    return (composed_footprint if composed else packed_scene_footprint)(file, navmesh, sensor)


def _echo_levels(resident: dict, dec: int, sensor) -> None:
    """The converter LOD level the figures above are for, why, and each level's totals."""
    h, w = sensor.resolution
    level = resident["level"]
    if len(resident["levels"]) < 2:   # no converter LODs: the full mesh, whatever the sensor
        return
    click.echo(f"    above: for a {h}x{w}, HFOV {sensor.hfov_deg:g} sensor, which loads "
               f"{'the full mesh' if level < 0 else f'converter LOD level {level}'} ({resident['reason']})")
    click.echo("    per level (--resolution / --hfov / --lod pick the one above):")
    for row in resident["levels"]:
        name = "full mesh" if row["level"] < 0 else f"level {row['level']} ({row['max_error'] * 100:g} cm)"
        click.echo(f"      {name:<20} {row['triangles']:>9} triangles  embree {row['embree']:>11} "
                   f"({row['embree'] / max(dec, 1):.2f}x)  warp {row['warp']:>11} ({row['warp'] / max(dec, 1):.2f}x)"
                   + ("  <- loaded" if row["level"] == level else ""))


def _objects_per_category(file) -> dict:
    """{category name: objects} of a packed scene's semantic section."""
    from bps_assets.packed_scene import read_packed_scene

    t = read_packed_scene(file, sections=["object_ids", "object_category", "object_region",
                                          "object_aabb", "object_source_ids"]).semantics
    out: dict = {}
    for i in range(len(t) if t is not None else 0):
        out[t.category_name(i)] = out.get(t.category_name(i), 0) + 1
    return out


def _unmatched_labels(file) -> dict:
    """{raw label: objects} of a packed scene's objects without a category, most first."""
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.transforms.semantic import unmatched_labels

    t = read_packed_scene(file, sections=["object_ids", "object_category", "object_region",
                                          "object_aabb", "object_source_ids"]).semantics
    return unmatched_labels(t.raw_names, t.category) if t is not None else {}


def _dtype_names():
    import numpy as np
    from bps_assets.container import DTYPES
    return {k: np.dtype(v) for k, v in DTYPES.items()}


commands = [convert_cmd, info_cmd]
