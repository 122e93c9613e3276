"""NAVM files: save/load round trip, refusal to overwrite, typed errors on corrupt files."""
from __future__ import annotations


import numpy as np
import pytest

from bps_assets.container import write_container
from bps_assets.errors import CorruptFileError, FormatVersionError, InputError, OutputExistsError
from bps_assets.nav import NavSettings, build_navmesh, load_navmesh
from bps_assets.nav.grid import is_navmesh_file
from bps_assets.nav.reference_scenes import house


@pytest.fixture(scope="module")
def nav():
    return build_navmesh(house().arrays(), NavSettings(agent_radius=0.15))


@pytest.fixture()
def saved(nav, tmp_path):
    p = tmp_path / "house.navmesh.bps"
    nav.save(p)
    return p


def test_round_trip(nav, saved):
    assert is_navmesh_file(saved)
    back = load_navmesh(saved)
    for name in ("height", "neighbors", "island", "island_area", "island_radius_m", "origin"):
        a, b = getattr(nav, name), getattr(back, name)
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    assert back.settings == nav.settings and back.settings.agent_radius == 0.15
    assert back.method == "voxel" and back.num_islands == nav.num_islands
    pts = nav.sample_navigable_point(20, seed=0)
    assert np.array_equal(nav.geodesic_distance(pts[:10], pts[10:]), back.geodesic_distance(pts[:10], pts[10:]))
    ends = pts + np.random.default_rng(0).normal(0, 0.2, pts.shape) * [1, 0, 1]
    assert np.array_equal(nav.try_step(pts, ends), back.try_step(pts, ends))
    from bps_assets.container import read_header

    h, secs, kind = read_header(saved)
    assert kind == "NAVM" and h["format"] == "bps-navmesh" and h["version"] == 1
    assert h["shape"] == list(nav.shape) and abs(h["navigable_area"] - nav.navigable_area) < 1e-6
    assert set(secs) == {"height", "neighbors", "island", "island_area", "island_radius"}
    assert "source_file" not in h and back.source_file is None   # not known: not written


def test_source_file_round_trips(nav, tmp_path):
    """The file a navmesh was made from (path, sha256) is written as ``source_file`` and read back."""
    rec = {"path": "/data/apt_0/mesh.ply", "sha256": "ab" * 32}
    p = tmp_path / "src.navmesh.bps"
    nav.source_file = rec
    try:
        nav.save(p)
    finally:
        nav.source_file = None   # the module's fixture is shared
    assert load_navmesh(p).source_file == rec


def test_refuses_to_overwrite(nav, saved):
    before = saved.read_bytes()
    with pytest.raises(OutputExistsError):
        nav.save(saved)
    assert saved.read_bytes() == before
    nav.save(saved, overwrite=True)
    assert load_navmesh(saved).num_spans == nav.num_spans


def test_truncated_file(saved):
    data = saved.read_bytes()
    saved.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match="truncated|outside"):
        load_navmesh(saved)


def test_flipped_byte_is_a_checksum_error(saved):
    from bps_assets.container import read_header

    sec = read_header(saved)[1]["height"]
    data = bytearray(saved.read_bytes())
    data[sec.offset + sec.stored_length // 2] ^= 0xFF
    saved.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as e:
        load_navmesh(saved)
    assert str(saved) in str(e.value)


def test_missing_file_and_wrong_kind(tmp_path):
    with pytest.raises(InputError):
        load_navmesh(tmp_path / "nope.navmesh.bps")
    p = tmp_path / "scene.bps"
    write_container(p, "SCEN", {}, {"positions": np.zeros((3, 3), np.float32)})
    with pytest.raises(CorruptFileError, match="NAVM"):
        load_navmesh(p)


def _rewrite(nav, path, header=None, **arrays):
    h = nav.header()
    h.update(header or {})
    a = {"height": nav.height, "neighbors": nav.neighbors, "island": nav.island,
         "island_area": nav.island_area, "island_radius": nav.island_radius_m}
    a.update(arrays)
    a = {k: v for k, v in a.items() if v is not None}
    write_container(path, "NAVM", h, a, overwrite=True)
    return path


def test_bad_contents_are_typed_errors(nav, tmp_path):
    p = tmp_path / "bad.navmesh.bps"
    with pytest.raises(FormatVersionError):
        load_navmesh(_rewrite(nav, p, {"version": 2}))
    with pytest.raises(CorruptFileError, match="format"):
        load_navmesh(_rewrite(nav, p, {"format": "other"}))
    with pytest.raises(CorruptFileError, match="neighbors"):
        bad = nav.neighbors.copy()
        bad[0, 0, 0, 0] = 100
        load_navmesh(_rewrite(nav, p, neighbors=bad))
    with pytest.raises(CorruptFileError, match="island"):
        bad = nav.island.copy()
        bad[bad >= 0] = 1000
        load_navmesh(_rewrite(nav, p, island=bad))
    with pytest.raises(CorruptFileError, match="height"):
        load_navmesh(_rewrite(nav, p, height=nav.height[:, :-1]))
    with pytest.raises(CorruptFileError, match="island_radius"):
        load_navmesh(_rewrite(nav, p, island_radius=None))
    with pytest.raises(CorruptFileError, match="header"):
        load_navmesh(_rewrite(nav, p, {"cell_size": "x"}))
