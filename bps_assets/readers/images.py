"""Decode texture images (PNG, JPEG, WebP, ... via Pillow; KTX2/Basis via opengl_basisu)
to RGBA uint8 arrays [H, W, 4].

KTX2 files whose payload is plain (uncompressed 8-bit RGB(A), or BC1/BC3/BC7 blocks) are read
here directly from level 0 (block formats decoded by Pillow's BCn decoder); Basis Universal
payloads (ETC1S / UASTC, as KHR_texture_basisu requires) need the optional ``opengl_basisu``
transcoder, imported lazily.
"""
from __future__ import annotations

import io
import struct

import numpy as np

from ..errors import InputError, MissingDependencyError, UnsupportedFormatError

KTX2_MAGIC = b"\xabKTX 20\xbb\r\n\x1a\n"
BASIS_MAGIC = b"sB"
BASISU_PIP = "opengl_basisu"
MAX_PIXELS = 1 << 28  # 16384^2: larger is not a scene texture and not safe to allocate


def sniff(data: bytes) -> str:
    if data[:12] == KTX2_MAGIC:
        return "ktx2"
    if data[:2] == BASIS_MAGIC and len(data) > 77:
        return "basis"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] == b"DDS ":
        return "dds"
    return "unknown"


def decode_image(data: bytes, path: str, what: str) -> np.ndarray:
    """RGBA uint8 [H, W, 4] of an encoded image; ``path``/``what`` name it in errors."""
    kind = sniff(data)
    if kind in ("ktx2", "basis"):
        return _decode_ktx2(data, path, what, kind)
    return _decode_pillow(data, path, what)


def _decode_pillow(data: bytes, path: str, what: str) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            if w * h > MAX_PIXELS:
                raise InputError(path, f"{what}: image of {w}x{h} pixels exceeds the cap")
            if im.mode.startswith("I"):  # 16-bit grey PNGs: scale to 8 bits, do not clip
                g = (np.clip(np.asarray(im, dtype=np.int64), 0, 65535) >> 8).astype(np.uint8)
                out = np.empty(g.shape + (4,), np.uint8)
                out[..., :3] = g[..., None]
                out[..., 3] = 255
                return out
            return np.asarray(im.convert("RGBA"), dtype=np.uint8).copy()
    except UnidentifiedImageError:
        raise UnsupportedFormatError(path, f"{what}: not a recognised image format") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise InputError(path, f"{what}: cannot decode image ({e})") from None


# Vulkan formats we read from a KTX2 level without a transcoder.
_VK_PLAIN = {23: 3, 29: 3, 37: 4, 43: 4}  # R8G8B8_{UNORM,SRGB}, R8G8B8A8_{UNORM,SRGB}
_VK_BCN = {131: 1, 132: 1, 133: 1, 134: 1, 137: 3, 138: 3, 145: 7, 146: 7}


def _decode_ktx2(data: bytes, path: str, what: str, kind: str) -> np.ndarray:
    if kind == "ktx2" and len(data) >= 80:
        vk, _ts, w, h, _d, layers, faces, levels, scheme = struct.unpack_from("<9I", data, 12)
        if scheme == 0 and (vk in _VK_PLAIN or vk in _VK_BCN):
            return _ktx2_level0(data, path, what, vk, w, h, max(levels, 1))
        if scheme == 0 and vk != 0:
            raise UnsupportedFormatError(path, f"{what}: KTX2 texture with vkFormat {vk} is not supported")
    try:
        import opengl_basisu
    except ImportError:
        ext = ("GOOGLE_texture_basis (.basis Basis Universal image)" if kind == "basis"
               else "KHR_texture_basisu (KTX2/Basis Universal image)")
        raise MissingDependencyError(path, f"{what}: {ext}", BASISU_PIP) from None
    try:
        tex = opengl_basisu.open(bytes(data))
        if tex.width * tex.height > MAX_PIXELS:
            raise InputError(path, f"{what}: image of {tex.width}x{tex.height} exceeds the cap")
        img = tex.transcode(opengl_basisu.Target.RGBA8)
        rgba = np.asarray(img.data, dtype=np.uint8)
    except (ValueError, IndexError) as e:
        raise InputError(path, f"{what}: cannot transcode KTX2/Basis image ({e})") from None
    if rgba.ndim != 3 or rgba.shape[2] != 4:
        raise InputError(path, f"{what}: transcoder returned shape {rgba.shape}")
    return rgba.copy()


def _ktx2_level0(data, path, what, vk, w, h, levels) -> np.ndarray:
    if not (0 < w <= 16384 and 0 < h <= 16384) or w * h > MAX_PIXELS:
        raise InputError(path, f"{what}: KTX2 size {w}x{h} out of range")
    idx_off = 80  # header (48) + index (32: dfd/kvd offsets+lengths, sgd offset+length)
    if len(data) < idx_off + 24 * levels:
        raise InputError(path, f"{what}: KTX2 level index truncated")
    off, length, _ = struct.unpack_from("<3Q", data, idx_off)  # level 0 comes first
    if off + length > len(data):
        raise InputError(path, f"{what}: KTX2 level 0 at {off}+{length} past end of {len(data)} bytes")
    raw = data[off:off + length]
    if vk in _VK_PLAIN:
        c = _VK_PLAIN[vk]
        if length < w * h * c:
            raise InputError(path, f"{what}: KTX2 level 0 has {length} bytes, need {w * h * c}")
        px = np.frombuffer(raw, np.uint8, count=w * h * c).reshape(h, w, c)
        if c == 3:
            px = np.concatenate([px, np.full((h, w, 1), 255, np.uint8)], axis=2)
        return px.copy()
    from PIL import Image

    n = _VK_BCN[vk]
    bw, bh = (w + 3) // 4, (h + 3) // 4
    need = bw * bh * (8 if n == 1 else 16)
    if length < need:
        raise InputError(path, f"{what}: KTX2 BC{n} level 0 has {length} bytes, need {need}")
    try:
        im = Image.frombytes("RGBA", (bw * 4, bh * 4), bytes(raw[:need]), "bcn", n)
    except (ValueError, OSError) as e:
        raise InputError(path, f"{what}: cannot decode BC{n} KTX2 level ({e})") from None
    return np.asarray(im, dtype=np.uint8)[:h, :w].copy()
