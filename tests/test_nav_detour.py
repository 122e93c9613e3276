"""Detour MSET reader on real habitat / go-detour files and on corrupted variants of them."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from bps_assets.errors import CorruptFileError, FormatVersionError, InputError
from bps_assets.nav import detour
from bps_assets.nav.detour import EXT_LINK, read_detour_navmesh

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
HABITAT_V1 = ASSETS / "habitat_test_scenes_navmesh"
REPLICA = ASSETS / "replicacad"
GODETOUR = ASSETS / "navmesh" / "go-detour"

needs_assets = pytest.mark.skipif(not ASSETS.is_dir(), reason="../shared/assets absent")


def _all_files():
    if not ASSETS.is_dir():
        return []
    return sorted([*ASSETS.glob("habitat_test_scenes_navmesh/*.navmesh"),
                   *ASSETS.glob("replicacad/navmeshes*/*.navmesh"),
                   *GODETOUR.glob("*.bin"), *GODETOUR.glob("sample/solomesh/*.bin")])


def _obj_bounds(path: Path):
    v = [list(map(float, line.split()[1:4])) for line in path.read_text().splitlines()
         if line.startswith("v ")]
    v = np.array(v)
    return v.min(0), v.max(0)


def _xz_area(v, t):
    a = v[t][:, :, [0, 2]].astype(np.float64)
    e1, e2 = a[:, 1] - a[:, 0], a[:, 2] - a[:, 0]
    return float(0.5 * np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]).sum())


# go-detour set -> the .obj it was built from (same origin in the set header)
GODETOUR_SOURCES = {"mesh1.bin": "nav_test.obj", "mesh2.bin": "develer.obj",
                    "offmeshcons.bin": "dungeon.obj"}


@needs_assets
def test_every_real_file_parses_consistently():
    files = _all_files()
    assert len(files) >= 29
    for f in files:
        m = read_detour_navmesh(f)
        assert m.version in (1, 2) and len(m.tiles) >= 1, f
        assert m.poly_count > 0
        n_pairs = 0
        for t in m.tiles:
            nv = len(t.vertices)
            n = t.poly_vert_count.astype(int)
            assert np.all((n >= 3) | (t.poly_type == 1)) and np.all(n <= 6)
            used = np.arange(6)[None] < n[:, None]
            assert np.all(t.poly_verts[used] < nv)
            # vertices lie in the tile's bounds (Detour quantizes y to the cell height)
            assert np.all(t.vertices >= t.bmin - 0.25) and np.all(t.vertices <= t.bmax + 0.25)
            # internal neighbours are mutual
            pairs = {(int(p), int(q)) for p, _, q in t.internal_neighbours()}
            assert all((q, p) in pairs for p, q in pairs), f
            n_pairs += len(pairs)
            # detail meshes: one per ground polygon, triangles index real vertices
            assert len(t.detail_meshes) == int(np.sum(t.poly_type == 0))
            v, tris, tri_poly = t.detail_triangles()
            assert tris.min() >= 0 and tris.max() < len(v)
            assert len(tris) == int(t.detail_meshes[:, 3].sum())
            # each detail triangle stays within its polygon's xz bounding box
            for p in np.unique(tri_poly)[:50]:
                poly = t.polygon(p)
                tv = v[tris[tri_poly == p]].reshape(-1, 3)
                assert np.all(tv[:, [0, 2]] >= poly[:, [0, 2]].min(0) - 1e-3)
                assert np.all(tv[:, [0, 2]] <= poly[:, [0, 2]].max(0) + 1e-3)
        assert n_pairs > 0 or m.poly_count < 10, f
        # the detail surface and the plain polygons cover the same ground (xz-projected area)
        a_detail, a_poly = _xz_area(*m.triangles()), _xz_area(*m.triangles(detail=False))
        assert a_detail > 0 and abs(a_detail - a_poly) / a_poly < 1e-3, (f, a_detail, a_poly)
        assert m.area() >= a_detail * (1 - 1e-6)


@needs_assets
def test_habitat_versions_and_settings_block():
    v1 = read_detour_navmesh(HABITAT_V1 / "van-gogh-room.navmesh")
    assert v1.version == 1 and v1.settings is None and v1.tile_ref_bits == 32
    assert v1.tiles[0].walkable_radius == pytest.approx(0.1)
    # habitat's own navigable area for this file (sum of walkable detail triangles) is ~9.18
    assert 8.5 < v1.area() < 10.0
    for sub, radius in (("navmeshes", 0.3), ("navmeshes_default", 0.1)):
        m = read_detour_navmesh(REPLICA / sub / "apt_0.navmesh")
        assert m.version == 2
        s = m.settings
        assert s["agentRadius"] == pytest.approx(radius)
        assert s["cellSize"] == pytest.approx(0.05) and s["cellHeight"] == pytest.approx(0.2)
        assert s["agentHeight"] == pytest.approx(1.5) and s["agentMaxSlope"] == pytest.approx(45)
        assert s["vertsPerPoly"] == 6 and s["filterLedgeSpans"] is True
        assert m.tiles[0].walkable_radius == pytest.approx(radius)
    # a larger agent radius erodes more: less walkable area
    a3 = read_detour_navmesh(REPLICA / "navmeshes" / "apt_0.navmesh").area()
    a1 = read_detour_navmesh(REPLICA / "navmeshes_default" / "apt_0.navmesh").area()
    assert a3 < a1


@needs_assets
@pytest.mark.parametrize("name", sorted(GODETOUR_SOURCES))
def test_godetour_surface_inside_source_obj(name):
    m = read_detour_navmesh(GODETOUR / name)
    lo, hi = _obj_bounds(GODETOUR / "obj" / GODETOUR_SOURCES[name])
    v, t = m.triangles()
    pts = v[np.unique(t)]
    cs = 0.31
    assert np.all(pts[:, [0, 2]] >= lo[[0, 2]] - cs) and np.all(pts[:, [0, 2]] <= hi[[0, 2]] + cs)
    assert np.all(pts[:, 1] >= lo[1] - 0.5) and np.all(pts[:, 1] <= hi[1] + 0.5)
    # the surface covers a good part of the mesh's footprint, not a sliver
    assert m.area() > 0.05 * (hi[0] - lo[0]) * (hi[2] - lo[2])


@needs_assets
def test_multi_tile_portals_and_offmesh():
    m = read_detour_navmesh(GODETOUR / "mesh2.bin")
    assert len(m.tiles) == 18 and len({(t.x, t.y, t.layer) for t in m.tiles}) == 18
    ext = [t.poly_neis[(t.poly_neis & EXT_LINK) != 0] for t in m.tiles]
    assert sum(len(e) for e in ext) > 0
    # the low bits of a portal name one of the 8 tile sides (Detour uses 0, 2, 4, 6 + 0xf)
    sides = np.concatenate(ext) & 0xFF
    assert set(np.unique(sides).tolist()) <= {0, 1, 2, 3, 4, 5, 6, 7, 0xF}
    # tile bounds follow the tile grid
    for t in m.tiles:
        assert t.bmin[0] == pytest.approx(m.origin[0] + t.x * m.tile_width, abs=1e-3)
    o = read_detour_navmesh(GODETOUR / "offmeshcons.bin")
    cons = [(t, c) for t in o.tiles for c in t.offmesh_connections]
    assert len(cons) == 1
    t, c = cons[0]
    assert t.poly_type[c["poly"]] == detour.POLYTYPE_OFFMESH_CONNECTION
    assert c["poly"] >= t.offmesh_base and c["rad"] > 0
    # the off-mesh polygon's two vertices are the connection's end points
    # (xz: Detour snaps the stored heights onto the polygons when it links the tile)
    assert np.allclose(t.polygon(c["poly"])[:, [0, 2]], c["pos"].reshape(2, 3)[:, [0, 2]], atol=1e-4)
    # off-mesh connections are not part of the walkable surface
    v, tris = o.triangles(include_flags=0xFFFF)
    assert len(tris) == sum(int(tt.detail_meshes[:, 3].sum()) for tt in o.tiles)


# ---------------------------------------------------------------- synthetic variants
def _split(data: bytes, settings_block: bool):
    """(set header + settings bytes, [(ref, tile bytes)]) of a 32-bit-record set."""
    off = 40 + (56 if settings_block else 0)
    head, tiles = data[:off], []
    n = struct.unpack_from("<i", data, 8)[0]
    for _ in range(n):
        ref, size = struct.unpack_from("<Ii", data, off)
        tiles.append((ref, data[off + 8: off + 8 + size]))
        off += 8 + size
    assert off == len(data)
    return head, tiles


def _links_to_64(tile: bytes) -> bytes:
    """Re-lay a tile's link block with 16-byte dtLink records (a DT_POLYREF64 build)."""
    h = struct.unpack_from("<15i", tile, 0)
    pc, vc, lc = h[6], h[7], h[8]
    a4 = lambda n: (n + 3) & ~3  # noqa: E731
    lo = 100 + a4(12 * vc) + a4(32 * pc)
    old = np.frombuffer(tile, detour.LINK32_DTYPE, lc, lo)
    new = np.zeros(lc, detour.LINK64_DTYPE)
    for k in old.dtype.names:
        new[k] = old[k]
    return tile[:lo] + new.tobytes() + tile[lo + a4(12 * lc):]


def _join64(head: bytes, tiles, link64=False) -> bytes:
    out = bytearray(head)
    for ref, t in tiles:
        if link64:
            t = _links_to_64(t)
        out += struct.pack("<Qi4x", ref, len(t)) + t
    return bytes(out)


@needs_assets
@pytest.mark.parametrize("link64", [False, True])
def test_64bit_ref_variant_reads_the_same(tmp_path, link64):
    src = GODETOUR / "mesh2.bin"
    a = read_detour_navmesh(src)
    head, tiles = _split(src.read_bytes(), settings_block=False)
    p = tmp_path / "ref64.bin"
    p.write_bytes(_join64(head, tiles, link64))
    b = read_detour_navmesh(p)
    assert b.tile_ref_bits == 64 and b.link_ref_bits == (64 if link64 else 32)
    assert [t.ref for t in a.tiles] == [t.ref for t in b.tiles]
    for ta, tb in zip(a.tiles, b.tiles):
        assert np.array_equal(ta.vertices, tb.vertices)
        assert np.array_equal(ta.poly_verts, tb.poly_verts)
        assert np.array_equal(ta.poly_neis, tb.poly_neis)
        assert np.array_equal(ta.detail_tris, tb.detail_tris)
        assert np.array_equal(ta.links["ref"], tb.links["ref"])
    assert a.area() == pytest.approx(b.area())


@needs_assets
def test_version2_settings_block_is_optional(tmp_path):
    # Detour users other than habitat write "version 2" sets without the settings block
    data = bytearray((HABITAT_V1 / "apartment_1.navmesh").read_bytes())
    struct.pack_into("<i", data, 4, 2)
    p = tmp_path / "v2_no_settings.navmesh"
    p.write_bytes(data)
    m = read_detour_navmesh(p)
    assert m.version == 2 and m.settings is None and m.poly_count == 78


# -------------------------------------------------------------------- corruption
def _variant(tmp_path, data, name="bad.navmesh"):
    p = tmp_path / name
    p.write_bytes(bytes(data))
    return p


@needs_assets
def test_truncated_files_raise_typed_errors(tmp_path):
    data = (HABITAT_V1 / "apartment_1.navmesh").read_bytes()
    cuts = sorted({0, 3, 4, 20, 39, 40, 44, 47, 48, 60, 147, 148, 500, len(data) // 2,
                   len(data) - 4, len(data) - 1})
    for n in cuts:
        p = _variant(tmp_path, data[:n], f"cut{n}.navmesh")
        with pytest.raises(CorruptFileError) as e:
            read_detour_navmesh(p)
        assert str(p) in str(e.value)
    data2 = (REPLICA / "navmeshes" / "apt_0.navmesh").read_bytes()
    for n in (60, 95, 96, 103, 120):
        with pytest.raises(CorruptFileError):
            read_detour_navmesh(_variant(tmp_path, data2[:n], f"v2cut{n}.navmesh"))


def _tile_field(data, name, value, tile_start=48):
    names = ["magic", "version", "x", "y", "layer", "userId", "polyCount", "vertCount",
             "maxLinkCount", "detailMeshCount", "detailVertCount", "detailTriCount",
             "bvNodeCount", "offMeshConCount", "offMeshBase"]
    d = bytearray(data)
    struct.pack_into("<i", d, tile_start + 4 * names.index(name), value)
    return d


@needs_assets
def test_header_corruptions(tmp_path):
    data = (HABITAT_V1 / "apartment_1.navmesh").read_bytes()
    bad = bytearray(data)
    bad[:4] = b"XXXX"
    with pytest.raises(CorruptFileError, match="magic"):
        read_detour_navmesh(_variant(tmp_path, bad))
    big_endian = b"MSET" + data[4:]
    with pytest.raises(CorruptFileError, match="big-endian"):
        read_detour_navmesh(_variant(tmp_path, big_endian))
    for version in (0, 3, 7):
        d = bytearray(data)
        struct.pack_into("<i", d, 4, version)
        with pytest.raises(FormatVersionError, match=f"version {version}"):
            read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    struct.pack_into("<i", d, 8, 10**9)
    with pytest.raises(CorruptFileError, match="numTiles"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    struct.pack_into("<i", d, 8, 2)  # claims a second tile that is not there
    with pytest.raises(CorruptFileError, match="tile 1"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    struct.pack_into("<i", d, 44, 1 << 30)  # tile dataSize beyond the file
    with pytest.raises(CorruptFileError, match="dataSize"):
        read_detour_navmesh(_variant(tmp_path, d))
    with pytest.raises(FormatVersionError, match="DNAV version 6"):
        read_detour_navmesh(_variant(tmp_path, _tile_field(data, "version", 6)))
    for name in ("polyCount", "vertCount", "detailTriCount", "maxLinkCount"):
        with pytest.raises(CorruptFileError, match=f"tile 0: {name}"):
            read_detour_navmesh(_variant(tmp_path, _tile_field(data, name, -5)))
        with pytest.raises(CorruptFileError, match="tile 0"):  # caps, then the size check
            read_detour_navmesh(_variant(tmp_path, _tile_field(data, name, 2**31 - 1)))
    with pytest.raises(CorruptFileError, match="does not match"):
        read_detour_navmesh(_variant(tmp_path, _tile_field(data, "vertCount", 200)))
    with pytest.raises(InputError, match="cannot read"):
        read_detour_navmesh(tmp_path / "missing.navmesh")


@needs_assets
def test_content_corruptions(tmp_path):
    data = (HABITAT_V1 / "apartment_1.navmesh").read_bytes()
    m = read_detour_navmesh(HABITAT_V1 / "apartment_1.navmesh")
    t = m.tiles[0]
    a4 = lambda n: (n + 3) & ~3  # noqa: E731
    base = 48
    verts_off = base + 100
    polys_off = verts_off + a4(12 * len(t.vertices))
    links_off = polys_off + 32 * t.poly_count
    dm_off = links_off + 12 * t.max_link_count
    dv_off = dm_off + 12 * len(t.detail_meshes)
    dt_off = dv_off + 12 * len(t.detail_vertices)

    d = bytearray(data)
    struct.pack_into("<f", d, verts_off + 4, float("nan"))
    with pytest.raises(CorruptFileError, match="non-finite"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    struct.pack_into("<H", d, polys_off + 4, 60000)  # poly 0, vertex 0
    with pytest.raises(CorruptFileError, match="polygon 0: vertex index"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    struct.pack_into("<H", d, polys_off + 16, 5000)  # poly 0, neighbour 0 (internal range)
    with pytest.raises(CorruptFileError, match="polygon 0: neighbour"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    d[polys_off + 30] = 9  # poly 0 vertCount
    with pytest.raises(CorruptFileError, match="polygon 0: vertCount"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    d[dt_off] = 250  # first detail triangle's first index
    with pytest.raises(CorruptFileError, match="detail mesh 0"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    bv_off = dt_off + 4 * len(t.detail_tris)
    struct.pack_into("<i", d, bv_off + 12, 5000)  # BV node 0 index
    with pytest.raises(CorruptFileError, match="BV tree"):
        read_detour_navmesh(_variant(tmp_path, d))
    d = bytearray(data)
    struct.pack_into("<I", d, dm_off, 10**6)  # detail mesh 0 vertBase
    with pytest.raises(CorruptFileError, match="detailVertCount"):
        read_detour_navmesh(_variant(tmp_path, d))


@needs_assets
def test_random_byte_flips_never_escape_typed_errors(tmp_path):
    data = (HABITAT_V1 / "van-gogh-room.navmesh").read_bytes()
    rng = np.random.default_rng(0)
    p = tmp_path / "fuzz.navmesh"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        d = bytearray(data)
        for pos in rng.integers(0, len(d), size=rng.integers(1, 4)):
            d[pos] = int(rng.integers(0, 256))
        p.write_bytes(d)
        try:
            m = read_detour_navmesh(p)
            m.triangles()
            outcomes["ok"] += 1
        except CorruptFileError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0


# -------------------------------------------------------------------- import
@needs_assets
def test_import_matches_habitat_area():
    for f in (HABITAT_V1 / "apartment_1.navmesh", HABITAT_V1 / "van-gogh-room.navmesh",
              REPLICA / "navmeshes" / "apt_0.navmesh", GODETOUR / "mesh2.bin"):
        dm = read_detour_navmesh(f)
        nm = detour.import_detour(f)
        # habitat's navigable area: the walkable detail triangles' area
        want = dm.area()
        got = nm.navigable_area
        got = float(got() if callable(got) else got)
        assert abs(got - want) / want < 0.03, (f.name, got, want)
        # the file's agent comes along; Detour's islands survive (slivers may split into cells)
        assert nm.settings.agent_radius == pytest.approx(dm.tiles[0].walkable_radius)
        n_detour = len(np.unique(np.concatenate(dm.polygon_islands())))
        assert nm.num_islands >= n_detour
        big = nm.island_area[nm.island_area > 1.0]
        assert len(big) <= n_detour
    v2 = detour.import_detour(REPLICA / "navmeshes" / "apt_0.navmesh")
    assert v2.settings.agent_radius == pytest.approx(0.3) and v2.settings.cell_size == 0.05


@needs_assets
def test_polygon_islands_follow_links_across_tiles():
    m = read_detour_navmesh(GODETOUR / "mesh2.bin")
    isl = m.polygon_islands()
    # without the cross-tile links every tile would be at least one island of its own
    assert len(np.unique(np.concatenate(isl))) < len(m.tiles)
    # the largest island spans many tiles
    big = np.bincount(np.concatenate(isl)).argmax()
    assert sum(bool(np.any(t == big)) for t in isl) >= 10


def _unlink(tile: bytes) -> bytes:
    """A tile as dtCreateNavMeshData leaves it: no runtime links."""
    h = struct.unpack_from("<15i", tile, 0)
    pc, vc, lc = h[6], h[7], h[8]
    a4 = lambda n: (n + 3) & ~3  # noqa: E731
    po = 100 + a4(12 * vc)
    tb = bytearray(tile)
    polys = np.frombuffer(tile, detour.POLY_DTYPE, pc, po).copy()
    polys["first_link"] = detour.NULL_LINK
    tb[po: po + 32 * pc] = polys.tobytes()
    tb[po + 32 * pc: po + 32 * pc + 12 * lc] = bytes(12 * lc)
    return bytes(tb)


@needs_assets
def test_import_of_unlinked_tiles_joins_them_by_height(tmp_path):
    head, tiles = _split((GODETOUR / "mesh2.bin").read_bytes(), settings_block=False)
    p = tmp_path / "unlinked.bin"
    p.write_bytes(head + b"".join(struct.pack("<Ii", r, len(_unlink(t))) + _unlink(t)
                                  for r, t in tiles))
    m = read_detour_navmesh(p)
    assert len(np.unique(np.concatenate(m.polygon_islands()))) > len(m.tiles)
    assert m.cross_tile_links == 0
    a = detour.import_detour(p)
    b = detour.import_detour(GODETOUR / "mesh2.bin")
    assert a.island_area[0] == pytest.approx(b.island_area[0]) and a.island_area[0] > 500


@needs_assets
def test_imported_islands_report_habitat_sims_island_area_and_radius(tmp_path):
    """habitat-sim's tests/test_nav.py asserts these for van-gogh-room (PathFinder.island_area:
    3D area of the walkable detail triangles; island_radius: farthest polygon corner from the
    corners' mean). Before, the import reported the cell count's x/z area and a span-centre radius."""
    from bps_assets.nav import load_navmesh

    want = [(7.305000305175781, 3.304431200027466), (1.8727209568023682, 1.4128597974777222)]
    dm = read_detour_navmesh(HABITAT_V1 / "van-gogh-room.navmesh")
    area, radius = dm.island_stats()
    flat = [x for pair in want for x in pair]
    assert [x for pair in sorted(zip(area, radius), reverse=True) for x in pair] == pytest.approx(flat, abs=2e-6)
    nm = detour.import_detour(dm)
    assert [float(x) for pair in zip(nm.island_area, nm.island_radius_m) for x in pair] == \
        pytest.approx(flat, abs=2e-6)
    # island_radius(point) answers habitat's value, and the values survive a save / load
    p = nm.sample_navigable_point(1, seed=0, island=1)
    assert nm.island_radius(p)[0] == pytest.approx(want[1][1], abs=2e-6)
    nm.save(tmp_path / "v.navmesh.bps")
    back = load_navmesh(tmp_path / "v.navmesh.bps")
    assert list(back.island_area) == list(nm.island_area)
    assert list(back.island_radius_m) == list(nm.island_radius_m)
    # apartment_1: the islands' areas add up to habitat's navigable_area, largest first
    ap = detour.import_detour(HABITAT_V1 / "apartment_1.navmesh")
    ad = read_detour_navmesh(HABITAT_V1 / "apartment_1.navmesh")
    assert ap.navigable_area == pytest.approx(sum(ad.island_stats()[0]), rel=1e-6)
    assert list(ap.island_area) == sorted(ap.island_area, reverse=True)
