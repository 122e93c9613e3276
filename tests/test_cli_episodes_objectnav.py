"""`bps-assets episodes --task objectnav`: habitat's ObjectNav v1 files from a navmesh and its packed
scene's objects, and one line naming the file for a scene without semantic annotations."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.nav.objectnav_files import read_objectnav_dataset
from bps_assets.readers.semantic_categories import mpcat40, objectnav_hm3d
from bps_assets.packed_scene import convert_scene
from cli.main import main
from objectnav_scenes import two_rooms
from packed_scene_fixtures import make_doc


def _packed_with_objects(s, path):
    """``two_rooms`` converted with its objects as an annotation (the file's own categories):
    a real packed scene with the semantic section, as preprocess writes it."""
    from bps_assets.scene import Mesh, SceneDocument
    from bps_assets.semantics import Annotation, ObjectRecord

    t = s.table
    objs = [ObjectRecord(int(t.ids[i]), t.raw_names[i], -1, int(t.ids[i]), category=t.category_name(i))
            for i in range(len(t))]
    ann = Annotation(s.vertices.astype(np.float32), s.triangles.astype(np.int64), objs,
                     face_object=s.tri_object.astype(np.int32), frame="habitat")
    doc = SceneDocument(meshes=[Mesh(positions=s.vertices.astype(np.float32), indices=s.triangles.astype(np.uint32))])
    convert_scene(doc, path, semantic=ann)


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """The preprocess layout: OUT/navmeshes/NAME.navmesh.bps beside OUT/scenes/NAME.bps; scene
    Plain has no semantics."""
    root = tmp_path_factory.mktemp("pre")
    s = two_rooms()
    (root / "navmeshes").mkdir()
    for name in ("TwoRooms", "Plain"):
        s.navmesh.save(root / "navmeshes" / f"{name}.navmesh.bps")
    _packed_with_objects(s, root / "scenes" / "TwoRooms.bps")
    convert_scene(make_doc(8, textures=0), root / "scenes" / "Plain.bps")  # no semantics
    return root, s


def test_a_scene_without_semantics_is_one_line_and_nothing_is_written(layout, tmp_path):
    root, _ = layout
    r = CliRunner().invoke(main, ["episodes", str(root / "navmeshes" / "Plain.navmesh.bps"), "--task",
                                  "objectnav", "-o", str(tmp_path / "on"), "--split", "val", "--per-scene", "2"])
    assert r.exit_code == 2
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert str(root / "scenes" / "Plain.bps") in line and "no semantic annotations" in line
    assert not (tmp_path / "on").exists()


def test_objectnav_files_from_the_cli(layout, tmp_path):
    root, s = layout
    args = ["episodes", str(root / "navmeshes" / "TwoRooms.navmesh.bps"), "--task", "objectnav", "-o",
            str(tmp_path / "on"), "--split", "val", "--per-scene", "4", "--seed", "3"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    ds = read_objectnav_dataset(tmp_path / "on" / "val")
    assert ds.category_to_task_category_id == objectnav_hm3d()  # default --categories hm3d
    # habitat's map: the mpcat40 index, for the categories this scene has no object of too
    assert ds.category_to_scene_annotation_category_id == {c: mpcat40().index(c) for c in objectnav_hm3d()}
    assert len(ds.episodes) == 4 and {e["object_category"] for e in ds.episodes} == {"chair", "sofa"}
    assert {e["scene_id"] for e in ds.episodes} == {"TwoRooms.glb"}
    r = CliRunner().invoke(main, args + ["--overwrite", "--json"])
    assert r.exit_code == 0, r.output
    (st,) = json.loads(r.stdout)["scenes"]
    assert st["categories_not_in_scene"] == 4   # bed, plant, toilet, tv_monitor: no such object
    r = CliRunner().invoke(main, args + ["--overwrite", "--categories", "table,chair"])
    assert r.exit_code == 0, r.output
    ds2 = read_objectnav_dataset(tmp_path / "on" / "val")
    assert ds2.category_to_task_category_id == {"table": 0, "chair": 1}
    assert {e["object_category"] for e in ds2.episodes} == {"table", "chair"}
    r = CliRunner().invoke(main, args + ["--overwrite", "--categories", "a,a"])
    assert r.exit_code == 2 and "--categories" in r.output


def test_typed_category_names_are_checked(layout, tmp_path):
    """A typed --categories list: 'Chair' (case) is refused before any scene is read, 'tv' (no
    mpcat40 category, no scene's) once they are, naming it and tv_monitor, nothing written; a valid
    category no scene has (bed) is one warning line and keeps its id."""
    root, _ = layout
    out = tmp_path / "on"
    args = ["episodes", str(root / "navmeshes" / "TwoRooms.navmesh.bps"), "--task", "objectnav", "-o",
            str(out), "--split", "val", "--per-scene", "4", "--seed", "3", "--categories"]
    r = CliRunner().invoke(main, [*args, "Chair"])
    assert r.exit_code != 0 and "'Chair'" in r.stderr and "did you mean 'chair'" in r.stderr, r.output
    assert "view point" not in r.output
    r = CliRunner().invoke(main, [*args, "chair,tv"])
    assert r.exit_code != 0 and "'tv'" in r.stderr and "'tv_monitor'" in r.stderr, r.output
    assert not out.exists()
    r = CliRunner().invoke(main, [*args, "chair,bed"])
    assert r.exit_code == 0, r.output
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: no scene has")]
    assert "bed" in line and "chair" not in line
    assert read_objectnav_dataset(out / "val").category_to_task_category_id == {"chair": 0, "bed": 1}


def test_named_category_sets_have_ids_that_do_not_depend_on_the_scenes(layout, tmp_path):
    """--categories all: every mpcat40 object class in mpcat40 order (not wall, floor, ceiling,
    void, unlabeled), whatever the scenes have; mp3d: habitat's 21 MP3D goal categories."""
    from bps_assets.readers.semantic_categories import goal_categories

    root, _ = layout
    args = ["episodes", str(root / "navmeshes" / "TwoRooms.navmesh.bps"), "--task", "objectnav", "-o",
            str(tmp_path / "on"), "--split", "val", "--per-scene", "4", "--seed", "3"]
    r = CliRunner().invoke(main, args + ["--categories", "all"])
    assert r.exit_code == 0, r.output
    task = read_objectnav_dataset(tmp_path / "on" / "val").category_to_task_category_id
    objects = [c for c in mpcat40() if c not in ("void", "wall", "floor", "ceiling", "unlabeled")]
    assert task == goal_categories("all") == {c: i for i, c in enumerate(objects)}
    assert task["chair"] == 0 and task["sofa"] == objects.index("sofa") and len(task) == 37
    r = CliRunner().invoke(main, args + ["--categories", "mp3d", "--overwrite"])
    assert r.exit_code == 0, r.output
    task = read_objectnav_dataset(tmp_path / "on" / "val").category_to_task_category_id
    assert len(task) == 21 and task["chair"] == 0 and task["sofa"] == 5 and task["clothes"] == 20


def _composed_rooms(src, scenes=(("a", ("chair", "sofa")), ("b", ("chair", "sofa", "bin")))):
    """Composed scenes of one dataset whose category lists differ (default: a has a chair and a
    sofa, ["chair", "sofa"], b a bin as well, ["bin", "chair", "sofa"]), one object per category
    (its template and category named alike) in the room's corners; returns the dataset config."""
    from bps_assets.scene_dataset.standin import write_box_room

    write_box_room(src / "stages" / "room.glb", (-3, 0, -3), (3, 2.5, 3))
    (src / "stages" / "room.stage_config.json").write_text(json.dumps({"render_asset": "room.glb"}))
    names = list(dict.fromkeys(o for _, objs in scenes for o in objs))
    for name in names:
        write_box_room(src / "objects" / f"{name}.glb", (-0.3, 0, -0.3), (0.3, 0.6, 0.3))
        (src / "objects" / f"{name}.object_config.json").write_text(json.dumps(
            {"render_asset": f"{name}.glb", "COM": [0, 0, 0], "category": name}))
    (src / "scenes").mkdir()
    at = dict(zip(names, ([1.5, 0, 1.5], [-1.5, 0, -1.5], [1.5, 0, -1.5], [-1.5, 0, 1.5])))
    for scene, objs in scenes:
        (src / "scenes" / f"{scene}.scene_instance.json").write_text(json.dumps({
            "stage_instance": {"template_name": "room"},
            "object_instances": [{"template_name": o, "translation": at[o]} for o in objs]}))
    cfg = src / "d.scene_dataset_config.json"
    cfg.write_text(json.dumps({"stages": {"paths": {".json": ["stages"]}}, "objects": {"paths": {".json": ["objects"]}},
                               "scene_instances": {"paths": {".json": ["scenes"]}}}))
    return cfg


def test_each_content_file_carries_its_own_scenes_annotation_map(tmp_path):
    """Composed scenes number categories in their own lists (chair is 0 in a, 1 in b): each
    content file carries its scene's indices, the split file the ones all scenes share (-1
    where they differ); the scenes' categories --categories leaves out are named on one line."""
    import gzip

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    cfg = _composed_rooms(tmp_path / "src")
    out = tmp_path / "out"
    assert preprocess(cfg.parent, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=0)).ok
    navs = sorted(str(p) for p in (out / "navmeshes").iterdir())
    r = CliRunner().invoke(main, ["episodes", *navs, "--task", "objectnav", "-o", str(tmp_path / "on"),
                                  "--split", "train", "--per-scene", "4", "--any-subset"])
    assert r.exit_code == 0, r.output
    ann = "category_to_scene_annotation_category_id"
    doc = {n: json.loads(gzip.decompress((tmp_path / "on" / "train" / "content" / f"{n}.json.gz").read_bytes()))
           for n in ("a", "b")}
    nothing = {c: -1 for c in ("bed", "plant", "toilet", "tv_monitor")}
    assert doc["a"][ann] == {"chair": 0, "sofa": 1, **nothing}
    assert doc["b"][ann] == {"chair": 1, "sofa": 2, **nothing}
    split = json.loads(gzip.decompress((tmp_path / "on" / "train" / "train.json.gz").read_bytes()))
    assert split[ann] == {"chair": -1, "sofa": -1, **nothing}
    assert all(d["category_to_task_category_id"] == objectnav_hm3d() for d in (*doc.values(), split))
    (line,) = [ln for ln in r.stderr.splitlines() if "not in --categories" in ln]
    assert line.startswith("1 object categories") and "bin (1 scene)" in line
    ds = read_objectnav_dataset(tmp_path / "on" / "train")   # habitat's reading: the last file's map
    assert len(ds.episodes) == 8 and set(ds.category_to_scene_annotation_category_id) == set(objectnav_hm3d())


RCAD = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "replicacad"


@pytest.mark.skipif(not RCAD.is_dir(), reason="../shared/datasets/replicacad absent")
def test_replicacad_indoor_plant_and_tv_screen_are_hm3d_plant_and_tv_monitor(tmp_path):
    """ReplicaCAD's lexicon names its plants indoor_plant and its TV tv_screen (read here from the
    real dataset); under --categories hm3d they are goals of plant and tv_monitor, keeping the
    scene's own annotation ids, and the line naming left-out categories no longer lists them."""
    import gzip

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from bps_assets.scene_dataset import habitat as H

    sc = H.read_scene_instance(H.read_dataset_config(RCAD / "replicaCAD.scene_dataset_config.json"),
                               "v3_sc0_staging_16", skip_missing=True)
    by_template = {i.name: i.category for i in sc.instances}
    plant, tv = by_template["frl_apartment_indoor_plant_01"], by_template["frl_apartment_tv_screen"]
    assert (plant, tv) == ("indoor_plant", "tv_screen")
    cfg = _composed_rooms(tmp_path / "src", (("s", ("chair", plant, tv, "tv_stand")),))
    out = tmp_path / "out"
    assert preprocess(cfg.parent, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=0)).ok
    r = CliRunner().invoke(main, ["episodes", str(out / "navmeshes" / "s.navmesh.bps"), "--task", "objectnav",
                                  "-o", str(tmp_path / "on"), "--split", "train", "--per-scene", "6",
                                  "--any-subset"])
    assert r.exit_code == 0, r.output
    doc = json.loads(gzip.decompress((tmp_path / "on" / "train" / "content" / "s.json.gz").read_bytes()))
    own = sorted(["chair", plant, tv, "tv_stand"])   # the composed scene's category list
    assert doc["category_to_scene_annotation_category_id"] == {
        "chair": own.index("chair"), "plant": own.index(plant), "tv_monitor": own.index(tv),
        "bed": -1, "toilet": -1, "sofa": -1}
    assert {g["object_category"] for gs in doc["goals_by_category"].values() for g in gs} == \
        {"chair", "plant", "tv_monitor"}
    assert {e["object_category"] for e in doc["episodes"]} == {"chair", "plant", "tv_monitor"}
    (line,) = [ln for ln in r.stderr.splitlines() if "not in --categories" in ln]
    assert line.startswith("1 object categories") and "tv_stand (1 scene)" in line and plant not in line


def test_a_navmesh_for_another_agent_is_one_warning_naming_the_flags(layout, tmp_path):
    """bps-train refuses a dataset whose navmeshes were built for another agent than the task's
    (habitat's: ObjectNav 0.18 m / 0.88 m, PointNav 0.1 m / 1.5 m); `episodes` says so in one line
    (a warning: make() takes any agent in the task options) and writes the episodes. two_rooms'
    navmesh is ObjectNav's agent: no warning there, one for PointNav."""
    root, s = layout
    assert (s.navmesh.settings.agent_radius, s.navmesh.settings.agent_height) == (0.18, 0.88)
    nav = str(root / "navmeshes" / "TwoRooms.navmesh.bps")
    r = CliRunner().invoke(main, ["episodes", nav, "--task", "objectnav", "-o", str(tmp_path / "on"),
                                  "--split", "val", "--per-scene", "2"])
    assert r.exit_code == 0 and "another agent" not in r.output, r.output
    r = CliRunner().invoke(main, ["episodes", nav, "-o", str(tmp_path / "pn"), "--split", "val", "--per-scene", "2"])
    assert r.exit_code == 0, r.output
    (line,) = [ln for ln in r.stderr.splitlines() if "another agent" in ln]
    assert line.startswith("warning: 1 navmesh(es) (TwoRooms) were built for another agent (radius 0.18 m, "
                           "height 0.88 m) than pointnav's (radius 0.1 m, height 1.5 m)")
    assert "--agent-radius 0.1 --agent-height 1.5" in line
    assert (tmp_path / "pn" / "val" / "content" / "TwoRooms.json.gz").is_file()
