"""`bps-assets preview --semantic`: one colour per category of a legend, fixed for mpcat40 names,
none the floor's or the unmatched grey (journey viz F1: `_PALETTE[category % 20]` gave chair and
shower, bed and shelving one colour, toilet the unmatched grey, ReplicaCAD's cabinet the floor's)."""
from __future__ import annotations

import numpy as np
import pytest

from bps_assets.nav import NavSettings, build_navmesh
from bps_assets.nav.exact_scenes import ExactScene, _rect
from bps_assets.nav.preview import PLAIN
from bps_assets.nav.semantic_preview import SKIP, UNMATCHED, UNMATCHED_RGB, category_colours, write_semantic_preview
from bps_assets.readers.semantic_categories import mpcat40
from bps_assets.semantics import SemanticTable

ROOM = (0.013, 0.021, 6.013, 4.021)


@pytest.fixture(scope="module")
def room_nav():
    sc = ExactScene("room", ROOM)
    x0, z0, x1, z1 = ROOM
    sc.solid(_rect(x0 - 0.15, z0 - 0.15, x1 + 0.15, z1 + 0.15), -0.1, 0.0, obstacle=False)
    return build_navmesh(sc.arrays(), NavSettings(agent_radius=0.1))


def _table(names: list[str]) -> SemanticTable:
    """One 0.4 m box per name on the room's floor, in a row; categories indexed as scans' are
    (mpcat40 numbers, other names after them); category -1 for UNMATCHED."""
    cats = mpcat40() + sorted({n for n in names if n != UNMATCHED} - set(mpcat40()))
    n = len(names)
    aabb = np.array([[0.3 + 0.45 * (i % 12), 0.0, 0.3 + 1.0 * (i // 12), 0.7 + 0.45 * (i % 12), 0.8,
                      0.7 + 1.0 * (i // 12)] for i in range(n)], np.float32)
    return SemanticTable(ids=np.arange(1, n + 1, dtype=np.int32),
                         category=np.array([cats.index(x) if x != UNMATCHED else -1 for x in names], np.int32),
                         raw_names=list(names), region=np.full(n, -1, np.int32), aabb=aabb,
                         points=np.full((n, 1, 3), np.nan, np.float32), categories=cats)


def _dist(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, float) - np.asarray(b, float)))


def test_every_mpcat40_category_its_own_colour_away_from_the_greys():
    names = [n for n in mpcat40() if n not in SKIP] + [UNMATCHED]
    col = category_colours(names)
    assert col[UNMATCHED] == UNMATCHED_RGB
    rgb = [col[n] for n in names if n != UNMATCHED]
    assert min(_dist(a, b) for i, a in enumerate(rgb) for b in rgb[:i]) >= 40
    for grey in (UNMATCHED_RGB, PLAIN, (60, 60, 60)):
        assert min(_dist(c, grey) for c in rgb) >= 60, grey


def test_colours_stable_across_legends_and_runs():
    a = category_colours(["chair", "toilet", "fridge", "indoor_plant"])
    b = category_colours(["toilet", "sofa", "chair", "bed"])
    assert a["chair"] == b["chair"] and a["toilet"] == b["toilet"]
    assert category_colours(["fridge", "indoor_plant", "chair", "toilet"]) == a   # order of names: no matter
    # names outside mpcat40 (ReplicaCAD's) never take a colour an mpcat40 name of the legend has
    many = [n for n in mpcat40() if n not in SKIP] + [f"thing_{k}" for k in range(20)]
    col = category_colours(many)
    assert len(set(col.values())) == len(many)


def test_semantic_preview_legend_distinct_and_boxes_seen(room_nav, tmp_path):
    # the old palette's collisions: chair/shower (3, 23), bed/shelving (11, 31), plant/seating (14, 34),
    # toilet vs (unmatched); cabinet in the old island-0 floor blue
    names = ["chair", "shower", "bed", "shelving", "plant", "seating", "toilet", "cabinet", UNMATCHED, "towel"]
    info = write_semantic_preview(room_nav, _table(names), tmp_path / "s.png")
    legend = {n: tuple(c) for n, _, c in info["legend"]}
    assert set(legend) == set(names)
    rgb = list(legend.values())
    assert min(_dist(a, b) for i, a in enumerate(rgb) for b in rgb[:i]) >= 40
    from PIL import Image

    png = np.asarray(Image.open(tmp_path / "s.png").convert("RGB")).astype(float)
    for n, c in legend.items():   # each box's outline is on the map in its legend colour
        assert (np.abs(png - np.array(c, float)).max(axis=2) == 0).sum() >= 20, n
    # the floor is grey, not a palette colour: no category's colour is the navigable area's
    grey = (np.ptp(png, axis=2) == 0) & (png[..., 0] > 150) & (png[..., 0] < 235)
    assert grey.mean() > 0.3


def test_a_ceiling_lamp_is_drawn_on_the_floor_below(tmp_path):
    """A lamp hanging 0.25 m under the upper floor's level was drawn on the upper floor (its
    bottom + 0.5 m reached it; journey viz F13): an object is on a floor not above its top."""
    from PIL import Image

    sc = ExactScene("stacked", ROOM)
    x0, z0, x1, z1 = ROOM
    for y in (0.0, 3.0):   # two storeys over the same rectangle
        sc.solid(_rect(x0 - 0.15, z0 - 0.15, x1 + 0.15, z1 + 0.15), y - 0.1, y, obstacle=False)
    nav = build_navmesh(sc.arrays(), NavSettings(agent_radius=0.1))
    t = _table(["lighting", "chair"])
    t.aabb[0] = [2.0, 2.55, 2.0, 2.6, 2.75, 2.6]    # under the upper slab (2.9 .. 3.0)
    t.aabb[1] = [4.0, 3.0, 2.0, 4.6, 3.8, 2.6]      # standing on the upper floor
    info = write_semantic_preview(nav, t, tmp_path / "s.png")
    assert info["floors"] == 2
    png = np.asarray(Image.open(tmp_path / "s.png").convert("RGB"))[:info["scale_bar_row"]]
    half = png.shape[1] // 2
    for name, c in ((n, c) for n, _, c in info["legend"]):
        cols = np.nonzero((png == np.array(c, np.uint8)).all(axis=2).any(axis=0))[0]
        assert cols.size, name
        assert (cols.max() < half) if name == "lighting" else (cols.min() > half), name


def test_an_object_off_the_map_is_not_drawn_on_the_next_floors_panel(tmp_path):
    """A floor-0 chair 1 m past the navigable area's edge was drawn on floor 1's panel, beside
    floor 1's objects (journey viz F14): boxes are clipped to their own panel, and one wholly off
    it is counted ('off the map'), not drawn elsewhere."""
    from PIL import Image

    sc = ExactScene("stacked", (0.013, 0.021, 4.013, 3.021))
    for y in (0.0, 3.0):
        sc.solid(_rect(0.013, 0.021, 4.013, 3.021), y - 0.1, y, obstacle=False)
    nav = build_navmesh(sc.arrays(), NavSettings(agent_radius=0.1))
    t = _table(["chair", "sofa", "bed"])
    t.aabb[0] = [5.0, 0.0, 1.0, 5.6, 0.8, 1.6]     # floor 0, wholly past the map's right edge
    t.aabb[1] = [1.0, 3.0, 1.0, 1.6, 3.8, 1.6]     # floor 1
    t.aabb[2] = [3.5, 0.0, 1.0, 4.6, 0.6, 2.0]     # floor 0, half past the edge: clipped
    info = write_semantic_preview(nav, t, tmp_path / "s.png")
    assert info["objects"] == 2 and info["outside"] == 1
    assert [n for n, _, _ in info["legend"]] == ["bed", "sofa"]
    png = np.asarray(Image.open(tmp_path / "s.png").convert("RGB"))[:info["scale_bar_row"]]
    half = png.shape[1] // 2
    bed = np.nonzero((png == np.array(dict((n, c) for n, _, c in info["legend"])["bed"], np.uint8)).all(axis=2).any(axis=0))[0]
    assert bed.size and bed.max() < half   # clipped at floor 0's panel edge
