"""BC1 texels decoded one by one (numpy): the numpy shader's texture fetch.

colour = (A * e0 + B * e1) // D per (mode, selector), mode 0: c0 > c1 (4 colours), mode 1:
3 colours + black. These are Pillow's integer formulas (e.g. (2*e0 + e1) // 3), so texels
match Pillow's BC1 decoder exactly; the Warp kernel and the C bridge use the same formulas.
"""
from __future__ import annotations

import numpy as np

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
