"""Scan-like demo scenes in the real Gibson / MP3D dataset layouts (the built-in demo and test data).

``generate(out_root, layout, scenes, seed, size)`` writes ``OUT/gibson/NAME.glb`` or
``OUT/mp3d/ID/ID.glb`` (binary glTF 2.0, Z up like the real scans, so the habitat frame is
(x, y, z) -> (x, z, -y)) and returns one ``SceneInfo`` per scene: ground truth for tests (rooms,
storeys, closed room, table tops, stairs, ...) in the habitat frame. Nothing besides the GLBs is
written, as in the real datasets; ``describe()`` recomputes a SceneInfo. A scene is a pure
function of (layout, name, seed, size): byte-identical in any run and in any subset.
Names are real ones from ``data_manifests`` (the rule: ``names``); features by position i % 4:
0 one storey with a closed room (no door), 1 two storeys joined by a stair flight, 2 one storey,
3 two storeys and a closed room (names not in the order: from a hash); so any N >= 2 has a val
scene, a closed room and a stair flight. Sizes: "small" ~45-60 m^2 of floor (two storeys ~80),
~30K triangles, 256/512 px textures; "gibson" ~150 m^2, ~600K triangles, 2048^2 JPEG textures.
Modules: ``names``, ``layout`` (floor plans), ``geometry`` (meshes), ``textures``,
``ground_truth`` (the SceneInfo records).
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ConfigError, OutputExistsError, is_int
from ..manifests_location import manifests_dir
from ..scene import Material, Mesh, SceneDocument, Texture
from . import geometry, layout as _layout, textures as _textures
from .ground_truth import FurnitureInfo, HRect, RoomInfo, SceneInfo, StairsInfo, _hpoint, _hrect
from .names import (LAYOUTS, ORDER_SPLIT, SEMANTIC_SUFFIXES, _check_layout, scene_names, scene_relpath,
                    semantic_paths)



@dataclass(frozen=True)
class SizePreset:
    """A synthetic scene size: floor area (m^2), target triangle count, texture sizes, the
    room area below which rooms are not split further, and its textures' image format."""
    name: str
    floor_area: tuple[float, float]   # total floor (m^2) drawn per scene
    triangles: int                    # target triangle count (each scene draws +-10 %)
    texture_px: tuple[int, ...]       # texture sizes drawn from
    max_room_area: float              # BSP stops splitting below this (m^2)
    image_format: str                 # "mixed": alternate PNG / JPEG; or "jpeg"


SIZES = {
    "small": SizePreset("small", (45.0, 60.0), 30_000, (256, 512), 16.0, "mixed"),
    "gibson": SizePreset("gibson", (140.0, 160.0), 600_000, (2048,), 22.0, "jpeg"),
}


def _check_size(size: str) -> SizePreset:
    try:
        return SIZES[size]
    except KeyError:
        raise ConfigError(None, f"unknown size {size!r} (choose from {', '.join(SIZES)})") from None


# ------------------------------------------------------------------------------ building

def _scene_seed(layout, name, seed, size) -> int:
    h = hashlib.sha256(f"bps-synth/{layout}/{name}/{int(seed)}/{size}".encode()).digest()
    return int.from_bytes(h[:8], "little")


def _features(layout: str, name: str, scene_seed: int) -> tuple[str, int]:
    """(split, feature index) for ``name``."""
    for i, (n, split) in enumerate(scene_names(layout)):
        if n == name:
            return split, i % 4
    return "other", scene_seed % 4


@dataclass
class _Built:
    info: SceneInfo
    plan: _layout.Plan
    quads: geometry.Quads
    cell: float
    rngs: list


def _build(layout: str, name: str, seed: int, size: str, roof: bool = False) -> _Built:
    _check_layout(layout)
    preset = _check_size(size)
    if not is_int(seed):
        raise ConfigError(None, f"seed must be an integer, got {seed!r}")
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ConfigError(None, f"bad scene name {name!r}")
    sseed = _scene_seed(layout, name, seed, size)
    split, feat = _features(layout, name, sseed)
    rng_plan, rng_mesh, rng_tex = [np.random.default_rng(s) for s in np.random.SeedSequence(sseed).spawn(3)]
    two = feat in (1, 3)
    closed = feat in (0, 3)
    area = rng_plan.uniform(*preset.floor_area)
    plan = _layout.make_plan(rng_plan, area, preset.max_room_area, two_storey=two, closed_room=closed)
    quads, floor_area = geometry.plan_quads(plan)
    roof_y = geometry.add_roof(quads, plan) if roof else None  # opt-in: other scenes keep their bytes
    target = int(preset.triangles * rng_plan.uniform(0.9, 1.1))
    cell, tris = geometry.solve_cell(quads, target)
    _, u, v, mat, *_ = quads.arrays()
    nu, nv = geometry._cells(np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1), cell)
    verts = int(((nu + 1) * (nv + 1)).sum())
    used = sorted(set(int(m) for m in mat))
    kinds = sorted({geometry.MATERIALS[m].texture for m in used} - {None})

    rooms = []
    for r in plan.rooms:
        fx, fy = r.free_point
        rooms.append(RoomInfo(r.id, r.storey, _hrect(r.interior), r.floor_z, r.ceil_z, r.closed, r.hall,
                              len(plan.doors_of(r.id)), _hpoint(fx, fy, r.floor_z)))
    furn = [FurnitureInfo(f.kind, f.storey, f.room, _hrect(f.rect), round(f.top_z, 6)) for f in plan.furniture]
    stairs = None
    if plan.stairs is not None:
        st = plan.stairs
        cx = (st.rect.x0 + st.rect.x1) / 2
        stairs = StairsInfo(_hrect(st.rect), st.z0, st.z1, st.n_steps, round(st.rise, 6), st.tread,
                            _hpoint(cx, st.rect.y0 - 0.4, st.z0), _hpoint(cx, st.rect.y1 + 0.4, st.z1))
    xs = [r.interior.x0 for r in plan.rooms] + [r.interior.x1 for r in plan.rooms]
    ys = [r.interior.y0 for r in plan.rooms] + [r.interior.y1 for r in plan.rooms]
    top = max(c for _, c in plan.storeys)
    bounds = ((round(min(xs), 6), 0.0, round(-max(ys), 6)), (round(max(xs), 6), round(top, 6), round(-min(ys), 6)))
    info = SceneInfo(
        name=name, layout=layout, split=split, manifest_split=ORDER_SPLIT[layout], size=size, seed=int(seed),
        relpath=scene_relpath(layout, name), path=None, triangles=tris, vertices=verts,
        floor_area=round(floor_area, 4), storeys=[(round(a, 6), round(b, 6)) for a, b in plan.storeys],
        rooms=rooms, closed_room=plan.closed_room, furniture=furn, stairs=stairs, bounds=bounds,
        textures=len(kinds), materials=len(used), roof_y=roof_y)
    return _Built(info, plan, quads, cell, [rng_mesh, rng_tex, sseed])


def _image_options():
    from ..writers.glb import GlbOptions

    return GlbOptions(png_compress_level=1, jpeg_quality=90, generator="bps_assets.synth")


def describe(layout: str, name: str, seed: int = 0, size: str = "small", roof: bool = False) -> SceneInfo:
    """The SceneInfo that ``generate`` returns for this scene, without meshing or writing."""
    return _build(layout, name, seed, size, roof).info


def build_scene(layout: str, name: str, seed: int = 0, size: str = "small", roof: bool = False
                ) -> tuple[SceneDocument, list[tuple[bytes, str]], SceneInfo]:
    """(document in the file frame, encoded images, info) for one scene, without writing."""
    from ..writers.glb import encode_image

    b = _build(layout, name, seed, size, roof)
    preset = SIZES[size]
    rng_mesh, rng_tex, sseed = b.rngs
    arr = geometry.mesh_quads(b.quads, b.cell, rng_mesh, noise_seed=sseed)
    doc = SceneDocument(source_path=b.info.relpath, source_format="synth")
    tex_index: dict[str, int] = {}
    encoded: list[tuple[bytes, str]] = []
    for mi, spec in enumerate(geometry.MATERIALS):
        v0, v1 = arr.vertex_ranges[mi]
        t0, t1 = arr.triangle_ranges[mi]
        if t1 <= t0:
            continue
        tex = None
        if spec.texture is not None:
            if spec.texture not in tex_index:
                n = int(rng_tex.choice(preset.texture_px))
                rgba = _textures.make_texture(spec.texture, rng_tex, n)
                k = len(doc.textures)
                fmt = "jpeg" if preset.image_format == "jpeg" or k % 2 == 1 else "png"
                encoded.append(encode_image(rgba, fmt, _image_options()))
                tex_index[spec.texture] = k
                doc.textures.append(Texture(rgba, source=f"synth:{spec.texture}", name=spec.texture))
            tex = tex_index[spec.texture]
        doc.materials.append(Material(name=spec.name, base_color=np.asarray(spec.color, np.float32), texture=tex))
        doc.meshes.append(Mesh(positions=arr.positions[v0:v1], indices=arr.indices[t0:t1] - np.uint32(v0),
                               uvs=arr.uvs[v0:v1] if tex is not None else None, colors=arr.colors[v0:v1],
                               material=len(doc.materials) - 1, name=spec.name))
    assert doc.triangle_count == b.info.triangles
    return doc, encoded, b.info


def generate(out_root: str | os.PathLike, layout: str = "gibson", scenes: int | Sequence[str] = 2,
             seed: int = 0, size: str = "small", overwrite: bool = False, progress=None,
             keep_existing: bool = False, roof: bool = False) -> list[SceneInfo]:
    """Write scenes under ``out_root`` in the real layout; returns their SceneInfo in order.

    ``scenes``: a count (the first N names of ``scene_names(layout)``) or a list of scene names
    (each scene is the same as when generated by count: it depends on its name, not on the list).
    Existing files are an OutputExistsError (checked for every scene before anything is
    written) unless ``overwrite``, or ``keep_existing`` (they are kept, and only the missing
    scenes written and returned). ``progress(info)`` is called after each scene is written.
    ``roof``: a walkable flat roof over the top storey (an outdoor island; a scene with it is
    another scene, the default ones are unchanged).
    """
    from ..writers.glb import write_glb

    _check_layout(layout)
    _check_size(size)
    if isinstance(scenes, (list, tuple)):
        names = [(n, "") for n in scenes]
        for n, _ in names:
            if not isinstance(n, str) or not n or "/" in n or "\\" in n or n in (".", ".."):
                raise ConfigError(None, f"bad scene name {n!r}")
        if not names or len({n for n, _ in names}) != len(names):
            raise ConfigError(None, "scene names must be a non-empty list without duplicates")
    elif is_int(scenes) and scenes >= 1:
        names = scene_names(layout, int(scenes))
    else:
        raise ConfigError(None, f"scenes must be a positive integer or a list of names, got {scenes!r}")
    root = Path(out_root)
    if root.exists() and not root.is_dir():
        raise ConfigError(root, "output path exists and is not a directory")
    if keep_existing and not overwrite:
        names = [(n, x) for n, x in names if not (root / scene_relpath(layout, n)).exists()]
    elif not overwrite:
        for name, _ in names:
            p = root / scene_relpath(layout, name)
            if p.exists():
                raise OutputExistsError(p, "already exists (pass overwrite / --overwrite to replace it)")
    out = []
    for name, _ in names:
        t0 = time.perf_counter()
        doc, encoded, info = build_scene(layout, name, seed, size, roof)
        path = root / info.relpath
        info.bytes = write_glb(doc, path, overwrite=overwrite, encoded_images=encoded)
        info.path = path.resolve()
        info.seconds = round(time.perf_counter() - t0, 3)
        out.append(info)
        if progress is not None:
            progress(info)
    return out


__all__ = ["generate", "describe", "build_scene", "scene_names", "scene_relpath", "SceneInfo", "RoomInfo",
           "FurnitureInfo", "StairsInfo", "HRect", "SizePreset", "SIZES", "LAYOUTS", "SEMANTIC_SUFFIXES", "semantic_paths",
           "manifests_dir"]
