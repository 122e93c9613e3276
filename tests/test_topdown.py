"""Top-down maps and shortest paths (bps_assets.nav.topdown / paths) on scenes whose free space is
known exactly: positions land on the stated pixels, a straight corridor's path is straight, the
scale bar has its stated length, and the drawn shortest path is the geodesic one."""
from __future__ import annotations

import numpy as np
import pytest

from bps_assets.nav import NavSettings, build_navmesh
from bps_assets.nav.exact_scenes import ExactScene, _rect, apartment
from bps_assets.nav.paths import path_length, shortest_path
from bps_assets.nav.topdown import BLOCKED, HEADER, KINDS, NAVIGABLE, MapOptions, TopDownMap

R = 0.1
CORRIDOR = (0.013, 0.021, 8.013, 1.221)   # x0, z0, x1, z1 of the free interior (faces off cell lines)


def _corridor():
    X0, Z0, X1, Z1 = CORRIDOR
    sc = ExactScene("corridor", CORRIDOR)
    t = 0.15
    sc.solid(_rect(X0 - t, Z0 - t, X1 + t, Z1 + t), -0.1, 0.0, obstacle=False)   # no floor outside
    sc.wall(X0 - t, Z0 - t, X1 + t, Z0)
    sc.wall(X0 - t, Z1, X1 + t, Z1 + t)
    sc.wall(X0 - t, Z0, X0, Z1)
    sc.wall(X1, Z0, X1 + t, Z1)
    return sc


@pytest.fixture(scope="module")
def corridor_nav():
    return build_navmesh(_corridor().arrays(), NavSettings(agent_radius=R))


def _mask(img, colour):
    return np.all(np.asarray(img)[..., :3] == np.array(colour, np.uint8), axis=-1)


def test_markers_land_on_their_pixels_at_the_stated_scale(corridor_nav):
    m = TopDownMap(corridor_nav, MapOptions(metres_per_pixel=0.05))
    assert m.mpp == 0.05
    a, b = np.array([1.0, 0.0, 0.6]), np.array([5.0, 0.0, 0.6])
    c = m.canvas().point(a, "start").point(b, "goal")
    img = np.asarray(c.image(legend=False, scale_bar=False))
    for p, kind in ((a, "start"), (b, "goal")):
        rows, cols = np.nonzero(_mask(img, KINDS[kind][0]))
        assert rows.size > 10
        centre = np.array([cols.mean(), rows.mean()]) + 0.5       # pixel i spans [i, i+1)
        uv = m.to_image(p)[0][0]
        assert np.all(np.abs(centre - uv) <= 1.0), (kind, centre, uv)
        # the stated frame: x0 + u * mpp (an independent recomputation of the contract)
        assert abs(uv[0] - (4 + (p[0] - m.x0) / 0.05)) < 1e-9 and abs(uv[1] - (HEADER + (p[2] - m.z0) / 0.05)) < 1e-9
    # 4 m apart are 80 px apart, within one pixel
    ua, ub = (np.nonzero(_mask(img, KINDS[k][0]))[1].mean() for k in ("start", "goal"))
    assert abs((ub - ua) - 4.0 / 0.05) <= 1.0


def _run(mask, i):
    """Indices of the run of True in ``mask`` holding index ``i``."""
    assert mask[i]
    lo, hi = i, i
    while lo > 0 and mask[lo - 1]:
        lo -= 1
    while hi + 1 < len(mask) and mask[hi + 1]:
        hi += 1
    return np.arange(lo, hi + 1)


def test_navigable_area_edges_where_the_walls_are(corridor_nav):
    """The eroded free space is x in [X0 + R, X1 - R], z in [Z0 + R, Z1 - R] exactly: its edges
    land on the pixels the stated frame puts them at (one pixel, plus the navmesh's cell)."""
    mpp = 0.1
    m = TopDownMap(corridor_nav, MapOptions(metres_per_pixel=mpp))
    img = m.base()
    X0, Z0, X1, Z1 = CORRIDOR
    row = int(m.pixel_of([[4.0, 0.0, (Z0 + Z1) / 2]])[0, 1])
    col = int(m.pixel_of([[4.0, 0.0, (Z0 + Z1) / 2]])[0, 0])
    nav_row = _run(_mask(img[row], NAVIGABLE), col)
    nav_col = _run(_mask(img[:, col], NAVIGABLE), row)
    tol = 1 + corridor_nav.cell_size / mpp
    for got, x in ((nav_row.min(), X0 + R), (nav_row.max() + 1, X1 - R)):
        assert abs(got - m.to_image([[x, 0, 0]])[0][0, 0]) <= tol, (got, x)
    for got, z in ((nav_col.min(), Z0 + R), (nav_col.max() + 1, Z1 - R)):
        assert abs(got - m.to_image([[0, 0, z]])[0][0, 1]) <= tol, (got, z)
    assert _mask(img[row:row + 1], BLOCKED)[0, :nav_row.min()].any()   # the wall is drawn dark


def test_straight_corridor_path_is_straight_on_the_map(corridor_nav):
    a, b = np.array([0.6, 0.0, 0.62]), np.array([7.4, 0.0, 0.62])
    path = shortest_path(corridor_nav, a, b)
    assert len(path) == 2 and abs(path_length(path) - 6.8) < 1e-3
    m = TopDownMap(corridor_nav, MapOptions(metres_per_pixel=0.05))
    img = np.asarray(m.canvas().path(path, "shortest_path", width=1).image(legend=False, scale_bar=False))
    rows, cols = np.nonzero(_mask(img, KINDS["shortest_path"][0]))
    v = m.to_image(a)[0][0, 1]
    assert np.all(np.abs(rows + 0.5 - v) <= 1.0)
    ua, ub = m.to_image(np.stack([a, b]))[0][:, 0]
    assert abs(cols.min() + 0.5 - ua) <= 1 and abs(cols.max() + 0.5 - ub) <= 1
    assert len(np.unique(cols)) >= int(ub - ua) - 1      # no gap along the line


def test_scale_bar_has_its_stated_length(corridor_nav):
    m = TopDownMap(corridor_nav, MapOptions(metres_per_pixel=0.02))
    img = np.asarray(m.canvas().image(legend=False))
    footer = img[m.height:]
    black = _mask(footer, (0, 0, 0))
    bar_rows = np.nonzero(black.sum(1) >= 20)[0]
    assert bar_rows.size
    cols = np.nonzero(black[bar_rows[0]])[0]
    run = cols[cols <= cols.min() + np.argmax(np.diff(np.r_[cols, 10**9]) > 1)]
    from bps_assets.nav.topdown import scale_bar_metres

    metres = scale_bar_metres(0.02, max(8, m.width // 3))
    assert run.size == round(metres / 0.02)


def test_fit_chooses_a_stated_round_scale(corridor_nav):
    m = TopDownMap(corridor_nav, MapOptions(max_size=200))
    assert m.mpp in (0.05, 0.1)
    assert m.width <= 200


def test_shortest_path_is_the_geodesic_one():
    sc = apartment()
    nav = build_navmesh(sc.arrays(), NavSettings(agent_radius=0.18))
    pts = nav.sample_navigable_point(16, seed=3, island=0)
    bent = 0
    for a, b in zip(pts[::2], pts[1::2]):
        p = shortest_path(nav, a, b)
        d = float(nav.geodesic_distance(a, b))
        assert abs(path_length(p) - d) <= 1e-6 * max(1.0, d), (a, b)
        assert np.allclose(p[0], nav.snap_point(a)) and np.allclose(p[-1], nav.snap_point(b))
        mid = (p[1:] + p[:-1]) / 2
        assert np.all(nav.is_navigable(mid))
        bent += len(p) > 2
    assert bent >= 3   # the apartment's walls make most pairs bend
    # the closed store room is another island: no path
    store = nav.sample_navigable_point(1, seed=0, island=nav.num_islands - 1)[0]
    assert len(shortest_path(nav, pts[0], store)) == 0


def test_view_points_and_the_legend_name_what_was_drawn(corridor_nav):
    """ObjectNav's view points are drawn as dots; the legend lists exactly the kinds drawn."""
    m = TopDownMap(corridor_nav, MapOptions(metres_per_pixel=0.05))
    vps = np.array([[2.0, 0.0, 0.4], [2.5, 0.0, 0.8], [3.0, 0.0, 0.6]])
    c = m.canvas().episode(start=[1.0, 0.0, 0.6], goal=[3.5, 0.0, 0.6], shortest=True, view_points=vps)
    assert c.used == ["shortest_path", "view_point", "start", "goal"]
    img = np.asarray(c.image(legend=False, scale_bar=False))
    rows, cols = np.nonzero(_mask(img, KINDS["view_point"][0]))
    for p in vps:   # a dot around each view point's pixel
        u, v = m.to_image(p)[0][0]
        assert np.any((np.abs(cols + 0.5 - u) <= 1.5) & (np.abs(rows + 0.5 - v) <= 1.5)), p
    with_legend = np.asarray(c.image())
    assert with_legend.shape[0] > img.shape[0]   # the footer
    from bps_assets.errors import ConfigError
    with pytest.raises(ConfigError, match="unknown map mark"):   # typed since issue 30 (was ValueError)
        c.point([1, 0, 1], "treasure")


def test_objectnav_view_points_are_read_from_habitat_goals():
    from bps_assets.nav.topdown import view_points

    e = {"goals": [{"position": [1, 0, 1], "view_points": [{"agent_state": {"position": [1, 0, 2]}},
                                                           {"agent_state": {"position": [2, 0, 1]}}]},
                   {"position": [5, 0, 5], "view_points": [{"agent_state": {"position": [5, 0, 4]}}]}]}
    assert view_points(e).tolist() == [[1, 0, 2], [2, 0, 1], [5, 0, 4]]
    assert view_points({"goals": [{"position": [1, 0, 1]}]}) is None
    assert view_points({"view_points": [[1, 2, 3]]}).tolist() == [[1, 2, 3]]


def test_a_long_panel_title_is_cut_with_dots_not_clipped(corridor_nav):
    """A title wider than its panel (an eval video's long scene name) ends in '...' inside the
    picture (journey viz F7: it ran off the map panel, its end lost mid-glyph)."""
    from PIL import ImageDraw, ImageFont

    from bps_assets.nav.topdown import fit_text

    m = TopDownMap(corridor_nav, MapOptions(metres_per_pixel=0.05))
    title = "floor 0: y=0.00 m, " + "v3_sc0_staging_00_" * 8
    im = m.canvas().image(title=title)
    ink = np.nonzero((np.asarray(im)[:HEADER - 2] < 128).all(axis=2).any(axis=0))[0]
    assert ink.size and ink.max() < im.width - 3
    d, font = ImageDraw.Draw(im), ImageFont.load_default()
    cut = fit_text(d, title, m.panel_w - 2, font)
    assert cut.endswith("...") and title.startswith(cut[:-3]) and d.textlength(cut, font=font) <= m.panel_w - 2
    assert fit_text(d, "floor 0", m.panel_w - 2, font) == "floor 0"
