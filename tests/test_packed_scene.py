"""convert_scene -> read_packed_scene round trip, header contract, damage detection."""
from __future__ import annotations

import os

import numpy as np
import pytest

from bps_assets.container import Container, write_container
from bps_assets.errors import CorruptFileError, OutputExistsError
from bps_assets.packed_scene import (ConvertOptions, convert_scene, decode_texture_level,
                                     process_geometry, read_packed_scene)
from bps_assets.transforms import merge
from bps_assets.transforms import frame as t_frame
from packed_scene_fixtures import make_doc


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    d = tmp_path_factory.mktemp("packed")
    path = d / "scene.bps"
    res = convert_scene(make_doc(50, z_up=True, textures=2, tex_size=256), path,
                        ConvertOptions(dataset="gibson", max_texture=128), scene_id="scene")
    return path, res


def test_round_trip_reproduces_geometry_within_the_bound(packed, tmp_path):
    path, res = packed
    s = read_packed_scene(path)
    # same processing in memory, keeping the source of every triangle
    doc = make_doc(50, z_up=True, textures=2, tex_size=256)
    ref = merge(t_frame.frame(t_frame.Options("gibson"))(make_doc(50, z_up=True, textures=2, tex_size=256)))
    g = process_geometry(doc, ConvertOptions(dataset="gibson"))
    np.testing.assert_array_equal(s.positions, g.positions)
    np.testing.assert_array_equal(s.indices, g.indices)
    np.testing.assert_array_equal(s.uvs, g.uvs)
    np.testing.assert_array_equal(s.tri_material, g.tri_material)
    err = np.linalg.norm(s.positions[s.indices].astype(np.float64)
                         - ref.positions[ref.indices[g.tri_source]], axis=2)
    assert err.max() <= 1e-3
    assert err.max() <= s.header["quantization"]["positions"]["error_bound"]
    assert s.header["quantization"]["positions"]["measured_max_error"] == pytest.approx(err.max(), rel=1e-6)
    # every source triangle is there (none were bad), materials/colours carried
    assert sorted(g.tri_source.tolist()) == list(range(ref.triangle_count))
    assert np.array_equal(s.tri_material, ref.tri_material[g.tri_source])
    assert s.colors is not None and s.colors.dtype == np.uint8
    plain = s.tri_material == 1
    assert (s.colors[s.indices[plain]] == [51, 128, 230, 255]).all()
    # habitat frame: the Z-up grid's height went to +Y; its y went to -Z
    assert s.header["frame"]["matrix"] == [[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]]
    assert s.positions[:, 2].max() <= 0.001 and s.positions[:, 2].min() < -9


def test_header_and_dtypes_follow_the_contract(packed):
    path, res = packed
    s = read_packed_scene(path)
    h = s.header
    for key in ("scene_format_version", "scene_id", "source", "frame", "bounds", "counts",
                "quantization", "textures", "converter"):
        assert key in h
    assert h["scene_id"] == "scene"
    assert h["counts"]["triangles"] == len(s.indices) == res.stats["triangles_out"]
    assert h["counts"]["vertices"] == len(s.positions)
    np.testing.assert_allclose(h["bounds"]["min"], s.positions.min(0))
    np.testing.assert_allclose(h["bounds"]["max"], s.positions.max(0))
    assert h["converter"]["settings"]["max_texture"] == 128
    want = {"positions": (np.float32, 3), "indices": (np.uint32, 3), "uvs": (np.float32, 2),
            "colors": (np.uint8, 4), "tri_material": (np.int32, None), "material_color": (np.float32, 4),
            "material_texture": (np.int32, None), "tex_blocks": (np.uint8, None), "tex_levels": (np.int64, 6),
            "chunk_tris": (np.int64, 2), "chunk_spheres": (np.float32, 4)}
    for name, (dt, cols) in want.items():
        a = getattr(s, name)
        assert a.dtype == dt, name
        assert (a.ndim == 1) if cols is None else (a.shape[1] == cols), name
    # only the textured material's texture is stored; PSNR recorded per texture
    assert s.material_texture.tolist() == [0, -1]
    assert len(h["textures"]) == 1
    assert s.tex_levels[0, 2:4].tolist() == [128, 128] and len(s.tex_levels) == 8
    img = decode_texture_level(s, 0, 0)
    assert img.shape == (128, 128, 4)
    # the recorded PSNR is the stored mip 0 against the resized source
    from bps_assets.transforms import textures as tx
    from packed_scene_fixtures import natural_image
    src0 = tx.mip_chain(natural_image(256, 0), 128)[0]
    assert h["textures"][0]["psnr_db"] == pytest.approx(tx.psnr(img[..., :3], src0[..., :3]), abs=1e-3)
    # chunk spheres contain their triangles (in the file's float32 positions)
    for (first, count), sph in zip(s.chunk_tris, s.chunk_spheres):
        c = s.positions[s.indices[first:first + count]].reshape(-1, 3)
        assert (np.linalg.norm(c - sph[:3], axis=1) <= sph[3]).all()


def test_subset_read_and_torch(packed):
    path, _ = packed
    s = read_packed_scene(path, sections=["positions", "indices"])
    assert s.uvs is None and s.tex_blocks is None and s.positions is not None
    t = s.to_torch("cpu")
    assert set(t) == {"positions", "indices"}
    import torch
    assert t["indices"].dtype == torch.int32 and t["positions"].dtype == torch.float32
    assert torch.equal(t["indices"].long(), torch.from_numpy(s.indices.astype(np.int64)))
    from bps_assets.errors import ConfigError
    with pytest.raises(ConfigError):   # a typed error since issue 30 (was ValueError)
        read_packed_scene(path, sections=["normals"])


def test_refuses_to_overwrite_and_leaves_no_partial_file(packed, tmp_path):
    path, _ = packed
    before = path.read_bytes()
    with pytest.raises(OutputExistsError):
        convert_scene(make_doc(10), path)
    assert path.read_bytes() == before
    dst = tmp_path / "x.bps"
    convert_scene(make_doc(10), dst)
    convert_scene(make_doc(12), dst, overwrite=True)
    assert read_packed_scene(dst).header["counts"]["triangles_in"] > 0
    assert sorted(os.listdir(tmp_path)) == ["x.bps"]  # no temp files left behind


def test_flipped_byte_names_the_section(packed, tmp_path):
    path, _ = packed
    with Container(path) as c:
        sec = c.sections["indices"]
    data = bytearray(path.read_bytes())
    data[sec.offset + sec.stored_length // 2] ^= 0x40
    bad = tmp_path / "flip.bps"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as e:
        read_packed_scene(bad)
    assert e.value.section == "indices" and "indices" in str(e.value)


def test_truncated_file_names_the_section(packed, tmp_path):
    path, _ = packed
    with Container(path) as c:
        last = max(c.sections.values(), key=lambda s: s.offset)
    bad = tmp_path / "trunc.bps"
    bad.write_bytes(path.read_bytes()[: last.offset + 3])
    with pytest.raises(CorruptFileError) as e:
        read_packed_scene(bad)
    assert e.value.section == last.name
    bad.write_bytes(path.read_bytes()[:20])
    with pytest.raises(CorruptFileError):
        read_packed_scene(bad)


def _rewrite(path, dst, **changes):
    with Container(path) as c:
        arrays = c.read_many()
        header = dict(c.header)
    arrays.update(changes.pop("arrays", {}))
    header.update(changes)
    write_container(dst, "SCEN", header, arrays)


def test_valid_checksums_but_bad_contents_are_refused(packed, tmp_path):
    path, _ = packed
    with Container(path) as c:
        idx = c.read("indices").copy()
        nv = c.sections["positions_q"].shape[0]
        lv = c.read("tex_levels").copy()
    idx[5, 1] = nv
    _rewrite(path, tmp_path / "a.bps", arrays={"indices": idx})
    with pytest.raises(CorruptFileError) as e:
        read_packed_scene(tmp_path / "a.bps")
    assert e.value.section == "indices"
    lv[0, 4] = 10**9
    _rewrite(path, tmp_path / "b.bps", arrays={"tex_levels": lv})
    with pytest.raises(CorruptFileError) as e:
        read_packed_scene(tmp_path / "b.bps")
    assert e.value.section == "tex_levels"
    with Container(path) as c:
        cm = c.read("chunk_meshlets").copy()
    cm[-1, 1] += 1
    _rewrite(path, tmp_path / "e.bps", arrays={"chunk_meshlets": cm})
    with pytest.raises(CorruptFileError) as e:
        read_packed_scene(tmp_path / "e.bps")
    assert e.value.section == "chunk_meshlets"
    _rewrite(path, tmp_path / "c.bps", arrays={"indices": idx.astype(np.int64)})
    with pytest.raises(CorruptFileError, match="dtype"):
        read_packed_scene(tmp_path / "c.bps")
    _rewrite(path, tmp_path / "d.bps", quantization={"positions": {"dtype": "u2"}})
    with pytest.raises(CorruptFileError, match="quantization"):
        read_packed_scene(tmp_path / "d.bps")


def test_wrong_kind_is_refused(tmp_path):
    write_container(tmp_path / "nav.bps", "NAVM", {"x": 1}, {"a": np.zeros(3, np.float32)})
    with pytest.raises(CorruptFileError, match="NAVM"):
        read_packed_scene(tmp_path / "nav.bps")


def test_empty_scene_is_a_typed_error_and_writes_nothing(tmp_path):
    """Nothing to render or navigate is an error, not an empty scene file (issue 13 item 5)."""
    from bps_assets.errors import EmptySceneError
    from bps_assets.scene import SceneDocument
    with pytest.raises(EmptySceneError, match="contains no triangle mesh"):
        convert_scene(SceneDocument(), tmp_path / "e.bps", scene_id="e")
    assert not (tmp_path / "e.bps").exists()
