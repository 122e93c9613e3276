"""Voxel-recipe navmesh builds on small in-memory scenes (bps_assets/nav/reference_scenes.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bps_assets.errors import NavError
from bps_assets.nav import DEFAULT_SETTINGS, NavSettings, build_navmesh
from bps_assets.scene import Mesh, SceneDocument
from bps_assets.nav.reference_scenes import Geometry, house

P = np.array
# probe points (habitat frame) in the house of reference_scenes.house()
ROOM_A = P([1.0, 0.0, 4.0])
ROOM_B = P([8.0, 0.0, 1.0])
ROOM_C = P([1.5, 0.0, 7.5])  # closed room
TABLE_TOP = P([2.0, 0.75, 1.6])
UNDER_TABLE = P([2.0, 0.0, 1.6])
LOW_STEP = P([3.6, 0.15, 4.6])
UNDER_SHELF = P([6.0, 0.0, 1.0])
MEZZANINE = P([8.5, 2.0, 5.0])
UNDER_MEZZANINE = P([8.5, 0.0, 5.0])
MID_STAIRS = P([6.4, 1.0, 3.6])


@pytest.fixture(scope="module")
def nav():
    return build_navmesh(house().arrays())


def island(nav, p):
    assert nav.is_navigable(p), f"{p} should be navigable"
    return int(nav.island_of(p))


def test_rooms_joined_by_door_closed_room_apart(nav):
    assert island(nav, ROOM_A) == island(nav, ROOM_B)
    assert island(nav, ROOM_C) != island(nav, ROOM_A)
    assert nav.is_navigable(P([5.0, 0.0, 2.95]))  # in the doorway
    assert math.isinf(nav.geodesic_distance(ROOM_A, ROOM_C))
    # through the door: around the eroded door posts (wall 4.95..5.05 grown by 0.1 m, opening
    # z 2.5..3.4 shrunk by 0.1 m): (4, 1) -> (4.85, 2.6) -> (5.15, 2.6) -> (6.5, 1)
    a, b = P([4.0, 0.0, 1.0]), P([6.5, 0.0, 1.0])
    exact = math.hypot(0.85, 1.6) + 0.3 + math.hypot(1.35, 1.6)
    assert abs(nav.geodesic_distance(a, b) - exact) < 0.05 * exact


def test_closed_door_separates_rooms():
    closed = build_navmesh(house(door=False).arrays())
    assert int(closed.island_of(ROOM_A)) != int(closed.island_of(ROOM_B))
    assert not closed.is_navigable(P([5.0, 0.0, 2.95]))


def test_table_top_is_an_unreachable_island(nav):
    assert island(nav, TABLE_TOP) not in (island(nav, ROOM_A), island(nav, ROOM_C))
    assert not nav.is_navigable(UNDER_TABLE)  # 0.7 m of head room under the table
    assert math.isinf(nav.geodesic_distance(ROOM_A, TABLE_TOP))
    # the table edge is a ledge and eroded: the island is smaller than the 2 x 1.2 m top
    top_area = nav.island_area[island(nav, TABLE_TOP)]
    assert 1.0 < top_area < 2.4


def test_low_step_is_walkable_and_connected(nav):
    assert island(nav, LOW_STEP) == island(nav, ROOM_A)
    y = nav.span_pos[nav.locate(LOW_STEP)[0], 1]
    assert abs(y - 0.15) < 1e-3


def test_floor_under_high_shelf_stays_walkable(nav):
    assert island(nav, UNDER_SHELF) == island(nav, ROOM_B)
    assert not nav.is_navigable(P([6.0, 1.85, 1.0]))  # the shelf itself: 5 cm wide strip eroded


def test_second_storey_reached_by_stairs(nav):
    assert island(nav, MEZZANINE) == island(nav, ROOM_B) == island(nav, MID_STAIRS)
    assert island(nav, UNDER_MEZZANINE) == island(nav, ROOM_B)  # two floors over one spot
    s = nav.locate(MEZZANINE)[0]
    assert nav.span_lrc[s, 0] == 1  # the upper layer of its cell
    d = nav.geodesic_distance(ROOM_B, MEZZANINE)
    assert np.linalg.norm(ROOM_B - MEZZANINE) < d < 15


def test_without_stairs_the_storey_is_apart():
    flat = build_navmesh(house(stairs=False).arrays())
    assert int(flat.island_of(MEZZANINE)) != int(flat.island_of(ROOM_B))


def test_erosion_by_agent_radius(nav):
    # the outer wall's inner face is at x = 0: within the radius is not navigable
    assert not nav.is_navigable(P([0.05, 0.0, 3.0]))
    assert nav.is_navigable(P([0.2, 0.0, 3.0]))
    fat = build_navmesh(house().arrays(), NavSettings(agent_radius=0.3))
    assert not fat.is_navigable(P([0.2, 0.0, 3.0]))
    assert fat.is_navigable(P([0.4, 0.0, 3.0]))
    assert fat.navigable_area < nav.navigable_area


def _ramp(angle_deg):
    g = Geometry()
    g.quad_y(-2, -2, 0, 2, 0.0, div=4)
    h = 2.0 * math.tan(math.radians(angle_deg))
    v = [[0, 0, -2], [2, h, -2], [2, h, 2], [0, 0, 2]]
    g.add(v, [[0, 3, 2], [0, 2, 1]])
    return g.arrays()


def test_max_slope():
    gentle = build_navmesh(_ramp(30))
    steep = build_navmesh(_ramp(60))
    up = P([1.5, 1.5 * math.tan(math.radians(30)), 0.0])
    assert gentle.is_navigable(up) and gentle.island_of(up) == gentle.island_of(P([-1.0, 0, 0]))
    assert not steep.is_navigable(P([1.5, 1.5 * math.tan(math.radians(60)), 0.0]))


def test_z_up_scene_document_uses_the_frame_transform():
    v, t = house().arrays()
    zup = np.stack([v[:, 0], -v[:, 2], v[:, 1]], 1)  # inverse of (x, y, z) -> (x, z, -y)
    doc = SceneDocument(meshes=[Mesh(positions=zup.astype(np.float32), indices=t.astype(np.uint32))])
    a = build_navmesh(doc, dataset="gibson")
    ref = build_navmesh((v.astype(np.float32), t))
    assert a.num_islands == ref.num_islands
    assert abs(a.navigable_area - ref.navigable_area) < 1e-6
    assert doc.frame == "source" and np.array_equal(doc.meshes[0].positions, zup.astype(np.float32))
    wrong = build_navmesh(doc, dataset="generic")  # read as Y-up: walls lie flat, nothing fits
    assert abs(wrong.navigable_area - ref.navigable_area) > 5


def test_settings_are_recorded_and_validated(nav):
    assert nav.settings == DEFAULT_SETTINGS
    from bps_assets.errors import ConfigError

    with pytest.raises(ConfigError):
        NavSettings(cell_size=0)
    with pytest.raises(ConfigError):
        NavSettings(max_slope=95)


def test_no_triangles_is_an_error():
    with pytest.raises(NavError):
        build_navmesh((np.zeros((0, 3)), np.zeros((0, 3), np.int64)))
    with pytest.raises(NavError):
        build_navmesh((np.zeros((3, 3)), np.array([[0, 1, 5]])))


SHARED = __import__("pathlib").Path(__file__).resolve().parents[1].parent / "shared" / "assets"


@pytest.mark.shared_assets
def test_real_scan_matches_habitats_navmesh():
    """The van Gogh room scan (Z-up PLY) built here vs the .navmesh habitat ships for it."""
    ply = SHARED / "habitat-sim" / "deleted_history" / "van-gogh-room.mesh.ply"
    ref = SHARED / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"
    if not (ply.exists() and ref.exists()):
        pytest.skip("shared assets absent")
    from bps_assets.nav.detour import import_detour
    from bps_assets.readers import load

    habitat = import_detour(ref)
    doc = load(ply)
    # --recast-compat reproduces habitat's rounding: the same navmesh within a few percent
    ours = build_navmesh(doc, NavSettings(recast_compat=True), dataset="gibson")
    assert ours.num_islands == habitat.num_islands == 2
    assert abs(ours.navigable_area - habitat.navigable_area) < 0.03 * habitat.navigable_area
    a = ours.sample_navigable_point(3000, seed=0)
    b = habitat.sample_navigable_point(3000, seed=0)
    assert habitat.is_navigable(a).mean() > 0.93 and ours.is_navigable(b).mean() > 0.93
    # the default (exact radius, sub-cell obstacles) keeps what Recast's rounding loses: more
    # area, nearly all of habitat's inside it
    exact = build_navmesh(doc, dataset="gibson")
    assert exact.num_islands == 2
    assert 1.02 * habitat.navigable_area < exact.navigable_area < 1.12 * habitat.navigable_area
    assert exact.is_navigable(b).mean() > 0.97
    # read as Y-up the same scan is nonsense: the frame transform matters
    assert abs(build_navmesh(load(ply)).navigable_area - habitat.navigable_area) > 3


@pytest.mark.shared_assets
@pytest.mark.parametrize("name", ["hill", "stair3"])
def test_recast_meshes_match_detour(name):
    """go-detour's test meshes vs the Detour navmeshes built from them (same agent)."""
    obj = SHARED / "navmesh" / "go-detour" / "obj" / f"{name}.obj"
    ref = SHARED / "navmesh" / "go-detour" / "sample" / "solomesh" / f"{name}.bin"
    if not (obj.exists() and ref.exists()):
        pytest.skip("shared assets absent")
    from bps_assets.nav.detour import import_detour
    from bps_assets.readers import load

    detour = import_detour(ref)
    s = detour.settings
    ours = build_navmesh(load(obj), NavSettings(agent_height=s.agent_height, agent_radius=s.agent_radius,
                                                max_climb=s.max_climb, max_slope=s.max_slope,
                                                region_min_size=8))
    assert ours.num_islands == detour.num_islands
    # Detour's cells are 0.3 m here (coarser erosion / contours): areas agree within 15%
    assert 0.85 < ours.navigable_area / detour.navigable_area < 1.15


def test_ramp_heights_are_taken_at_cell_centres():
    nav = build_navmesh(_ramp(30))
    s = nav.locate(P([[1.0, 0.58, 0.5], [1.52, 0.88, -0.5]]))
    assert (s >= 0).all()
    x = nav.span_pos[s, 0]
    assert np.allclose(nav.span_pos[s, 1], x * math.tan(math.radians(30)), atol=1e-4)


def test_build_from_a_packed_scene(tmp_path):
    from bps_assets import packed_scene
    import dataclasses

    from test_nav_cli import write_obj

    v, t = house().arrays()
    write_obj(tmp_path / "h.obj", np.stack([v[:, 0], -v[:, 2], v[:, 1]], 1), t)  # a Z-up scan
    opts = dataclasses.replace(packed_scene.DEFAULTS, dataset="gibson")
    packed_scene.convert_file(tmp_path / "h.obj", tmp_path / "h.bps", opts)
    nav = build_navmesh(tmp_path / "h.bps")  # packed scenes are already in the habitat frame
    ref = build_navmesh((v, t))
    assert nav.num_islands == ref.num_islands and nav.source == "h.bps"
    assert abs(nav.navigable_area - ref.navigable_area) < 0.02 * ref.navigable_area
    assert int(nav.island_of(MEZZANINE)) == int(nav.island_of(ROOM_B))


def test_compiled_sample_test_builds_what_numpy_builds(monkeypatch):
    """The exact erosion's sub-cell obstacle test in C (bps_assets/native/_navbuild.c) blocks
    the same samples as the numpy one: the same navmesh from a noisy scan-like scene."""
    from bps_assets.nav import build as nav_build
    from bps_assets.nav.exact_scenes import apartment, subdivide

    if nav_build._native_near() is None:
        pytest.skip("the compiled helper was not built (no C compiler at install)")
    v, t = apartment(seed=2).arrays()
    v, t = subdivide(*subdivide(v, t))
    v = v + np.random.default_rng(1).normal(0, 0.002, v.shape)
    s = NavSettings(agent_radius=0.18)
    a = build_navmesh((v, t), s)
    monkeypatch.setattr(nav_build, "_native_near", lambda: None)
    b = build_navmesh((v, t), s)
    np.testing.assert_array_equal(a.height, b.height)
    np.testing.assert_array_equal(a.neighbors, b.neighbors)
    assert a.num_spans > 10000
