"""PLY and OBJ readers on files written here (ascii / binary LE / BE PLY, OBJ + MTL)."""
from __future__ import annotations

import io
import random
import time
from pathlib import Path

import numpy as np
import pytest

from bps_assets.errors import BpsError, InputError, UnsupportedFormatError
from bps_assets.readers import load

# ---------------------------------------------------------------------------------------------
# PLY
POS = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0.5, 0.5, 1]], np.float32)
FACES = [[0, 1, 2, 3], [0, 1, 4], [1, 2, 4], [2, 3, 4], [3, 0, 4]]  # a quad + 4 triangles
COLS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 0], [10, 20, 30]], np.uint8)


def write_ply(path: Path, fmt: str, *, faces=FACES, uv_names=("s", "t"), colors=True, index_prop="vertex_indices",
              index_type="int", extra_elem=True) -> Path:
    props = [("float", "x"), ("float", "y"), ("float", "z")]
    if colors:
        props += [("uchar", "red"), ("uchar", "green"), ("uchar", "blue")]
    if uv_names:
        props += [("float", uv_names[0]), ("float", uv_names[1])]
    uv = POS[:, :2] * 0.5
    head = ["ply", f"format {fmt} 1.0", "comment made by a test"]
    if extra_elem:  # an element the reader must skip, placed before the vertices
        head += ["element camera 1", "property float view_px", "property list uchar int junk"]
    head += [f"element vertex {len(POS)}"] + [f"property {t} {n}" for t, n in props]
    head += [f"element face {len(faces)}", f"property list uchar {index_type} {index_prop}", "property uchar flags",
             "end_header"]
    header = ("\n".join(head) + "\n").encode()
    if fmt == "ascii":
        lines = []
        if extra_elem:
            lines.append("1.5 2 7 8")
        for i, p in enumerate(POS):
            row = [*map(str, p)] + ([*map(str, COLS[i])] if colors else []) + ([*map(str, uv[i])] if uv_names else [])
            lines.append(" ".join(row))
        for f in faces:
            lines.append(" ".join(map(str, [len(f), *f, 3])))
        body = ("\n".join(lines) + "\n").encode()
    else:
        e = "<" if fmt == "binary_little_endian" else ">"
        out = io.BytesIO()
        if extra_elem:
            out.write(np.array([1.5], e + "f4").tobytes() + bytes([2]) + np.array([7, 8], e + "i4").tobytes())
        for i, p in enumerate(POS):
            out.write(np.asarray(p, e + "f4").tobytes())
            if colors:
                out.write(COLS[i].tobytes())
            if uv_names:
                out.write(np.asarray(uv[i], e + "f4").tobytes())
        it = {"int": "i4", "uint": "u4", "ushort": "u2", "uchar": "u1"}[index_type]
        for f in faces:
            out.write(bytes([len(f)]) + np.asarray(f, e + it).tobytes() + bytes([3]))
        body = out.getvalue()
    path.write_bytes(header + body)
    return path


def fan(faces):
    return [[f[0], f[j], f[j + 1]] for f in faces for j in range(1, len(f) - 1)]


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
def test_ply_formats_agree(tmp_path, fmt):
    d = load(write_ply(tmp_path / "m.ply", fmt))
    assert d.source_format == "ply" and len(d.meshes) == 1
    m = d.meshes[0]
    np.testing.assert_array_equal(m.indices, fan(FACES))  # the quad fan-triangulated
    np.testing.assert_allclose(m.positions, POS)
    np.testing.assert_allclose(m.colors[:, :3], COLS / 255.0)
    np.testing.assert_allclose(m.colors[:, 3], 1.0)
    np.testing.assert_allclose(m.uvs, POS[:, :2] * 0.5)


@pytest.mark.parametrize("uv_names", [("u", "v"), ("texture_u", "texture_v")])
def test_ply_uv_names_and_index_property(tmp_path, uv_names):
    d = load(write_ply(tmp_path / "m.ply", "binary_little_endian", uv_names=uv_names, index_prop="vertex_index",
                       index_type="ushort", colors=False))
    m = d.meshes[0]
    assert m.colors is None and m.triangle_count == 6
    np.testing.assert_allclose(m.uvs, POS[:, :2] * 0.5)


def test_ply_all_triangles_fast_path_equals_mixed(tmp_path):
    tri_faces = fan(FACES)
    a = load(write_ply(tmp_path / "a.ply", "binary_little_endian", faces=tri_faces)).meshes[0]
    b = load(write_ply(tmp_path / "b.ply", "binary_little_endian", faces=FACES)).meshes[0]
    np.testing.assert_array_equal(a.indices, b.indices)


@pytest.mark.parametrize("endian", ["<", ">"])
def test_ply_varying_lists_offset_walk_matches_general_walk(endian):
    """Mixed polygon sizes with scalars before and after the list: the offsets-only walk
    (vectorized gather) and the general record walk read the same values."""
    from bps_assets.readers.ply import _Elem, _walk_binary, _walk_one_list
    e = _Elem("face", 4)
    e.props = [("a", "u2"), ("vertex_indices", "u1", "i4"), ("b", "f4"), ("c", "u1")]
    faces = [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9, 10, 11], [1, 2, 3]]
    buf = b"xx"  # records start at an odd offset
    for k, f in enumerate(faces):
        buf += (np.array([k + 100], endian + "u2").tobytes() + bytes([len(f)]) + np.array(f, endian + "i4").tobytes()
                + np.array([k * 0.5], endian + "f4").tobytes() + bytes([k]))
    mv = memoryview(buf)
    fast, off1 = _walk_one_list("x", mv, 2, e, endian)
    slow, off2 = _walk_binary("x", mv, 2, e, endian)
    assert off1 == off2 == len(buf)
    np.testing.assert_array_equal(fast["vertex_indices"][0], [3, 4, 5, 3])
    np.testing.assert_array_equal(fast["vertex_indices"][1], np.concatenate(faces))
    np.testing.assert_array_equal(slow["vertex_indices"][1], np.concatenate(faces))
    for k in ("a", "b", "c"):
        np.testing.assert_array_equal(fast[k], slow[k])
    np.testing.assert_array_equal(fast["b"], [0, 0.5, 1.0, 1.5])
    with pytest.raises(InputError):
        _walk_one_list("x", memoryview(buf[:-3]), 2, e, endian)


def test_ply_errors(tmp_path):
    p = write_ply(tmp_path / "bad.ply", "binary_little_endian", faces=[[0, 1, 99]])
    with pytest.raises(InputError, match="index 99 out of range"):
        load(p)
    good = write_ply(tmp_path / "g.ply", "binary_little_endian").read_bytes()
    p.write_bytes(good[:-7])
    with pytest.raises(InputError, match="truncated|remain|past"):
        load(p)
    p.write_bytes(good.replace(b"element vertex 5", b"element vertex 999999999"))
    with pytest.raises(InputError, match="need at least"):
        load(p)
    p.write_bytes(b"not a ply")
    with pytest.raises(UnsupportedFormatError):
        load(p)
    p.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\n")
    with pytest.raises(InputError, match="end_header"):
        load(p)
    p.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
                  b"property float z\nend_header\n0 0 0\n1 1\n")
    with pytest.raises(InputError):
        load(p)


def test_ply_fuzzed_bytes_typed_errors(tmp_path):
    rng = random.Random(3)
    for fmt in ("ascii", "binary_big_endian"):
        good = write_ply(tmp_path / "g.ply", fmt).read_bytes()
        for i in range(150):
            d = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                d[rng.randrange(len(d))] = rng.randrange(256)
            if i % 4 == 0:
                d = d[: rng.randrange(len(d))]
            (tmp_path / "f.ply").write_bytes(bytes(d))
            try:
                load(tmp_path / "f.ply")
            except BpsError as e:
                assert "unexpected" not in str(e), str(e)


def test_ply_large_binary_is_vectorized(tmp_path):
    n = 200
    ys, xs = np.mgrid[0:n + 1, 0:n + 1]
    pos = np.stack([xs.ravel(), ys.ravel(), np.zeros(xs.size)], 1).astype("<f4")
    i = (ys[:-1, :-1] * (n + 1) + xs[:-1, :-1]).ravel()
    quads = np.stack([i, i + 1, i + n + 2, i + n + 1], 1).astype("<i4")
    rec = np.zeros(len(quads), [("n", "u1"), ("v", "<i4", (4,))])
    rec["n"], rec["v"] = 4, quads
    head = (f"ply\nformat binary_little_endian 1.0\nelement vertex {len(pos)}\nproperty float x\nproperty float y\n"
            f"property float z\nelement face {len(quads)}\nproperty list uchar int vertex_indices\nend_header\n")
    p = tmp_path / "big.ply"
    p.write_bytes(head.encode() + pos.tobytes() + rec.tobytes())
    t = time.perf_counter()
    d = load(p)
    dt = time.perf_counter() - t
    assert d.triangle_count == 2 * n * n
    assert dt < 2.0  # generous: a per-face Python loop over 40K quads would still pass, see benchmarks


# ---------------------------------------------------------------------------------------------
# OBJ
OBJ = """\
# a test OBJ
mtllib scene.mtl
o first
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
vn 0 0 1
usemtl red
f 1/1/1 2/2/1 3/3/1 4/4/1
g second
usemtl textured
v 0 0 2 0.5 0.25 1.0
v 1 0 2 0.5 0.25 1.0
v 1 1 2 0.5 0.25 1.0
f -3/1 -2/2 -1/3
f 5//1 6//1 7//1
l 1 2 3
usemtl missing_in_mtl
f 1 2 3
"""
MTL = """\
newmtl red
Kd 1 0 0
d 0.5
newmtl textured
Kd 0.2 0.4 0.6
map_Kd -s 2 2 1 -o 0.5 0 0 tex/my tex.png
"""


def write_obj(tmp_path: Path, obj=OBJ, mtl=MTL, with_texture=True) -> Path:
    (tmp_path / "scene.obj").write_text(obj)
    if mtl is not None:
        (tmp_path / "scene.mtl").write_text(mtl)
    if with_texture:
        from PIL import Image

        (tmp_path / "tex").mkdir(exist_ok=True)
        Image.fromarray(np.full((4, 4, 3), 77, np.uint8)).save(tmp_path / "tex" / "my tex.png")
    return tmp_path / "scene.obj"


def test_obj_groups_materials_textures(tmp_path):
    d = load(write_obj(tmp_path))
    assert d.source_format == "obj"
    # one Mesh per (group, material): (first, red), (second, textured), (second, missing_in_mtl)
    assert d.triangle_count == 2 + 2 + 1 and [m.triangle_count for m in d.meshes] == [2, 2, 1]
    assert d.stats["skipped_lines"] == 2 and d.stats["unknown_materials"] == 1
    first, second_t, last = d.meshes
    # quad fan-triangulated, vt/vn kept per corner
    assert first.name == "first" and first.triangle_count == 2
    np.testing.assert_allclose(first.positions[first.indices], [[[0, 0, 0], [1, 0, 0], [1, 1, 0]],
                                                                [[0, 0, 0], [1, 1, 0], [0, 1, 0]]])
    np.testing.assert_allclose(first.normals, [[0, 0, 1]] * 4)
    red = d.materials[first.material]
    np.testing.assert_allclose(red.base_color, [1, 0, 0, 0.5])
    assert red.alpha_mode == "BLEND" and red.texture is None
    # second group: negative indices = the three vertices just defined; vertex colours
    assert second_t.name == "second"
    tex_mat = d.materials[second_t.material]
    np.testing.assert_allclose(tex_mat.base_color[:3], [0.2, 0.4, 0.6])
    assert d.textures[tex_mat.texture].rgba.shape == (4, 4, 4)
    np.testing.assert_allclose(second_t.positions[second_t.indices[0]], [[0, 0, 2], [1, 0, 2], [1, 1, 2]])
    np.testing.assert_allclose(second_t.colors[0], [0.5, 0.25, 1.0, 1.0])
    # map_Kd -s 2 2 -o 0.5 0: uv' = uv * 2 + (0.5, 0), applied to the UVs
    uv = second_t.uvs[second_t.indices[0]]
    np.testing.assert_allclose(uv, [[0.5, 0], [2.5, 0], [2.5, 2]])
    assert last.material is not None and d.materials[last.material].name == "missing_in_mtl"


def test_obj_missing_mtl_is_counted_not_fatal(tmp_path):
    d = load(write_obj(tmp_path, mtl=None, with_texture=False))
    assert d.triangle_count == 5 and d.stats["missing_mtllib"] == 1


def test_obj_errors(tmp_path):
    with pytest.raises(InputError, match="index 9 out of range"):
        load(write_obj(tmp_path, obj="v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 9\n", mtl=None, with_texture=False))
    with pytest.raises(InputError, match="index -4 out of range"):
        load(write_obj(tmp_path, obj="v 0 0 0\nv 1 0 0\nv 0 1 0\nf -1 -2 -4\n", mtl=None, with_texture=False))
    with pytest.raises(InputError, match="not an integer"):
        load(write_obj(tmp_path, obj="v 0 0 0\nf 1 a 1\n", mtl=None, with_texture=False))
    with pytest.raises(InputError, match="non-numeric"):
        load(write_obj(tmp_path, obj="v 0 zero 0\n", mtl=None, with_texture=False))
    with pytest.raises(InputError, match="path traversal"):
        load(write_obj(tmp_path, obj="mtllib ../outside.mtl\nv 0 0 0\n", mtl=None, with_texture=False))
    p = write_obj(tmp_path, obj="mtllib scene.mtl\nusemtl a\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n",
                  mtl="newmtl a\nmap_Kd /etc/passwd\n", with_texture=False)
    with pytest.raises(InputError, match="absolute"):
        load(p)


def test_obj_no_faces_counts_points(tmp_path):
    d = load(write_obj(tmp_path, obj="v 0 0 0\nv 1 1 1\np 1 2\n", mtl=None, with_texture=False))
    assert d.triangle_count == 0 and d.stats["skipped_points"] == 2


@pytest.mark.parametrize("form", ["{v}", "{v}/{t}", "{v}//{n}", "{v}/{t}/{n}", "mixed", "trailing"])
def test_obj_face_forms_agree(tmp_path, form):
    """Every corner form (parsed in one step when uniform, corner by corner when mixed)
    gives the same triangles."""
    head = "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\nvn 0 0 1\n"
    forms = {"mixed": ["{v}", "{v}/{t}", "{v}//{n}", "{v}/{t}/{n}"], "trailing": ["{v}/{t}/"]}.get(form, [form])
    lines = []
    for k, face in enumerate([[1, 2, 3, 4], [1, 3, 4]]):
        lines.append("f " + " ".join(forms[(k + j) % len(forms)].format(v=i, t=i, n=1) for j, i in enumerate(face)))
    d = load(write_obj(tmp_path, obj=head + "\n".join(lines) + "\n", mtl=None, with_texture=False))
    m = d.meshes[0]
    np.testing.assert_allclose(m.positions[m.indices].reshape(-1, 3),
                               np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 1, 0], [0, 1, 0],
                                         [0, 0, 0], [1, 1, 0], [0, 1, 0]], float))


def test_obj_fuzzed_bytes_typed_errors(tmp_path):
    rng = random.Random(5)
    good = write_obj(tmp_path, with_texture=False).read_bytes()
    for i in range(300):
        d = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(len(d))] = rng.choice(b"0123456789-/ \n#vtnfgo.\\x")
        if i % 5 == 0:
            d = d[: rng.randrange(len(d))]
        p = tmp_path / "scene.obj"
        p.write_bytes(bytes(d))
        try:
            load(p, textures=False)
        except BpsError as e:
            assert "unexpected" not in str(e), str(e)
