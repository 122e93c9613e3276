"""Every settings-block layout habitat-sim has written, and unknown ones, built from the shared
files (same tiles, each settings block), read by the MSET reader and reported by `nav info`."""
from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.nav import detour
from bps_assets.nav.detour import NavFormatWarning, read_detour_navmesh
from cli.main import main

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
VANGOGH = ASSETS / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"
APT0 = ASSETS / "replicacad" / "navmeshes" / "apt_0.navmesh"
MESH2 = ASSETS / "navmesh" / "go-detour" / "mesh2.bin"

pytestmark = pytest.mark.skipif(not ASSETS.is_dir(), reason="../shared/assets absent")

FLOATS = (0.05, 0.2, 1.5, 0.18, 0.2, 45.0, 20.0, 20.0, 12.0, 1.3, 6.0, 6.0, 1.0)


def tiles_of(path: Path) -> tuple[bytes, bytes, list[tuple[int, bytes]]]:
    """(set header 40 bytes, settings block, [(ref, tile bytes)]) of a 32-bit-record set."""
    data = path.read_bytes()
    n = struct.unpack_from("<i", data, 8)[0]
    off = 40
    if data[40 + 8: 40 + 12] != b"VAND":  # habitat v2: a 56-byte block first
        off = 96
    block = data[40:off]
    out = []
    for _ in range(n):
        ref, size = struct.unpack_from("<Ii", data, off)
        out.append((ref, data[off + 8: off + 8 + size]))
        off += 8 + size
    assert off == len(data)
    return data[:40], block, out


def make_set(path: Path, src: Path, block: bytes, version: int = 2, ref64: bool = False) -> Path:
    head, _, tiles = tiles_of(src)
    out = bytearray(head)
    struct.pack_into("<i", out, 4, version)
    out += block
    for ref, t in tiles:
        out += (struct.pack("<Qi4x", ref, len(t)) if ref64 else struct.pack("<Ii", ref, len(t))) + t
    path.write_bytes(bytes(out))
    return path


def block_3bool(pad: int = 118) -> bytes:  # habitat-sim 2022-10 .. 2023-05
    return struct.pack("<13f3BB", *FLOATS, 1, 0, 1, pad)


def block_4bool(static: int = 1) -> bytes:  # habitat-sim 2023-05 on
    return struct.pack("<13f4B", *FLOATS, 1, 0, 1, static)


def same_tiles(a, b):
    assert len(a.tiles) == len(b.tiles)
    for ta, tb in zip(a.tiles, b.tiles):
        assert ta.ref == tb.ref
        assert np.array_equal(ta.vertices, tb.vertices)
        assert np.array_equal(ta.poly_verts, tb.poly_verts)
        assert np.array_equal(ta.detail_tris, tb.detail_tris)


@pytest.mark.parametrize("src", [VANGOGH, APT0, MESH2], ids=lambda p: p.name)
@pytest.mark.parametrize("ref64", [False, True])
def test_known_layouts_are_recognised_and_parsed(tmp_path, src, ref64):
    ref = read_detour_navmesh(src)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NavFormatWarning)  # known layouts warn about nothing
        m3 = read_detour_navmesh(make_set(tmp_path / "b3.navmesh", src, block_3bool(), ref64=ref64))
        m4 = read_detour_navmesh(make_set(tmp_path / "b4.navmesh", src, block_4bool(), ref64=ref64))
        m1 = read_detour_navmesh(make_set(tmp_path / "v1.navmesh", src, b"", 1, ref64=ref64))
        m0 = read_detour_navmesh(make_set(tmp_path / "v2none.navmesh", src, b"", 2, ref64=ref64))
    for m in (m3, m4, m1, m0):
        same_tiles(ref, m)
        assert m.tile_ref_bits == (64 if ref64 else 32) and not m.warnings
    assert m3.settings_layout == detour.LAYOUT_3BOOL and m3.settings_bytes == 56
    assert "includeStaticObjects" not in m3.settings  # the 56th byte is padding there
    assert m4.settings_layout == detour.LAYOUT_4BOOL and m4.settings["includeStaticObjects"] is True
    for m in (m3, m4):
        assert m.settings["agentRadius"] == pytest.approx(0.18)
        assert m.settings["filterLedgeSpans"] is False and m.settings["filterLowHangingObstacles"] is True
        assert m.nav_settings().agent_radius == pytest.approx(0.18)
    assert m1.settings is None and m0.settings is None and m0.settings_bytes == 0


@pytest.mark.parametrize("n", [4, 52, 60, 64, 200, 1000])
def test_unknown_layouts_are_skipped_with_a_warning(tmp_path, n):
    ref = read_detour_navmesh(VANGOGH)
    rng = np.random.default_rng(n)
    block = struct.pack("<13f", *FLOATS)[:n] + bytes(rng.integers(0, 256, max(0, n - 52), np.uint8))
    p = make_set(tmp_path / f"u{n}.navmesh", VANGOGH, block)
    with pytest.warns(NavFormatWarning, match=f"unknown layout of {n} bytes"):
        m = read_detour_navmesh(p)
    same_tiles(ref, m)
    assert m.settings is None and m.settings_layout is None and m.settings_bytes == n
    assert len(m.warnings) == 1 and str(p) in m.warnings[0]
    # the agent then comes from the tile headers
    assert m.nav_settings().agent_radius == pytest.approx(ref.tiles[0].walkable_radius)


def test_56_bytes_that_are_not_settings_are_skipped(tmp_path):
    block = struct.pack("<13f4B", float("nan"), *FLOATS[1:], 1, 1, 1, 0)
    with pytest.warns(NavFormatWarning, match="not habitat NavMeshSettings"):
        m = read_detour_navmesh(make_set(tmp_path / "nan.navmesh", APT0, block))
    assert m.settings is None and m.poly_count == read_detour_navmesh(APT0).poly_count


def test_replicacad_v3_padding_byte_reads(tmp_path):
    # the failure reported from ReplicaCAD v3 files: "includeStaticObjects = 118 is not a bool"
    m = read_detour_navmesh(make_set(tmp_path / "v3_sc0.navmesh", APT0, block_3bool(118)))
    assert m.settings_layout == detour.LAYOUT_3BOOL and m.settings["cellSize"] == pytest.approx(0.05)


def test_nav_info_reports_layout_settings_and_warnings(tmp_path):
    runner = CliRunner()
    p4 = make_set(tmp_path / "b4.navmesh", VANGOGH, block_4bool(0))
    r = runner.invoke(main, ["nav", "info", str(p4), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    det = json.loads(r.output)["detour"]
    assert det["settings_layout"] == detour.LAYOUT_4BOOL and det["settings_bytes"] == 56
    assert det["settings"]["agentRadius"] == 0.18 and det["settings"]["includeStaticObjects"] is False
    assert det["set_version"] == 2 and det["tiles"] == 1 and det["warnings"] == []
    p3 = make_set(tmp_path / "b3.navmesh", VANGOGH, block_3bool())
    r = runner.invoke(main, ["nav", "info", str(p3)], catch_exceptions=False)
    assert r.exit_code == 0 and "layout " + detour.LAYOUT_3BOOL in r.output
    assert "agentRadius=0.18" in r.output
    pu = make_set(tmp_path / "u.navmesh", VANGOGH, bytes(72))
    r = runner.invoke(main, ["nav", "info", str(pu)], catch_exceptions=False)
    assert r.exit_code == 0 and "layout unknown" in r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1 and "unknown layout of 72 bytes" in lines[0]
    assert "NavFormatWarning" not in r.output  # one line, not Python's warning display
    r = runner.invoke(main, ["nav", "info", str(pu), "--json"], catch_exceptions=False)
    assert "unknown layout of 72 bytes" in r.output
