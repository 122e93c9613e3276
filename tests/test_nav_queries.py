"""Batched queries: snap, navigability, sampling, island radius, try_step, geodesics (accuracy
against exact shortest paths on scenes whose free space is known exactly)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bps_assets.errors import NavError

from bps_assets.nav import NavMesh, build_navmesh
from bps_assets.nav.reference_scenes import ExactRoom, geodesic_errors, house

P = np.array


@pytest.fixture(scope="module")
def nav():
    return build_navmesh(house().arrays())


def test_snap_point(nav):
    p = P([[2.0, 0.3, 1.6],     # under the table: the floor there is not navigable -> table top
           [1.0, 1.0, 4.0],     # 1 m above room A's floor -> straight down
           [-0.5, 0.0, 3.0],    # outside the wall -> nearest floor inside
           [50.0, 0.0, 0.0]])   # far away -> NaN
    s = nav.snap_point(p)
    assert np.allclose(s[0], [2.0, 0.75, 1.6], atol=1e-6)
    assert np.allclose(s[1], [1.0, 0.0, 4.0], atol=1e-6)
    assert abs(s[2, 2] - 3.0) < 0.05 and 0.1 <= s[2, 0] <= 0.25 and s[2, 1] == 0
    assert np.isnan(s[3]).all()
    assert nav.is_navigable(s[:3]).all()
    assert np.allclose(nav.snap_point(P([1.0, 1.0, 4.0])), [1.0, 0.0, 4.0])  # a single [3] point


def test_huge_finite_coordinates_are_off_the_mesh_without_warnings(nav):
    """Finite but huge coordinates (1e308 in an episode file, `nav distance --from 1e20,0,0`)
    are off the mesh, as before, without numpy RuntimeWarnings (overflow in the cell division
    and the squared distances, an out-of-range float-to-int cast) reaching the user."""
    import warnings

    huge = P([[1e308, 0.0, 0.0], [1e20, 0.0, 0.0], [-1e308, 0.0, -1e308], [1.0, 1e300, 4.0], [1.0, 0.0, 1e19]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r, c = nav.cell_of(huge)
        s = nav.snap_point(huge)
        nav_ok = nav.is_navigable(huge)
        d = nav.geodesic_distance(huge, P([[1.0, 0.0, 4.0]] * len(huge)))
    D, W = nav.shape[1:]
    assert ((r >= 0) & (r < D) & (c >= 0) & (c < W)).tolist() == [False, False, False, True, False]   # [3]: y only
    assert np.isnan(s).all() and not nav_ok.any() and not np.isfinite(d).any()
    assert tuple(x[0] for x in nav.cell_of(P([[1.0, 0.0, 4.0]]))) == tuple(
        int(v) for v in np.floor((P([4.0, 1.0]) - np.asarray(nav.origin)[[1, 0]]) / nav.cell_size))


def test_is_navigable_y_tolerance(nav):
    assert nav.is_navigable(P([[1.0, 0.4, 4.0]]))[0]
    assert not nav.is_navigable(P([[1.0, 0.6, 4.0]]))[0]
    assert not nav.is_navigable(P([[1.0, 0.6, 4.0]]), max_y_delta=0.5)[0]
    assert nav.is_navigable(P([[1.0, 0.6, 4.0]]), max_y_delta=1.0)[0]


def test_sampling_is_seeded_uniform_and_on_the_mesh(nav):
    a = nav.sample_navigable_point(4000, seed=7)
    b = nav.sample_navigable_point(4000, seed=7)
    c = nav.sample_navigable_point(4000, seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert nav.is_navigable(a, max_y_delta=1e-3).all()
    isl = nav.island_of(a)
    share = np.bincount(isl, minlength=nav.num_islands) / len(a)
    expect = nav.island_area / nav.island_area.sum()
    assert np.abs(share - expect).max() < 0.03  # area-weighted
    one = nav.sample_navigable_point(200, seed=1, island=1)
    assert (nav.island_of(one) == 1).all()


def test_island_radius(nav):
    # closed room C: 3 x 2.9 m eroded by 0.1 m -> half-diagonal ~ 1.9 m
    r = nav.island_radius(P([[1.5, 0.0, 7.5], [50, 0, 0]]))
    assert 1.7 < r[0] < 2.0 and r[1] == 0


def test_try_step_slides_along_a_wall(nav):
    start = P([[4.7, 0.0, 1.0], [1.0, 0.0, 3.0]])
    end = P([[5.0, 0.0, 1.2], [1.2, 0.0, 3.1]])  # into the wall at x = 4.95 / free space
    slide = nav.try_step(start, end)
    assert 4.8 <= slide[0, 0] <= 4.9 and abs(slide[0, 2] - 1.2) < 1e-3  # slid the full 0.2 in z
    assert np.allclose(slide[1], end[1])  # unobstructed: exactly the requested end
    stop = nav.try_step(start, end, sliding=False)
    assert 4.8 <= stop[0, 0] <= 4.9
    # without sliding the agent stays on the segment and stops at the wall
    t = (stop[0, 0] - 4.7) / 0.3
    assert abs(stop[0, 2] - (1.0 + 0.2 * t)) < 1e-6 and stop[0, 2] < 1.2 - 0.05
    assert np.allclose(stop[1], end[1])
    assert nav.is_navigable(np.vstack([slide, stop]), max_y_delta=1e-3).all()


def test_try_step_climbs_stairs_and_refuses_islands(nav):
    on_stairs = P([6.3, 0.0, 3.6])
    s0 = nav.snap_point(on_stairs)
    s1 = nav.try_step(s0, s0 + [0.25, 0, 0])
    assert s1[0] > s0[0] + 0.2 and s1[1] > s0[1] + 0.3  # went up two steps
    floor = P([2.0, 0.0, 0.5])
    assert np.allclose(nav.try_step(floor, P([2.0, 0.75, 1.0])), floor)  # other island: stay


def test_geodesic_straight_line_and_symmetry(nav):
    a, b = P([1.0, 0.0, 4.0]), P([3.5, 0.0, 3.2])
    assert abs(nav.geodesic_distance(a, b) - np.linalg.norm(a - b)) < 1e-6
    pts = nav.sample_navigable_point(40, seed=3, island=0)
    d1 = nav.geodesic_distance(pts[:20], pts[20:])
    d2 = nav.geodesic_distance(pts[20:], pts[:20])
    assert np.all(np.isfinite(d1))
    assert np.all(np.abs(d1 - d2) <= 0.02 * d1 + 1e-6)
    assert np.all(d1 >= np.linalg.norm(pts[:20] - pts[20:], axis=1) - 1e-6)


def test_distance_field_matches_geodesic(nav):
    goal = P([8.0, 0.0, 1.0])
    f = nav.distance_field(goal)
    assert f.shape == nav.shape and f.dtype == np.float32
    pts = nav.sample_navigable_point(50, seed=5)
    via_field = nav.distance_at(f, pts)
    direct = nav.geodesic_distance(np.repeat(goal[None], 50, 0), pts)
    fin = np.isfinite(direct)
    assert np.array_equal(fin, np.isfinite(via_field))
    # geodesic_distance is exact for pairs in line of sight; the field is the graph estimate
    assert np.allclose(via_field[fin], direct[fin], rtol=0.02, atol=1e-5)
    assert np.all(via_field[fin] >= direct[fin] - 1e-6)
    assert np.isinf(f[nav.island != nav.island_of(goal)]).all()


def test_geodesic_accuracy_against_exact_paths():
    room = ExactRoom(seed=0)
    nav = room.navmesh()
    err, exact = geodesic_errors(room, nav, n_pairs=120)
    assert len(err) >= 100 and exact.max() > 5
    assert np.median(err) <= 0.01, np.median(err)
    assert np.percentile(err, 95) <= 0.03, np.percentile(err, 95)
    # the neighbourhood matters: plain 8-connected Dijkstra (no corner nodes) misses the target
    err8, _ = geodesic_errors(room, nav, n_pairs=60, radius=1, corners=False)
    assert np.median(err8) > 0.02
    # and so do the corner nodes: bending at span centres only is farther off (measured
    # 0.21 % / 1.09 % without, 0.03 % / 0.43 % with, 120 pairs)
    old, _ = geodesic_errors(room, nav, n_pairs=120, corners=False)
    assert np.percentile(err, 95) < 0.6 * np.percentile(old, 95), (np.percentile(err, 95), np.percentile(old, 95))
    assert np.median(err) < 0.5 * np.median(old), (np.median(err), np.median(old))


def test_from_walkable_triangles():
    # two 2 x 2 m squares side by side at the same height; a third one 1 m higher
    v = P([[0, 0, 0], [2, 0, 0], [2, 0, 2], [0, 0, 2],
           [2, 0, 0], [4, 0, 0], [4, 0, 2], [2, 0, 2],
           [0, 1, 3], [2, 1, 3], [2, 1, 5], [0, 1, 5]], float)
    q = lambda o: [[o, o + 3, o + 2], [o, o + 2, o + 1]]
    t = P(q(0) + q(4) + q(8))
    nav = NavMesh.from_walkable_triangles(v, t)
    assert abs(nav.navigable_area - 12.0) < 1e-6
    assert nav.num_islands == 2 and np.allclose(sorted(nav.island_area), [4, 8])
    assert nav.island_of(P([1, 0, 1])) == nav.island_of(P([3, 0, 1]))
    assert abs(nav.geodesic_distance(P([0.5, 0, 1]), P([3.5, 0, 1])) - 3.0) < 1e-6
    # groups keep touching surfaces apart (Detour islands along an infinitely thin wall)
    sep = NavMesh.from_walkable_triangles(v, t, triangle_groups=[0, 0, 1, 1, 2, 2])
    assert sep.num_islands == 3
    assert math.isinf(sep.geodesic_distance(P([0.5, 0, 1]), P([3.5, 0, 1])))


def test_try_step_does_not_fall_off_a_ledge(nav):
    start = nav.snap_point(P([7.3, 2.0, 5.0]))  # on the mezzanine, near its edge (drop of 2 m)
    assert start[1] == pytest.approx(2.0)
    end = start + [-0.25, 0, 0]
    for sliding in (True, False):
        got = nav.try_step(start, end, sliding=sliding)
        assert got[1] == pytest.approx(2.0) and got[0] > 7.0  # stopped at the edge, still up
        assert nav.is_navigable(got, max_y_delta=1e-3)
    # a batch mixing agents on both storeys keeps each on its own surface
    below = nav.snap_point(P([7.3, 0.0, 5.0]))
    both = nav.try_step(np.stack([start, below]), np.stack([end, below + [-0.25, 0, 0]]))
    assert both[0, 1] == pytest.approx(2.0) and both[1, 1] == pytest.approx(0.0)
    assert both[1, 0] == pytest.approx(7.05)  # the floor below is open: full step


def test_queries_on_an_empty_navmesh(tmp_path):
    from bps_assets.errors import NavError
    from bps_assets.nav import load_navmesh
    from bps_assets.nav.reference_scenes import Geometry

    g = Geometry().wall_sheet(0, 0, 3, 0, 0, 2)  # nothing walkable
    nav = build_navmesh(g.arrays())
    assert nav.num_spans == 0 and nav.num_islands == 0 and nav.navigable_area == 0
    p = np.zeros((2, 3))
    assert np.isnan(nav.snap_point(p)).all() and not nav.is_navigable(p).any()
    assert np.isinf(nav.geodesic_distance(p, p + 1)).all()
    assert np.array_equal(nav.try_step(p, p + 0.1), p) and (nav.island_radius(p) == 0).all()
    with pytest.raises(NavError):
        nav.sample_navigable_point(1, seed=0)
    nav.save(tmp_path / "e.navmesh.bps")
    assert load_navmesh(tmp_path / "e.navmesh.bps").num_spans == 0


def test_compiled_dijkstra_matches_scipy(nav, monkeypatch):
    """The GIL-free Dijkstra (bps_assets/native/_dijkstra.c) gives scipy's distances, with and
    without a limit, and refuses a corrupt graph."""
    from bps_assets.nav import geodesic
    from bps_assets.nav.queries import geodesic_graph

    if geodesic._native_dijkstra() is None:
        pytest.skip("the compiled Dijkstra was not built (no C compiler at install)")
    g = geodesic_graph(nav)
    rng = np.random.default_rng(5)
    spans = rng.choice(g.S, 6, replace=False)
    fields = {}
    for use_native in (True, False):
        if not use_native:
            monkeypatch.setattr(geodesic, "_native_dijkstra", lambda: None)
        fields[use_native] = [g.field_from_point(int(s), nav.span_pos[s] + [0.01, 0, -0.01], nav.span_pos, lim)
                              for s in spans for lim in (np.inf, 2.0)]
    for a, b in zip(fields[True], fields[False]):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], rtol=1e-12)
    assert any(np.isinf(f).any() and np.isfinite(f).sum() > 10 for f in fields[True][1::2])  # the limit cut
    monkeypatch.undo()
    g = geodesic.GeodesicGraph(nav)  # a private copy: geodesic_graph's is shared per navmesh
    g.indices[0] = g.N + 5  # past the last node (spans, then corner nodes)
    with pytest.raises(NavError, match="corrupt"):
        g.field_from_point(0, nav.span_pos[0], nav.span_pos)


def test_compiled_line_of_sight_matches_numpy(nav, monkeypatch):
    """The corner edges' compiled walk (bps_assets/native/_navbuild.c) gives numpy's answers,
    centre-to-centre segments (exact corner crossings, ties) included, on both floors and the
    stairs; and refuses a span id out of range."""
    from bps_assets.nav import geodesic

    if geodesic._native_los() is None:
        pytest.skip("the compiled helper was not built (no C compiler at install)")
    rng = np.random.default_rng(3)
    S = nav.num_spans
    sa = rng.integers(0, S, 20000)
    sb = np.clip(sa + rng.integers(-400, 400, sa.size), 0, S - 1)
    pa = nav.span_pos[sa] + np.c_[rng.uniform(-0.024, 0.024, sa.size), np.zeros(sa.size),
                                  rng.uniform(-0.024, 0.024, sa.size)]
    centre = rng.random(sa.size) < 0.5
    pa[centre] = nav.span_pos[sa[centre]]
    pb = nav.span_pos[sb]
    # and diagonal steps between centres from every span: the segment crosses a cell corner
    # exactly, so the tie order of the crossings decides next to every wall corner
    l, r, c = nav.span_lrc.T
    for k in (1, 2):
        ok = (r + k < nav.shape[1]) & (c + k < nav.shape[2])
        tgt = nav.span_index[l[ok], r[ok] + k, c[ok] + k]
        src = np.nonzero(ok)[0][tgt >= 0]
        tgt = tgt[tgt >= 0].astype(np.int64)
        sa, sb = np.r_[sa, src], np.r_[sb, tgt]
        pa, pb = np.vstack([pa, nav.span_pos[src]]), np.vstack([pb, nav.span_pos[tgt]])
    got = geodesic._visible(nav, sa, pa, sb, pb)
    monkeypatch.setattr(geodesic, "_native_los", lambda: None)
    want = geodesic._visible(nav, sa, pa, sb, pb)
    np.testing.assert_array_equal(got, want)
    assert 0.05 < want.mean() < 0.95  # both answers occur
    monkeypatch.undo()
    with pytest.raises(NavError, match="span id"):
        geodesic._visible(nav, np.array([S + 3]), pa[:1], sb[:1], pb[:1])
