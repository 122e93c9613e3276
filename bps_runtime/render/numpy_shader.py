"""The numpy reference shader (``shade_hits``): the Embree renderer's fallback when neither the
C bridge's native shading nor Warp is there, and what the tests hold the others to. The shading
model is in ``shading_data``'s docstring."""
from __future__ import annotations

import numpy as np

from .bc1 import decode_bc1_texels
from .shading_data import COS_FLOOR, FORMAT_BC1, ShadingData


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
