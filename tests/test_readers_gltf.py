"""glTF reader: features on small files built here, and every error case typed."""
from __future__ import annotations

import base64
import copy
import json
import math
import random
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readers_gltf_builder import GltfBuilder, grid_mesh  # noqa: E402

from bps_assets.errors import (BpsError, InputError, MissingDependencyError,  # noqa: E402
                               UnsupportedExtensionError, UnsupportedFormatError)
from bps_assets.readers import load  # noqa: E402
from bps_assets.readers.gltf import primitive_triangles, texture_transform_matrix  # noqa: E402

TRI = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32)
QUAD = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], np.float32)


def one_mesh(b: GltfBuilder, *prims, **node) -> int:
    m = b.mesh(*prims)
    n = b.node(mesh=m, **node)
    b.scene([n])
    return n


def face_normals(m) -> np.ndarray:
    p = m.positions[m.indices]
    return np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])


# -- basics ---------------------------------------------------------------------------------------
def test_glb_and_gltf_variants_agree(tmp_path):
    b = GltfBuilder()
    one_mesh(b, b.primitive(QUAD, np.array([0, 1, 2, 0, 2, 3], np.uint16)))
    docs = [load(b.write_glb(tmp_path / "a.glb")),
            load(b.write_gltf(tmp_path / "b.gltf")),
            load(b.write_gltf(tmp_path / "c.gltf", embed=True))]
    for d, fmt in zip(docs, ["glb", "gltf", "gltf"]):
        assert d.source_format == fmt and d.source_path.endswith(fmt)
        assert d.triangle_count == 2 and len(d.meshes) == 1
        np.testing.assert_array_equal(d.meshes[0].indices, [[0, 1, 2], [0, 2, 3]])
        np.testing.assert_allclose(d.bounds()[1], [1, 1, 0])
        assert d.frame == "source"


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, None])
def test_index_types_and_non_indexed(tmp_path, dtype):
    pos, tris = grid_mesh(6)
    b = GltfBuilder()
    if dtype is None:
        one_mesh(b, b.primitive(pos[tris.reshape(-1)]))
    else:
        one_mesh(b, b.primitive(pos, tris.reshape(-1).astype(dtype)))
    d = load(b.write_glb(tmp_path / "g.glb"))
    m = d.meshes[0]
    assert m.indices.dtype == np.uint32 and m.triangle_count == len(tris)
    np.testing.assert_allclose(m.positions[m.indices], pos[tris])


def test_strip_fan_points_lines(tmp_path):
    idx = np.arange(6, dtype=np.uint16)
    np.testing.assert_array_equal(primitive_triangles(idx, 5), [[0, 1, 2], [1, 3, 2], [2, 3, 4], [3, 5, 4]])
    np.testing.assert_array_equal(primitive_triangles(idx, 6), [[1, 2, 0], [2, 3, 0], [3, 4, 0], [4, 5, 0]])
    pos = np.random.default_rng(0).random((6, 3)).astype(np.float32)
    b = GltfBuilder()
    one_mesh(b, b.primitive(pos, idx, mode=5), b.primitive(pos, idx, mode=6), b.primitive(pos, mode=0),
             b.primitive(pos, mode=1), b.primitive(pos, mode=2), b.primitive(pos, mode=3))
    d = load(b.write_glb(tmp_path / "m.glb"))
    assert [m.triangle_count for m in d.meshes] == [4, 4]
    # strips keep a consistent winding: all face normals of this planar-ish strip on one side
    assert d.stats["skipped_points"] == 6
    assert d.stats["skipped_lines"] == 3 + 6 + 5  # LINES, LINE_LOOP, LINE_STRIP


def test_strip_winding_consistent(tmp_path):
    # A flat strip in z=0: every converted triangle must face +z.
    xs = np.repeat(np.arange(5), 2).astype(np.float32)
    pos = np.stack([xs, np.tile([0, 1], 5), np.zeros(10)], 1).astype(np.float32)
    b = GltfBuilder()
    one_mesh(b, b.primitive(pos, mode=5))
    m = load(b.write_glb(tmp_path / "s.glb")).meshes[0]
    nz = face_normals(m)[:, 2]
    assert m.triangle_count == 8 and (np.sign(nz) == np.sign(nz[0])).all()


def test_sparse_accessor_with_and_without_base(tmp_path):
    b = GltfBuilder()
    idx_view = b.view(np.array([1, 3], np.uint16).tobytes())
    val_view = b.view(np.array([[5, 5, 5], [7, 7, 7]], np.float32).tobytes())
    sparse = {"count": 2, "indices": {"bufferView": idx_view, "componentType": 5123},
              "values": {"bufferView": val_view}}
    base = b.accessor(QUAD, sparse=sparse)
    zero = {"componentType": 5126, "count": 4, "type": "VEC3", "sparse": sparse}
    b.json["accessors"].append(zero)
    zi = len(b.json["accessors"]) - 1
    ind = b.accessor(np.array([0, 1, 2, 0, 2, 3], np.uint8), minmax=False)
    one_mesh(b, {"attributes": {"POSITION": base}, "indices": ind},
             {"attributes": {"POSITION": zi}, "indices": ind})
    d = load(b.write_glb(tmp_path / "sp.glb"))
    np.testing.assert_allclose(d.meshes[0].positions, [[0, 0, 0], [5, 5, 5], [1, 1, 0], [7, 7, 7]])
    np.testing.assert_allclose(d.meshes[1].positions, [[0, 0, 0], [5, 5, 5], [0, 0, 0], [7, 7, 7]])


def test_normalized_quantized_attributes_and_colors(tmp_path):
    b = GltfBuilder()
    q = np.array([[0, 0, 0], [32767, 0, 0], [0, -32767, 0]], np.int16)  # KHR_mesh_quantization
    pos = b.accessor(q, normalized=True)
    uv = b.accessor(np.array([[0, 0], [65535, 0], [0, 65535]], np.uint16), normalized=True)
    c3 = b.accessor(np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], np.uint8), normalized=True)
    c4 = b.accessor(np.array([[65535, 0, 0, 0], [0, 65535, 0, 32768], [0, 0, 0, 65535]], np.uint16), normalized=True)
    cf = b.accessor(np.array([[0.5, 0.25, 1.0]] * 3, np.float32))
    tex = b.image_texture(np.full((2, 2, 4), 200, np.uint8))
    mat = b.material(pbrMetallicRoughness={"baseColorTexture": {"index": tex}})
    ind = b.accessor(np.array([0, 1, 2], np.uint8), minmax=False)
    prims = [{"attributes": {"POSITION": pos, "COLOR_0": c, "TEXCOORD_0": uv}, "indices": ind, "material": mat}
             for c in (c3, c4, cf)]
    b.json["extensionsUsed"] = b.json["extensionsRequired"] = ["KHR_mesh_quantization"]
    one_mesh(b, *prims, scale=[2, 2, 2])
    d = load(b.write_glb(tmp_path / "q.glb"))
    np.testing.assert_allclose(d.meshes[0].positions, [[0, 0, 0], [2, 0, 0], [0, -2, 0]], atol=1e-6)
    np.testing.assert_allclose(d.meshes[0].uvs, [[0, 0], [1, 0], [0, 1]])
    np.testing.assert_allclose(d.meshes[0].colors, [[1, 0, 0, 1], [0, 1, 0, 1], [0, 0, 1, 1]])
    np.testing.assert_allclose(d.meshes[1].colors[1], [0, 1, 0, 32768 / 65535])
    np.testing.assert_allclose(d.meshes[2].colors[0], [0.5, 0.25, 1, 1])
    assert d.meshes[0].colors.dtype == np.float32


def test_interleaved_byte_stride(tmp_path):
    b = GltfBuilder()
    pos = QUAD
    uv = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], np.float32)
    inter = np.zeros((4, 8), np.float32)  # 32-byte stride: pos(12) uv(8) padding(12)
    inter[:, :3], inter[:, 3:5] = pos, uv
    view = b.view(inter.tobytes(), stride=32)
    pa = b.accessor(pos, view=view)
    ua = b.accessor(uv, view=view, byte_offset=12)
    tex = b.image_texture(np.zeros((1, 1, 4), np.uint8))
    mat = b.material(pbrMetallicRoughness={"baseColorTexture": {"index": tex}})
    ind = b.accessor(np.array([0, 1, 2, 0, 2, 3], np.uint32), minmax=False)
    one_mesh(b, {"attributes": {"POSITION": pa, "TEXCOORD_0": ua}, "indices": ind, "material": mat})
    m = load(b.write_glb(tmp_path / "i.glb")).meshes[0]
    np.testing.assert_array_equal(m.positions, pos)
    np.testing.assert_array_equal(m.uvs, uv)


# -- scene graph ---------------------------------------------------------------------------------
def quat(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return list(np.append(axis * math.sin(angle / 2), math.cos(angle / 2)))


def test_hierarchy_trs_matrix_and_instancing(tmp_path):
    b = GltfBuilder()
    m = b.mesh(b.primitive(TRI))
    leaf_a = b.node(mesh=m, translation=[1, 0, 0])
    mat = np.eye(4)
    mat[:3, 3] = [0, 0, 5]
    leaf_b = b.node(mesh=m, matrix=list(mat.T.reshape(-1)))  # column-major
    parent = b.node(children=[leaf_a, leaf_b], rotation=quat([0, 0, 1], math.pi / 2), scale=[2, 2, 2])
    b.scene([parent])
    d = load(b.write_glb(tmp_path / "h.glb"))
    assert len(d.meshes) == 2  # one per node using the mesh
    # leaf_a: x -> (x + 1), then scale 2, then rotate 90 deg about z: (x, y) -> (-y, x)
    np.testing.assert_allclose(d.meshes[0].positions, [[0, 2, 0], [0, 4, 0], [-2, 2, 0]], atol=1e-6)
    np.testing.assert_allclose(d.meshes[1].positions, [[0, 0, 10], [0, 2, 10], [-2, 0, 10]], atol=1e-6)


@pytest.mark.parametrize("scale", [1e200, 1e-170, 1e-160])
def test_huge_and_tiny_quaternions_still_rotate(scale):
    """The squared norm of [s,0,0,s] overflows (1e200), underflows (1e-170) or goes subnormal
    (1e-160): still the rotation of [1,0,0,1] (90 degrees about x), not the identity."""
    from bps_assets.transforms.frame import quat_matrix

    want = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], float)
    np.testing.assert_allclose(quat_matrix([1, 0, 0, 1]), want, atol=1e-15)
    np.testing.assert_array_equal(quat_matrix([scale, 0, 0, scale]), quat_matrix([1, 0, 0, 1]))
    np.testing.assert_array_equal(quat_matrix([scale, scale, 0, 0], "wxyz"), quat_matrix([1, 0, 0, 1]))
    assert (quat_matrix([0, 0, 0, 0]) == np.eye(3)).all()


def test_meshes_never_share_buffers(tmp_path):
    b = GltfBuilder()
    pa = b.accessor(TRI)
    ca = b.accessor(np.full((3, 4), 0.5, np.float32))
    prim = {"attributes": {"POSITION": pa, "COLOR_0": ca}}
    m = b.mesh(prim, dict(prim, mode=5))  # two primitives on one accessor
    b.scene([b.node(mesh=m), b.node(mesh=m)])  # and two instances
    d = load(b.write_glb(tmp_path / "sh.glb"))
    assert len(d.meshes) == 4
    arrays = [a for mm in d.meshes for a in (mm.positions, mm.indices, mm.colors)]
    for i, a in enumerate(arrays):
        for c in arrays[i + 1:]:
            assert not np.shares_memory(a, c)


def test_negative_determinant_flips_winding(tmp_path):
    b = GltfBuilder()
    m = b.mesh(b.primitive(TRI, np.array([0, 1, 2], np.uint8)))
    b.scene([b.node(mesh=m), b.node(mesh=m, scale=[-1, 1, 1])])
    d = load(b.write_glb(tmp_path / "n.glb"))
    plain, mirrored = d.meshes
    np.testing.assert_array_equal(mirrored.indices, [[0, 2, 1]])
    # The visible side stays the same (+z) after mirroring.
    assert face_normals(plain)[0, 2] > 0 and face_normals(mirrored)[0, 2] > 0


def test_default_scene_and_root_nodes(tmp_path):
    b = GltfBuilder()
    m = b.mesh(b.primitive(TRI))
    n0, n1 = b.node(mesh=m), b.node(mesh=m, translation=[0, 0, 3])
    child = b.node(mesh=m, translation=[0, 0, 9])
    b.json["nodes"][n1]["children"] = [child]
    b.scene([n0], default=False)
    b.scene([n1], default=True)
    d = load(b.write_glb(tmp_path / "s1.glb"))
    assert len(d.meshes) == 2 and d.bounds()[0][2] == 3  # scene 1: n1 and its child only
    del b.json["scene"]
    d = load(b.write_glb(tmp_path / "s2.glb"))
    assert len(d.meshes) == 3  # no default scene: every root node (n0, n1 -> child)
    b.json.pop("scenes")
    b.json.pop("nodes")
    d = load(b.write_glb(tmp_path / "s3.glb"))
    assert len(d.meshes) == 1  # no nodes at all: each mesh once


def test_node_cycle_is_refused(tmp_path):
    b = GltfBuilder()
    m = b.mesh(b.primitive(TRI))
    b.node(mesh=m, children=[1])
    b.node(children=[0])
    b.scene([0])
    with pytest.raises(InputError, match="cycle"):
        load(b.write_glb(tmp_path / "c.glb"))


# -- materials and textures -----------------------------------------------------------------------
def test_materials_texcoord_set_and_texture_transform(tmp_path):
    b = GltfBuilder()
    img = np.zeros((4, 8, 4), np.uint8)
    img[..., 0] = 255
    img[..., 3] = 255
    tex = b.image_texture(img)
    tt = {"offset": [0.5, 0.25], "rotation": math.pi / 2, "scale": [2, 3]}
    m_tex = b.material(pbrMetallicRoughness={"baseColorFactor": [1, 0.5, 0.25, 1],
                                             "baseColorTexture": {"index": tex, "texCoord": 1,
                                                                  "extensions": {"KHR_texture_transform": tt}}})
    m_plain = b.material(pbrMetallicRoughness={"baseColorFactor": [0, 1, 0, 0.5]}, alphaMode="BLEND", doubleSided=True)
    uv0 = np.zeros((3, 2), np.float32)
    uv1 = np.array([[0, 0], [1, 0], [0, 1]], np.float32)
    b.json["extensionsUsed"] = ["KHR_texture_transform"]
    one_mesh(b, b.primitive(TRI, TEXCOORD_0=uv0, TEXCOORD_1=uv1, material=m_tex),
             b.primitive(TRI + 1, material=m_plain), b.primitive(TRI + 2))
    d = load(b.write_glb(tmp_path / "mat.glb"))
    assert [m.material for m in d.meshes] == [0, 1, None]
    mt, mp = d.materials
    np.testing.assert_allclose(mt.base_color, [1, 0.5, 0.25, 1])
    np.testing.assert_allclose(mp.base_color, [0, 1, 0, 0.5])
    assert mp.alpha_mode == "BLEND" and mp.double_sided and mp.texture is None
    assert d.textures[mt.texture].rgba.shape == (4, 8, 4) and d.textures[mt.texture].rgba[0, 0, 0] == 255
    # KHR_texture_transform: uv' = T * R * S * uv with R = [[c, s], [-s, c]] (spec)
    c, s = math.cos(math.pi / 2), math.sin(math.pi / 2)
    expect = [(np.array([[c, s], [-s, c]]) @ (np.array([2, 3]) * u)) + [0.5, 0.25] for u in uv1]
    np.testing.assert_allclose(d.meshes[0].uvs, expect, atol=1e-6)
    np.testing.assert_allclose(texture_transform_matrix(tt)[:2, 2], [0.5, 0.25])
    assert d.meshes[1].uvs is None


def test_images_once_external_and_data_uri(tmp_path):
    b = GltfBuilder()
    ext = b.image_texture(np.full((2, 2, 4), 10, np.uint8), uri="tex/a b.png")
    duri = b.image_texture(np.full((3, 3, 4), 20, np.uint8), data_uri=True)
    mats = [b.material(pbrMetallicRoughness={"baseColorTexture": {"index": t}}) for t in (ext, ext, duri)]
    uv = np.zeros((3, 2), np.float32)
    one_mesh(b, *[b.primitive(TRI, TEXCOORD_0=uv, material=m) for m in mats])
    b.json["images"][0]["uri"] = "tex/a%20b.png"  # percent-encoded, as URIs must be
    d = load(b.write_gltf(tmp_path / "t.gltf"))
    assert len(d.textures) == 2  # image 0 is decoded once for two materials
    assert d.materials[0].texture == d.materials[1].texture == 0
    assert d.textures[1].rgba.shape == (3, 3, 4) and d.textures[1].rgba[0, 0, 0] == 20
    d2 = load(tmp_path / "t.gltf", textures=False)
    assert d2.textures == [] and d2.triangle_count == 3


def test_spec_gloss_diffuse_is_base_colour(tmp_path):
    b = GltfBuilder()
    mat = b.material(extensions={"KHR_materials_pbrSpecularGlossiness": {"diffuseFactor": [0.1, 0.2, 0.3, 1]}})
    b.json["extensionsRequired"] = ["KHR_materials_pbrSpecularGlossiness"]
    one_mesh(b, b.primitive(TRI, material=mat))
    d = load(b.write_glb(tmp_path / "sg.glb"))
    np.testing.assert_allclose(d.materials[0].base_color, [0.1, 0.2, 0.3, 1])


# -- compression ---------------------------------------------------------------------------------
def test_draco_roundtrip(tmp_path):
    DracoPy = pytest.importorskip("DracoPy")
    pos, tris = grid_mesh(10)
    blob = DracoPy.encode(pos, faces=tris, quantization_bits=16)
    dm = DracoPy.decode(blob)
    pid = next(a["unique_id"] for a in dm.attributes if a["attribute_type"] == 0)
    b = GltfBuilder()
    view = b.view(blob)
    pa = {"componentType": 5126, "count": len(pos), "type": "VEC3",
          "min": pos.min(0).tolist(), "max": pos.max(0).tolist()}
    ia = {"componentType": 5125, "count": tris.size, "type": "SCALAR"}
    b.json["accessors"] = [pa, ia]
    one_mesh(b, {"attributes": {"POSITION": 0}, "indices": 1,
                 "extensions": {"KHR_draco_mesh_compression": {"bufferView": view, "attributes": {"POSITION": pid}}}})
    b.json["extensionsUsed"] = b.json["extensionsRequired"] = ["KHR_draco_mesh_compression"]
    d = load(b.write_glb(tmp_path / "d.glb"))
    m = d.meshes[0]
    assert m.triangle_count == len(tris)
    # Draco may reorder vertices; compare the triangle soups' sorted vertex sets.
    got = np.sort(np.round(m.positions[m.indices].reshape(-1, 3), 3), axis=0)
    want = np.sort(np.round(pos[tris].reshape(-1, 3), 3), axis=0)
    np.testing.assert_allclose(got, want, atol=2e-3)


def test_meshopt_roundtrip(tmp_path):
    import meshoptimizer as mo
    pos, tris = grid_mesh(8)
    b = GltfBuilder()
    venc = bytes(mo.encode_vertex_buffer(pos, len(pos), 12))
    ienc = bytes(mo.encode_index_buffer(tris.reshape(-1).astype(np.uint32), tris.size, len(pos)))
    src_v, src_i = b.view(venc), b.view(ienc)
    b.json["buffers"] = [{"byteLength": 0}, {"byteLength": pos.nbytes + tris.nbytes,
                                            "extensions": {"EXT_meshopt_compression": {"fallback": True}}}]
    b.json["bufferViews"] += [
        {"buffer": 1, "byteOffset": 0, "byteLength": pos.nbytes, "byteStride": 12,
         "extensions": {"EXT_meshopt_compression": {"buffer": 0, "byteOffset": b.json["bufferViews"][src_v]["byteOffset"],
                                                    "byteLength": len(venc), "byteStride": 12, "count": len(pos),
                                                    "mode": "ATTRIBUTES"}}},
        {"buffer": 1, "byteOffset": pos.nbytes, "byteLength": tris.nbytes,
         "extensions": {"EXT_meshopt_compression": {"buffer": 0, "byteOffset": b.json["bufferViews"][src_i]["byteOffset"],
                                                    "byteLength": len(ienc), "byteStride": 4, "count": tris.size,
                                                    "mode": "TRIANGLES"}}}]
    b.json["accessors"] = [{"bufferView": 2, "componentType": 5126, "count": len(pos), "type": "VEC3"},
                           {"bufferView": 3, "componentType": 5125, "count": tris.size, "type": "SCALAR"}]
    one_mesh(b, {"attributes": {"POSITION": 0}, "indices": 1})
    b.json["extensionsUsed"] = b.json["extensionsRequired"] = ["EXT_meshopt_compression"]
    m = load(b.write_glb(tmp_path / "mo.glb")).meshes[0]
    np.testing.assert_array_equal(m.positions, pos)

    def canon(t):  # the index codec may rotate a triangle's corners (winding kept)
        r = np.argmin(t, axis=1)[:, None]
        return np.take_along_axis(t, (np.arange(3)[None, :] + r) % 3, axis=1)

    np.testing.assert_array_equal(canon(m.indices.astype(np.int64)), canon(tris.astype(np.int64)))
    # an absurd declared count is refused before anything is allocated
    b.json["bufferViews"][2]["extensions"]["EXT_meshopt_compression"]["count"] = 2 ** 34
    with pytest.raises(InputError, match="cannot come from"):
        load(b.write_glb(tmp_path / "mo2.glb"))


@pytest.mark.parametrize("module,fixture", [("DracoPy", "draco/Box/glTF_Binary/Box_Draco.glb"),
                                            ("meshoptimizer", "gltf-transform/extensions/BoxMeshopt.glb")])
def test_missing_decoder_names_pip_install(monkeypatch, module, fixture):
    path = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / fixture
    if not path.exists():
        pytest.skip("shared assets absent")
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(MissingDependencyError) as e:
        load(path)
    assert f"pip install {module}" in str(e.value) and str(path) in str(e.value)


def _ktx2_rgba8(w: int, h: int, rgba: np.ndarray) -> bytes:
    """Minimal uncompressed KTX2 (VK_FORMAT_R8G8B8A8_UNORM, one level, no DFD content)."""
    level = rgba.astype(np.uint8).tobytes()
    header = b"\xabKTX 20\xbb\r\n\x1a\n" + struct.pack("<9I", 37, 1, w, h, 0, 0, 1, 1, 0)
    index = struct.pack("<4I2Q", 0, 0, 0, 0, 0, 0)
    off = len(header) + len(index) + 24
    return header + index + struct.pack("<3Q", off, len(level), len(level)) + level


def test_ktx2_plain_and_basisu_dependency(tmp_path, monkeypatch):
    rgba = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    b = GltfBuilder()
    src = b._add("images", {"bufferView": b.view(_ktx2_rgba8(3, 2, rgba)), "mimeType": "image/ktx2"})
    tex = b._add("textures", {"extensions": {"KHR_texture_basisu": {"source": src}}})
    mat = b.material(pbrMetallicRoughness={"baseColorTexture": {"index": tex}})
    one_mesh(b, b.primitive(TRI, TEXCOORD_0=np.zeros((3, 2), np.float32), material=mat))
    b.json["extensionsRequired"] = ["KHR_texture_basisu"]
    d = load(b.write_glb(tmp_path / "k.glb"))
    np.testing.assert_array_equal(d.textures[0].rgba, rgba)
    # A Basis Universal payload needs the transcoder: without it, a typed error with the pip line.
    b.json["images"][src] = {"uri": "data:image/ktx2;base64," + base64.b64encode(
        _ktx2_rgba8(3, 2, rgba)[:12] + struct.pack("<9I", 0, 1, 3, 2, 0, 0, 1, 1, 1) + b"\0" * 64).decode()}
    monkeypatch.setitem(sys.modules, "opengl_basisu", None)
    with pytest.raises(MissingDependencyError, match="pip install opengl_basisu"):
        load(b.write_glb(tmp_path / "k2.glb"))


def _psnr(a, b) -> float:
    mse = ((a[..., :3].astype(float) - b[..., :3].astype(float)) ** 2).mean()
    return 10 * math.log10(255 ** 2 / max(mse, 1e-9))


def test_plain_and_block_compressed_ktx2_shared_fixtures():
    """gltf-transform's fixtures: the same label image stored as RGBA8 / RGB8 (green) and as
    BC1 / BC7 (orange); read directly (BCn through Pillow), no transcoder needed."""
    base = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / "gltf-transform" / "extensions"
    if not base.is_dir():
        pytest.skip("shared assets absent")
    from bps_assets.readers.images import decode_image
    im = {n: decode_image((base / f"2d_{n}.ktx2").read_bytes(), n, n) for n in ("rgba8", "rgb8", "bc1", "bc7")}
    assert all(v.shape == (40, 40, 4) for v in im.values())
    assert im["rgba8"][39, 39, 1] > 150 and im["bc1"][39, 39, 0] > 200  # green / orange backgrounds
    assert _psnr(im["rgba8"], im["rgb8"]) > 18  # same picture (different labels drawn on it)
    assert _psnr(im["bc1"], im["bc7"]) > 18
    with pytest.raises(UnsupportedFormatError, match="vkFormat 158"):
        decode_image((base / "2d_astc4x4.ktx2").read_bytes(), "astc", "astc")


def test_basisu_shared_fixture_decodes():
    pytest.importorskip("opengl_basisu")
    path = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / "gltf-transform/extensions/2d_etc1s.ktx2"
    if not path.exists():
        pytest.skip("shared assets absent")
    from bps_assets.readers.images import decode_image
    rgba = decode_image(path.read_bytes(), str(path), "etc1s")
    assert rgba.shape == (40, 40, 4) and rgba.dtype == np.uint8 and rgba.std() > 0


# -- errors -------------------------------------------------------------------------------------------
def _valid(tmp_path) -> GltfBuilder:
    b = GltfBuilder()
    one_mesh(b, b.primitive(QUAD, np.array([0, 1, 2, 0, 2, 3], np.uint16)))
    return b


def test_invalid_json_and_not_gltf(tmp_path):
    p = tmp_path / "bad.gltf"
    p.write_text('{"asset": {"version": "2.0"}, "meshes": [')
    with pytest.raises(InputError, match="invalid glTF JSON") as e:
        load(p)
    assert str(p) in str(e.value)
    p.write_text("[1, 2]")
    with pytest.raises(InputError, match="not an object"):
        load(p)
    with pytest.raises(UnsupportedFormatError):
        load(tmp_path / "x.fbx")
    with pytest.raises(InputError, match="not found"):
        load(tmp_path / "missing.glb")


def test_gltf1_refused(tmp_path):
    p = tmp_path / "v1.gltf"
    p.write_text('{"asset": {"version": "1.0"}}')
    with pytest.raises(UnsupportedFormatError, match="glTF 1.0"):
        load(p)
    js = b'{"meshes": {}}  '
    g = tmp_path / "v1.glb"
    g.write_bytes(struct.pack("<4sIIII", b"glTF", 1, 20 + len(js), len(js), 0) + js)
    with pytest.raises(UnsupportedFormatError, match="GLB version 1"):
        load(g)
    p.write_text('{"asset": {"version": "2.0", "minVersion": "2.1"}}')
    with pytest.raises(UnsupportedFormatError, match="minVersion"):
        load(p)


def test_unknown_required_extension(tmp_path):
    b = _valid(tmp_path)
    b.json["extensionsRequired"] = ["KHR_texture_transform", "VENDOR_magic", "ACME_thing"]
    with pytest.raises(UnsupportedExtensionError, match="ACME_thing, VENDOR_magic"):
        load(b.write_glb(tmp_path / "r.glb"))
    b.json["extensionsRequired"] = []
    b.json["extensionsUsed"] = ["VENDOR_magic"]  # only used: fine
    assert load(b.write_glb(tmp_path / "u.glb")).triangle_count == 2


def test_missing_external_files(tmp_path):
    b = _valid(tmp_path)
    p = b.write_gltf(tmp_path / "e.gltf")
    (tmp_path / "e.bin").unlink()
    with pytest.raises(InputError, match="'e.bin' not found"):
        load(p)


@pytest.mark.parametrize("uri", ["../secret.bin", "sub/../../secret.bin", "/etc/passwd",
                                 "%2E%2E/secret.bin", "file:///etc/passwd", "http://example.com/a.bin"])
def test_path_traversal_uris_refused(tmp_path, uri):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    d = tmp_path / "scene"
    d.mkdir()
    b = _valid(tmp_path)
    p = b.write_gltf(d / "t.gltf")
    j = json.loads(p.read_text())
    j["buffers"][0]["uri"] = uri
    p.write_text(json.dumps(j))
    with pytest.raises(InputError, match="not allowed|path traversal|outside"):
        load(p)


def test_out_of_range_index_and_accessor(tmp_path):
    b = _valid(tmp_path)
    b.json["meshes"][0]["primitives"][0]["indices"] = b.accessor(np.array([0, 1, 9], np.uint16), minmax=False)
    with pytest.raises(InputError, match="index 9 out of range for 4 vertices"):
        load(b.write_glb(tmp_path / "o.glb"))
    b = _valid(tmp_path)
    b.json["accessors"][0]["count"] = 5  # 5 positions in a 48-byte view
    with pytest.raises(InputError, match="need 60 bytes but bufferView 0 has 48"):
        load(b.write_glb(tmp_path / "a.glb"))
    b = _valid(tmp_path)
    b.json["meshes"][0]["primitives"][0]["attributes"]["POSITION"] = 42
    with pytest.raises(InputError, match="accessor index 42 out of range"):
        load(b.write_glb(tmp_path / "x.glb"))


def test_absurd_sizes_fail_before_allocating(tmp_path):
    b = _valid(tmp_path)
    b.json["accessors"][0]["count"] = 2 ** 40
    with pytest.raises(InputError, match="need"):
        load(b.write_glb(tmp_path / "big.glb"))
    b = _valid(tmp_path)
    b.json["bufferViews"][0]["byteLength"] = 2 ** 50
    with pytest.raises(InputError, match="spans bytes"):
        load(b.write_glb(tmp_path / "bv.glb"))
    b = _valid(tmp_path)
    del b.json["accessors"][0]["bufferView"]
    b.json["accessors"][0]["count"] = 2 ** 45  # zero-filled accessor: capped
    with pytest.raises(InputError, match="exceed the cap"):
        load(b.write_glb(tmp_path / "zf.glb"))


def test_bad_glb_chunks(tmp_path):
    good = _valid(tmp_path).glb()
    cases = {
        "short": good[:10],
        "length": good[:8] + struct.pack("<I", len(good) + 100) + good[12:],
        "chunk": good[:12] + struct.pack("<I", 10 ** 9) + good[16:],
        "truncated": good[:-20],
    }
    for name, data in cases.items():
        p = tmp_path / f"{name}.glb"
        p.write_bytes(data)
        with pytest.raises(InputError) as e:
            load(p)
        assert str(p) in str(e.value), name


def _mutations(doc: dict, rng: random.Random, n: int):
    values = [None, -1, 0, 3, 2 ** 31, 2 ** 40, 1.5, "x", [], {}, [1, 2], True, float("nan"),
              5126, "VEC3", [0] * 16, {"KHR_texture_transform": {"scale": "a"}}]
    paths = []

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                paths.append(path + (k,))
                walk(v, path + (k,))
        elif isinstance(o, list):
            for i, v in enumerate(o):
                paths.append(path + (i,))
                walk(v, path + (i,))

    walk(doc, ())
    for _ in range(n):
        d = copy.deepcopy(doc)
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(paths)
            o = d
            try:
                for k in path[:-1]:
                    o = o[k]
                o[path[-1]] = copy.deepcopy(rng.choice(values))
            except (KeyError, IndexError, TypeError):
                pass
        yield d


def test_fuzzed_json_gives_only_precise_typed_errors(tmp_path):
    """Random type/value substitutions anywhere in the JSON: every failure is a BpsError raised
    by an explicit check (the reader's safety net, whose message says 'unexpected', unused)."""
    b = GltfBuilder()
    tex = b.image_texture(np.full((2, 2, 4), 9, np.uint8))
    mat = b.material(pbrMetallicRoughness={"baseColorTexture": {"index": tex, "extensions": {
        "KHR_texture_transform": {"offset": [0.1, 0.2], "scale": [2, 2]}}}, "baseColorFactor": [1, 1, 1, 1]})
    idx_view = b.view(np.array([1], np.uint16).tobytes())
    val_view = b.view(np.array([[5, 5, 5]], np.float32).tobytes())
    pa = b.accessor(QUAD, sparse={"count": 1, "indices": {"bufferView": idx_view, "componentType": 5123},
                                  "values": {"bufferView": val_view}})
    ua = b.accessor(np.zeros((4, 2), np.float32))
    ca = b.accessor(np.full((4, 4), 200, np.uint8), normalized=True)
    ia = b.accessor(np.array([0, 1, 2, 0, 2, 3], np.uint16), minmax=False)
    m = b.mesh({"attributes": {"POSITION": pa, "TEXCOORD_0": ua, "COLOR_0": ca}, "indices": ia, "material": mat},
               {"attributes": {"POSITION": pa}, "mode": 5})
    b.scene([b.node(children=[b.node(mesh=m, rotation=[0, 0, 0, 1])], matrix=list(np.eye(4).reshape(-1)))])
    base = json.loads(json.dumps(b.json))
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for i, doc in enumerate(_mutations(base, rng, 300)):
        b.json = doc
        p = b.write_glb(tmp_path / f"f{i % 2}.glb")
        try:
            load(p)
            outcomes["ok"] += 1
        except BpsError as e:
            assert "unexpected" not in str(e), str(e)
            outcomes["error"] += 1
    assert outcomes["ok"] > 20 and outcomes["error"] > 100


def test_fuzzed_bytes_give_typed_errors(tmp_path):
    # counted outcomes: a mutant either loads or gets a BpsError; any other exception fails
    # the test by propagating. Truncated files never load (the GLB length fields disagree).
    rng = random.Random(7)
    good = _valid(tmp_path).glb()
    outcomes = {"accepted": 0, "typed": 0, "typed_by_net": 0, "truncated_accepted": 0}
    for i in range(200):
        d = bytearray(good)
        for _ in range(rng.randint(1, 6)):
            k = rng.randrange(len(d))
            d[k] = rng.randrange(256)
        truncated = i % 3 == 0
        if truncated:
            d = d[: rng.randrange(len(d))]
        p = tmp_path / "z.glb"
        p.write_bytes(bytes(d))
        try:
            doc = load(p)
        except BpsError as e:
            outcomes["typed_by_net" if "unexpected" in str(e) else "typed"] += 1
            assert str(p) in str(e)
        else:
            assert doc.triangle_count >= 0
            outcomes["accepted"] += 1
            outcomes["truncated_accepted"] += truncated
    assert sum(outcomes[k] for k in ("accepted", "typed", "typed_by_net")) == 200
    assert outcomes["truncated_accepted"] == 0, outcomes
    # seed 7 gives 193 typed, 7 accepted (mutants inside vertex data): a reader that refuses
    # everything fails as surely as one that accepts everything
    assert outcomes["typed"] >= 170 and outcomes["accepted"] >= 3, outcomes
    assert outcomes["typed_by_net"] <= 5, outcomes  # precise checks, not the safety net


def test_image_modes_decode_to_rgba8():
    import io

    from PIL import Image

    from bps_assets.readers.images import decode_image
    grey16 = (np.arange(16 * 16).reshape(16, 16) * 256).astype(np.uint16)  # 0 .. 65280
    buf = io.BytesIO()
    Image.fromarray(grey16).save(buf, "PNG")
    out = decode_image(buf.getvalue(), "g16", "g16")
    np.testing.assert_array_equal(out[..., 0], grey16 >> 8)  # scaled, not clipped at 255
    assert (out[..., 3] == 255).all()
    for mode, fmt in (("P", "PNG"), ("LA", "PNG"), ("L", "JPEG"), ("RGB", "WEBP")):
        buf = io.BytesIO()
        Image.new(mode, (5, 3)).save(buf, fmt)
        assert decode_image(buf.getvalue(), mode, mode).shape == (3, 5, 4)
    with pytest.raises(UnsupportedFormatError):
        decode_image(b"definitely not an image", "x", "x")


def test_meshopt_color_filter_by_spec():
    """KHR_meshopt_compression COLOR filter on hand-encoded YCoCg values (spec Appendix B)."""
    from bps_assets.readers.gltf_compression import color_filter

    def fail(msg):
        return InputError("x", msg)

    # K = 8: y=100, co=20, cg=10 -> r=110, g=110, b=70; alpha 7 bits all set -> 255
    raw = np.array([[100, 20, 10, 0x80 | 0x7F]], np.uint8).reshape(-1)
    np.testing.assert_array_equal(color_filter(raw, 1, 4, fail), [110, 110, 70, 255])
    # K = 6: same colour scaled by 255/63; alpha marker bit 5, value 0b10101 -> 0b101011 = 43
    raw = np.array([[30, 5, 3, 0x20 | 0b10101]], np.uint8).reshape(-1)
    want = np.floor(np.array([32, 33, 22, 43]) * 255 / 63 + 0.5)
    np.testing.assert_array_equal(color_filter(raw, 1, 4, fail), want)
    # 16-bit components (byteStride 8), K = 16
    raw = np.array([[30000, -1000, 2000, 0x8000 | 0x7FFF]], np.int32).astype("<u2").view(np.uint8).reshape(-1)
    out = color_filter(raw, 1, 8, fail).view("<u2")
    np.testing.assert_array_equal(out, [27000, 32000, 29000, 65535])
