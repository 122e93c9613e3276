"""A minimal GLB writer for the convert CLI tests and the packed-scene benchmark.

``write_glb_parts`` writes one mesh per part (positions, indices, optional UVs, optional RGBA
texture embedded as PNG or JPEG); ``write_glb`` is the one-part shorthand.
"""
from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np


def _image_bytes(rgba, fmt: str) -> tuple[bytes, str]:
    from PIL import Image

    buf = io.BytesIO()
    img = Image.fromarray(np.asarray(rgba, np.uint8))
    if fmt == "jpeg":
        img.convert("RGB").save(buf, "JPEG", quality=90)
        return buf.getvalue(), "image/jpeg"
    img.save(buf, "PNG")
    return buf.getvalue(), "image/png"


def write_glb_parts(path, parts, image_format: str = "png") -> Path:
    """``parts``: list of dicts with positions, indices and optional uvs, rgba."""
    bin_ = bytearray()
    doc: dict = {"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": []}], "nodes": [],
                 "meshes": [], "bufferViews": [], "accessors": []}

    def view(data: bytes) -> int:
        while len(bin_) % 4:
            bin_.append(0)
        doc["bufferViews"].append({"buffer": 0, "byteOffset": len(bin_), "byteLength": len(data)})
        bin_.extend(data)
        return len(doc["bufferViews"]) - 1

    def accessor(a, ctype, typ, minmax=False) -> int:
        acc = {"bufferView": view(a.tobytes()), "componentType": ctype, "count": int(a.shape[0]), "type": typ}
        if minmax:
            acc["min"] = a.min(0).tolist()
            acc["max"] = a.max(0).tolist()
        doc["accessors"].append(acc)
        return len(doc["accessors"]) - 1

    for part in parts:
        positions = np.ascontiguousarray(part["positions"], np.float32)
        indices = np.ascontiguousarray(part["indices"], np.uint32)
        attrs = {"POSITION": accessor(positions, 5126, "VEC3", True)}
        if part.get("uvs") is not None:
            attrs["TEXCOORD_0"] = accessor(np.ascontiguousarray(part["uvs"], np.float32), 5126, "VEC2")
        prim = {"attributes": attrs, "indices": accessor(indices.reshape(-1), 5125, "SCALAR"), "mode": 4}
        if part.get("rgba") is not None:
            data, mime = _image_bytes(part["rgba"], image_format)
            doc.setdefault("images", []).append({"bufferView": view(data), "mimeType": mime})
            doc.setdefault("textures", []).append({"source": len(doc["images"]) - 1})
            doc.setdefault("materials", []).append(
                {"pbrMetallicRoughness": {"baseColorTexture": {"index": len(doc["textures"]) - 1}}})
            prim["material"] = len(doc["materials"]) - 1
        doc["meshes"].append({"primitives": [prim]})
        doc["nodes"].append({"mesh": len(doc["meshes"]) - 1})
        doc["scenes"][0]["nodes"].append(len(doc["nodes"]) - 1)
    while len(bin_) % 4:
        bin_.append(0)
    doc["buffers"] = [{"byteLength": len(bin_)}]
    js = json.dumps(doc).encode()
    js += b" " * ((-len(js)) % 4)
    out = struct.pack("<III", 0x46546C67, 2, 12 + 8 + len(js) + 8 + len(bin_))
    out += struct.pack("<II", len(js), 0x4E4F534A) + js + struct.pack("<II", len(bin_), 0x004E4942) + bytes(bin_)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out)
    return path


def write_glb(path, positions, indices, uvs=None, rgba=None) -> Path:
    return write_glb_parts(path, [{"positions": positions, "indices": indices, "uvs": uvs, "rgba": rgba}])
