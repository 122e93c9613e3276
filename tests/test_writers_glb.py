"""The .glb writer: structure checked against the glTF 2.0 GLB rules by a small independent parser,
by pygltflib when installed, and round-tripped through bps_assets.readers when that exists."""
from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
from PIL import Image

from bps_assets.errors import OutputExistsError, UnsupportedFormatError
from bps_assets.scene import Material, Mesh, SceneDocument, Texture
from bps_assets.writers import GlbOptions, write, write_glb

_CTYPES = {5120: np.int8, 5121: np.uint8, 5122: np.int16, 5123: np.uint16, 5125: np.uint32, 5126: np.float32}
_NCOMP = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}


def read_glb(path):
    """(gltf JSON, BIN bytes) after checking the GLB container rules; used by the synth tests too."""
    data = open(path, "rb").read()
    magic, version, length = struct.unpack_from("<III", data, 0)
    assert magic == 0x46546C67 and version == 2 and length == len(data)
    jlen, jtype = struct.unpack_from("<II", data, 12)
    assert jtype == 0x4E4F534A and jlen % 4 == 0
    gltf = json.loads(data[20:20 + jlen].decode("utf-8"))
    pos = 20 + jlen
    binary = b""
    if pos < len(data):
        blen, btype = struct.unpack_from("<II", data, pos)
        assert btype == 0x004E4942 and blen % 4 == 0 and pos + 8 + blen == len(data)
        binary = data[pos + 8:pos + 8 + blen]
    assert gltf["asset"]["version"] == "2.0"
    if binary:
        assert len(gltf["buffers"]) == 1 and "uri" not in gltf["buffers"][0]
        assert len(binary) - 3 <= gltf["buffers"][0]["byteLength"] <= len(binary)
    for v in gltf.get("bufferViews", []):
        assert v["byteOffset"] % 4 == 0
        assert v["byteOffset"] + v["byteLength"] <= gltf["buffers"][0]["byteLength"]
    for a in gltf.get("accessors", []):
        v = gltf["bufferViews"][a["bufferView"]]
        item = np.dtype(_CTYPES[a["componentType"]]).itemsize * _NCOMP[a["type"]]
        assert a.get("byteOffset", 0) + a["count"] * item <= v["byteLength"]
    return gltf, binary


def accessor_array(gltf, binary, i):
    a = gltf["accessors"][i]
    v = gltf["bufferViews"][a["bufferView"]]
    n = _NCOMP[a["type"]]
    arr = np.frombuffer(binary, _CTYPES[a["componentType"]], a["count"] * n,
                        v["byteOffset"] + a.get("byteOffset", 0))
    return arr.reshape(a["count"], n) if n > 1 else arr


def image_bytes(gltf, binary, i):
    img = gltf["images"][i]
    v = gltf["bufferViews"][img["bufferView"]]
    return binary[v["byteOffset"]:v["byteOffset"] + v["byteLength"]], img["mimeType"]


def _doc():
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 255, (32, 64, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    quad = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32)
    m0 = Mesh(positions=quad + 0.5, indices=np.array([[0, 1, 2], [0, 2, 3]], np.uint32),
              uvs=quad[:, :2].copy(), colors=np.array([[1, 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 1], [0.5, 0.5, 0.5, 1]],
                                                      np.float32), material=0, name="textured")
    tri = np.array([[0, 0, 2], [2, 0, 3], [0, 1, 5]], np.float32)
    m1 = Mesh(positions=tri, indices=np.array([[0, 1, 2]], np.uint32),
              normals=np.array([[0, 0, 1]] * 3, np.float32), material=1, name="plain")
    doc = SceneDocument(meshes=[m0, m1],
                        materials=[Material("tex", np.array([1, 1, 1, 1], np.float32), texture=0),
                                   Material("red", np.array([0.8, 0.1, 0.1, 1], np.float32), double_sided=True)],
                        textures=[Texture(rgba, name="noise")])
    return doc, rgba


def test_glb_structure_and_round_trip(tmp_path):
    doc, rgba = _doc()
    p = tmp_path / "a.glb"
    n = write_glb(doc, p)
    assert n == p.stat().st_size
    gltf, binary = read_glb(p)
    prims = gltf["meshes"][0]["primitives"]
    assert len(prims) == 2 and all(pr["mode"] == 4 for pr in prims)
    for pr, m in zip(prims, doc.meshes):
        pa = gltf["accessors"][pr["attributes"]["POSITION"]]
        assert np.allclose(pa["min"], m.positions.min(0)) and np.allclose(pa["max"], m.positions.max(0))
        assert np.array_equal(accessor_array(gltf, binary, pr["attributes"]["POSITION"]), m.positions)
        idx = gltf["accessors"][pr["indices"]]
        assert idx["componentType"] == 5125 and idx["type"] == "SCALAR"
        assert np.array_equal(accessor_array(gltf, binary, pr["indices"]).reshape(-1, 3), m.indices)
        assert gltf["bufferViews"][idx["bufferView"]]["target"] == 34963
    a0 = prims[0]["attributes"]
    assert set(a0) == {"POSITION", "TEXCOORD_0", "COLOR_0"}
    col = gltf["accessors"][a0["COLOR_0"]]
    assert col["componentType"] == 5121 and col["normalized"] is True and col["type"] == "VEC4"
    assert np.abs(accessor_array(gltf, binary, a0["COLOR_0"]) / 255.0 - doc.meshes[0].colors).max() <= 0.5 / 255 + 1e-6
    assert np.array_equal(accessor_array(gltf, binary, a0["TEXCOORD_0"]), doc.meshes[0].uvs)
    assert set(prims[1]["attributes"]) == {"POSITION", "NORMAL"}
    mats = gltf["materials"]
    assert mats[0]["pbrMetallicRoughness"]["baseColorTexture"] == {"index": 0, "texCoord": 0}
    assert mats[1]["pbrMetallicRoughness"]["baseColorFactor"] == pytest.approx([0.8, 0.1, 0.1, 1])
    assert mats[1]["doubleSided"] is True
    data, mime = image_bytes(gltf, binary, 0)
    assert mime == "image/png"  # "auto": small images are PNG (lossless)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data)).convert("RGBA")), rgba)
    assert gltf["samplers"][0]["wrapS"] == 10497


def test_jpeg_images_and_pre_encoded(tmp_path):
    doc, rgba = _doc()
    write_glb(doc, tmp_path / "j.glb", options=GlbOptions(image_format="jpeg"))
    gltf, binary = read_glb(tmp_path / "j.glb")
    data, mime = image_bytes(gltf, binary, 0)
    assert mime == "image/jpeg" and data[:2] == b"\xff\xd8"
    # pre-encoded images go in untouched (odd length: the next view must still be aligned)
    write_glb(doc, tmp_path / "k.glb", encoded_images=[(b"\x89PNG-not-really", "image/png")])
    gltf, binary = read_glb(tmp_path / "k.glb")
    assert image_bytes(gltf, binary, 0) == (b"\x89PNG-not-really", "image/png")


def test_no_overwrite_and_unknown_extension(tmp_path):
    doc, _ = _doc()
    p = tmp_path / "a.glb"
    write(doc, p)
    before = p.read_bytes()
    doc.meshes = doc.meshes[:1]
    with pytest.raises(OutputExistsError):
        write(doc, p)
    assert p.read_bytes() == before
    write(doc, p, overwrite=True)
    assert p.read_bytes() != before
    assert [q.name for q in tmp_path.iterdir()] == ["a.glb"]  # no temp file left behind
    with pytest.raises(UnsupportedFormatError):
        write(doc, tmp_path / "a.obj")


def test_empty_document(tmp_path):
    write_glb(SceneDocument(), tmp_path / "e.glb")
    gltf, binary = read_glb(tmp_path / "e.glb")
    assert binary == b"" and "meshes" not in gltf


def test_pygltflib_reads_it(tmp_path):
    pygltflib = pytest.importorskip("pygltflib")
    doc, _ = _doc()
    write_glb(doc, tmp_path / "a.glb")
    g = pygltflib.GLTF2().load(str(tmp_path / "a.glb"))
    assert len(g.meshes[0].primitives) == 2
    assert g.images[0].mimeType == "image/png"
    assert len(g.binary_blob()) == g.buffers[0].byteLength
    blob = g.binary_blob()
    acc = g.accessors[g.meshes[0].primitives[0].attributes.POSITION]
    view = g.bufferViews[acc.bufferView]
    pos = np.frombuffer(blob, np.float32, acc.count * 3, view.byteOffset).reshape(-1, 3)
    assert np.array_equal(pos, doc.meshes[0].positions)


def test_readers_round_trip(tmp_path):
    from bps_assets import readers
    doc, rgba = _doc()
    write_glb(doc, tmp_path / "a.glb")
    back = readers.load(tmp_path / "a.glb")
    assert back.triangle_count == doc.triangle_count
    assert len(back.materials) == 2 and len(back.textures) == 1
    assert np.array_equal(back.textures[0].rgba, rgba)
    lo, hi = back.bounds()
    elo, ehi = doc.bounds()
    assert np.allclose(lo, elo) and np.allclose(hi, ehi)
    textured = [m for m in back.meshes if m.material is not None and back.materials[m.material].texture is not None]
    assert len(textured) == 1 and textured[0].colors is not None
    assert np.allclose(textured[0].colors, doc.meshes[0].colors, atol=1 / 255)
