"""Compressed glTF geometry: KHR_draco_mesh_compression and EXT/KHR_meshopt_compression.

Both decoders are optional packages imported inside the functions, so a file that does not
use them never needs them, and one that does gets a typed error with the ``pip install``.

Tried and dropped: ``meshoptimizer.decode_vertex_buffer(..., dtype=np.uint8)`` allocates
``count`` elements instead of ``count * stride`` bytes and overruns its buffer (segfault);
``decode_index_buffer(count, 2, ...)`` writes 16-bit indices into its 32-bit output. We call
both in their safe form (float32 bytes viewed as uint8; 32-bit indices cast afterwards).
"""
from __future__ import annotations

import numpy as np

from ..errors import MissingDependencyError, UnsupportedExtensionError

MESHOPT_EXTS = ("EXT_meshopt_compression", "KHR_meshopt_compression")
DRACO_PIP = "DracoPy"
MESHOPT_PIP = "meshoptimizer"


def decode_meshopt_view(path: str, ext_name: str, ext: dict, src: memoryview, fail) -> bytes:
    """Decode one meshopt-compressed buffer view into its ``count * byteStride`` raw bytes.

    ``fail(detail)`` builds the typed error for malformed extension data.
    """
    try:
        import meshoptimizer
    except ImportError:
        raise MissingDependencyError(path, ext_name, MESHOPT_PIP) from None
    count, stride = ext.get("count"), ext.get("byteStride")
    mode = ext.get("mode", "ATTRIBUTES")
    filt = ext.get("filter", "NONE")
    if not (type(count) is int and type(stride) is int and count >= 0 and 0 < stride <= 256):
        raise fail(f"{ext_name}: bad count/byteStride {count!r}/{stride!r}")
    # Densest possible encodings: attributes v0 ~64x (2 header bits per 16 zero deltas), v1
    # ~1024x (a 2-bit control per byte channel of a 256-element block); indices >= 1 byte per
    # triangle. A stream too short for `count` elements is refused before allocating.
    ratio = 1024 if mode == "ATTRIBUTES" else 16
    if count * stride > ratio * len(src) + (1 << 16):
        raise fail(f"{ext_name}: {count} x {stride} bytes cannot come from a {len(src)}-byte stream")
    data = np.frombuffer(src, np.uint8)
    try:
        if mode == "ATTRIBUTES":
            if stride % 4:
                raise fail(f"{ext_name}: ATTRIBUTES byteStride {stride} is not a multiple of 4")
            raw = meshoptimizer.decode_vertex_buffer(count, stride, data).view(np.uint8).reshape(-1)
            if filt in ("OCTAHEDRAL", "QUATERNION", "EXPONENTIAL"):
                fn = {"OCTAHEDRAL": meshoptimizer.decode_filter_oct,
                      "QUATERNION": meshoptimizer.decode_filter_quat,
                      "EXPONENTIAL": meshoptimizer.decode_filter_exp}[filt]
                raw = fn(np.ascontiguousarray(raw), count, stride)
            elif filt == "COLOR":  # KHR_meshopt_compression; not in the wrapped C library
                raw = color_filter(raw, count, stride, fail)
            elif filt != "NONE":
                raise UnsupportedExtensionError(
                    path, f"{ext_name}: filter {filt!r} is not supported by the installed "
                          f"meshoptimizer decoder (try: pip install -U {MESHOPT_PIP})")
        elif mode in ("TRIANGLES", "INDICES"):
            if stride not in (2, 4):
                raise fail(f"{ext_name}: index byteStride must be 2 or 4, got {stride}")
            fn = meshoptimizer.decode_index_buffer if mode == "TRIANGLES" else meshoptimizer.decode_index_sequence
            idx = fn(count, 4, data)
            raw = idx.astype("<u2" if stride == 2 else "<u4").view(np.uint8)
        else:
            raise fail(f"{ext_name}: unknown mode {mode!r}")
    except (ValueError, RuntimeError) as e:
        raise fail(f"{ext_name}: cannot decode buffer view ({e})") from None
    if raw.nbytes != count * stride:
        raise fail(f"{ext_name}: decoder returned {raw.nbytes} bytes, expected {count * stride}")
    return raw.tobytes()


def color_filter(raw: np.ndarray, count: int, stride: int, fail) -> np.ndarray:
    """KHR_meshopt_compression COLOR filter (YCoCg -> RGBA), per its spec's Appendix B:
    Y unsigned, Co/Cg signed K-bit integers; alpha stores K-1 bits under a marker bit K-1 that
    gives K; outputs are unsigned normalized 8- or 16-bit RGBA."""
    if stride not in (4, 8):
        raise fail(f"COLOR filter needs byteStride 4 or 8, got {stride}")
    bits = 8 * stride // 4
    u = raw.view("<u1" if bits == 8 else "<u2").reshape(count, 4).astype(np.int64)
    sgn = raw.view("<i1" if bits == 8 else "<i2").reshape(count, 4).astype(np.int64)
    y, co, cg, a_in = u[:, 0], sgn[:, 1], sgn[:, 2], u[:, 3]
    nbits = sum(((a_in >> k) != 0).astype(np.int64) for k in range(bits))  # findMSB + 1
    scale = np.maximum((1 << nbits) - 1, 1)
    a = a_in & (scale >> 1)
    a = (a << 1) | (a & 1)
    rgba = np.stack([y + co - cg, y + cg, y - co - cg, a], axis=1).astype(np.float64)
    out = rgba * ((1 << bits) - 1) / scale[:, None]
    out = np.clip(np.floor(out + 0.5), 0, (1 << bits) - 1)  # round half up; values are >= 0
    return out.astype("<u1" if bits == 8 else "<u2").view(np.uint8).reshape(-1)


def decode_draco(path: str, data: bytes, fail):
    """Decode a Draco stream; returns the DracoPy mesh/point cloud object."""
    try:
        import DracoPy
    except ImportError:
        raise MissingDependencyError(path, "KHR_draco_mesh_compression", DRACO_PIP) from None
    try:
        return DracoPy.decode(bytes(data))
    except Exception as e:  # DracoPy raises its own exception classes (FileTypeException, ...)
        raise fail(f"KHR_draco_mesh_compression: cannot decode Draco data ({type(e).__name__}: {e})") from None


def draco_attribute(mesh, unique_id, fail) -> np.ndarray:
    try:
        att = mesh.get_attribute_by_unique_id(int(unique_id))
    except Exception:
        att = None
    if not att or att.get("data") is None:
        raise fail(f"KHR_draco_mesh_compression: no attribute with id {unique_id} in the Draco stream")
    a = np.asarray(att["data"])
    if a.ndim == 1:
        a = a.reshape(-1, int(att.get("num_components") or 1))
    return a


def draco_faces(mesh) -> np.ndarray | None:
    faces = getattr(mesh, "faces", None)
    if faces is None:
        return None
    f = np.asarray(faces)
    return f.reshape(-1) if f.size else np.zeros(0, np.uint32)
