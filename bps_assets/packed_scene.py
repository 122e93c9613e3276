"""Packed scenes: convert a read scene into GPU-ready arrays in a `SCEN` container, read it back.

Spec: docs/FORMAT.md section 5. The conversion pipeline, one transform per step:

    frame -> clean -> merge -> quantize -> weld -> reorder -> meshlets   (geometry)
    textures                                                            (images)

Each step is a transform module's factory called with options that ``ConvertOptions`` builds
(``document_transforms`` / ``geometry_transforms`` return the lists), so every setting of every
step is a ConvertOptions field and a caller can run its own list through ``process_geometry``.

``read_packed_scene`` returns numpy arrays in the habitat frame with no per-element Python
work (sections decompressed on a small thread pool, vectorized dequantization), and every
index-like array is range-checked, so a crafted file cannot make a renderer read out of bounds.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable

import numpy as np

from . import __version__
from .container import DTYPES as DT_BY_NAME
from .container import Container, SectionSpec, remove_stale_temps, source_record, write_container
from .errors import ConfigError, CorruptFileError, InputError, InterpreterExiting, OutputExistsError, is_int
from .hashing import sha256_file
from . import semantic_section as _sem
from . import composed_section as _comp
from . import lod_section as _lod
from .scene import SceneDocument
from .transforms import clean as t_clean
from .transforms import frame as t_frame
from .transforms import merge
from .transforms import meshlets as t_meshlets
from .transforms import quantize as t_quantize
from .transforms import reorder as t_reorder
from .transforms import textures as t_textures
from .transforms import weld as t_weld

KIND = "SCEN"
SCENE_FORMAT_VERSION = 1
SUFFIX = ".bps"


@dataclass(frozen=True)
class ConvertOptions:
    """Every setting of the conversion; recorded in the file header. CLI defaults come from here."""

    dataset: str = "generic"            # gibson | mp3d (Z-up sources) | generic (Y-up)
    up: str | None = None               # y | z: override the dataset's up axis
    max_texture: int = t_textures.DEFAULTS.max_texture
    texture_format: str = t_textures.DEFAULTS.format
    mipmaps: bool = t_textures.DEFAULTS.mipmaps
    position_error: float = t_quantize.DEFAULTS.position_error
    uv_error: float = t_quantize.DEFAULTS.uv_error
    min_area: float = t_clean.DEFAULTS.min_area
    weld_drop_collapsed: bool = t_weld.DEFAULTS.drop_collapsed
    reorder_curve: str = t_reorder.DEFAULTS.curve
    meshlet_max_vertices: int = t_meshlets.DEFAULTS.max_vertices
    meshlet_max_triangles: int = t_meshlets.DEFAULTS.max_triangles
    chunk_meshlets: int = t_meshlets.DEFAULTS.chunk_meshlets
    zstd_level: int = 9                 # geometry sections (textures use 3: BC blocks barely compress)
    semantic_split: int = 1             # with an annotation: levels of 1-to-4 cuts of triangles a boundary crosses
    allow_annotation_mismatch: bool = False   # an annotation mostly off its scan: warn instead of refusing
    lod: tuple = ()                     # LOD levels to store, by geometric error in metres (lod_section)
    label_table: str = ""               # habitat-sim raw label -> mpcat40 TSV ("": data_manifests' table)

    def frame_options(self):
        """Options of the frame transform (dataset layout and up axis)."""
        return t_frame.Options(dataset=self.dataset, up=self.up)

    def clean_options(self):
        """Options of the clean transform."""
        return t_clean.Options(min_area=self.min_area)

    def quantize_options(self):
        """Options of the quantize transform (position and UV error bounds)."""
        return t_quantize.Options(self.position_error, self.uv_error)

    def weld_options(self):
        """Options of the weld transform."""
        return t_weld.Options(drop_collapsed=self.weld_drop_collapsed)

    def reorder_options(self):
        """Options of the reorder transform (space-filling curve)."""
        return t_reorder.Options(curve=self.reorder_curve)

    def meshlet_options(self):
        """Options of the meshlet transform (per-meshlet vertex/triangle limits, meshlets per chunk)."""
        return t_meshlets.Options(self.meshlet_max_vertices, self.meshlet_max_triangles, self.chunk_meshlets)

    def texture_options(self):
        """Options of the texture transform (size cap, BC1/BC7 format, mipmaps)."""
        return t_textures.Options(max_texture=self.max_texture, format=self.texture_format,
                                  mipmaps=self.mipmaps)


DEFAULTS = ConvertOptions()


@dataclass
class ConvertResult:
    """What converting one scene produced: its id, source and output paths, and the convert
    statistics."""
    scene_id: str
    source: str
    output: str
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The result as one flat JSON object (the statistics merged in)."""
        return {"scene_id": self.scene_id, "source": self.source, "output": self.output, **self.stats}


def scene_id_for(path: str | os.PathLike, dataset: str = "generic") -> str:
    """The scene's name: habitat's (the file name up to its first dot: ``X.basis.glb`` -> ``X``,
    as ``preprocess`` names it); for the MP3D layout (``mp3d/ID/ID.glb``) the folder name."""
    from .habitat_names import habitat_scene_name

    p = Path(path)
    if dataset == "mp3d" and p.parent.name:
        return p.parent.name
    return habitat_scene_name(p)


# ------------------------------------------------------------------------------ conversion

def document_transforms(options: ConvertOptions = DEFAULTS) -> list:
    """The steps on the SceneDocument, in order: frame, clean."""
    return [t_frame.frame(options.frame_options()), t_clean.clean(options.clean_options())]


def geometry_transforms(options: ConvertOptions = DEFAULTS) -> list:
    """The steps on the merged geometry, in order: quantize, weld, reorder, meshlets.

    Quantize comes first so weld merges vertices equal after quantization; meshlets come last
    because they cut the final triangle order into ranges.
    """
    return [t_quantize.quantize(options.quantize_options()), t_weld.weld(options.weld_options()),
            t_reorder.reorder(options.reorder_options()), t_meshlets.meshlets(options.meshlet_options())]


def process_geometry(doc: SceneDocument, options: ConvertOptions = DEFAULTS, *,
                     document_steps: list | None = None, geometry_steps: list | None = None):
    """Run the document steps on ``doc`` (in place), merge, run the geometry steps; returns the
    MergedGeometry. Each step list defaults to the one ``options`` builds; a caller may pass its
    own (glTF-Transform's ``doc.transform(...)``), e.g. to insert a step of its own."""
    for step in document_transforms(options) if document_steps is None else document_steps:
        step(doc)
    g = merge(doc)
    for step in geometry_transforms(options) if geometry_steps is None else geometry_steps:
        g = step(g)
    return g


def settings_json(options: ConvertOptions) -> dict:
    """The converter settings as a file's header records them (and fingerprints compare)."""
    d = asdict(options)
    if not d["lod"]:  # files without LODs keep today's header, byte for byte
        del d["lod"]
    if not d["label_table"]:  # likewise; a table is recorded by content, so an edit re-converts
        del d["label_table"]
    else:
        from .readers.semantic_categories import read_label_table

        p = d["label_table"]
        read_label_table(p)  # a bad table fails here, before any scene converts (DatasetError)
        d["label_table"] = {"name": os.path.basename(p), "sha256": sha256_file(p)[0]}
    return d


def _scene_sections(g, texset, material_texture: np.ndarray, zstd_level: int):
    """(arrays, section specs) of a SCEN file (docs/FORMAT.md section 5)."""
    ml = g.meshlets
    geo_spec = SectionSpec("zstd", "delta+shuffle", zstd_level)
    arrays: dict[str, np.ndarray] = {
        "positions_q": g.positions_q,
        "indices": g.indices.astype(np.uint32),
    }
    specs = {"positions_q": geo_spec, "indices": geo_spec}
    if g.uvs_q is not None:
        arrays["uvs_q"] = g.uvs_q
        specs["uvs_q"] = geo_spec
    if g.colors is not None:
        arrays["colors"] = g.colors
        specs["colors"] = geo_spec
    arrays.update({
        "tri_material": g.tri_material.astype(np.int32),
        "material_color": g.material_color.astype(np.float32),
        "material_texture": material_texture,
        "tex_blocks": texset.tex_blocks,
        "tex_levels": texset.tex_levels,
        "meshlet_tris": ml.meshlet_tris,
        "meshlet_spheres": ml.meshlet_spheres,
        "chunk_meshlets": ml.chunk_meshlets,
        "chunk_tris": ml.chunk_tris,
        "chunk_spheres": ml.chunk_spheres,
    })
    specs.update({
        "tri_material": geo_spec,
        "tex_blocks": SectionSpec("zstd", "none", 3),
        "meshlet_tris": geo_spec, "chunk_meshlets": geo_spec, "chunk_tris": geo_spec,
        "meshlet_spheres": SectionSpec("zstd", "shuffle", zstd_level),
        "chunk_spheres": SectionSpec("zstd", "shuffle", zstd_level),
    })
    return arrays, specs


def _scene_header(doc: SceneDocument, g, texset, counts: dict, options: ConvertOptions, src: dict,
                  sid: str) -> dict:
    """The SCEN header: identity, frame, bounds, counts, quantization, textures, settings."""
    lo, hi = (g.positions.min(0), g.positions.max(0)) if g.vertex_count else (np.zeros(3), np.zeros(3))
    quant = {"positions": {**g.position_grid.to_json(), "norm": "euclidean",
                           "requested_bound": options.position_error,
                           "measured_max_error": g.stats.get("position_max_error", 0.0)}}
    if g.uvs_q is not None:
        quant["uvs"] = {**g.uv_grid.to_json(), "norm": "per_component",
                        "requested_bound": options.uv_error,
                        "measured_max_error": g.stats.get("uv_max_error", 0.0)}
    return {
        "scene_format_version": SCENE_FORMAT_VERSION,
        "scene_id": sid,
        "source": src,
        "frame": {"name": "habitat", "dataset": options.dataset,
                  "up": t_frame.up_axis(options.frame_options()),
                  "matrix": np.asarray(doc.frame_matrix, np.float64).tolist()},
        "bounds": {"min": [float(x) for x in lo], "max": [float(x) for x in hi]},
        "counts": counts,
        "quantization": quant,
        "textures": texset.info,
        "meshlets": {"max_vertices": options.meshlet_max_vertices,
                     "max_triangles": options.meshlet_max_triangles,
                     "chunk_meshlets": options.chunk_meshlets},
        "converter": {"name": "bps_assets", "version": __version__, "settings": settings_json(options)},
    }


def convert_scene(doc: SceneDocument, dst: str | os.PathLike, options: ConvertOptions = DEFAULTS,
                  overwrite: bool = False, scene_id: str | None = None,
                  source_info: dict | None = None, semantic=None, extra=None,
                  check_geometry=None) -> ConvertResult:
    """Process ``doc`` (modified in place) and write the packed file ``dst`` atomically.

    ``check_geometry``: called as ``check_geometry(vertices, triangles)`` on the processed
    geometry (habitat frame) before anything is written; it raises to refuse the scene (the
    CLI's up-axis check, ``nav.scan_checks.require_up_axis``).

    ``extra``: ``(header_key, header_object, arrays)`` stored beside the scene (a composed
    scene's instance table, ``composed_section``).

    ``semantic``: an ``Annotation`` (in the source's frame) whose ids are transferred to the
    render triangles and stored as the semantic section (docs/FORMAT.md 5.6), or None."""
    t0 = time.perf_counter()
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise OutputExistsError(dst, "already exists (pass overwrite / --overwrite to replace it)")
    t_textures.check_options(options.texture_options())
    triangles_in = doc.triangle_count
    steps = None
    if semantic is not None and options.semantic_split > 0:  # after frame and clean, before merge
        from .transforms import semantic as t_semantic
        steps = document_transforms(options) + [t_semantic.split_mixed(options.semantic_split, semantic)]
    try:
        g = process_geometry(doc, options, document_steps=steps)
    except InputError as e:   # a step's error about the geometry (quantize's bounds): name the scan
        if e.path is not None or type(e).__init__ is not InputError.__init__:
            raise
        raise type(e)(doc.source_path or dst, e.detail) from None
    if g.triangle_count == 0:  # nothing to render or navigate: an error, not an empty scene file
        from .empty_scene import empty_geometry_error
        raise empty_geometry_error(doc.source_path or dst, triangles_in, g.stats, options.min_area)
    # the quantized positions as a reader dequantizes them: quantize left them in g.positions (and
    # weld / reorder move every vertex array together), so checks, semantics and LODs share that
    # one dequantization; read-only, so no step can change what the next one (or the header) reads
    positions = g.positions.view()
    positions.flags.writeable = False
    if check_geometry is not None:
        check_geometry(positions, g.indices)
    used_tex = sorted({int(t) for t in g.material_texture if t >= 0})
    remap = np.full(len(doc.textures) + 1, -1, np.int32)
    remap[used_tex] = np.arange(len(used_tex), dtype=np.int32)
    material_texture = np.where(g.material_texture >= 0, remap[g.material_texture], -1).astype(np.int32)
    texset = t_textures.textures(options.texture_options())([doc.textures[i] for i in used_tex])
    ml = g.meshlets

    psnrs = [t.get("psnr_db") for t in texset.info]
    arrays, specs = _scene_sections(g, texset, material_texture, options.zstd_level)
    sem_header, sem_stats = None, {}
    if semantic is not None:
        sem_arrays, sem_header, sem_stats = _semantic_sections(semantic, doc, g, positions,
                                                                options.allow_annotation_mismatch, options.label_table)
        arrays.update(sem_arrays)
        specs.update({k: SectionSpec("zstd", "shuffle", options.zstd_level) for k in sem_arrays})
        specs["tri_object"] = SectionSpec("zstd", "delta+shuffle", options.zstd_level)
    lod_header = None
    if options.lod:  # levels of detail of the final geometry (the navmesh is built from the full mesh)
        lod_arrays, lod_header, lod_stats = _lod.build(positions, g, arrays.get("tri_object"), options.lod)
        arrays.update(lod_arrays)
        specs.update({k: SectionSpec("zstd", "delta+shuffle" if not k.endswith("colors") else "shuffle",
                                     options.zstd_level) for k in lod_arrays})
        sem_stats = {**sem_stats, **lod_stats}

    drop_keys = ("invalid_index_triangles", "nonfinite_triangles", "degenerate_triangles",
                 "collapsed_triangles", "skipped_points", "skipped_lines", "nonfinite_uvs",
                 "welded_vertices", "unused_vertices")
    counts = {
        "triangles_in": int(triangles_in),
        "triangles": g.triangle_count,
        "vertices": g.vertex_count,
        "materials": int(len(g.material_color)),
        "textures": len(used_tex),
        "texture_levels": int(len(texset.tex_levels)),
        "meshlets": int(len(ml.meshlet_tris)),
        "chunks": int(len(ml.chunk_tris)),
        **{k: int(g.stats.get(k, 0)) for k in drop_keys},
    }
    src = dict(source_info or {})
    src.setdefault("path", doc.source_path)
    src.setdefault("format", doc.source_format)
    sid = scene_id or (scene_id_for(doc.source_path, options.dataset) if doc.source_path else dst.stem)
    header = _scene_header(doc, g, texset, counts, options, src, sid)
    if sem_header is not None:
        header[_sem.HEADER_KEY] = sem_header
    if lod_header is not None:
        header[_lod.HEADER_KEY] = lod_header
    if extra is not None:
        header[extra[0]] = extra[1]
        arrays.update(extra[2])
        specs.update({k: SectionSpec("zstd", "shuffle", options.zstd_level) for k in extra[2]})
    quant = header["quantization"]
    try:  # the writer holds itself to the caps the reader enforces (docs/FORMAT.md 5.5)
        section_bounds(dst, header)
    except CorruptFileError as e:
        raise InputError(src.get("path") or dst, f"cannot be packed: {e.detail}") from None
    for name, a in arrays.items():  # tiny sections only grow under zstd
        if a.nbytes < 512:
            specs[name] = SectionSpec("raw", "none")
    bytes_out = write_container(dst, KIND, header, arrays, specs, overwrite=overwrite)
    stats = {
        "triangles_in": counts["triangles_in"], "triangles_out": counts["triangles"],
        "vertices_out": counts["vertices"],
        "dropped_triangles": sum(counts[k] for k in ("invalid_index_triangles", "nonfinite_triangles",
                                                     "degenerate_triangles", "collapsed_triangles")),
        **{k: counts[k] for k in drop_keys},
        "bytes_in": int(src.get("bytes", 0)), "bytes_out": int(bytes_out),
        "texture_bytes": int(texset.tex_blocks.size), "textures": len(used_tex),
        "psnr": psnrs, "psnr_min": min((p for p in psnrs if p is not None), default=None),
        "position_max_error": quant["positions"]["measured_max_error"],
        "position_error_bound": quant["positions"]["error_bound"],
        "meshlets": counts["meshlets"], "chunks": counts["chunks"],
        "seconds": round(time.perf_counter() - t0, 4),
        **sem_stats,
    }
    return ConvertResult(sid, src.get("path", ""), str(dst), stats)


def _semantic_sections(ann, doc: SceneDocument, g, positions: np.ndarray, allow_mismatch: bool = False,
                       label_table: str = "") -> tuple[dict, dict, dict]:
    """(arrays, header object, stats) of the semantic section: the annotation moved into the
    habitat frame by the document's frame matrix, its ids transferred to the final triangles
    (``positions``: ``g``'s, dequantized)."""
    from .transforms import semantic as t_semantic

    t_semantic.to_frame(ann, doc.frame_matrix)
    tri_object, table, st = t_semantic.transfer(ann, positions, g.indices,
                                                t_semantic.Options(allow_mismatch=allow_mismatch,
                                                                   label_table=label_table))
    arrays, hdr = _sem.arrays(tri_object, table)
    hdr["source"] = {"format": getattr(ann, "format", ""), "path": ann.source, "warnings": dict(ann.warnings)}
    hdr.update(_sem.id_rule_header(hdr["source"]["format"]))
    st["split_triangles"] = int(doc.stats.get("semantic_split_triangles", 0))
    hdr["transfer"] = {k: v for k, v in st.items() if not k.startswith("annotation_") and k != "mismatch"}
    return arrays, hdr, {"semantic_format": getattr(ann, "format", ""), **{f"semantic_{k}": v for k, v in st.items()}}


def convert_file(src: str | os.PathLike, dst: str | os.PathLike, options: ConvertOptions = DEFAULTS,
                 overwrite: bool = False, scene_id: str | None = None, semantic="auto",
                 check_geometry=None) -> ConvertResult:
    """Read ``src`` (any format ``bps_assets.readers`` knows) and write the packed scene ``dst``.

    ``semantic``: ``"auto"`` stores the annotation pair found beside ``src`` (HM3D
    ``.semantic.glb/.txt``, MP3D ``_semantic.ply/.house``) when there is one; a
    ``SemanticSource`` names the pair, an ``Annotation`` is one already read; None stores none.
    ``check_geometry``: as ``convert_scene``'s."""
    t0 = time.perf_counter()
    dst = Path(dst)
    if dst.exists() and not overwrite:  # before the expensive part
        raise OutputExistsError(dst, "already exists (pass overwrite / --overwrite to replace it)")
    remove_stale_temps(dst)  # ".NAME.bps.*.tmp" of killed runs (a live writer's is locked, kept)
    from .readers import load  # readers import optional decoders lazily

    from .readers.semantic_files import find_semantic, read_annotation

    sem_src = find_semantic(src) if isinstance(semantic, str) and semantic == "auto" else semantic
    ann = sem_src if sem_src is not None and not hasattr(sem_src, "mesh") else None
    if ann is None and sem_src is not None:  # before the scene: a broken annotation fails fast
        ann = read_annotation(sem_src)
        ann.format = sem_src.format
    doc = load(src)
    # the resolved path: the same file re-converted from another folder is the same source
    info = {**source_record(src), "bytes": os.path.getsize(src),
            "format": doc.source_format or Path(src).suffix.lstrip(".").lower()}
    res = convert_scene(doc, dst, options, overwrite=overwrite,
                        scene_id=scene_id or scene_id_for(src, options.dataset), source_info=info,
                        semantic=ann, check_geometry=check_geometry)
    res.stats["seconds"] = round(time.perf_counter() - t0, 4)
    return res


# ------------------------------------------------------------------------------ reading

# field -> stored section(s)
_FIELD_SECTIONS = {
    "positions": "positions_q", "indices": "indices", "uvs": "uvs_q", "colors": "colors",
    "tri_material": "tri_material", "material_color": "material_color",
    "material_texture": "material_texture", "tex_blocks": "tex_blocks", "tex_levels": "tex_levels",
    "meshlet_tris": "meshlet_tris", "meshlet_spheres": "meshlet_spheres",
    "chunk_meshlets": "chunk_meshlets", "chunk_tris": "chunk_tris", "chunk_spheres": "chunk_spheres",
    **{f: f for f in _sem.FIELDS},
}
_REQUIRED = ("positions_q", "indices", "tri_material", "material_color", "material_texture",
             "tex_blocks", "tex_levels", "chunk_tris", "chunk_spheres")
# dtype and trailing shape each section must have
_LAYOUT = {
    "positions_q": (("u2", "u4"), (3,)), "indices": (("u4",), (3,)), "uvs_q": (("u2", "u4"), (2,)),
    "colors": (("u1",), (4,)), "tri_material": (("i4",), ()), "material_color": (("f4",), (4,)),
    "material_texture": (("i4",), ()), "tex_blocks": (("u1",), ()), "tex_levels": (("i8",), (6,)),
    "meshlet_tris": (("i8",), (2,)), "meshlet_spheres": (("f4",), (4,)),
    "chunk_meshlets": (("i8",), (2,)), "chunk_tris": (("i8",), (2,)), "chunk_spheres": (("f4",), (4,)),
    **_sem.LAYOUT,
    **_comp.LAYOUT,
    **_lod.LAYOUT,
}
STORED_SECTIONS = tuple(_LAYOUT)  # the sections read_packed_scene reads (and checks) when present
_DT_NAME = {np.dtype(np.uint8): "u1", np.dtype(np.uint16): "u2", np.dtype(np.uint32): "u4",
            np.dtype(np.int32): "i4", np.dtype(np.int64): "i8", np.dtype(np.float32): "f4",
            np.dtype(np.float64): "f8"}
# a file without a semantic section is read with these None (PointNav needs none of them)


@dataclass
class PackedScene:
    """A packed scene's arrays (numpy, habitat frame). Fields not requested are None."""

    header: dict
    positions: np.ndarray | None = None         # float32 [V,3]
    indices: np.ndarray | None = None           # uint32 [T,3]
    uvs: np.ndarray | None = None               # float32 [V,2]
    colors: np.ndarray | None = None            # uint8 [V,4] or None
    tri_material: np.ndarray | None = None      # int32 [T]
    material_color: np.ndarray | None = None    # float32 [M,4]
    material_texture: np.ndarray | None = None  # int32 [M], -1: none
    tex_blocks: np.ndarray | None = None        # uint8 [B]
    tex_levels: np.ndarray | None = None        # int64 [L,6]
    meshlet_tris: np.ndarray | None = None      # int64 [K,2]
    meshlet_spheres: np.ndarray | None = None   # float32 [K,4]
    chunk_meshlets: np.ndarray | None = None    # int64 [C,2]
    chunk_tris: np.ndarray | None = None        # int64 [C,2]
    chunk_spheres: np.ndarray | None = None     # float32 [C,4]
    tri_object: np.ndarray | None = None        # int32 [T]: instance id per triangle (0 none); None: no semantics
    object_ids: np.ndarray | None = None        # int32 [O]  (the object table: see ``semantics``)
    object_category: np.ndarray | None = None   # int32 [O]
    object_region: np.ndarray | None = None     # int32 [O]
    object_source_ids: np.ndarray | None = None  # int64 [O]
    object_aabb: np.ndarray | None = None       # float32 [O,6]
    object_points: np.ndarray | None = None     # float32 [O*P,3]
    path: str = ""
    lod: int = -1   # the LOD level whose geometry this holds (read_lod_level); -1: the full mesh
    lod_reason: str = ""   # why that level, from a reader that chose it (bps_runtime's read_for_sensor); else ""

    ARRAY_FIELDS = tuple(_FIELD_SECTIONS)

    @property
    def scene_id(self) -> str:
        """The scene id recorded in the file's header ("" when absent)."""
        return self.header.get("scene_id", "")

    @property
    def semantics(self):
        """The object table (``bps_assets.semantics.SemanticTable``), or None when the file has no
        semantic section or its table sections were not read."""
        return _sem.table_of(self.header, {f: getattr(self, f) for f in _sem.FIELDS})

    def nbytes(self) -> int:
        """Bytes of the arrays loaded into this object."""
        return sum(getattr(self, f).nbytes for f in self.ARRAY_FIELDS if getattr(self, f) is not None)

    def to_torch(self, device="cpu") -> dict:
        """Tensors on ``device`` for every loaded array. ``indices`` becomes int32 (torch's
        uint32 support is partial; values are < 2^31, checked on read)."""
        import torch

        out = {}
        for name in self.ARRAY_FIELDS:
            a = getattr(self, name)
            if a is None:
                continue
            if name == "indices":
                a = a.view(np.int32)
            if not a.flags.writeable:  # torch.from_numpy wants a writable buffer
                a = a.copy()
            out[name] = torch.from_numpy(a).to(device)
        return out


def _hdr_err(path, msg):
    return CorruptFileError(path, f"header: {msg}")


def _grid(path, header, key, dtype_name, k):
    try:
        d = header["quantization"][key]
        grid = t_quantize.Grid.from_json(d)
    except (KeyError, TypeError, ValueError) as e:
        raise _hdr_err(path, f"quantization.{key} missing or malformed ({e})") from None
    if grid.dtype != dtype_name or len(grid.origin) != k or len(grid.step) != k or \
            not all(np.isfinite(grid.origin)) or not all(np.isfinite(grid.step)):
        raise _hdr_err(path, f"quantization.{key} does not match its section")
    return grid


def _grids_and_bounds(path, header, secs, names: dict, n_v: int) -> tuple[dict, dict]:
    """(grids, below): ``Container.read``'s dequantization grids and upper index bounds for the
    geometry ``names`` (geometry section name -> the section read for it, e.g. a LOD level's),
    ``n_v`` vertices: the quantized sections come back as float32 values, dequantized in the
    unfilter pass; indices and material ids are range-checked in the read's own pass (as
    unsigned: a negative id fails too)."""
    grids = {f: _grid(path, header, key, _DT_NAME[secs[names[f]].dtype], k)
             for f, key, k in (("positions_q", "positions", 3), ("uvs_q", "uvs", 2)) if f in names}
    return grids, {"indices": n_v, "tri_material": secs["material_color"].shape[0]}


# Caps on what a header may declare (docs/FORMAT.md 5.5). Sizes of every section follow from
# these counts, so a file cannot make the reader allocate more than the scene it describes.
MAX_TRIANGLES = 2**31 - 1   # indices go to torch as int32
MAX_MATERIALS = 1 << 20     # material tables: 20 MiB at most
MAX_TEXTURE_SIDE = 1 << 16
MAX_TEXTURE_LEVELS = 17     # a 65536 chain down to 1x1
_COUNT_KEYS = ("triangles", "vertices", "materials", "textures", "texture_levels", "meshlets", "chunks")
_BLOCK_BYTES = {"bc1": 8, "bc7": 16}


def _int_field(path, obj, key, where, lo=0, hi=None):
    v = obj.get(key) if isinstance(obj, dict) else None
    if not is_int(v) or v < lo or (hi is not None and v > hi):
        raise _hdr_err(path, f"{where}.{key} missing or not an integer in [{lo}, {hi if hi is not None else 'inf'}]")
    return v


def texture_bytes_bound(path, header: dict) -> int:
    """Most bytes ``tex_blocks`` may hold: every level of every texture the header lists, each
    padded to 16 bytes (levels smaller than a block take one block)."""
    texs = header.get("textures")
    if not isinstance(texs, list):
        raise _hdr_err(path, "textures is not a list")
    total = 0
    for i, t in enumerate(texs):
        w = _int_field(path, t, "width", f"textures[{i}]", 1, MAX_TEXTURE_SIDE)
        h = _int_field(path, t, "height", f"textures[{i}]", 1, MAX_TEXTURE_SIDE)
        n = _int_field(path, t, "levels", f"textures[{i}]", 1, MAX_TEXTURE_LEVELS)
        fmt = t.get("format")
        bb = _BLOCK_BYTES.get(fmt) if isinstance(fmt, str) else None   # a list / object is unhashable
        if bb is None:
            raise _hdr_err(path, f"textures[{i}].format {repr(fmt)[:40]} is not one of bc1, bc7")
        for lv in range(n):
            lb = -(-max(1, w >> lv) // 4) * -(-max(1, h >> lv) // 4) * bb
            total += -(-lb // 16) * 16
    return total


def section_rows(path, header: dict) -> dict[str, int]:
    """The row count every known section must have, from the header's ``counts`` (checked
    against the caps above and against each other: every vertex is used by a triangle, every
    meshlet and chunk holds at least one triangle, every stored texture is some material's)."""
    counts = header.get("counts")
    if not isinstance(counts, dict):
        raise _hdr_err(path, "no counts object")
    n = {k: _int_field(path, counts, k, "counts") for k in _COUNT_KEYS}
    t = n["triangles"]
    limits = {"triangles": MAX_TRIANGLES, "vertices": 3 * t, "meshlets": t, "chunks": t,
              "materials": MAX_MATERIALS, "textures": n["materials"],
              "texture_levels": MAX_TEXTURE_LEVELS * n["textures"]}
    for k, lim in limits.items():
        if n[k] > lim:
            raise _hdr_err(path, f"counts.{k} = {n[k]} exceeds {lim}")
    texs = header.get("textures")
    if not isinstance(texs, list) or len(texs) != n["textures"]:
        raise _hdr_err(path, f"textures list does not have counts.textures = {n['textures']} entries")
    v, m, k, c = n["vertices"], n["materials"], n["meshlets"], n["chunks"]
    return {"positions_q": v, "uvs_q": v, "colors": v, "indices": t, "tri_material": t,
            "material_color": m, "material_texture": m, "tex_levels": n["texture_levels"],
            "meshlet_tris": k, "meshlet_spheres": k, "chunk_meshlets": c, "chunk_tris": c,
            "chunk_spheres": c, **_sem.section_rows(path, header, t), **_comp.section_rows(path, header),
            **_lod.section_rows(path, header, t, v)}


def section_bounds(path, header: dict) -> dict[str, int]:
    """Most raw bytes each known section may declare (rows from ``section_rows`` times the
    widest row the layout allows; ``tex_blocks`` from ``texture_bytes_bound``)."""
    rows = section_rows(path, header)
    out = {}
    for name, (dts, tail) in _LAYOUT.items():
        if name == "tex_blocks":
            continue
        width = max(np.dtype(DT_BY_NAME[d]).itemsize for d in dts) * int(np.prod(tail, dtype=np.int64))
        out[name] = rows[name] * width
    out["tex_blocks"] = texture_bytes_bound(path, header)
    return out


def check_declared_sizes(path, c: Container) -> None:
    """Every known section's row count equals the header's counts, and the bytes it declares fit
    what those counts can need; a section of another name may not declare more than all known
    sections together (docs/FORMAT.md 5.5). Runs before anything is read or decompressed."""
    hdr, secs = c.header, c.sections
    rows = section_rows(path, hdr)
    _lod.check_present(path, hdr, secs)
    for name, want in rows.items():
        if name in secs and (secs[name].shape[0] if secs[name].shape else 0) != want:
            raise CorruptFileError(path, f"has {secs[name].shape[0]} rows, the header's counts say {want}",
                                   section=name)
    bounds = section_bounds(path, hdr)
    c.check_bounds(bounds, default=sum(bounds.values()))


def read_packed_scene(path: str | os.PathLike, sections: Iterable[str] | None = None,
                      threads: int = 2, verify: bool = True, expand: bool = True) -> PackedScene:
    """Read a packed scene. ``sections``: field names to load (default all), e.g.
    ``["positions", "indices"]``. Raises CorruptFileError naming the section on any damage.
    A composed scene (docs/FORMAT.md 5.7) comes back flattened (its instances' assets placed
    in world space) unless ``expand`` is False (then: the stage alone)."""
    path = os.fspath(path)
    want = list(_FIELD_SECTIONS) if sections is None else list(sections)
    for f in want:
        if f not in _FIELD_SECTIONS:
            raise ConfigError(path, f"unknown packed-scene field {f!r} (choose from {', '.join(_FIELD_SECTIONS)})")
    with Container(path, KIND) as c:
        hdr = c.header
        if not isinstance(hdr.get("scene_format_version"), int):
            raise _hdr_err(path, "no scene_format_version")
        if hdr["scene_format_version"] != SCENE_FORMAT_VERSION:
            from .errors import FormatVersionError
            raise FormatVersionError(path, f"scene format version {hdr['scene_format_version']} is not "
                                           f"supported (this build reads {SCENE_FORMAT_VERSION})")
        for s in _REQUIRED:
            if s not in c.sections:
                raise CorruptFileError(path, "required section is missing", section=s)
        for name, sec in c.sections.items():
            lay = _LAYOUT.get(name)
            if lay is None:
                continue  # unknown sections MAY be present (forward compatible)
            dts, tail = lay
            if _DT_NAME.get(sec.dtype) not in dts or len(sec.shape) != 1 + len(tail) or \
                    tuple(sec.shape[1:]) != tail:
                raise CorruptFileError(path, f"dtype/shape {sec.dtype}{list(sec.shape)} is not the "
                                             f"specified {dts[0]}[N{''.join(',%d' % t for t in tail)}]",
                                       section=name)
        check_declared_sizes(path, c)
        secs = c.sections
        n_v = secs["positions_q"].shape[0]
        n_t = secs["indices"].shape[0]
        for name, n in (("uvs_q", n_v), ("colors", n_v), ("tri_material", n_t)):
            if name in secs and secs[name].shape[0] != n:
                raise CorruptFileError(path, f"has {secs[name].shape[0]} rows, expected {n}", section=name)
        if secs["material_texture"].shape[0] != secs["material_color"].shape[0]:
            raise CorruptFileError(path, "row count differs from material_color", section="material_texture")

        needed = []
        for f in want:
            s = _FIELD_SECTIONS[f]
            if s in secs and s not in needed:
                needed.append(s)
        # largest first: the longest decompression (the texture blocks) starts at once instead
        # of last on a thread that has already worked through the small sections
        needed.sort(key=lambda n: -secs[n].stored_length)
        grids, below = _grids_and_bounds(path, hdr, secs, {n: n for n in needed}, n_v)

        def read(n):
            return c.read(n, verify=verify, grid=grids.get(n), below=below.get(n))

        if threads <= 1:  # in this thread: a pool of one only adds a thread start and hand-overs
            raw = {n: read(n) for n in needed}
        else:
            with ThreadPoolExecutor(threads) as ex:
                try:
                    results = ex.map(read, needed)   # every read submitted here
                except RuntimeError as e:   # a pool of its own refuses work only at the interpreter's exit
                    raise InterpreterExiting(f"{path}: {e}") from e
                raw = dict(zip(needed, results))

    out = PackedScene(header=hdr, path=path)
    if "positions_q" in raw:
        out.positions = raw["positions_q"]
    if "uvs" in want:
        out.uvs = raw["uvs_q"] if "uvs_q" in raw else np.zeros((n_v, 2), np.float32)
    for f in want:
        s = _FIELD_SECTIONS[f]
        if f not in ("positions", "uvs") and s in raw:
            setattr(out, f, raw[s])
    _check_ranges(path, out, n_v, n_t, secs)
    _sem.check(path, hdr, {f: getattr(out, f) for f in _sem.FIELDS})
    _sem.warn_stale_ids(path, hdr)
    if expand and _comp.HEADER_KEY in hdr:  # instances placed in world space (composed_section)
        out = _expand_composed(out, path, want, threads, verify)
    return out


def _expand_composed(ps: PackedScene, path: str, want: list, threads: int, verify: bool) -> PackedScene:
    """The composed scene ``ps`` (its stage read) with its instances' assets placed in world space."""
    with Container(path, KIND) as c:
        table = _comp.read_table(path, c)
    return _comp.expand(ps, table, want, lambda p, s: read_packed_scene(p, s, threads, verify, False))


def read_lod_level(path: str | os.PathLike, level: int, threads: int = 2, verify: bool = True, expand: bool = True):
    """The packed scene with level ``level``'s geometry (positions, indices, uvs, colors,
    tri_material, tri_object) in place of the full mesh's; its ``lod`` field says which level,
    its header's counts are the level's (``with_lod_geometry``). The rest (materials, textures,
    object table) as ``read_packed_scene`` reads it; a composed scene's stage is the level, its
    instances are expanded from their full assets."""
    path = os.fspath(path)
    rest = [f for f in PackedScene.ARRAY_FIELDS if f not in
            ("positions", "indices", "uvs", "colors", "tri_material", "tri_object")
            and not f.startswith(("meshlet_", "chunk_"))]
    ps = with_lod_geometry(read_packed_scene(path, rest, threads, verify, expand=False), level, verify)
    if expand and _comp.HEADER_KEY in ps.header:  # the merge sizes the stage from its header's counts
        want = [f for f in PackedScene.ARRAY_FIELDS if not f.startswith(("meshlet_", "chunk_"))]
        ps = _expand_composed(ps, path, want, threads, verify)
        ps.lod = level
    return ps


def with_lod_geometry(base: PackedScene, level: int, verify: bool = True) -> PackedScene:
    """A copy of ``base`` (read by ``read_packed_scene`` with ``expand=False``) whose geometry
    (positions, indices, uvs, colors, tri_material, tri_object) is level ``level``'s, read from
    its file with every check of the level (docs/FORMAT.md 5.8); its other fields (materials,
    textures, object table) are ``base``'s arrays, not read again. Meshlets and chunks: None.
    Its header is a copy of ``base``'s whose ``counts`` triangles / vertices are the level's
    (``lods`` still lists every level against the file's full mesh)."""
    path, hdr = base.path, base.header
    lv = _lod.levels(path, hdr)
    if not 0 <= level < len(lv):
        raise ConfigError(path, f"LOD level {level} does not exist (the file has {len(lv)})")
    nv = lv[level]["vertices"]
    with Container(path, KIND) as c:
        names = {f: _lod.section(level, f) for f in _lod.GEOMETRY if _lod.section(level, f) in c.sections}
        grids, below = _grids_and_bounds(path, hdr, c.sections, names, nv)
        raw = {f: c.read(n, verify=verify, grid=grids.get(f), below=below.get(f)) for f, n in names.items()}
    ps = replace(base, positions=raw["positions_q"],
                 uvs=raw["uvs_q"] if "uvs_q" in raw else np.zeros((nv, 2), np.float32),
                 indices=raw["indices"], tri_material=raw["tri_material"],
                 colors=raw.get("colors"), tri_object=raw.get("tri_object"), lod=level,
                 **{f: None for f in PackedScene.ARRAY_FIELDS if f.startswith(("meshlet_", "chunk_"))})
    ps.header = {**hdr, "counts": {**hdr["counts"], "triangles": len(ps.indices), "vertices": nv}}
    _sem.check(path, hdr, {"tri_object": ps.tri_object, "object_ids": ps.object_ids})
    return ps


def _check_ranges(path, s: PackedScene, n_v: int, n_t: int, secs) -> None:
    """Vectorized range checks of every array that indexes another one."""
    def bad(name, msg):
        return CorruptFileError(path, msg, section=name)

    if n_v >= 2**31:
        raise bad("positions_q", f"{n_v} vertices exceed 2^31")
    # indices < n_v and 0 <= tri_material < materials: checked by Container.read(below=...)
    for name in ("chunk_tris", "meshlet_tris"):
        _check_spans(path, name, getattr(s, name), n_t, "triangle")
    if "meshlet_tris" in secs:
        _check_spans(path, "chunk_meshlets", s.chunk_meshlets, secs["meshlet_tris"].shape[0], "meshlet")
    if s.tex_levels is not None and s.tex_levels.size:
        lv = s.tex_levels
        n_tex = int(lv[:, 0].max()) + 1
        if int(lv.min()) < 0 or not np.isin(lv[:, 5], (1, 7)).all():
            raise bad("tex_levels", "negative value or unknown format code")
        if n_tex > len(s.header.get("textures") or ()) or int(lv[:, 1].max()) >= MAX_TEXTURE_LEVELS:
            raise bad("tex_levels", "texture id or level beyond the header's textures")
        if int(lv[:, 2].max()) > MAX_TEXTURE_SIDE or int(lv[:, 3].max()) > MAX_TEXTURE_SIDE:
            raise bad("tex_levels", "texture side above 65536")
        n_b = secs["tex_blocks"].shape[0]
        # each part against the limit first, so offset + size cannot wrap int64
        if int(lv[:, 4].max()) > n_b:
            raise bad("tex_levels", f"level offset outside tex_blocks ({n_b} bytes)")
        size = ((lv[:, 2] + 3) // 4) * ((lv[:, 3] + 3) // 4) * np.where(lv[:, 5] == 1, 8, 16)
        if int((lv[:, 4] + size).max()) > n_b:
            raise bad("tex_levels", f"level bytes outside tex_blocks ({n_b} bytes)")
        mt = s.material_texture
        if mt is not None and mt.size and (int(mt.min()) < -1 or int(mt.max()) >= n_tex):
            raise bad("material_texture", f"texture id out of range for {n_tex} textures")
    elif s.material_texture is not None and s.material_texture.size and int(s.material_texture.max()) >= 0 \
            and s.tex_levels is not None:
        raise bad("material_texture", "refers to a texture but the file has none")


def _check_spans(path, name: str, a: np.ndarray | None, n: int, what: str) -> None:
    """Rows ``(first, count)`` lie inside ``[0, n]``. First and count are each checked against
    ``n`` before they are added, so crafted values near 2^63 cannot wrap the sum past the check."""
    if a is None or not a.size:
        return
    if int(a.min()) < 0 or int(a.max()) > n or int((a[:, 0] + a[:, 1]).max()) > n:
        raise CorruptFileError(path, f"{what} range outside 0..{n}", section=name)


def texture_level(scene: PackedScene, texture: int, level: int = 0) -> tuple[int, int, int, bytes]:
    """(width, height, format, blocks) of one mip level (needs tex_blocks and tex_levels)."""
    lv = scene.tex_levels
    row = lv[(lv[:, 0] == texture) & (lv[:, 1] == level)]
    if not len(row):
        raise KeyError((texture, level))
    _, _, w, h, off, fmt = (int(x) for x in row[0])
    n = t_textures.block_bytes(w, h, fmt)
    return w, h, fmt, scene.tex_blocks[off:off + n].tobytes()


def decode_texture_level(scene: PackedScene, texture: int, level: int = 0) -> np.ndarray:
    """uint8 [H,W,4] of one stored level, decoded with Pillow (for checks and previews)."""
    w, h, fmt, data = texture_level(scene, texture, level)
    return t_textures.decode_blocks(data, w, h, fmt)


__all__ = ["ConvertOptions", "DEFAULTS", "ConvertResult", "PackedScene", "convert_scene",
           "convert_file", "read_packed_scene", "read_lod_level", "with_lod_geometry", "scene_id_for", "texture_level",
           "decode_texture_level", "process_geometry", "document_transforms", "geometry_transforms"]
