"""Episode files both ways with habitat-lab: its own ``ObjectNavDatasetV1`` / ``PointNavDatasetV1``
read what we write, and we read what they write (``to_json``). habitat-lab is imported with its
simulator stubbed (tests/habitat_lab_stub.py); those tests skip when it is not installed
(``pip install --no-deps habitat-lab==0.3.320260507``: its wheel pins numpy 1.26.4). A fixture
written to habitat's documented ObjectNav v1 layout (the shape of the released
objectnav_hm3d_v1 content files) runs always."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from bps_assets.errors import InputError
from bps_assets.nav.episodes import generate_episodes, read_pointnav_dataset, write_pointnav_dataset
from bps_assets.nav.objectnav_episodes import objectnav_scene
from bps_assets.nav.objectnav_files import goals_key, read_objectnav_dataset, write_objectnav_dataset
from episode_files import write_gz
from habitat_lab_stub import habitat_lab  # noqa: F401 - the fixture
from objectnav_scenes import two_rooms

SID = "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"


@pytest.fixture(scope="module")
def generated():
    s = two_rooms()
    ds = objectnav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, SID, 9, seed=2,
                         categories={"chair": 0, "table": 2, "sofa": 5, "bed": 1})
    return s, ds


def _config(root, split="val"):
    return SimpleNamespace(data_path=str(root / "{split}" / "{split}.json.gz"), split=split,
                           scenes_dir="data/scene_datasets", content_scenes=["*"])


def test_habitat_reads_our_objectnav_files(habitat_lab, generated, tmp_path):
    _, ds = generated
    write_objectnav_dataset(tmp_path, "val", {"TEEsavR23oF": ds}, ds.category_to_task_category_id,
                            ds.category_to_scene_annotation_category_id)
    h = habitat_lab.ObjectNavDatasetV1(_config(tmp_path))
    assert h.category_to_task_category_id == {"chair": 0, "table": 2, "sofa": 5, "bed": 1}
    assert h.category_to_scene_annotation_category_id == {"chair": 0, "table": 2, "sofa": 1, "bed": -1}
    assert len(h.episodes) == len(ds.episodes) == 9
    for ours, theirs in zip(ds.episodes, h.episodes):
        assert theirs.scene_id == "data/scene_datasets/" + SID
        assert theirs.object_category == ours["object_category"]
        assert theirs.goals_key == goals_key(SID, ours["object_category"])
        assert list(theirs.start_position) == pytest.approx(ours["start_position"])
        assert theirs.info["geodesic_distance"] == pytest.approx(ours["info"]["geodesic_distance"])
        goals = ds.goals_of(ours)
        assert [g.object_id for g in theirs.goals] == [g["object_id"] for g in goals]
        vps = [vp.agent_state.position for g in theirs.goals for vp in g.view_points]
        np.testing.assert_allclose(vps, ds.view_points_of(ours))
        assert [vp.iou for vp in theirs.goals[0].view_points] == pytest.approx(
            [vp["iou"] for vp in goals[0]["view_points"]])


def _habitat_objectnav(habitat_lab, ds):
    """The same episodes built with habitat-lab's own classes."""
    from habitat.core.simulator import AgentState
    from habitat.tasks.nav.object_nav_task import ObjectGoal, ObjectGoalNavEpisode, ObjectViewLocation

    h = habitat_lab.ObjectNavDatasetV1()
    h.category_to_task_category_id = dict(ds.category_to_task_category_id)
    h.category_to_scene_annotation_category_id = dict(ds.category_to_scene_annotation_category_id)
    for key, goals in ds.goals_by_category.items():
        h.goals_by_category[key] = [ObjectGoal(
            position=g["position"], object_id=g["object_id"], object_category=g["object_category"],
            object_name=g["object_name"], view_points=[ObjectViewLocation(
                AgentState(vp["agent_state"]["position"], vp["agent_state"]["rotation"]), vp["iou"])
                for vp in g["view_points"]]) for g in goals]
    for e in ds.episodes:
        ep = ObjectGoalNavEpisode(episode_id=e["episode_id"], scene_id=e["scene_id"],
                                  start_position=e["start_position"], start_rotation=e["start_rotation"],
                                  info=e["info"], object_category=e["object_category"], goals=[])
        ep.goals = h.goals_by_category[ep.goals_key]
        h.episodes.append(ep)
    return h


def test_we_read_habitats_objectnav_files(habitat_lab, generated, tmp_path):
    _, ds = generated
    h = _habitat_objectnav(habitat_lab, ds)
    text = h.to_json()  # habitat's writer: goals_by_category, episodes with goals emptied
    doc = json.loads(text)
    assert all(e["goals"] == [] for e in doc["episodes"]) and "goals_by_category" in doc
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", text)
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": [], **{k: doc[k] for k in (
        "category_to_task_category_id", "category_to_scene_annotation_category_id")}})
    back = read_objectnav_dataset(tmp_path / "val")
    assert [e["episode_id"] for e in back.episodes] == [e["episode_id"] for e in ds.episodes]
    assert [e["object_category"] for e in back.episodes] == [e["object_category"] for e in ds.episodes]
    for ours, theirs in zip(ds.episodes, back.episodes):
        np.testing.assert_allclose(back.view_points_of(theirs), ds.view_points_of(ours), atol=1e-6)
        assert theirs["info"]["closest_goal_object_id"] == ours["info"]["closest_goal_object_id"]
    # and habitat reads its own file back to the same goals (the round trip closes)
    h2 = habitat_lab.ObjectNavDatasetV1(_config(tmp_path))
    assert [len(e.goals) for e in h2.episodes] == [len(ds.goals_of(e)) for e in ds.episodes]


def test_objectnav_episode_ids_are_habitats(habitat_lab, generated, tmp_path):
    """habitat numbers ObjectNav episodes by their index in each file (ObjectNavDatasetV1.from_json),
    whatever their own ids, repeats included: ours are the same ids for the same episodes, so
    per-episode results join with a habitat eval (the user-journey tester's hon/ and dup/ files)."""
    _, ds = generated
    h = _habitat_objectnav(habitat_lab, ds)
    h.episodes = h.episodes[::-1]
    for k, e in enumerate(h.episodes):
        e.episode_id = "h0" if k % 3 == 0 else f"h{len(h.episodes) - k}"   # reversed, some repeated
    text = h.to_json()
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", text)
    doc = json.loads(text)
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": [], **{k: doc[k] for k in (
        "category_to_task_category_id", "category_to_scene_annotation_category_id")}})
    theirs = habitat_lab.ObjectNavDatasetV1(_config(tmp_path))
    ours = read_objectnav_dataset(tmp_path / "val")
    assert [e["episode_id"] for e in ours.episodes] == [e.episode_id for e in theirs.episodes]
    assert len({e.episode_id for e in theirs.episodes}) == len(ds.episodes)
    for o, t in zip(ours.episodes, theirs.episodes):
        assert o["object_category"] == t.object_category
        assert o["start_position"] == pytest.approx(list(t.start_position))


def test_pointnav_episode_ids_are_the_files_as_habitats(habitat_lab, generated, tmp_path):
    """habitat's PointNavDatasetV1 (ImageNav reads it too) keeps each file's own ids: so do we."""
    s, _ = generated
    eps = generate_episodes(s.navmesh, "gibson/TwoRooms.glb", 4, seed=0)[::-1]
    for k, e in enumerate(eps):
        e["episode_id"] = f"p{7 * k}"
    write_pointnav_dataset(tmp_path, "val", {"TwoRooms": eps})
    h = habitat_lab.PointNavDatasetV1(_config(tmp_path))
    assert [e["episode_id"] for e in read_pointnav_dataset(tmp_path / "val")] == [e.episode_id for e in h.episodes]
    assert [e.episode_id for e in h.episodes] == ["p0", "p7", "p14", "p21"]


def test_goals_inside_episodes_are_read_like_habitats_dedup(habitat_lab, generated, tmp_path):
    """Older files carry the goals in every episode and no goals_by_category."""
    _, ds = generated
    eps = [dict(e, goals=ds.goals_of(e)) for e in ds.episodes]
    for e in eps:
        e.pop("object_category")  # habitat takes it from goals[0]
    doc = {"episodes": eps, "category_to_task_category_id": ds.category_to_task_category_id,
           "category_to_mp3d_category_id": ds.category_to_scene_annotation_category_id}
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", doc)
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": [], "category_to_task_category_id":
                                           ds.category_to_task_category_id, "category_to_mp3d_category_id":
                                           ds.category_to_scene_annotation_category_id})
    ours = read_objectnav_dataset(tmp_path / "val")
    h = habitat_lab.ObjectNavDatasetV1(_config(tmp_path))
    assert [e["object_category"] for e in ours.episodes] == [e.object_category for e in h.episodes]
    assert set(ours.goals_by_category) == set(h.goals_by_category)
    assert ours.category_to_scene_annotation_category_id == h.category_to_scene_annotation_category_id


def test_pointnav_both_ways(habitat_lab, generated, tmp_path):
    s, _ = generated
    eps = generate_episodes(s.navmesh, "gibson/TwoRooms.glb", 5, seed=0)
    write_pointnav_dataset(tmp_path, "val", {"TwoRooms": eps})
    h = habitat_lab.PointNavDatasetV1(_config(tmp_path))
    assert [e.episode_id for e in h.episodes] == [e["episode_id"] for e in eps]
    assert [list(e.goals[0].position) for e in h.episodes] == [e["goals"][0]["position"] for e in eps]
    assert h.episodes[0].scene_id == "data/scene_datasets/gibson/TwoRooms.glb"
    # habitat writes, we read
    write_gz(tmp_path / "theirs" / "val" / "val.json.gz", h.to_json())
    back = read_pointnav_dataset(tmp_path / "theirs" / "val")
    np.testing.assert_allclose([e["start_position"] for e in back], [e["start_position"] for e in eps])
    assert [e["goals"][0]["radius"] for e in back] == [0.2] * 5


# ------------------------------------------------------------------ no habitat-lab needed
# One episode and one goal in the layout of habitat's released objectnav_hm3d_v1 content files
# (habitat-lab's ObjectNavDatasetV1.from_json / ObjectGoal / ObjectViewLocation field names).
HM3D_V1_CONTENT = {
    "episodes": [{
        "episode_id": "0", "scene_id": "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
        "scene_dataset_config": "./data/scene_datasets/hm3d/hm3d_annotated_basis.scene_dataset_config.json",
        "additional_obj_config_paths": [],
        "start_position": [-1.2, 0.06, 3.3], "start_rotation": [0, 0.97, 0, -0.24],
        "info": {"geodesic_distance": 6.1, "euclidean_distance": 4.9, "closest_goal_object_id": 354},
        "goals": [], "start_room": None, "shortest_paths": None, "object_category": "chair"}],
    "goals_by_category": {"TEEsavR23oF.basis.glb_chair": [{
        "position": [2.1, 0.5, 7.9], "radius": None, "object_id": 354, "object_name": "chair_354",
        "object_name_id": None, "object_category": "chair", "room_id": None, "room_name": None,
        "view_points": [{"agent_state": {"position": [1.5, 0.06, 7.2], "rotation": [0, 0.3, 0, 0.95]},
                         "iou": 0.06}]}]},
    "category_to_task_category_id": {"chair": 0, "bed": 1, "plant": 2, "toilet": 3, "tv_monitor": 4, "sofa": 5},
    "category_to_scene_annotation_category_id": {"chair": 0, "bed": 1, "plant": 2, "toilet": 3,
                                                 "tv_monitor": 4, "sofa": 5},
}


def test_documented_layout_fixture(tmp_path):
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", HM3D_V1_CONTENT)
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": [], **{k: HM3D_V1_CONTENT[k] for k in (
        "category_to_task_category_id", "category_to_scene_annotation_category_id")}})
    ds = read_objectnav_dataset(tmp_path / "val", scenes_dir="data/scene_datasets")
    (e,) = ds.episodes
    assert e["scene_id"] == "data/scene_datasets/hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"
    assert ds.task_category_id(e) == 0
    np.testing.assert_allclose(ds.view_points_of(e), [[1.5, 0.06, 7.2]])
    # a content file without the maps takes the split file's (as habitat's loader does)
    doc = {k: v for k, v in HM3D_V1_CONTENT.items() if not k.startswith("category_to")}
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", doc)
    assert read_objectnav_dataset(tmp_path / "val").episodes[0]["object_category"] == "chair"
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": []})
    with pytest.raises(InputError, match="no category_to_task_category_id"):
        read_objectnav_dataset(tmp_path / "val")


def test_objectnav_files_map_onto_manifest_scenes(tmp_path):
    """habitat's scene_id (hm3d/val/...) finds the manifest scene; goals come along."""
    from bps_assets.pipeline.habitat_episodes import map_habitat_objectnav
    from bps_assets.pipeline.manifest import Manifest

    scenes = {"TEEsavR23oF": {"subset": "val", "status": "ok", "outputs": {}, "sources": {
        "scene": {"path": "hm3d/minival/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"}}}}
    m = Manifest({"dataset": "hm3d", "split": "minival", "scenes": scenes}, tmp_path / "manifest.json")
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", HM3D_V1_CONTENT)
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": [], **{k: HM3D_V1_CONTENT[k] for k in (
        "category_to_task_category_id", "category_to_scene_annotation_category_id")}})
    got = map_habitat_objectnav(tmp_path / "val", m)
    (ep,) = got.by_scene["TEEsavR23oF"]
    assert [g["object_id"] for g in got.objectnav.goals_of(ep)] == [354]
    with pytest.raises(InputError, match="not a scene of"):
        map_habitat_objectnav(tmp_path / "val", m, subset="train")
