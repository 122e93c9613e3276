"""The numpy reference shader and BC1 texel decoder: what the tests hold the product's two
shaders to (the C shading in the Embree bridge, and the Warp kernel that the Warp renderer and
the Embree renderer's "warp" shading run). The product does not use this module; it is written
to be read, not to be fast. The shading model is in ``bps_runtime.render.shading_data``'s
docstring; the float32 operation order is the Warp kernel's.

BC1: colour = (A * e0 + B * e1) // D per (mode, selector), mode 0: c0 > c1 (4 colours), mode
1: 3 colours + black. These are Pillow's integer formulas (e.g. (2*e0 + e1) // 3), so texels
match Pillow's BC1 decoder exactly (test_runtime_render checks it).
"""
from __future__ import annotations

import numpy as np

from bps_runtime.render import RenderOptions, build_shading_data
from bps_runtime.render.camera import camera_directions, camera_origins, rotation_matrices
from bps_runtime.render.embree import EmbreeAccel
from bps_runtime.render.shading_data import COS_FLOOR, FORMAT_BC1, ShadingData

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
    """Colour hits (prim >= 0) -> uint8 [n,3], given each hit's barycentrics ``bu``/``bv`` (weights
    of the 2nd and 3rd vertex), z-depth and |cos(incidence)|."""
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


def reference_rgb(scene, positions, rotations, options: RenderOptions = RenderOptions()) -> np.ndarray:
    """uint8 [N,H,W,3]: the frames of agents at ``positions`` [N,3] with ``rotations`` ([N] yaw or
    [N,4] xyzw) in one ``scene`` (positions, indices and the shading tables' sources), traced
    with embreex and shaded by ``shade_hits``; misses are black."""
    sd = build_shading_data(scene)
    rot = rotation_matrices(np.asarray(rotations, np.float32))
    cam_dirs = camera_directions(options)
    n, hw = rot.shape[0], cam_dirs.shape[0]
    z = np.empty(n * hw, np.float32)
    hit = EmbreeAccel(scene.positions, scene.indices).trace_cameras(
        camera_origins(positions, options), rot, cam_dirs, z, hits=True)
    prim, ng, d = hit["primID"], hit["Ng"], hit["dirs"]
    rgb = np.zeros((n * hw, 3), np.uint8)
    h = np.flatnonzero((prim >= 0) & (z > 0))
    if not h.size:
        return rgb.reshape(n, *options.resolution, 3)
    cos_abs = np.abs(np.einsum("ij,ij->i", ng[h], d[h])) / np.maximum(
        np.linalg.norm(ng[h], axis=1) * np.linalg.norm(d[h], axis=1), np.float32(1e-30))
    rgb[h] = shade_hits(sd, prim[h], hit["u"][h], hit["v"][h], z[h], cos_abs.astype(np.float32),
                        options.pixel_angle)
    return rgb.reshape(n, *options.resolution, 3)
