"""Issue 14 items 4-6 and issue 15's container errors: bombs, wrapping ranges, typed errors.

Each attack is built by tests/hostile_cases.py; tests/test_hostile_corpus.py runs them all
again under a 1 GiB address-space limit. Here: the precise error each one gets.
"""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from bps_assets import container as C
from bps_assets.errors import (ConfigError, CorruptFileError, InputError, MissingSectionError,
                               ResourceLimitError)
from bps_assets.packed_scene import read_packed_scene
from bps_assets.pipeline.verify import verify_manifest
from bps_assets.readers.guard import read_limited
from hostile_cases import (gltf_with_data_uri, gzip_bomb, manifest_over, small_scene, with_bomb_section,
                           wrapping_ranges)

GIB = 1 << 30


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return small_scene(tmp_path_factory.mktemp("hostile") / "s.bps")


def _deep_problems(root, files):
    rep = verify_manifest(manifest_over(root, files), deep=True, jobs=1)
    return [p for s in rep.scenes for f in s.files for p in f.problems]


def test_section_declared_beyond_the_headers_counts_is_refused_before_decoding(scene, tmp_path):
    # 4 GiB of tex_blocks in a 131 KB file: the header's textures allow a few KB
    bomb = with_bomb_section(scene, tmp_path / "tex.bps", "tex_blocks", 4 * GIB)
    assert bomb.stat().st_size < 200_000
    with pytest.raises(CorruptFileError, match="header's counts allow") as e:
        read_packed_scene(bomb)
    assert e.value.section == "tex_blocks"
    probs = _deep_problems(tmp_path, {"s": {"scene": (bomb, "SCEN")}})
    assert len(probs) == 1 and "'tex_blocks'" in probs[0] and "counts allow" in probs[0]


def test_unknown_section_bomb_is_bounded_by_the_scene(scene, tmp_path):
    bomb = with_bomb_section(scene, tmp_path / "x.bps", "extra_data", 4 * GIB)
    with pytest.raises(CorruptFileError, match="counts allow") as e:
        read_packed_scene(bomb)
    assert e.value.section == "extra_data"
    # one just inside the bound is a valid (ignored) section, and deep verify streams it
    with C.Container(scene) as c:
        room = sum(s.raw_length for s in c.sections.values())
    ok = with_bomb_section(scene, tmp_path / "y.bps", "extra_data", room)
    assert read_packed_scene(ok).indices is not None
    assert _deep_problems(tmp_path, {"y": {"scene": (ok, "SCEN")}}) == []


@pytest.mark.parametrize("content_size", [True, False])
def test_zstd_frame_larger_than_its_table_entry_is_cut_off(scene, tmp_path, content_size):
    # the table says 1000 bytes; the frame inflates to 256 MiB (zstandard's one-shot
    # decompress would allocate the frame's own content size)
    bomb = with_bomb_section(scene, tmp_path / "f.bps", "extra_data", 256 << 20, table_bytes=1000,
                             content_size=content_size)
    with C.Container(bomb) as c:
        with pytest.raises(CorruptFileError, match="frame declares|decompress") as e:
            c.read("extra_data")
        assert e.value.section == "extra_data"
        with pytest.raises(CorruptFileError, match="frame declares|more than"):
            c.verify(deep=True)


@pytest.mark.parametrize("section", ["chunk_tris", "meshlet_tris", "chunk_meshlets", "tex_levels"])
def test_int64_wrapping_ranges_are_refused_by_reader_and_deep_verify(scene, tmp_path, section):
    path = wrapping_ranges(scene, tmp_path)[section]
    with pytest.raises(CorruptFileError) as e:
        read_packed_scene(path)
    assert e.value.section == section
    probs = _deep_problems(tmp_path, {"w": {"scene": (path, "SCEN")}})
    assert len(probs) == 1 and f"'{section}'" in probs[0]


def test_header_counts_must_match_the_sections(scene, tmp_path):
    from hostile_cases import rewrite

    with C.Container(scene) as c:
        counts = dict(c.header["counts"])
    bad = rewrite(scene, tmp_path / "c.bps", header={"counts": {**counts, "vertices": counts["vertices"] + 1}})
    with pytest.raises(CorruptFileError, match="counts say") as e:
        read_packed_scene(bad)
    assert e.value.section == "positions_q"
    bad = rewrite(scene, tmp_path / "d.bps", header={"counts": {**counts, "meshlets": counts["triangles"] + 1}})
    with pytest.raises(CorruptFileError, match="counts.meshlets"):
        read_packed_scene(bad)


def test_gzip_is_read_in_a_stream_with_a_running_limit(tmp_path):
    small = tmp_path / "ok.json.gz"
    small.write_bytes(gzip.compress(json.dumps({"episodes": []}).encode()))
    assert json.loads(read_limited(small, 2 * GIB)) == {"episodes": []}
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", 64 << 20)
    assert bomb.stat().st_size < 200_000
    with pytest.raises(ResourceLimitError, match=f"more than {32 << 20} bytes"):
        read_limited(bomb, 32 << 20)
    trunc = tmp_path / "t.json.gz"
    trunc.write_bytes(small.read_bytes()[:-5])
    with pytest.raises(InputError, match="bad gzip"):
        read_limited(trunc, 1 << 20)


def test_gltf_data_uri_longer_than_its_byte_length_is_refused_before_decoding(tmp_path):
    from bps_assets.readers import load

    p = gltf_with_data_uri(tmp_path / "a.gltf", 4 << 20)
    with pytest.raises(InputError, match="refused before decoding"):
        load(p)
    assert load(gltf_with_data_uri(tmp_path / "b.gltf", 48)).triangle_count == 1


def test_writer_misuse_is_a_typed_error_naming_the_file(tmp_path):
    p = tmp_path / "w.bps"
    a = {"x": np.zeros(3, np.float32)}
    cases = [
        (dict(kind="scen"), "4 upper-case"),
        (dict(header={"sections": 1}), "reserved"),
        (dict(arrays={"../x": a["x"]}), "bad section name"),
        (dict(arrays={"x": np.zeros(3, np.complex64)}), "not storable"),
        (dict(specs={"x": C.SectionSpec(codec="lz4")}), "unknown codec"),
        (dict(specs={"x": C.SectionSpec(filter="delta+shuffle")}), "does not apply"),
        (dict(specs={"x": C.SectionSpec(filter="bogus")}), "filter"),
    ]
    for kw, msg in cases:
        args = dict(kind="SCEN", header={}, arrays=a, specs=None) | kw
        with pytest.raises(ConfigError, match=msg) as e:
            C.write_container(p, args["kind"], args["header"], args["arrays"], args["specs"])
        assert str(p) in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing partial


def test_missing_requested_section_is_its_own_error(scene):
    with C.Container(scene) as c:
        with pytest.raises(MissingSectionError, match="has no section 'nope' \\(it has: .*indices") as e:
            c.read("nope")
    assert e.value.section == "nope" and not isinstance(e.value, CorruptFileError)


def test_navmesh_island_tables_are_bounded_by_the_grid(tmp_path):
    from pathlib import Path

    from bps_assets.nav import load_navmesh
    from bps_assets.nav.detour import import_detour

    src = Path(__file__).resolve().parents[2] / "shared" / "assets" / "habitat_test_scenes_navmesh" / \
        "van-gogh-room.navmesh"
    if not src.exists():
        pytest.skip("shared assets absent")
    p = tmp_path / "n.navmesh.bps"
    import_detour(src).save(p)
    bomb = with_bomb_section(p, tmp_path / "b.navmesh.bps", "island_area", 4 * GIB)
    with pytest.raises(CorruptFileError, match="counts allow") as e:
        load_navmesh(bomb)
    assert e.value.section == "island_area"


@pytest.mark.parametrize("field, value", [("format", []), ("format", {"a": 1}), ("format", None), ("format", "dxt5"),
                                          ("width", "32"), ("levels", [1]), ("height", None)])
def test_texture_header_fields_of_another_kind_are_corrupt_file_errors(scene, tmp_path, field, value):
    """docs/FORMAT.md 5.5: textures[i] fields out of their kind are a CorruptFileError naming the
    header field, in read, deep verify and `bps-assets info` (a list / object format once
    raised TypeError: unhashable type)."""
    from click.testing import CliRunner

    from cli.main import main
    from hostile_cases import rewrite

    with C.Container(scene) as c:
        texs = json.loads(json.dumps(c.header["textures"]))
    texs[0][field] = value
    bad = rewrite(scene, tmp_path / "t.bps", header={"textures": texs})
    with pytest.raises(CorruptFileError, match=rf"header: textures\[0\]\.{field}"):
        read_packed_scene(bad)
    assert any(f"textures[0].{field}" in p for p in _deep_problems(tmp_path, {"s": {"scene": (bad, "SCEN")}}))
    r = CliRunner().invoke(main, ["info", str(bad)])
    assert r.exit_code == 2 and f"textures[0].{field}" in r.output and "Traceback" not in r.output, r.output
