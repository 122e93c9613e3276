"""`bps-assets episodes --task objectnav`: habitat's ObjectNav v1 files from a navmesh and its packed
scene's objects, and one line naming the file for a scene without semantic annotations."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from bps_assets.nav import objectnav_episodes as on
from bps_assets.nav.objectnav_files import read_objectnav_dataset
from bps_assets.readers.semantic_categories import objectnav_hm3d
from bps_assets.packed_scene import convert_scene
from cli.main import main
from objectnav_scenes import two_rooms
from packed_scene_fixtures import make_doc


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """The preprocess layout: OUT/navmeshes/NAME.navmesh.bps beside OUT/scenes/NAME.bps."""
    root = tmp_path_factory.mktemp("pre")
    s = two_rooms()
    (root / "navmeshes").mkdir()
    s.navmesh.save(root / "navmeshes" / "TwoRooms.navmesh.bps")
    convert_scene(make_doc(8, textures=0), root / "scenes" / "TwoRooms.bps")  # no semantics
    return root, s


def test_a_scene_without_semantics_is_one_line_and_nothing_is_written(layout, tmp_path):
    root, _ = layout
    r = CliRunner().invoke(main, ["episodes", str(root / "navmeshes" / "TwoRooms.navmesh.bps"), "--task",
                                  "objectnav", "-o", str(tmp_path / "on"), "--split", "val", "--per-scene", "2"])
    assert r.exit_code == 2
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert str(root / "scenes" / "TwoRooms.bps") in line and "no semantic annotations" in line
    assert not (tmp_path / "on").exists()


def test_objectnav_files_from_the_cli(layout, tmp_path, monkeypatch):
    root, s = layout
    seen = []

    def fake(path):  # the semantics helper's packed section is not merged yet: the exact scene's
        seen.append(path)
        return s.vertices, s.triangles, s.tri_object, s.table

    monkeypatch.setattr(on, "semantic_scene", fake)
    args = ["episodes", str(root / "navmeshes" / "TwoRooms.navmesh.bps"), "--task", "objectnav", "-o",
            str(tmp_path / "on"), "--split", "val", "--per-scene", "4", "--seed", "3"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert seen == [root / "scenes" / "TwoRooms.bps"]
    ds = read_objectnav_dataset(tmp_path / "on" / "val")
    assert ds.category_to_task_category_id == objectnav_hm3d()  # default --categories hm3d
    assert ds.category_to_scene_annotation_category_id["chair"] == 0
    assert ds.category_to_scene_annotation_category_id["bed"] == -1  # not a category of this scene
    assert len(ds.episodes) == 4 and {e["object_category"] for e in ds.episodes} == {"chair", "sofa"}
    assert {e["scene_id"] for e in ds.episodes} == {"TwoRooms.glb"}
    r = CliRunner().invoke(main, args + ["--overwrite", "--categories", "table,chair"])
    assert r.exit_code == 0, r.output
    ds2 = read_objectnav_dataset(tmp_path / "on" / "val")
    assert ds2.category_to_task_category_id == {"table": 0, "chair": 1}
    assert {e["object_category"] for e in ds2.episodes} == {"table", "chair"}
    r = CliRunner().invoke(main, args + ["--overwrite", "--categories", "a,a"])
    assert r.exit_code == 2 and "--categories" in r.output
