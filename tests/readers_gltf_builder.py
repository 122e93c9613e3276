"""A tiny glTF 2.0 writer for the reader tests and benchmarks (builds files in memory)."""
from __future__ import annotations

import base64
import io
import json
import struct
from pathlib import Path

import numpy as np

CTYPE = {np.dtype("int8"): 5120, np.dtype("uint8"): 5121, np.dtype("int16"): 5122,
         np.dtype("uint16"): 5123, np.dtype("uint32"): 5125, np.dtype("float32"): 5126}
TYPES = {1: "SCALAR", 2: "VEC2", 3: "VEC3", 4: "VEC4"}


def png_bytes(rgba: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(rgba, np.uint8)).save(buf, "PNG")
    return buf.getvalue()


class GltfBuilder:
    def __init__(self):
        self.json: dict = {"asset": {"version": "2.0", "generator": "bps tests"}}
        self.bin = bytearray()

    def _add(self, key: str, obj: dict) -> int:
        self.json.setdefault(key, []).append(obj)
        return len(self.json[key]) - 1

    def view(self, data: bytes, stride: int | None = None, buffer: int = 0) -> int:
        while len(self.bin) % 4:
            self.bin.append(0)
        v = {"buffer": buffer, "byteOffset": len(self.bin), "byteLength": len(data)}
        if stride:
            v["byteStride"] = stride
        self.bin += data
        return self._add("bufferViews", v)

    def accessor(self, arr, *, normalized: bool = False, view: int | None = None,
                 byte_offset: int = 0, count: int | None = None, minmax: bool = True, **extra) -> int:
        a = np.asarray(arr)
        if a.ndim == 1:
            a = a[:, None]
        if view is None:
            view = self.view(np.ascontiguousarray(a).tobytes())
        acc = {"bufferView": view, "componentType": CTYPE[a.dtype], "count": int(count if count is not None else a.shape[0]),
               "type": TYPES[a.shape[1]]}
        if byte_offset:
            acc["byteOffset"] = byte_offset
        if normalized:
            acc["normalized"] = True
        if minmax and a.shape[0]:
            acc["min"] = [float(x) if a.dtype.kind == "f" else int(x) for x in a.min(0)]
            acc["max"] = [float(x) if a.dtype.kind == "f" else int(x) for x in a.max(0)]
        acc.update(extra)
        return self._add("accessors", acc)

    def primitive(self, positions, indices=None, mode: int | None = None, **attrs) -> dict:
        p = {"attributes": {"POSITION": self.accessor(np.asarray(positions, np.float32))}}
        if indices is not None:
            p["indices"] = self.accessor(np.asarray(indices).reshape(-1), minmax=False)
        if mode is not None:
            p["mode"] = mode
        for k, v in attrs.items():
            if k == "material":
                p["material"] = v
            else:
                p["attributes"][k] = v if isinstance(v, int) else self.accessor(v)
        return p

    def mesh(self, *prims: dict, name: str = "") -> int:
        m = {"primitives": list(prims)}
        if name:
            m["name"] = name
        return self._add("meshes", m)

    def node(self, **kw) -> int:
        return self._add("nodes", kw)

    def scene(self, nodes: list[int], default: bool = True) -> int:
        i = self._add("scenes", {"nodes": nodes})
        if default:
            self.json["scene"] = i
        return i

    def material(self, **kw) -> int:
        return self._add("materials", kw)

    def image_texture(self, rgba: np.ndarray, *, uri: str | None = None, data_uri: bool = False) -> int:
        data = png_bytes(rgba)
        if uri is not None:
            img = {"uri": uri}
            self._external = getattr(self, "_external", {})
            self._external[uri] = data
        elif data_uri:
            img = {"uri": "data:image/png;base64," + base64.b64encode(data).decode()}
        else:
            img = {"bufferView": self.view(data), "mimeType": "image/png"}
        src = self._add("images", img)
        return self._add("textures", {"source": src})

    # -- output -------------------------------------------------------------------------------
    def _json_with_buffer(self, uri: str | None) -> dict:
        j = json.loads(json.dumps(self.json))
        if self.bin or "buffers" not in j:
            buf = {"byteLength": len(self.bin)}
            if uri is not None:
                buf["uri"] = uri
            bufs = j.get("buffers", [])
            j["buffers"] = [buf] + bufs[1:] if bufs else [buf]
        return j

    def glb(self) -> bytes:
        js = json.dumps(self._json_with_buffer(None)).encode()
        js += b" " * (-len(js) % 4)
        binc = bytes(self.bin) + b"\0" * (-len(self.bin) % 4)
        chunks = struct.pack("<II", len(js), 0x4E4F534A) + js
        if binc:
            chunks += struct.pack("<II", len(binc), 0x004E4942) + binc
        return struct.pack("<4sII", b"glTF", 2, 12 + len(chunks)) + chunks

    def write_glb(self, path: Path) -> Path:
        path.write_bytes(self.glb())
        return path

    def write_gltf(self, path: Path, *, embed: bool = False, bin_name: str | None = None) -> Path:
        if embed:
            uri = "data:application/octet-stream;base64," + base64.b64encode(bytes(self.bin)).decode()
        else:
            uri = bin_name or path.with_suffix(".bin").name
            (path.parent / uri).write_bytes(bytes(self.bin))
        path.write_text(json.dumps(self._json_with_buffer(uri)))
        for name, data in getattr(self, "_external", {}).items():
            (path.parent / name).parent.mkdir(parents=True, exist_ok=True)
            (path.parent / name).write_bytes(data)
        return path


def grid_mesh(n: int) -> tuple[np.ndarray, np.ndarray]:
    """An n x n quad grid: (positions [(n+1)^2, 3] float32, triangles [2 n^2, 3] uint32)."""
    ys, xs = np.mgrid[0:n + 1, 0:n + 1]
    pos = np.stack([xs.ravel(), ys.ravel(), np.sin(xs.ravel() * 0.1)], 1).astype(np.float32)
    i = (ys[:-1, :-1] * (n + 1) + xs[:-1, :-1]).ravel()
    tris = np.concatenate([np.stack([i, i + 1, i + n + 2], 1), np.stack([i, i + n + 2, i + n + 1], 1)])
    return pos, tris.astype(np.uint32)
