"""glTF accessors -> numpy arrays, vectorized, with every range checked before allocation.

An accessor is read as one strided view over its buffer view (``np.ndarray`` with explicit
strides: no per-element Python work), then copied/converted once. Sparse substitution,
normalized integers (KHR_mesh_quantization) and meshopt-compressed views are handled here.
"""
from __future__ import annotations

import numpy as np

from ..errors import is_int
from .gltf_compression import MESHOPT_EXTS, decode_meshopt_view
from .gltf_container import GltfFile

COMPONENT_DTYPES = {
    5120: np.dtype("<i1"), 5121: np.dtype("<u1"), 5122: np.dtype("<i2"),
    5123: np.dtype("<u2"), 5125: np.dtype("<u4"), 5126: np.dtype("<f4"),
}
TYPE_COMPONENTS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT2": 4, "MAT3": 9, "MAT4": 16}
# Divisors of normalized integers (glTF 2.0 spec, "Animations"/"Meshes": c / max, signed clamped to -1).
NORMALIZE = {5120: 127.0, 5121: 255.0, 5122: 32767.0, 5123: 65535.0}
# Accessors without a buffer view are zero-filled; beyond this many elements it is not a scene.
MAX_ZERO_FILLED = 1 << 28


def buffer_view(g: GltfFile, index) -> tuple[memoryview, int | None]:
    """(bytes of the view, byteStride or None). Meshopt views are decoded once and cached."""
    index = g.index(index, "bufferView")
    if index in g.views:
        return g.views[index]
    v = g.item("bufferViews", index, "bufferView")
    length = _nonneg(g, v.get("byteLength"), f"bufferViews[{index}].byteLength")
    offset = _nonneg(g, v.get("byteOffset", 0), f"bufferViews[{index}].byteOffset")
    stride = v.get("byteStride")
    if stride is not None:
        stride = _nonneg(g, stride, f"bufferViews[{index}].byteStride")
        if not 4 <= stride <= 252:
            raise g.fail(f"bufferViews[{index}].byteStride {stride} outside 4..252")
    exts = g.obj(v.get("extensions"))
    mo = next(((k, exts[k]) for k in MESHOPT_EXTS if isinstance(exts.get(k), dict)), None)
    if mo is not None:
        name, ext = mo
        src_buf = g.buffer(_nonneg(g, ext.get("buffer"), f"bufferViews[{index}].{name}.buffer"))
        so = _nonneg(g, ext.get("byteOffset", 0), f"bufferViews[{index}].{name}.byteOffset")
        sl = _nonneg(g, ext.get("byteLength"), f"bufferViews[{index}].{name}.byteLength")
        if so + sl > len(src_buf):
            raise g.fail(f"bufferViews[{index}].{name}: bytes {so}..{so + sl} exceed buffer of {len(src_buf)}")

        def fail(detail, _i=index):
            return g.fail(f"bufferViews[{_i}]: {detail}")

        data = memoryview(decode_meshopt_view(g.path, name, ext, src_buf[so:so + sl], fail))
        if stride is None and ext.get("mode", "ATTRIBUTES") == "ATTRIBUTES":
            stride = ext.get("byteStride")
        out = (data, stride)
    else:
        buf = g.buffer(_nonneg(g, v.get("buffer"), f"bufferViews[{index}].buffer"))
        if offset + length > len(buf):
            raise g.fail(f"bufferViews[{index}] spans bytes {offset}..{offset + length} "
                         f"but buffer {v.get('buffer')} has {len(buf)}")
        out = (buf[offset:offset + length], stride)
    g.views[index] = out
    return out


def read_accessor(g: GltfFile, index, as_float: bool = False) -> np.ndarray:
    """Accessor ``index`` as an array [count, components] (native dtype, or float32 with
    normalized integers mapped to 0..1 / -1..1 when ``as_float``). Cached per file."""
    index = g.index(index, "accessor")
    key = (index, as_float)
    if key in g.accessors:
        return g.accessors[key]
    a = g.item("accessors", index, "accessor")
    ctype = a.get("componentType")
    if not isinstance(ctype, int) or ctype not in COMPONENT_DTYPES:
        raise g.fail(f"accessors[{index}].componentType {ctype!r} is not a glTF component type")
    atype = a.get("type")
    if not isinstance(atype, str) or atype not in TYPE_COMPONENTS:
        raise g.fail(f"accessors[{index}].type {atype!r} is not a glTF accessor type")
    ncomp = TYPE_COMPONENTS[atype]
    dt = COMPONENT_DTYPES[ctype]
    count = _nonneg(g, a.get("count"), f"accessors[{index}].count")
    elem = ncomp * dt.itemsize
    if "bufferView" in a:
        data, stride = buffer_view(g, a["bufferView"])
        stride = stride or elem
        offset = _nonneg(g, a.get("byteOffset", 0), f"accessors[{index}].byteOffset")
        need = offset + (count - 1) * stride + elem if count else 0
        if need > len(data):
            raise g.fail(f"accessors[{index}]: {count} elements x stride {stride} from offset {offset} "
                         f"need {need} bytes but bufferView {a['bufferView']} has {len(data)}")
        if count:
            arr = np.ndarray((count, ncomp), dtype=dt, buffer=data, offset=offset,
                             strides=(stride, dt.itemsize)).copy()
        else:
            arr = np.zeros((0, ncomp), dt)
    else:
        if count * ncomp > MAX_ZERO_FILLED:
            raise g.fail(f"accessors[{index}]: {count} elements without a bufferView exceed the cap")
        arr = np.zeros((count, ncomp), dt)
    sparse = a.get("sparse")
    if sparse is not None:
        _apply_sparse(g, index, arr, sparse, dt, ncomp)
    if as_float:
        norm = a.get("normalized", False) is True and ctype in NORMALIZE
        arr = arr.astype(np.float32)
        if norm:
            arr /= NORMALIZE[ctype]
            if ctype in (5120, 5122):
                np.maximum(arr, -1.0, out=arr)
    g.accessors[key] = arr
    return arr


def _apply_sparse(g: GltfFile, index, arr: np.ndarray, sparse, dt, ncomp) -> None:
    if not isinstance(sparse, dict):
        raise g.fail(f"accessors[{index}].sparse must be an object")
    n = _nonneg(g, sparse.get("count"), f"accessors[{index}].sparse.count")
    si, sv = sparse.get("indices"), sparse.get("values")
    if not isinstance(si, dict) or not isinstance(sv, dict):
        raise g.fail(f"accessors[{index}].sparse needs indices and values objects")
    ict = si.get("componentType")
    if not isinstance(ict, int) or ict not in (5121, 5123, 5125):
        raise g.fail(f"accessors[{index}].sparse.indices.componentType {ict!r} is not u8/u16/u32")
    idt = COMPONENT_DTYPES[ict]
    idx = _tight(g, index, "indices", si, n, idt, 1).reshape(-1).astype(np.int64)
    vals = _tight(g, index, "values", sv, n, dt, ncomp)
    if n and int(idx.max()) >= arr.shape[0]:
        raise g.fail(f"accessors[{index}].sparse: index {int(idx.max())} >= count {arr.shape[0]}")
    arr[idx] = vals


def _tight(g, index, what, spec, n, dt, ncomp) -> np.ndarray:
    data, _ = buffer_view(g, spec.get("bufferView"))
    off = _nonneg(g, spec.get("byteOffset", 0), f"accessors[{index}].sparse.{what}.byteOffset")
    need = off + n * ncomp * dt.itemsize
    if need > len(data):
        raise g.fail(f"accessors[{index}].sparse.{what}: {n} elements need {need} bytes, view has {len(data)}")
    return np.frombuffer(data, dtype=dt, count=n * ncomp, offset=off).reshape(n, ncomp)


def _nonneg(g: GltfFile, v, what: str) -> int:
    if not is_int(v) or v < 0:
        raise g.fail(f"{what} must be a non-negative integer, got {v!r}")
    return v
