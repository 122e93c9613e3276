"""A scene's shading tables (``ShadingData``), validated once where they are made, and the
shading model every backend implements on them.

Shading (every backend implements exactly this; the tests compare them pixel for pixel):
  colour = texel(material texture, mip, uv) * material_color * vertex colour, RGB uint8,
with point sampling at the nearest texel of mip level round(lod), clamped to the chain, and
  lod = log2(z * pixel_angle / max(|cos(incidence)|, 0.05)) + tri_lod_bias[tri]
where tri_lod_bias = 0.5 * log2(uv area * level-0 texels / world area), prepared per triangle
by the loader. UVs wrap (glTF REPEAT); uv (0, 0) is the first texel of the first row. Textures
are BC1 blocks (decoded per sampled texel) or RGBA8 levels (BC7 sources, expanded by the loader).

Every index a renderer follows (triangle -> vertices, triangle -> material, material ->
texture, texture -> levels -> bytes) is checked by ``ShadingData``'s constructor, so a backend
never reads outside a table; the C bridge checks them again per hit (docs/DECISIONS.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bps_assets.errors import CorruptFileError

if TYPE_CHECKING:
    from bps_assets.packed_scene import PackedScene

FORMAT_RGBA8 = 0  # internal: levels stored as raw RGBA8 (expanded from BC7 by the loader)
FORMAT_BC1 = 1
FORMAT_BC7 = 7
COS_FLOOR = 0.05  # grazing angles: cap the footprint stretch at 20x (4.3 mip levels)
LOD_BIAS_FLOOR = -30.0
MAX_TEXTURE_SIZE = 16384


def level_nbytes(fmt, width, height):
    """Bytes of one texture level (works on numpy arrays too)."""
    blocks = ((width + 3) // 4) * ((height + 3) // 4)
    return np.where(fmt == FORMAT_BC1, blocks * 8, np.where(fmt == FORMAT_BC7, blocks * 16, width * height * 4))


@dataclass
class ShadingData:
    """What a backend needs to colour a hit; built once per scene by the loader (host numpy).

    ``level_info`` [X, Lmax, 3] int64 (byte offset into ``tex_data``, width, height) per texture
    and level; ``tex_nlevels`` [X] int32; ``tex_format`` [X] int32 (FORMAT_BC1 / FORMAT_RGBA8).
    The constructor checks shapes, dtypes and every cross reference, converting tables to the
    listed dtypes (no copy when they have them already) and raising CorruptFileError naming
    ``source`` (the scene's file) otherwise.
    """

    indices: np.ndarray          # int32 [T,3]
    uvs: np.ndarray              # float32 [V,2]
    colors: np.ndarray | None    # uint8 [V,4]
    tri_material: np.ndarray     # int32 [T]
    tri_lod_bias: np.ndarray     # float32 [T]
    material_color: np.ndarray   # float32 [M,4], M >= 1
    material_texture: np.ndarray  # int32 [M], -1: untextured
    tex_data: np.ndarray         # uint8 [B], B a multiple of 8
    level_info: np.ndarray       # int64 [X, Lmax, 3], X >= 1
    tex_nlevels: np.ndarray      # int32 [X]
    tex_format: np.ndarray       # int32 [X]
    source: str | None = None    # the file the tables came from (for errors)
    # the semantic sensor's per-triangle instance ids (bps_assets.semantics: 0 = no object);
    # None when the scene has no annotations (its semantic pixels are all 0)
    tri_object: np.ndarray | None = None  # int32 [T], >= 0

    def __post_init__(self):
        def bad(msg):
            return CorruptFileError(self.source, f"shading tables: {msg}")

        def table(name, dtype, shape, optional=False):
            a = getattr(self, name)
            if a is None and optional:
                return None
            a = np.asarray(a)
            want = np.dtype(dtype)
            if a.dtype.kind not in ("iu" if want.kind in "iu" else "f"):
                raise bad(f"{name} has dtype {a.dtype}, expected {want}")
            if len(shape) != a.ndim or any(s is not None and s != d for s, d in zip(shape, a.shape)):
                raise bad(f"{name} has shape {a.shape}, expected "
                          f"[{', '.join('?' if s is None else str(s) for s in shape)}]")
            if want.kind in "iu" and a.size and a.dtype != want:
                lo, hi = np.iinfo(want).min, np.iinfo(want).max
                if int(a.min()) < lo or int(a.max()) > hi:
                    raise bad(f"{name} holds values outside {want}")
            a = np.ascontiguousarray(a, want)
            setattr(self, name, a)
            return a

        tris = table("indices", np.int32, (None, 3))
        nt = tris.shape[0]
        nv = table("uvs", np.float32, (None, 2)).shape[0]
        table("colors", np.uint8, (nv, 4), optional=True)
        tri_mat = table("tri_material", np.int32, (nt,))
        obj = table("tri_object", np.int32, (nt,), optional=True)
        if obj is not None and obj.size and int(obj.min()) < 0:
            raise bad(f"tri_object holds a negative instance id ({int(obj.min())}); ids are >= 1, 0 = no object")
        table("tri_lod_bias", np.float32, (nt,))
        nm = table("material_color", np.float32, (None, 4)).shape[0]
        mat_tex = table("material_texture", np.int32, (nm,))
        nb = table("tex_data", np.uint8, (None,)).size
        info = table("level_info", np.int64, (None, None, 3))
        nx, lmax = info.shape[:2]
        nlev = table("tex_nlevels", np.int32, (nx,))
        fmt = table("tex_format", np.int32, (nx,))
        if nm < 1 or nx < 1 or lmax < 1:
            raise bad(f"need at least one material, texture slot and level ({nm}, {nx}, {lmax})")
        if nt and (tris.min() < 0 or tris.max() >= nv):
            raise bad(f"a vertex index ({int(tris.max()) if tris.max() >= nv else int(tris.min())}) is out of "
                      f"range for {nv} vertices")
        if nt and (tri_mat.min() < 0 or tri_mat.max() >= nm):
            raise bad(f"tri_material refers to a material that does not exist ({nm} materials)")
        if mat_tex.min() < -1 or mat_tex.max() >= nx:
            raise bad(f"material_texture refers to a texture that does not exist ({nx} textures)")
        if nb % 8:
            raise bad(f"tex_data has {nb} bytes, not a multiple of 8 (BC1 blocks are read as 8-byte words)")
        if nlev.min() < 0 or nlev.max() > lmax:
            raise bad(f"tex_nlevels must be in [0, {lmax}]")
        if not np.all((fmt == FORMAT_BC1) | (fmt == FORMAT_RGBA8)):
            raise bad(f"tex_format holds a format other than BC1 ({FORMAT_BC1}) or RGBA8 ({FORMAT_RGBA8})")
        used = mat_tex[mat_tex >= 0]
        if used.size and np.any(nlev[used] == 0):
            raise bad("a material refers to a texture with no levels")
        live = np.arange(lmax)[None, :] < nlev[:, None]  # [X, Lmax]: the levels a renderer may pick
        t_of, l_of = np.nonzero(live)
        off, w, h = info[live].T
        f = fmt[t_of]
        size_ok = (w >= 1) & (h >= 1) & (w <= MAX_TEXTURE_SIZE) & (h <= MAX_TEXTURE_SIZE)
        end = off + level_nbytes(f, np.clip(w, 0, MAX_TEXTURE_SIZE), np.clip(h, 0, MAX_TEXTURE_SIZE))
        ok = size_ok & (off >= 0) & (end <= nb) & ((f != FORMAT_BC1) | (off % 8 == 0))
        if not ok.all():
            k = int(np.flatnonzero(~ok)[0])
            what = ("has no image (a gap in its mip chain?)" if not size_ok[k] and w[k] == 0 else
                    f"size {w[k]}x{h[k]} is outside [1, {MAX_TEXTURE_SIZE}]" if not size_ok[k] else
                    f"BC1 byte offset {off[k]} is not a multiple of 8" if off[k] >= 0 and end[k] <= nb else
                    f"byte range {off[k]}+{end[k] - off[k]} is outside tex_data ({nb} bytes)")
            raise bad(f"texture {t_of[k]} level {l_of[k]} {what}")

    def check_geometry(self, num_vertices: int, num_triangles: int):
        """The mesh a renderer traces must be the one these tables describe (a hit's triangle id
        indexes ``indices``, ``tri_material`` and ``tri_lod_bias``)."""
        if num_triangles != self.indices.shape[0] or num_vertices != self.uvs.shape[0]:
            raise CorruptFileError(self.source, f"shading tables are for {self.uvs.shape[0]} vertices / "
                                                f"{self.indices.shape[0]} triangles, the mesh has {num_vertices} "
                                                f"/ {num_triangles}")

    def arrays(self) -> dict[str, np.ndarray]:
        """Every numpy array of the tables by field name (what gets pinned, copied or counted)."""
        return {k: v for k, v in self.__dict__.items() if isinstance(v, np.ndarray)}

    @property
    def nbytes(self) -> int:
        """Bytes of all the tables' arrays."""
        return sum(a.nbytes for a in self.arrays().values())


def _decode_bc7_level(data: bytes, w: int, h: int) -> np.ndarray:
    from PIL import Image  # core dependency
    img = Image.frombytes("RGBA", (w, h), data, "bcn", 7)
    return np.asarray(img, dtype=np.uint8)


def _texture_tables(levels: np.ndarray, blocks: np.ndarray, ntex: int, bad):
    """A packed scene's tex_levels rows (texture, level, width, height, byte offset, format) ->
    (level_info, tex_nlevels, tex_format, tex_data), BC7 levels expanded to RGBA8."""
    lmax = int(levels[:, 1].max() + 1) if len(levels) else 1
    level_info = np.zeros((max(ntex, 1), lmax, 3), np.int64)
    nlev = np.zeros(max(ntex, 1), np.int32)
    fmt = np.full(max(ntex, 1), FORMAT_BC1, np.int32)
    extra: list[np.ndarray] = []
    extra_off = blocks.size
    for t, lvl, w, h, off, f in levels.tolist():
        if not (0 <= t < ntex and 0 <= lvl < lmax and 1 <= w <= MAX_TEXTURE_SIZE and 1 <= h <= MAX_TEXTURE_SIZE):
            raise bad(f"bad tex_levels row {(t, lvl, w, h, off, f)}")
        nbytes = int(level_nbytes(f, w, h))
        if f not in (FORMAT_BC1, FORMAT_BC7) or off < 0 or off + nbytes > blocks.size:
            raise bad(f"texture {t} level {lvl}: format {f} / byte range {off}+{nbytes} outside "
                      f"tex_blocks ({blocks.size} bytes)")
        if f == FORMAT_BC7:  # the only format decoded here: its bytes must be in range first
            rgba = _decode_bc7_level(blocks[off:off + nbytes].tobytes(), w, h)
            extra.append(rgba.reshape(-1))
            off = extra_off
            extra_off += rgba.size
            fmt[t] = FORMAT_RGBA8
        level_info[t, lvl] = (off, w, h)
        nlev[t] = max(nlev[t], lvl + 1)
    tex_data = np.concatenate([blocks] + extra) if extra else blocks
    if tex_data.size % 8:  # BC1 texels are fetched as little-endian uint64 words
        tex_data = np.concatenate([tex_data, np.zeros(8 - tex_data.size % 8, np.uint8)])
    return level_info, nlev, fmt, tex_data


def _tri_lod_bias(pos: np.ndarray, sd: ShadingData) -> np.ndarray:
    """Per-triangle mip bias: 0.5*log2(uv area * level-0 texels / world area)."""
    tris = sd.indices
    if not tris.shape[0]:
        return np.zeros(0, np.float32)
    p = pos[tris]
    world = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)
    uv = sd.uvs[tris].astype(np.float64)
    e1, e2 = uv[:, 1] - uv[:, 0], uv[:, 2] - uv[:, 0]
    uv_area = 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    tex = np.clip(sd.material_texture[sd.tri_material], 0, None)
    texels = np.where(sd.material_texture[sd.tri_material] >= 0,
                      sd.level_info[tex, 0, 1] * sd.level_info[tex, 0, 2], 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = 0.5 * np.log2(uv_area * texels / world)
    b = np.where(np.isfinite(b), b, LOD_BIAS_FLOOR)
    return np.clip(b, LOD_BIAS_FLOOR, 30.0).astype(np.float32)


def build_shading_data(scene: PackedScene, path: str | None = None) -> ShadingData:
    """A packed scene (``bps_assets.packed_scene.PackedScene``) -> ShadingData. Its
    ``colors``, ``tex_levels`` / ``tex_blocks`` and ``tri_object`` may be None (no vertex
    colours, no textures, no semantic ids: the semantic sensor then sees 0).

    Every cross reference a renderer would otherwise index out of bounds with is checked (by
    ``ShadingData``), raising CorruptFileError naming ``path``.
    """
    def bad(msg):
        return CorruptFileError(path, msg)

    pos = np.asarray(scene.positions, np.float32)
    tris = np.asarray(scene.indices)
    if tris.ndim != 2 or tris.shape[1] != 3 or pos.ndim != 2 or pos.shape[1] != 3:
        raise bad(f"positions {pos.shape} / indices {tris.shape} are not [V,3] / [T,3]")
    nv = pos.shape[0]
    uvs = scene.uvs if scene.uvs is not None else np.zeros((nv, 2), np.float32)
    colors = scene.colors
    mat_color = np.asarray(scene.material_color, np.float32).reshape(-1, 4)
    mat_tex = np.asarray(scene.material_texture, np.int32).reshape(-1)
    if mat_color.shape[0] == 0:  # no materials: one white default
        mat_color = np.ones((1, 4), np.float32)
        mat_tex = np.full(1, -1, np.int32)
    levels = np.asarray(np.zeros((0, 6)) if scene.tex_levels is None else scene.tex_levels, np.int64).reshape(-1, 6)
    blocks = np.asarray(np.zeros(0, np.uint8) if scene.tex_blocks is None else scene.tex_blocks, np.uint8).reshape(-1)
    ntex = int(max(levels[:, 0].max() + 1 if len(levels) else 0, mat_tex.max() + 1 if len(mat_tex) else 0, 0))
    level_info, nlev, fmt, tex_data = _texture_tables(levels, blocks, ntex, bad)
    sd = ShadingData(indices=tris, uvs=uvs, colors=colors,
                     tri_material=np.asarray(scene.tri_material).reshape(-1),
                     tri_lod_bias=np.zeros(tris.shape[0], np.float32), material_color=mat_color,
                     material_texture=mat_tex, tex_data=tex_data, level_info=level_info, tex_nlevels=nlev,
                     tex_format=fmt, source=None if path is None else str(path),
                     tri_object=scene.tri_object)
    sd.check_geometry(nv, tris.shape[0])
    sd.tri_lod_bias[:] = _tri_lod_bias(pos, sd)
    return sd
