"""An episode video's map keeps drawing the agent and its path after the agent leaves its start's
floor (journey viz F8: both vanished), projected onto the start floor's map as habitat-lab's
TopDownMap.update_map draws them (to_grid of x and z, whatever the height)."""
from __future__ import annotations

import numpy as np
import pytest

from bps_assets.nav import NavSettings, build_navmesh
from bps_assets.nav.exact_scenes import ExactScene, _rect
from bps_assets.nav.topdown import KINDS, MapOptions, TopDownMap

UPPER = 3.0


@pytest.fixture(scope="module")
def two_floors():
    """Two 4 x 3 m slabs, the second 3 m above the first and shifted 5 m in x (two floors)."""
    sc = ExactScene("two_floors", (0.013, 0.021, 9.013, 3.021))
    sc.solid(_rect(0.013, 0.021, 4.013, 3.021), -0.1, 0.0, obstacle=False)
    sc.solid(_rect(5.013, 0.021, 9.013, 3.021), UPPER - 0.1, UPPER, obstacle=False)
    nav = build_navmesh(sc.arrays(), NavSettings(agent_radius=0.1))
    assert len(TopDownMap(nav).levels) == 2
    return nav


def _colour_px(img, kind) -> int:
    return int(np.all(np.asarray(img)[..., :3] == np.array(KINDS[kind][0], np.uint8), axis=-1).sum())


def test_canvas_draws_another_floors_points_on_a_given_floor(two_floors):
    tdm = TopDownMap(two_floors, MapOptions(metres_per_pixel=0.05, floors=(0,)))
    up = [7.0, UPPER, 1.5]
    assert _colour_px(tdm.canvas().point(up, "agent", yaw=0.0).im, "agent") == 0   # not this floor's
    c = tdm.canvas().point(up, "agent", yaw=0.0, floor=0)
    assert _colour_px(c.im, "agent") > 10
    col, row = tdm.pixel_of(np.array([[7.0, 0.0, 1.5]]))[0]
    assert np.all(np.asarray(c.im)[row, col] == KINDS["agent"][0])
    p = tdm.canvas().path([[2.0, 0.0, 1.5], [7.0, UPPER, 1.5]], "agent_path", floor=0)
    assert _colour_px(p.im, "agent_path") >= 5 / 0.05 - 2   # one unbroken 5 m line


def test_recorder_keeps_the_agent_after_it_changes_floor(two_floors, tmp_path):
    from PIL import Image

    from bps_train.video import EpisodeRecorder, FrameLayout
    from bps_train.video_io import VideoOptions

    rec = EpisodeRecorder(tmp_path, 1, navmesh_for=lambda s: two_floors, background=False,
                          video=VideoOptions(format="png"), action_names=("STOP", "MOVE_FORWARD"))
    positions = [[1.0, 0.0, 1.5], [2.0, 0.0, 1.5], [6.0, UPPER, 1.5], [1.0, 0.0, 1.5]]

    def info(k, done):
        return {"env_id": np.array([0]), "position": np.array([positions[k]], np.float32),
                "rotation": np.array([[0, 0, 0, 1]], np.float32), "distance_to_goal": np.array([1.0]),
                "scene_id": ["two_floors"],
                "episode": {"episode_id": ["7"], "scene_id": ["two_floors"], "success": np.array([0.0]),
                            "spl": np.array([0.0]), "length": np.array([3]), "distance_to_goal": np.array([1.0])}}

    obs = {"depth": np.zeros((1, 8, 8, 1), np.float32)}
    rec.reset(obs, info(0, False))
    for k in (1, 2, 3):
        rec.step(obs, np.array([k == 3]), info(k, k == 3), actions=np.array([1]))
    (folder,) = rec.close()
    frames = sorted(folder.glob("frame_*.png"))
    assert len(frames) == 3
    layout = FrameLayout(["depth"], (8, 8))
    tdm = rec.episode_map("two_floors", positions[0], layout)   # the frame's map (its legend below it)
    last = np.asarray(Image.open(frames[-1]).convert("RGB"))[:tdm.height, layout.map_x:]
    assert _colour_px(last, "agent") > 10   # the agent, now upstairs, still on the map
    col, row = tdm.pixel_of(np.array([[6.0, 0.0, 1.5]]))[0]
    assert np.all(last[row, col] == KINDS["agent"][0])


def test_map_title_spans_the_map_column_and_is_cut_with_dots():
    """The video's map title (floor first, then the scene) uses the map column's whole width and a
    scene name too long for it ends in '...' inside the frame (journey viz F7: cut mid-glyph at
    the narrow map's edge, the floor's height lost)."""
    from bps_assets.nav.topdown import HEADER
    from bps_train.video import FrameLayout, _map_title

    layout = FrameLayout(["depth"], (64, 64))
    frame = np.full((layout.height, layout.width, 3), 250, np.uint8)
    _map_title(frame, layout, "floor 0: y=-0.10 m, v3_sc0_staging_00")
    ink = np.nonzero((frame[:HEADER - 2, layout.map_x:] < 128).all(axis=2).any(axis=0))[0]
    assert 150 < ink.max() < layout.map_w - 3   # wider than a tall map's ~150 px, inside the column
    frame[:] = 250
    _map_title(frame, layout, "floor 0: y=-0.10 m, " + "a_very_long_scene_name_" * 6)
    ink = np.nonzero((frame[:HEADER - 2, layout.map_x:] < 128).all(axis=2).any(axis=0))[0]
    assert ink.max() < layout.map_w - 3


def test_sensor_panels_fit_the_panel_size_by_an_even_factor():
    """'the largest even whole factor that fits 256 px' (TRAINING.md): odd fits were rounded up
    (48 px -> x6 = 288 px, 80 -> x4 = 320; journey viz F11); 2 only where no even factor fits."""
    from bps_train.video import FrameLayout

    for res in (32, 36, 48, 64, 72, 80, 96, 128):
        lay = FrameLayout(["rgb"], (res, res))
        assert lay.scale % 2 == 0 and lay.panel_w <= 256 and (lay.scale + 2) * res > 256, res
    for res in (160, 256):
        assert FrameLayout(["rgb"], (res, res)).scale == 2
