"""The renderer protocol, the camera model and the shading data every backend shares.

Camera (habitat-sim's pinhole depth/RGB sensor): HFOV 90 deg, square pixels, at the agent's
position + 1.25 m along the agent's up axis, looking along the agent's -Z. Depth is the
z-distance to the image plane (habitat-sim's depth buffer, not the ray length); 0 marks "no
geometry" as in habitat. Ray directions in camera space are (x, y, -1), so the ray parameter
t that Embree and Warp return for an unnormalized direction IS the z-depth: no per-pixel
cosine correction is needed.

Shading (both backends implement exactly this, the tests compare them pixel for pixel):
  colour = texel(material texture, mip, uv) * material_color * vertex colour, RGB uint8,
with point sampling at the nearest texel of mip level round(lod), clamped to the chain, and
  lod = log2(z * pixel_angle / max(|cos(incidence)|, 0.05)) + tri_lod_bias[tri]
where tri_lod_bias = 0.5 * log2(uv area * level-0 texels / world area) is prepared per
triangle by the loader (so the step path never looks at vertex positions for shading). UVs
wrap (glTF REPEAT), uv (0, 0) is the first texel of the first row (glTF convention).
Textures are BC1 blocks (decoded per sampled texel: block index, two RGB565 endpoints, a
2-bit selector) or, for BC7 sources, RGBA8 levels the loader expanded with Pillow (a
vectorized BC7 decoder is not worth it for the few scenes that use BC7).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from bps_assets.errors import ConfigError

SENSORS = ("depth", "rgb")
FORMAT_RGBA8 = 0  # internal: levels stored as raw RGBA8 (expanded from BC7 by the loader)
FORMAT_BC1 = 1
FORMAT_BC7 = 7
COS_FLOOR = 0.05  # grazing angles: cap the footprint stretch at 20x (4.3 mip levels)
LOD_BIAS_FLOOR = -30.0


@dataclass(frozen=True)
class RenderOptions:
    """Sensor settings shared by every backend (habitat-lab PointNav defaults)."""

    resolution: tuple[int, int] = (64, 64)  # (height, width)
    hfov_deg: float = 90.0
    sensor_height: float = 1.25
    min_depth: float = 0.0
    max_depth: float = 10.0
    normalize_depth: bool = False  # habitat-lab: clip to [min, max] then scale to [0, 1]
    threads: int = 2  # Embree: ray-casting threads (one call per thread; it releases the GIL)

    def __post_init__(self):
        h, w = self.resolution
        if not (isinstance(h, int) and isinstance(w, int) and 1 <= h <= 8192 and 1 <= w <= 8192):
            raise ConfigError(None, f"resolution must be two ints in [1, 8192], got {self.resolution!r}")
        if not 0.0 < self.hfov_deg < 180.0:
            raise ConfigError(None, f"hfov_deg must be in (0, 180), got {self.hfov_deg}")
        if not 0.0 <= self.min_depth < self.max_depth:
            raise ConfigError(None, f"need 0 <= min_depth < max_depth, got {self.min_depth}, {self.max_depth}")
        if self.threads < 1:
            raise ConfigError(None, f"threads must be >= 1, got {self.threads}")

    @property
    def pixel_angle(self) -> float:
        """Width of one pixel on the plane z = 1 (the footprint scale for mip selection)."""
        return 2.0 * math.tan(math.radians(self.hfov_deg) / 2.0) / self.resolution[1]


DEFAULTS = RenderOptions()


def camera_directions(options: RenderOptions) -> np.ndarray:
    """[H*W, 3] float32 camera-space ray directions (x right, y up, z = -1), row-major from the
    top-left pixel, through pixel centres."""
    h, w = options.resolution
    t = math.tan(math.radians(options.hfov_deg) / 2.0)
    xs = ((np.arange(w, dtype=np.float64) + 0.5) * (2.0 / w) - 1.0) * t
    ys = (1.0 - (np.arange(h, dtype=np.float64) + 0.5) * (2.0 / h)) * t * (h / w)
    d = np.empty((h, w, 3), np.float64)
    d[..., 0] = xs[None, :]
    d[..., 1] = ys[:, None]
    d[..., 2] = -1.0
    return d.reshape(-1, 3).astype(np.float32)


def rotation_matrices(rotations: np.ndarray) -> np.ndarray:
    """[N] yaw (radians about +Y, positive turns left) or [N,4] quaternions xyzw -> [N,3,3] f32.

    Quaternions are normalized; a zero quaternion is a ConfigError.
    """
    r = np.asarray(rotations, dtype=np.float64)
    if r.ndim == 1 or (r.ndim == 2 and r.shape[1] == 1):
        yaw = r.reshape(-1)
        c, s = np.cos(yaw), np.sin(yaw)
        m = np.zeros((yaw.shape[0], 3, 3))
        m[:, 0, 0] = c
        m[:, 0, 2] = s
        m[:, 1, 1] = 1.0
        m[:, 2, 0] = -s
        m[:, 2, 2] = c
        return m.astype(np.float32)
    if r.ndim != 2 or r.shape[1] != 4:
        raise ConfigError(None, f"rotations must be [N] yaw or [N,4] quaternions xyzw, got shape {r.shape}")
    n = np.linalg.norm(r, axis=1, keepdims=True)
    if np.any(n < 1e-12):
        raise ConfigError(None, "rotations contain a zero quaternion")
    x, y, z, w = (r / n).T
    m = np.empty((r.shape[0], 3, 3))
    m[:, 0, 0] = 1 - 2 * (y * y + z * z)
    m[:, 0, 1] = 2 * (x * y - z * w)
    m[:, 0, 2] = 2 * (x * z + y * w)
    m[:, 1, 0] = 2 * (x * y + z * w)
    m[:, 1, 1] = 1 - 2 * (x * x + z * z)
    m[:, 1, 2] = 2 * (y * z - x * w)
    m[:, 2, 0] = 2 * (x * z - y * w)
    m[:, 2, 1] = 2 * (y * z + x * w)
    m[:, 2, 2] = 1 - 2 * (x * x + y * y)
    return m.astype(np.float32)


def yaw_to_quaternion(yaw) -> np.ndarray:
    """[N] yaw -> [N,4] xyzw (rotation about +Y), habitat's episode convention."""
    yaw = np.asarray(yaw, dtype=np.float64).reshape(-1)
    q = np.zeros((yaw.shape[0], 4))
    q[:, 1] = np.sin(yaw / 2)
    q[:, 3] = np.cos(yaw / 2)
    return q


def camera_origins(positions: np.ndarray, rot: np.ndarray, options: RenderOptions) -> np.ndarray:
    """Agent positions [N,3] + the sensor offset (0, h, 0) in the agent frame -> [N,3] f32."""
    p = np.asarray(positions, dtype=np.float32).reshape(-1, 3)
    return (p + rot[:, :, 1] * np.float32(options.sensor_height)).astype(np.float32)


# ------------------------------------------------------------------------------ shading data

@dataclass
class ShadingData:
    """What a backend needs to colour a hit; built once per scene by the loader (host numpy).

    ``level_info`` [X, Lmax, 3] int64 (byte offset into ``tex_data``, width, height) per texture
    and level; ``tex_nlevels`` [X] int32; ``tex_format`` [X] int32 (FORMAT_BC1 / FORMAT_RGBA8).
    """

    indices: np.ndarray          # uint32 [T,3] -> int32 view for gathers
    uvs: np.ndarray              # float32 [V,2]
    colors: np.ndarray | None    # uint8 [V,4]
    tri_material: np.ndarray     # int32 [T]
    tri_lod_bias: np.ndarray     # float32 [T]
    material_color: np.ndarray   # float32 [M,4]
    material_texture: np.ndarray  # int32 [M]
    tex_data: np.ndarray         # uint8 [B]
    level_info: np.ndarray       # int64 [X, Lmax, 3]
    tex_nlevels: np.ndarray      # int32 [X]
    tex_format: np.ndarray       # int32 [X]

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.__dict__.items() if isinstance(v, np.ndarray)}

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())


def _decode_bc7_level(data: bytes, w: int, h: int) -> np.ndarray:
    from PIL import Image  # core dependency
    img = Image.frombytes("RGBA", (w, h), data, "bcn", 7)
    return np.asarray(img, dtype=np.uint8)


def build_shading_data(scene: Any, path: str | None = None) -> ShadingData:
    """PackedScene-like object (attributes of the packed_scene contract) -> ShadingData.

    Checks the cross references a renderer would otherwise index out of bounds with, raising
    CorruptFileError naming ``path``.
    """
    from bps_assets.errors import CorruptFileError

    def bad(msg):
        return CorruptFileError(path, msg)

    pos = np.asarray(scene.positions, np.float32)
    idx = np.asarray(scene.indices)
    if idx.ndim != 2 or idx.shape[1] != 3 or pos.ndim != 2 or pos.shape[1] != 3:
        raise bad(f"positions {pos.shape} / indices {idx.shape} are not [V,3] / [T,3]")
    nv, nt = pos.shape[0], idx.shape[0]
    if nt and (int(idx.max()) >= nv):
        raise bad(f"an index ({int(idx.max())}) is out of range for {nv} vertices")
    idx = idx.astype(np.int32, copy=False)
    uvs = np.asarray(scene.uvs if scene.uvs is not None else np.zeros((nv, 2), np.float32), np.float32)
    if uvs.shape != (nv, 2):
        raise bad(f"uvs {uvs.shape} do not match {nv} vertices")
    colors = None if getattr(scene, "colors", None) is None else np.asarray(scene.colors, np.uint8)
    if colors is not None and colors.shape != (nv, 4):
        raise bad(f"colors {colors.shape} do not match {nv} vertices")
    mat_color = np.asarray(scene.material_color, np.float32).reshape(-1, 4)
    mat_tex = np.asarray(scene.material_texture, np.int32).reshape(-1)
    tri_mat = np.asarray(scene.tri_material, np.int32).reshape(-1)
    if mat_color.shape[0] == 0:  # no materials: one white default
        mat_color = np.ones((1, 4), np.float32)
        mat_tex = np.full(1, -1, np.int32)
    if tri_mat.shape[0] != nt:
        raise bad(f"tri_material has {tri_mat.shape[0]} entries for {nt} triangles")
    if mat_tex.shape[0] != mat_color.shape[0]:
        raise bad("material_texture and material_color differ in length")
    if nt and (tri_mat.min() < 0 or tri_mat.max() >= mat_color.shape[0]):
        raise bad("tri_material refers to a material that does not exist")

    # textures: group the level rows per texture
    levels = np.asarray(getattr(scene, "tex_levels", np.zeros((0, 6))), np.int64).reshape(-1, 6)
    blocks = np.asarray(getattr(scene, "tex_blocks", np.zeros(0, np.uint8)), np.uint8).reshape(-1)
    ntex = int(max(levels[:, 0].max() + 1 if len(levels) else 0, mat_tex.max() + 1 if len(mat_tex) else 0, 0))
    lmax = int(levels[:, 1].max() + 1) if len(levels) else 1
    level_info = np.zeros((max(ntex, 1), lmax, 3), np.int64)
    nlev = np.zeros(max(ntex, 1), np.int32)
    fmt = np.full(max(ntex, 1), FORMAT_BC1, np.int32)
    extra: list[np.ndarray] = []
    extra_off = blocks.size
    for t, lvl, w, h, off, f in levels.tolist():
        if not (0 <= t < ntex and 0 <= lvl < lmax and 1 <= w <= 16384 and 1 <= h <= 16384):
            raise bad(f"bad tex_levels row {(t, lvl, w, h, off, f)}")
        nbytes = ((w + 3) // 4) * ((h + 3) // 4) * (8 if f == FORMAT_BC1 else 16)
        if f not in (FORMAT_BC1, FORMAT_BC7) or off < 0 or off + nbytes > blocks.size:
            raise bad(f"texture {t} level {lvl}: format {f} / byte range {off}+{nbytes} outside "
                      f"tex_blocks ({blocks.size} bytes)")
        if f == FORMAT_BC1 and off % 8:
            raise bad(f"texture {t} level {lvl}: BC1 byte offset {off} is not a multiple of 8")
        if f == FORMAT_BC7:
            rgba = _decode_bc7_level(blocks[off:off + nbytes].tobytes(), w, h)
            extra.append(rgba.reshape(-1))
            off = extra_off
            extra_off += rgba.size
            fmt[t] = FORMAT_RGBA8
        level_info[t, lvl] = (off, w, h)
        nlev[t] = max(nlev[t], lvl + 1)
    for t in range(ntex):  # a chain must be complete from level 0
        if nlev[t] and not np.all(level_info[t, :nlev[t], 1] > 0):
            raise bad(f"texture {t} has a gap in its mip chain")
    if np.any((mat_tex >= 0) & (nlev[np.clip(mat_tex, 0, None)] == 0)):
        raise bad("a material refers to a texture with no levels")
    tex_data = np.concatenate([blocks] + extra) if extra else blocks
    if tex_data.size % 8:  # BC1 texels are fetched as little-endian uint64 words
        tex_data = np.concatenate([tex_data, np.zeros(8 - tex_data.size % 8, np.uint8)])

    # per-triangle mip bias: 0.5*log2(uv area * texels / world area)
    tri_lod = np.zeros(nt, np.float32)
    if nt:
        p = pos[idx]
        world = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)
        uv = uvs[idx].astype(np.float64)
        e1, e2 = uv[:, 1] - uv[:, 0], uv[:, 2] - uv[:, 0]
        uv_area = 0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
        tex = mat_tex[tri_mat]
        texels = np.where(tex >= 0, level_info[np.clip(tex, 0, None), 0, 1] * level_info[np.clip(tex, 0, None), 0, 2], 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            b = 0.5 * np.log2(uv_area * texels / world)
        b = np.where(np.isfinite(b), b, LOD_BIAS_FLOOR)
        tri_lod = np.clip(b, LOD_BIAS_FLOOR, 30.0).astype(np.float32)

    return ShadingData(
        indices=np.ascontiguousarray(idx), uvs=np.ascontiguousarray(uvs), colors=colors,
        tri_material=np.ascontiguousarray(tri_mat), tri_lod_bias=tri_lod,
        material_color=np.ascontiguousarray(mat_color), material_texture=np.ascontiguousarray(mat_tex),
        tex_data=np.ascontiguousarray(tex_data), level_info=level_info, tex_nlevels=nlev, tex_format=fmt)


# ------------------------------------------------------------------------------ BC1 texels

# colour = (A * e0 + B * e1) // D per (mode, selector), mode 0: c0 > c1 (4 colours), mode 1:
# 3 colours + black. These are Pillow's integer formulas (e.g. (2*e0 + e1) // 3), so texels
# match Pillow's BC1 decoder exactly; the Warp kernel uses the same formulas.
_W_A = np.array([3, 0, 2, 1, 2, 0, 1, 0], np.int32)
_W_B = np.array([0, 3, 1, 2, 0, 2, 1, 0], np.int32)
_W_D = np.array([3, 3, 3, 3, 2, 2, 2, 2], np.int32)


def decode_bc1_texels(data: np.ndarray, base: np.ndarray, width: np.ndarray,
                      x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Decode just the texels (x, y) of BC1 images starting at byte ``base`` (a multiple of 8)
    with ``width`` texels per row: one 8-byte gather per texel. Returns uint8 [n,4] RGBA."""
    words = data[: data.size - data.size % 8].view("<u8")
    bw = (width + 3) >> 2
    w = words[(base >> 3) + (y >> 2) * bw + (x >> 2)]
    c0 = (w & np.uint64(0xFFFF)).astype(np.int32)
    c1 = ((w >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int32)
    shift = (((((y & 3) << 2) | (x & 3)) << 1) + 32).astype(np.uint64)
    k = ((w >> shift) & np.uint64(3)).astype(np.int32)
    k += (c0 <= c1).astype(np.int32) << 2
    a, b, d = _W_A[k], _W_B[k], _W_D[k]
    out = np.empty((w.shape[0], 4), np.uint8)
    for ch, (sh, bits) in enumerate(((11, 5), (5, 6), (0, 5))):
        m = (1 << bits) - 1
        e0 = (c0 >> sh) & m
        e1 = (c1 >> sh) & m
        e0 = (e0 << (8 - bits)) | (e0 >> (2 * bits - 8))
        e1 = (e1 << (8 - bits)) | (e1 >> (2 * bits - 8))
        out[:, ch] = (a * e0 + b * e1) // d
    out[:, 3] = np.where(k == 7, 0, 255)
    return out


def shade_hits(sd: ShadingData, prim: np.ndarray, bu: np.ndarray, bv: np.ndarray,
               z: np.ndarray, cos_abs: np.ndarray, pixel_angle: float) -> np.ndarray:
    """Colour hits (prim >= 0) -> uint8 [n,3]. numpy reference used by the Embree backend;
    the float32 operation order is the Warp kernel's (the tests compare them)."""
    f32 = np.float32
    tri = sd.indices[prim]  # [n,3]
    w0 = f32(1.0) - bu - bv
    mat = sd.tri_material[prim]
    col = sd.material_color[mat, :3]  # [n,3] f32 (a copy)
    if sd.colors is not None:
        c = sd.colors[tri, :3].astype(f32)  # [n,3 vertices,3]
        vc = (w0[:, None] * c[:, 0] + bu[:, None] * c[:, 1] + bv[:, None] * c[:, 2]) * f32(1.0 / 255.0)
        col *= vc
    tex = sd.material_texture[mat]
    has = tex >= 0
    nh = int(np.count_nonzero(has))
    if nh:
        h = slice(None) if nh == has.size else np.flatnonzero(has)
        t = tex[h]
        uv = sd.uvs[tri[h]]  # [k,3,2]
        wa, wb, wc = w0[h, None], bu[h, None], bv[h, None]
        uvh = wa * uv[:, 0] + wb * uv[:, 1] + wc * uv[:, 2]
        foot = z[h] * f32(pixel_angle) / np.maximum(cos_abs[h], f32(COS_FLOOR))
        lod = np.log2(np.maximum(foot, f32(1e-30))) + sd.tri_lod_bias[prim[h]]
        lvl = np.clip(np.floor(lod + f32(0.5)), 0, sd.tex_nlevels[t] - 1).astype(np.int64)
        info = sd.level_info[t, lvl]  # [k,3]
        base, wd, ht = info[:, 0], info[:, 1], info[:, 2]
        fu = uvh[:, 0] - np.floor(uvh[:, 0])
        fv = uvh[:, 1] - np.floor(uvh[:, 1])
        x = np.minimum((fu * wd.astype(f32)).astype(np.int64), wd - 1)
        y = np.minimum((fv * ht.astype(f32)).astype(np.int64), ht - 1)
        fmt = sd.tex_format[t]
        isbc = fmt == FORMAT_BC1
        if isbc.all():
            texel = decode_bc1_texels(sd.tex_data, base, wd, x, y)
        else:
            texel = np.empty((x.shape[0], 4), np.uint8)
            if isbc.any():
                texel[isbc] = decode_bc1_texels(sd.tex_data, base[isbc], wd[isbc], x[isbc], y[isbc])
            r = ~isbc
            o = base[r] + (y[r] * wd[r] + x[r]) * 4
            texel[r] = sd.tex_data[o[:, None] + np.arange(4)]
        col[h] = col[h] * (texel[:, :3].astype(f32) * f32(1.0 / 255.0))
    np.clip(col, f32(0.0), f32(1.0), out=col)
    return np.floor(col * f32(255.0) + f32(0.5)).astype(np.uint8)


def finish_depth(z: np.ndarray, options: RenderOptions) -> np.ndarray:
    """Raw z-depth (0 = miss) -> the sensor's output (metres, or normalized 0-1 like habitat-lab)."""
    if not options.normalize_depth:
        return z
    lo, hi = np.float32(options.min_depth), np.float32(options.max_depth)
    return (np.clip(z, lo, hi) - lo) / (hi - lo)


# ------------------------------------------------------------------------------ protocol

@runtime_checkable
class Renderer(Protocol):
    """A batch renderer over resident scenes addressed by small integer ids.

    ``prepare`` runs in loader threads (builds the BVH; no GIL-holding work on the step path);
    ``attach`` / ``detach`` are called by the scene cache when a scene becomes resident / leaves.
    """

    options: RenderOptions

    def prepare(self, shading: ShadingData, positions: np.ndarray, indices: np.ndarray) -> Any: ...

    def accel_bytes(self, num_vertices: int, num_triangles: int) -> int: ...

    def attach(self, scene_id: int, shading: ShadingData, accel: Any) -> None: ...

    def detach(self, scene_id: int) -> None: ...

    def render(self, scene_ids, positions, rotations, sensors: Sequence[str] = ("depth",)) -> Mapping[str, Any]: ...


def check_sensors(sensors: Sequence[str]) -> tuple[str, ...]:
    s = (sensors,) if isinstance(sensors, str) else tuple(sensors)
    bad = [x for x in s if x not in SENSORS]
    if bad or not s:
        raise ConfigError(None, f"unknown sensors {bad or s!r}: choose from {SENSORS}")
    return s


def as_numpy(x, dtype, name: str, shape_tail: tuple = ()) -> np.ndarray:
    """Tensor / array -> numpy (CPU copy if needed) with a precise error on a bad shape."""
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu").numpy()
    a = np.asarray(x, dtype=dtype)
    if shape_tail and a.shape[1:] != shape_tail:
        raise ConfigError(None, f"{name} must have shape [N, {', '.join(map(str, shape_tail))}], got {a.shape}")
    return a


def check_render_inputs(scene_ids, positions, rotations, resident) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scene ids [N], positions [N,3], rotation matrices [N,3,3]) checked for every backend:
    same N everywhere, and every scene id resident in the renderer."""
    sid = as_numpy(scene_ids, np.int64, "scene_ids").reshape(-1)
    pos = as_numpy(positions, np.float32, "positions", (3,))
    rot = rotation_matrices(as_numpy(rotations, np.float32, "rotations"))
    n = sid.shape[0]
    if pos.shape[0] != n or rot.shape[0] != n:
        raise ConfigError(None, f"scene_ids, positions and rotations disagree on N: "
                                f"{n}, {pos.shape[0]}, {rot.shape[0]}")
    missing = sorted(set(np.unique(sid).tolist()) - set(resident))
    if missing:
        raise ConfigError(None, f"scene ids {missing[:8]} are not resident in the renderer")
    return sid, pos, rot


def group_by_scene(scene_ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """[(scene id, agent indices)] in ascending scene id; one vectorized sort, no per-agent loop."""
    order = np.argsort(scene_ids, kind="stable")
    sid = scene_ids[order]
    cuts = np.flatnonzero(np.diff(sid)) + 1
    return [(int(g[0]), o) for g, o in zip(np.split(sid, cuts), np.split(order, cuts)) if len(g)]
