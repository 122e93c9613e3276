"""Decoded images -> capped, mip-mapped, block-compressed textures (GPU-ready).

Each texture is resized once to power-of-two sides (nearest power of two in log scale, capped
at ``max_texture``), its full mip chain is built with 2x2 box reduction down to 1x1 (averaged
in sRGB values, not linear light: docs/DECISIONS.md), and every level is block-compressed with
etcpak: BC1 (default, 8 bytes per 4x4 block = 0.5 byte per texel, 0.67 with the mip chain:
alpha is dropped) or BC7 (1 byte per texel, keeps alpha). Levels smaller than 4x4 are
edge-padded to one block. Quality is the PSNR of mip 0 (RGB; RGBA for BC7) decoded with
Pillow's BCn decoder against the resized source (etcpak's own decompressors crash).

Output, for all textures together: ``tex_blocks`` uint8 [B] (every level's blocks back to
back, each level starting at a multiple of 16 bytes) and ``tex_levels`` int64 [L,6] rows
(texture, level, width, height, byte_offset, format) with format 1 = BC1, 7 = BC7.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..scene import Texture

FORMATS = {"bc1": 1, "bc7": 7}
BLOCK_BYTES = {1: 8, 7: 16}


@dataclass(frozen=True)
class Options:
    max_texture: int = 2048   # cap on each side, a power of two
    format: str = "bc1"       # bc1 | bc7
    mipmaps: bool = True
    measure_psnr: bool = True


DEFAULTS = Options()


@dataclass
class TextureSet:
    tex_blocks: np.ndarray                 # uint8 [B]
    tex_levels: np.ndarray                 # int64 [L,6]
    info: list[dict] = field(default_factory=list)  # per texture: sizes, levels, psnr_db

    @property
    def texel_count(self) -> int:
        return int((self.tex_levels[:, 2] * self.tex_levels[:, 3]).sum()) if len(self.tex_levels) else 0


def check_options(options: Options) -> int:
    if options.format not in FORMATS:
        raise ConfigError(None, f"unknown texture format {options.format!r} (choose bc1 or bc7)")
    m = options.max_texture
    if not isinstance(m, int) or m < 1 or m & (m - 1):
        raise ConfigError(None, f"max_texture must be a power of two >= 1, got {m!r}")
    return FORMATS[options.format]


def target_size(width: int, height: int, max_texture: int) -> tuple[int, int]:
    """Power-of-two sides nearest to the source in log scale, each capped at ``max_texture``."""
    def side(n):
        p = 1 << max(0, round(math.log2(max(n, 1))))
        return min(p, max_texture)
    return side(width), side(height)


def block_bytes(width: int, height: int, fmt: int) -> int:
    return ((width + 3) // 4) * ((height + 3) // 4) * BLOCK_BYTES[fmt]


def _compress(rgba: np.ndarray, fmt: int) -> bytes:
    import etcpak

    h, w = rgba.shape[:2]
    if w % 4 or h % 4:  # only levels below 4 texels wide/high: pad by repeating edges
        rgba = np.pad(rgba, ((0, (-h) % 4), (0, (-w) % 4), (0, 0)), mode="edge")
        h, w = rgba.shape[:2]
    data = np.ascontiguousarray(rgba).tobytes()
    return etcpak.compress_bc1(data, w, h) if fmt == 1 else etcpak.compress_bc7(data, w, h)


def decode_blocks(data: bytes, width: int, height: int, fmt: int) -> np.ndarray:
    """Decode one level's blocks to uint8 [height, width, 4] with Pillow."""
    from PIL import Image

    pw, ph = (width + 3) // 4 * 4, (height + 3) // 4 * 4
    img = Image.frombytes("RGBA", (pw, ph), bytes(data), "bcn", fmt)
    return np.asarray(img)[:height, :width]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    d = np.subtract(a, b, dtype=np.int32).reshape(-1)
    mse = float(np.einsum("i,i->", d, d, dtype=np.int64)) / max(d.size, 1)
    return float("inf") if mse == 0 else 10.0 * math.log10(255.0 ** 2 / mse)


def mip_chain(rgba: np.ndarray, max_texture: int, mipmaps: bool = True) -> list[np.ndarray]:
    """Level 0 (resized to power-of-two sides) and, with ``mipmaps``, every level to 1x1."""
    from PIL import Image

    img = Image.fromarray(np.ascontiguousarray(rgba), "RGBA")
    w, h = target_size(img.width, img.height, max_texture)
    if (w, h) != img.size:
        img = img.resize((w, h), Image.Resampling.LANCZOS if w * h < img.width * img.height
                         else Image.Resampling.BICUBIC)
    levels = [img]
    while mipmaps and (w > 1 or h > 1):
        fx, fy = (2 if w > 1 else 1), (2 if h > 1 else 1)
        img = img.reduce((fx, fy))  # exact 2x2 (or 2x1) box average
        w, h = img.size
        levels.append(img)
    return [np.asarray(lv) for lv in levels]


def encode_texture(rgba: np.ndarray, options: Options = DEFAULTS) -> tuple[list[tuple[int, int, bytes]], dict]:
    """([(width, height, blocks) per level], info) for one decoded image."""
    fmt = check_options(options)
    rgba = np.asarray(rgba)
    if rgba.ndim != 3 or rgba.shape[2] != 4 or rgba.dtype != np.uint8:
        raise ConfigError(None, f"texture must be uint8 [H,W,4], got {rgba.dtype} {rgba.shape}")
    levels = mip_chain(rgba, options.max_texture, options.mipmaps)
    out = [(lv.shape[1], lv.shape[0], _compress(lv, fmt)) for lv in levels]
    info = {"src_width": int(rgba.shape[1]), "src_height": int(rgba.shape[0]),
            "width": out[0][0], "height": out[0][1], "levels": len(out),
            "format": options.format, "bytes": sum(len(b) for _, _, b in out)}
    if options.measure_psnr:
        dec = decode_blocks(out[0][2], out[0][0], out[0][1], fmt)
        ch = 3 if fmt == 1 else 4
        info["psnr_db"] = round(psnr(dec[..., :ch], levels[0][..., :ch]), 3)
    return out, info


def textures(options: Options = DEFAULTS):
    """Factory: a callable turning a list of Textures into one TextureSet."""
    fmt = check_options(options)

    def apply(texs: list[Texture]) -> TextureSet:
        blobs, rows, info = [], [], []
        offset = 0
        for ti, tex in enumerate(texs):
            levels, inf = encode_texture(tex.rgba, options)
            inf["index"] = ti
            inf["source"] = tex.source or tex.name
            info.append(inf)
            for li, (w, h, data) in enumerate(levels):
                rows.append((ti, li, w, h, offset, fmt))
                blobs.append(data)
                pad = (-len(data)) % 16
                if pad:
                    blobs.append(b"\0" * pad)
                offset += len(data) + pad
        blocks = np.frombuffer(b"".join(blobs), np.uint8) if blobs else np.zeros(0, np.uint8)
        levels_arr = np.asarray(rows, np.int64).reshape(-1, 6)
        return TextureSet(blocks, levels_arr, info)

    return apply
