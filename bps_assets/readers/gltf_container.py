"""glTF 2.0 containers: the JSON document, its binary buffers and URI resolution.

Everything read from the file is checked before use: GLB chunk lengths against the file
length, buffer lengths against their declared ``byteLength``, and every external URI against
the directory of the glTF file (no ``../`` escapes, no absolute paths, no remote schemes).
"""
from __future__ import annotations

import base64
import binascii
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from ..errors import InputError, UnsupportedFormatError, is_int
from ..json_input import parse_json
from .guard import read_source

GLB_MAGIC = b"glTF"
CHUNK_JSON = 0x4E4F534A
CHUNK_BIN = 0x004E4942
# A glTF JSON chunk larger than this is not a scene file we want to parse.
MAX_JSON_BYTES = 512 << 20


@dataclass
class GltfFile:
    """The parsed JSON plus lazily loaded buffers. ``path`` names the file in every error."""

    path: str
    json: dict
    base_dir: Path
    glb_bin: memoryview | None = None
    _buffers: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)  # decoded (meshopt) buffer views, by index
    accessors: dict = field(default_factory=dict)  # read accessors, by (index, as_float)

    def fail(self, detail: str) -> InputError:
        return InputError(self.path, detail)

    # -- typed accessors into the JSON -------------------------------------------------
    def index(self, v, what: str) -> int:
        if not is_int(v) or v < 0:
            raise self.fail(f"{what} index must be a non-negative integer, got {v!r}")
        return v

    @staticmethod
    def obj(v) -> dict:
        """``v`` if it is a JSON object, else {} (for optional ``extensions`` members)."""
        return v if isinstance(v, dict) else {}

    def items(self, key: str) -> list:
        v = self.json.get(key, [])
        if not isinstance(v, list):
            raise self.fail(f"'{key}' must be an array")
        return v

    def item(self, key: str, index, what: str | None = None) -> dict:
        arr = self.items(key)
        if not is_int(index) or not 0 <= index < len(arr):
            raise self.fail(f"{what or key} index {index!r} out of range (file has {len(arr)} {key})")
        v = arr[index]
        if not isinstance(v, dict):
            raise self.fail(f"{key}[{index}] must be an object")
        return v

    # -- buffers -------------------------------------------------------------------------
    def buffer(self, index: int) -> memoryview:
        index = self.index(index, "buffer")
        if index in self._buffers:
            return self._buffers[index]
        b = self.item("buffers", index, "buffer")
        declared = _int(self, b.get("byteLength", 0), f"buffers[{index}].byteLength")
        uri = b.get("uri")
        if uri is None:
            if index == 0 and self.glb_bin is not None:
                data = self.glb_bin
            else:
                # Placeholder of EXT_meshopt_compression (every view of it is decoded from
                # another buffer), or an empty buffer: any view reaching into it fails the
                # length checks below and in the accessor reader.
                data = memoryview(b"")
        else:
            data = memoryview(self.read_uri(uri, f"buffer {index}", declared))
        if len(data) < declared and not _meshopt_fallback(b):
            where = "no uri and no GLB binary chunk" if uri is None and not len(data) else f"only {len(data)} bytes"
            raise self.fail(f"buffer {index} declares byteLength {declared} but has {where}")
        self._buffers[index] = data
        return data

    def read_uri(self, uri, what: str, declared: int | None = None) -> bytes:
        """Bytes of a data URI or of a file beside the glTF (never outside its directory).
        ``declared``: the byte length the JSON gives; a data URI longer than that needs is
        refused before it is decoded (or copied), so a huge URI costs no decode buffer."""
        if not isinstance(uri, str):
            raise self.fail(f"{what}: uri must be a string")
        if uri.startswith("data:"):
            comma = uri.find(",")
            if comma < 0:
                raise self.fail(f"{what}: malformed data URI")
            head, encoded = uri[:comma], len(uri) - comma - 1
            b64 = head.endswith(";base64")
            if declared is not None:
                # base64: 4 characters per 3 bytes (+ padding); percent-encoding: up to 3 per byte
                most = 4 * -(-declared // 3) + 4 if b64 else 3 * declared
                if encoded > most:
                    raise self.fail(f"{what}: data URI of {encoded} characters is longer than its "
                                    f"byteLength {declared} needs ({most}); refused before decoding")
            payload = uri[comma + 1:]
            try:
                if b64:
                    return base64.b64decode(payload, validate=False)
                return unquote(payload).encode("latin-1")
            except (binascii.Error, ValueError, UnicodeEncodeError) as e:
                raise self.fail(f"{what}: malformed data URI ({e})") from None
        target = self.resolve_uri(uri, what)
        try:
            return target.read_bytes()
        except FileNotFoundError:
            raise self.fail(f"{what}: external file {uri!r} not found (looked for {target})") from None
        except OSError as e:
            raise self.fail(f"{what}: cannot read external file {uri!r}: {e.strerror or e}") from None

    def check_external(self, images: bool = True) -> None:
        """Every external URI must be safe and name an existing file, even when the scene
        would not read it: a glTF with a missing part is a broken asset, refused up front."""
        keys = ("buffers", "images") if images else ("buffers",)
        for key in keys:
            for i, item in enumerate(self.items(key)):
                uri = item.get("uri") if isinstance(item, dict) else None
                if uri is None or (isinstance(uri, str) and uri.startswith("data:")):
                    continue
                what = f"{key[:-1]} {i}"
                if not isinstance(uri, str):
                    raise self.fail(f"{what}: uri must be a string")
                target = self.resolve_uri(uri, what)
                if not target.is_file():
                    raise self.fail(f"{what}: external file {uri!r} not found (looked for {target})")

    def resolve_uri(self, uri: str, what: str) -> Path:
        if "://" in uri or uri.startswith(("file:", "http:", "https:")):
            raise self.fail(f"{what}: remote or scheme URI {uri!r} is not allowed")
        rel = unquote(uri)
        if "\x00" in rel:
            raise self.fail(f"{what}: URI {uri!r} contains a NUL byte")
        if os.path.isabs(rel) or rel.startswith(("/", "\\")) or (len(rel) > 1 and rel[1] == ":"):
            raise self.fail(f"{what}: absolute URI {uri!r} is not allowed")
        parts = rel.replace("\\", "/").split("/")
        if ".." in parts:
            raise self.fail(f"{what}: URI {uri!r} leaves the directory of the glTF file (path traversal)")
        base = self.base_dir.resolve()
        target = (base / rel).resolve()
        if target != base and base not in target.parents:
            raise self.fail(f"{what}: URI {uri!r} resolves outside the directory of the glTF file")
        return target


def _meshopt_fallback(b: dict) -> bool:
    ext = b.get("extensions")
    if not isinstance(ext, dict):
        return False
    return any(isinstance(ext.get(k), dict) and ext[k].get("fallback")
               for k in ("EXT_meshopt_compression", "KHR_meshopt_compression"))


def _int(doc: GltfFile, v, what: str) -> int:
    if not is_int(v) or v < 0:
        raise doc.fail(f"{what} must be a non-negative integer, got {v!r}")
    return v


def open_gltf(path: str | os.PathLike) -> GltfFile:
    """Parse a ``.glb`` or ``.gltf`` file into a :class:`GltfFile` (buffers load lazily)."""
    p = Path(path)
    spath, data = read_source(path, "glTF")
    glb_bin = None
    if data[:4] == GLB_MAGIC:
        js, glb_bin = _parse_glb(spath, data)
    else:
        js = data
        if len(js) > MAX_JSON_BYTES:
            raise InputError(spath, f"glTF JSON of {len(js)} bytes exceeds the cap of {MAX_JSON_BYTES}")
    doc = parse_json(js, spath, prefix="invalid glTF JSON", encoding="utf-8-sig")
    if not isinstance(doc, dict):
        raise InputError(spath, "invalid glTF JSON: the top level is not an object")
    asset = doc.get("asset")
    version = str(asset.get("version", "")) if isinstance(asset, dict) else ""
    if version.startswith("1.") or (not version and "asset" not in doc and isinstance(doc.get("meshes"), dict)):
        raise UnsupportedFormatError(
            spath, f"glTF {version or '1.0'} is not supported; convert it to glTF 2.0 first "
                   "(e.g. with the Khronos glTF-Pipeline or Blender)")
    if not version:
        raise InputError(spath, "not a glTF 2.0 file: asset.version is missing")
    if not version.startswith("2."):
        raise UnsupportedFormatError(spath, f"glTF version {version!r} is not supported (only 2.x)")
    min_version = str(asset.get("minVersion", "2.0"))
    if min_version not in ("2.0", "2"):
        raise UnsupportedFormatError(spath, f"glTF asset.minVersion {min_version!r} is newer than 2.0")
    return GltfFile(spath, doc, p.parent, glb_bin)


def _parse_glb(path: str, data: bytes) -> tuple[memoryview, memoryview | None]:
    mv = memoryview(data)
    if len(data) < 12:
        raise InputError(path, f"GLB header truncated ({len(data)} bytes)")
    _, version, length = struct.unpack_from("<4sII", data, 0)
    if version == 1:
        raise UnsupportedFormatError(
            path, "GLB version 1 (glTF 1.0 binary) is not supported; convert it to glTF 2.0 first "
                  "(e.g. with the Khronos glTF-Pipeline or Blender)")
    if version != 2:
        raise UnsupportedFormatError(path, f"GLB container version {version} is not supported (only 2)")
    if length > len(data):
        raise InputError(path, f"GLB header declares {length} bytes but the file has {len(data)}")
    if length < 20:
        raise InputError(path, f"GLB declares length {length}, too short for a JSON chunk")
    json_chunk = None
    bin_chunk = None
    off = 12
    while off + 8 <= length:
        clen, ctype = struct.unpack_from("<II", data, off)
        start = off + 8
        if clen > length - start:
            raise InputError(path, f"GLB chunk at byte {off} declares {clen} bytes, past the end of the file")
        if ctype == CHUNK_JSON and json_chunk is None:
            if off != 12:
                raise InputError(path, "GLB: the first chunk must be JSON")
            if clen > MAX_JSON_BYTES:
                raise InputError(path, f"GLB JSON chunk of {clen} bytes exceeds the cap of {MAX_JSON_BYTES}")
            json_chunk = mv[start:start + clen]
        elif ctype == CHUNK_BIN and bin_chunk is None:
            bin_chunk = mv[start:start + clen]
        nxt = start + ((clen + 3) & ~3)
        # Some writers (seen in trimesh's test files) do not pad the JSON chunk to 4 bytes;
        # accept a BIN chunk header found right after the unpadded JSON instead.
        if (ctype == CHUNK_JSON and nxt != start + clen and start + clen + 8 <= length
                and struct.unpack_from("<I", data, start + clen + 4)[0] == CHUNK_BIN
                and (nxt + 8 > length or struct.unpack_from("<I", data, nxt + 4)[0] != CHUNK_BIN)):
            nxt = start + clen
        off = nxt
    if json_chunk is None:
        raise InputError(path, "GLB has no JSON chunk")
    return json_chunk, bin_chunk
