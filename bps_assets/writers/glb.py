"""Write a SceneDocument as binary glTF 2.0 (.glb).

Layout written (glTF 2.0, section 4.4 "GLB File Format Specification"):
- 12-byte header (magic ``glTF``, version 2, total length), a JSON chunk padded with spaces
  and a BIN chunk padded with zeros, both to 4-byte multiples;
- one buffer (the BIN chunk); one bufferView per accessor and per image, each starting at a
  4-byte aligned offset (every component type we write is <= 4 bytes);
- one node holding one mesh with one primitive per SceneDocument mesh (mode TRIANGLES):
  POSITION float32 VEC3 with min/max, NORMAL float32 when present, TEXCOORD_0 float32 VEC2,
  COLOR_0 uint8 normalized VEC4, indices uint32;
- materials: pbrMetallicRoughness with baseColorFactor and baseColorTexture (texCoord 0),
  metallic 0, roughness 1; textures use one REPEAT / trilinear sampler; images are PNG or JPEG
  bytes in bufferViews with their mimeType.

The node has no transform: positions are written as given (Gibson/MP3D-style data stays Z-up).
"""
from __future__ import annotations

import io
import json
import os
import struct
from dataclasses import dataclass

import numpy as np

from ..container import atomic_write
from ..errors import ConfigError, InputError
from ..scene import SceneDocument

GLB_MAGIC = 0x46546C67
CHUNK_JSON = 0x4E4F534A
CHUNK_BIN = 0x004E4942
ARRAY_BUFFER, ELEMENT_ARRAY_BUFFER = 34962, 34963
FLOAT, UNSIGNED_BYTE, UNSIGNED_INT = 5126, 5121, 5125


@dataclass(frozen=True)
class GlbOptions:
    """``image_format``: "png", "jpeg", or "auto" (JPEG for opaque images of >= 1024 px, else PNG)."""

    image_format: str = "auto"
    jpeg_quality: int = 90
    png_compress_level: int = 6
    generator: str = "bps_assets"


DEFAULTS = GlbOptions()


def encode_image(rgba: np.ndarray, fmt: str, options: GlbOptions = DEFAULTS) -> tuple[bytes, str]:
    """(bytes, mimeType) of an RGBA uint8 image; JPEG drops alpha."""
    from PIL import Image

    rgba = np.ascontiguousarray(rgba, dtype=np.uint8)
    if fmt == "auto":
        opaque = rgba.shape[2] < 4 or bool((rgba[..., 3] == 255).all())
        fmt = "jpeg" if opaque and max(rgba.shape[:2]) >= 1024 else "png"
    buf = io.BytesIO()
    if fmt == "jpeg":
        Image.fromarray(rgba[..., :3]).save(buf, "JPEG", quality=options.jpeg_quality)
        return buf.getvalue(), "image/jpeg"
    if fmt == "png":
        mode = "RGBA" if rgba.shape[2] == 4 else "RGB"
        Image.fromarray(rgba, mode).save(buf, "PNG", compress_level=options.png_compress_level)
        return buf.getvalue(), "image/png"
    raise ConfigError(None, f"unknown image format {fmt!r}: expected png or jpeg")


class _Bin:
    def __init__(self):
        self.parts: list[bytes | memoryview] = []
        self.length = 0
        self.views: list[dict] = []

    def add(self, data, target: int | None = None) -> int:
        pad = (-self.length) % 4
        if pad:
            self.parts.append(b"\0" * pad)
            self.length += pad
        mv = memoryview(data).cast("B")
        view = {"buffer": 0, "byteOffset": self.length, "byteLength": mv.nbytes}
        if target is not None:
            view["target"] = target
        self.parts.append(mv)
        self.length += mv.nbytes
        self.views.append(view)
        return len(self.views) - 1


def build_glb(doc: SceneDocument, options: GlbOptions = DEFAULTS,
              encoded_images: list[tuple[bytes, str]] | None = None) -> list[bytes | memoryview]:
    """The .glb file as a list of byte chunks (to be written in order).

    ``encoded_images`` (bytes, mimeType) per texture, if given, are embedded as they are instead
    of encoding ``doc.textures``.
    """
    b = _Bin()
    accessors: list[dict] = []

    def accessor(arr: np.ndarray, ctype: int, typ: str, target, normalized=False, minmax=False):
        view = b.add(np.ascontiguousarray(arr), target)
        acc = {"bufferView": view, "componentType": ctype, "count": int(arr.shape[0]), "type": typ}
        if normalized:
            acc["normalized"] = True
        if minmax:
            acc["min"] = [float(x) for x in arr.min(0)]
            acc["max"] = [float(x) for x in arr.max(0)]
        accessors.append(acc)
        return len(accessors) - 1

    prims = []
    for m in doc.meshes:
        pos = np.asarray(m.positions, np.float32)
        idx = np.asarray(m.indices, np.uint32).reshape(-1, 3)
        if pos.shape[0] == 0 or idx.shape[0] == 0:
            continue
        if int(idx.max()) >= pos.shape[0]:
            raise InputError(doc.source_path or None, f"mesh {m.name!r}: index out of range")
        attrs = {"POSITION": accessor(pos, FLOAT, "VEC3", ARRAY_BUFFER, minmax=True)}
        if m.normals is not None:
            attrs["NORMAL"] = accessor(np.asarray(m.normals, np.float32), FLOAT, "VEC3", ARRAY_BUFFER)
        if m.uvs is not None:
            attrs["TEXCOORD_0"] = accessor(np.asarray(m.uvs, np.float32), FLOAT, "VEC2", ARRAY_BUFFER)
        if m.colors is not None:
            col = np.asarray(m.colors, np.float32)
            if col.shape[1] == 3:
                col = np.concatenate([col, np.ones((len(col), 1), np.float32)], 1)
            c8 = np.clip(np.rint(col * 255.0), 0, 255).astype(np.uint8)
            attrs["COLOR_0"] = accessor(c8, UNSIGNED_BYTE, "VEC4", ARRAY_BUFFER, normalized=True)
        prim = {"attributes": attrs, "indices": accessor(idx.reshape(-1), UNSIGNED_INT, "SCALAR",
                                                         ELEMENT_ARRAY_BUFFER), "mode": 4}
        if m.material is not None:
            prim["material"] = int(m.material)
        prims.append(prim)

    images, textures = [], []
    for i, tex in enumerate(doc.textures):
        data, mime = encoded_images[i] if encoded_images is not None else \
            encode_image(tex.rgba, options.image_format, options)
        img = {"bufferView": b.add(data), "mimeType": mime}
        if tex.name:
            img["name"] = tex.name
        images.append(img)
        textures.append({"sampler": 0, "source": i})

    materials = []
    for mat in doc.materials:
        pbr = {"baseColorFactor": [float(x) for x in np.asarray(mat.base_color, np.float64).reshape(4)],
               "metallicFactor": 0.0, "roughnessFactor": 1.0}
        if mat.texture is not None:
            pbr["baseColorTexture"] = {"index": int(mat.texture), "texCoord": 0}
        md = {"pbrMetallicRoughness": pbr}
        if mat.name:
            md["name"] = mat.name
        if mat.double_sided:
            md["doubleSided"] = True
        if mat.alpha_mode != "OPAQUE":
            md["alphaMode"] = mat.alpha_mode
        materials.append(md)

    gltf = {
        "asset": {"version": "2.0", "generator": options.generator},
        "scene": 0,
        "scenes": [{"nodes": [0]}] if prims else [{}],
        "buffers": [{"byteLength": b.length + (-b.length) % 4}],
        "bufferViews": b.views,
        "accessors": accessors,
    }
    if prims:
        gltf["nodes"] = [{"mesh": 0, "name": "scene"}]
        gltf["meshes"] = [{"primitives": prims, "name": "scene"}]
    if materials:
        gltf["materials"] = materials
    if textures:
        gltf["textures"] = textures
        gltf["images"] = images
        gltf["samplers"] = [{"magFilter": 9729, "minFilter": 9987, "wrapS": 10497, "wrapT": 10497}]
    if not b.views:
        del gltf["buffers"], gltf["bufferViews"], gltf["accessors"]

    js = json.dumps(gltf, separators=(",", ":")).encode("utf-8")
    js += b" " * ((-len(js)) % 4)
    bin_len = b.length + (-b.length) % 4
    total = 12 + 8 + len(js) + (8 + bin_len if b.views else 0)
    out: list[bytes | memoryview] = [struct.pack("<III", GLB_MAGIC, 2, total),
                                     struct.pack("<II", len(js), CHUNK_JSON), js]
    if b.views:
        out.append(struct.pack("<II", bin_len, CHUNK_BIN))
        out += b.parts
        out.append(b"\0" * (bin_len - b.length))
    return out


def write_glb(doc: SceneDocument, path: str | os.PathLike, overwrite: bool = False,
              options: GlbOptions = DEFAULTS,
              encoded_images: list[tuple[bytes, str]] | None = None) -> int:
    """Write ``doc`` to ``path`` atomically; returns the file size in bytes."""
    chunks = build_glb(doc, options, encoded_images)

    def _write(f):
        for c in chunks:
            f.write(c)

    atomic_write(path, _write, overwrite=overwrite)
    return sum(memoryview(c).nbytes for c in chunks)
