"""InstanceImageNav-v1 episode files both ways with habitat-lab: its own
``InstanceImageNavDatasetV1`` reads what we write, we read what its classes write (``to_json``);
and bad files give one InputError naming the file and the episode or goal. habitat-lab is
imported with its simulator stubbed (tests/habitat_lab_stub.py); those tests skip without it. A
fixture in habitat's field names runs always."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from bps_assets.errors import InputError, OutputExistsError
from bps_assets.nav.instance_imagenav_episodes import instance_imagenav_scene
from bps_assets.nav.instance_imagenav_files import (MAX_IMAGE_GOALS, MAX_IMAGE_SIDE, InstanceImageNavDataset,
                                                    goal_key, read_instance_imagenav_dataset,
                                                    write_instance_imagenav_dataset)
from habitat_lab_stub import habitat_lab  # noqa: F401 - the fixture
from objectnav_scenes import two_rooms
from episode_files import write_gz
from test_habitat_interop import _config

SID = "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"


@pytest.fixture(scope="module")
def generated():
    s = two_rooms()
    return instance_imagenav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, SID, 9, seed=4)


def test_goal_key_is_habitats():
    assert goal_key(SID, "354") == "TEEsavR23oF_354"          # .glb, then .basis stripped
    assert goal_key("mp3d/x/x.glb", 7) == "x_7"
    assert goal_key("a/scene.ply", "1") == "scene.ply_1"


def test_habitat_reads_our_files(habitat_lab, generated, tmp_path):
    ds = generated
    write_instance_imagenav_dataset(tmp_path, "val", {"TEEsavR23oF": ds})
    h = habitat_lab.InstanceImageNavDatasetV1(_config(tmp_path))
    assert len(h.episodes) == len(ds.episodes) == 9
    assert set(h.goals) == set(ds.goals)
    for ours, theirs in zip(ds.episodes, h.episodes):
        assert theirs.scene_id == "data/scene_datasets/" + SID
        assert theirs.goal_key == goal_key(SID, ours["goal_object_id"])
        assert theirs.goal_object_id == ours["goal_object_id"] and theirs.goal_image_id == ours["goal_image_id"]
        assert list(theirs.start_position) == pytest.approx(ours["start_position"])
        (g,) = theirs.goals
        assert str(g.object_id) == ours["goal_object_id"] and g.object_category == ours["object_category"]
        np.testing.assert_allclose([vp.agent_state.position for vp in g.view_points], ds.view_points_of(ours))
        cam, mine = g.image_goals[theirs.goal_image_id], ds.image_goal_of(ours)
        assert list(cam.position) == pytest.approx(mine["position"])
        assert list(cam.rotation) == pytest.approx(mine["rotation"])
        assert cam.hfov == pytest.approx(mine["hfov"]) and list(cam.image_dimensions) == [512, 512]
        assert cam.frame_coverage == pytest.approx(mine["frame_coverage"])
        assert cam.object_coverage == pytest.approx(mine["object_coverage"])
        assert g.object_surface_area == pytest.approx(ds.goal_of(ours)["object_surface_area"])


def _habitat_dataset(ds):
    """The same episodes built with habitat-lab's own classes."""
    from habitat.core.simulator import AgentState
    from habitat.datasets.image_nav.instance_image_nav_dataset import InstanceImageNavDatasetV1
    from habitat.tasks.nav.instance_image_nav_task import (InstanceImageGoal, InstanceImageGoalNavEpisode,
                                                           InstanceImageParameters)
    from habitat.tasks.nav.object_nav_task import ObjectViewLocation

    h = InstanceImageNavDatasetV1()
    for key, g in ds.goals.items():
        h.goals[key] = InstanceImageGoal(
            position=g["position"], object_id=g["object_id"], object_category=g["object_category"],
            object_name=g["object_name"], object_surface_area=g["object_surface_area"],
            view_points=[ObjectViewLocation(AgentState(vp["agent_state"]["position"], vp["agent_state"]["rotation"]),
                                            vp["iou"]) for vp in g["view_points"]],
            image_goals=[InstanceImageParameters(
                position=c["position"], rotation=c["rotation"], hfov=c["hfov"],
                image_dimensions=tuple(c["image_dimensions"]), frame_coverage=c["frame_coverage"],
                object_coverage=c["object_coverage"]) for c in g["image_goals"]])
    for e in ds.episodes:
        ep = InstanceImageGoalNavEpisode(
            episode_id=e["episode_id"], scene_id=e["scene_id"], start_position=e["start_position"],
            start_rotation=e["start_rotation"], info=e["info"], goal_object_id=e["goal_object_id"],
            goal_image_id=e["goal_image_id"], object_category=e["object_category"], goals=[])
        ep.goals = [h.goals[ep.goal_key]]
        h.episodes.append(ep)
    return h


def test_we_read_habitats_files(habitat_lab, generated, tmp_path):
    ds = generated
    text = _habitat_dataset(ds).to_json()   # habitat's writer: goals by key, episodes' goals emptied
    doc = json.loads(text)
    assert all(e["goals"] == [] for e in doc["episodes"]) and set(doc["goals"]) == set(ds.goals)
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", text)
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": []})
    back = read_instance_imagenav_dataset(tmp_path / "val")
    assert [e["episode_id"] for e in back.episodes] == [e["episode_id"] for e in ds.episodes]
    for ours, theirs in zip(ds.episodes, back.episodes):
        assert (theirs["goal_object_id"], theirs["goal_image_id"]) == (ours["goal_object_id"], ours["goal_image_id"])
        np.testing.assert_allclose(back.view_points_of(theirs), ds.view_points_of(ours), atol=1e-6)
        a, b = back.image_goal_of(theirs), ds.image_goal_of(ours)
        np.testing.assert_allclose(a["position"] + a["rotation"] + [a["hfov"]],
                                   b["position"] + b["rotation"] + [b["hfov"]], atol=1e-5)  # habitat: 5 decimals
        assert a["image_dimensions"] == b["image_dimensions"]
    # habitat reads its own file back to the same goals (the round trip closes)
    h2 = habitat_lab.InstanceImageNavDatasetV1(_config(tmp_path))
    assert [e.goal_key for e in h2.episodes] == [goal_key(SID, e["goal_object_id"]) for e in ds.episodes]


# ------------------------------------------------------------------ no habitat-lab needed
# One episode and its goal in habitat's InstanceImageNav-v1 field names (InstanceImageNavDatasetV1.
# from_json, InstanceImageGoalNavEpisode, InstanceImageGoal, InstanceImageParameters).
CONTENT = {
    "episodes": [{
        "episode_id": "0", "scene_id": SID,
        "scene_dataset_config": "./data/scene_datasets/hm3d/hm3d_annotated_basis.scene_dataset_config.json",
        "additional_obj_config_paths": [], "start_position": [-1.2, 0.06, 3.3],
        "start_rotation": [0, 0.97, 0, -0.24], "info": {"geodesic_distance": 6.1, "euclidean_distance": 4.9},
        "goals": [], "start_room": None, "shortest_paths": None, "object_category": "chair",
        "goal_object_id": "354", "goal_image_id": 1}],
    "goals": {"TEEsavR23oF_354": {
        "position": [2.1, 0.5, 7.9], "radius": None, "object_id": 354, "object_name": "chair_354",
        "object_name_id": None, "object_category": "chair", "room_id": None, "room_name": None,
        "view_points": [{"agent_state": {"position": [1.5, 0.06, 7.2], "rotation": [0, 0.3, 0, 0.95]},
                         "iou": 0.06}],
        "image_goals": [
            {"position": [1.0, 1.2, 7.0], "rotation": [0, 0.3, 0, 0.954], "hfov": 80, "image_dimensions": [512, 512],
             "frame_coverage": 0.1, "object_coverage": 0.5},
            {"position": [3.0, 1.0, 9.0], "rotation": [-0.05, 0.38, 0.02, 0.92], "hfov": 110.5,
             "image_dimensions": [480, 640], "frame_coverage": 0.2, "object_coverage": 0.4}],
        "object_surface_area": 2.5}},
}


def _write(root, content):
    write_gz(root / "val" / "content" / "TEEsavR23oF.json.gz", content)
    write_gz(root / "val" / "val.json.gz", {"episodes": []})
    return root / "val"


def test_habitat_layout_fixture(tmp_path):
    ds = read_instance_imagenav_dataset(_write(tmp_path, CONTENT), scenes_dir="data/scene_datasets")
    (e,) = ds.episodes
    assert e["scene_id"] == "data/scene_datasets/" + SID
    cam = ds.image_goal_of(e)
    assert cam["hfov"] == 110.5 and cam["image_dimensions"] == [480, 640]
    np.testing.assert_allclose(ds.view_points_of(e), [[1.5, 0.06, 7.2]])
    # an integer goal_object_id names the same goal (habitat formats it into the key)
    c = copy.deepcopy(CONTENT)
    c["episodes"][0]["goal_object_id"] = 354
    assert read_instance_imagenav_dataset(_write(tmp_path, c)).episodes[0]["goal_object_id"] == "354"


def _bad(mutate):
    c = copy.deepcopy(CONTENT)
    mutate(c)
    return c


G = "TEEsavR23oF_354"
BAD = [
    (lambda c: c["episodes"][0].update(goal_image_id=2), "episode 0 .*goal_image_id 2 is not an index"),
    (lambda c: c["episodes"][0].update(goal_image_id=True), "goal_image_id True"),
    (lambda c: c["episodes"][0].update(goal_object_id="355"), "episode 0 .*no goal 'TEEsavR23oF_355'"),
    (lambda c: c["episodes"][0].pop("goal_object_id"), "goal_object_id must be"),
    (lambda c: c["episodes"][0].update(start_rotation=[0, 0, 0, 2]), "episode 0 .*unit quaternion"),
    (lambda c: c.pop("goals"), "episodes but no \"goals\""),
    (lambda c: c.update(goals=[]), "goals must be an object"),
    (lambda c: c["goals"][G].update(image_goals=[]), f"goals\\['{G}'\\]: image_goals must be a non-empty"),
    (lambda c: c["goals"][G]["image_goals"][1].update(image_dimensions=[MAX_IMAGE_SIDE + 1, 64]),
     "image_goals\\[1\\]: image_dimensions .* outside"),
    (lambda c: c["goals"][G]["image_goals"][1].update(image_dimensions=[480.0, 640]), "\\[height, width\\] integers"),
    (lambda c: c["goals"][G]["image_goals"][0].update(hfov=180), "image_goals\\[0\\]: hfov"),
    (lambda c: c["goals"][G]["image_goals"][0].update(rotation=[0, 0, 0]), "rotation must be a unit quaternion"),
    (lambda c: c["goals"][G]["image_goals"][0].update(position=[0, float("nan"), 0]), "position must be 3 finite"),
    (lambda c: c["goals"][G]["image_goals"][0].update(frame_coverage=1.5), "frame_coverage must be"),
    (lambda c: c["goals"][G].update(image_goals=c["goals"][G]["image_goals"] * (MAX_IMAGE_GOALS // 2 + 1)),
     "more than the cap"),
    (lambda c: c["goals"][G].update(object_surface_area=-1), "object_surface_area"),
    (lambda c: c["goals"][G]["view_points"][0]["agent_state"].update(position=[1, 2]), "view point 0"),
    # integers beyond float range (float() raises OverflowError) are not finite numbers
    (lambda c: c["episodes"][0].update(start_position=[0, 10 ** 400, 0]), "episode 0 .*start_position"),
    (lambda c: c["goals"][G]["image_goals"][0].update(position=[10 ** 400, 0, 0]), "position must be 3 finite"),
    (lambda c: c["goals"][G]["image_goals"][0].update(hfov=10 ** 400), "image_goals\\[0\\]: hfov"),
    (lambda c: c["goals"][G].update(object_surface_area=10 ** 400), "object_surface_area"),
]


@pytest.mark.parametrize("mutate,message", BAD)
def test_bad_files_are_typed_errors_naming_file_and_place(tmp_path, mutate, message):
    root = _write(tmp_path, _bad(mutate))
    with pytest.raises(InputError, match=message) as ei:
        read_instance_imagenav_dataset(root)
    assert str(root / "content" / "TEEsavR23oF.json.gz") in str(ei.value)


def test_writer_validates_first_and_keeps_existing_files(generated, tmp_path):
    ds = generated
    bad = InstanceImageNavDataset([dict(ds.episodes[0], goal_image_id=99)], ds.goals)
    with pytest.raises(InputError, match="content/Two.json.gz.*episode 0 .*goal_image_id 99"):
        write_instance_imagenav_dataset(tmp_path, "val", {"Two": bad})
    assert not (tmp_path / "val").exists()   # nothing partial
    write_instance_imagenav_dataset(tmp_path, "val", {"Two": ds})
    with pytest.raises(OutputExistsError):
        write_instance_imagenav_dataset(tmp_path, "val", {"Two": ds})
    back = read_instance_imagenav_dataset(tmp_path / "val")
    assert back.episodes == [dict(e, goals=[]) for e in ds.episodes] and back.goals == ds.goals


def test_navmesh_check(generated):
    """View points, goals and starts off the navmesh are dropped and counted, or (strict) the
    first is an InputError naming the file."""
    from bps_assets.nav.instance_imagenav_files import check_on_navmesh

    ds = generated
    nav = two_rooms().navmesh
    assert check_on_navmesh(ds, nav).dropped == {} and check_on_navmesh(ds, nav).dataset.episodes == ds.episodes
    goals = copy.deepcopy(ds.goals)
    k1, k2 = sorted(goals)[:2]
    goals[k1]["view_points"][0]["agent_state"]["position"] = [50.0, 0.0, 50.0]    # one off: dropped
    for vp in goals[k2]["view_points"]:                                          # all off: goal gone
        vp["agent_state"]["position"] = [50.0, 0.0, 50.0]
    eps = copy.deepcopy(ds.episodes)
    eps[0]["start_position"] = [50.0, 0.0, 50.0]
    bad = InstanceImageNavDataset(eps, goals)
    chk = check_on_navmesh(bad, nav, "x.json.gz")
    lost = sum(goal_key(e["scene_id"], e["goal_object_id"]) == k2 for e in eps[1:])
    assert chk.dropped == {"view_points_off_navmesh": len(goals[k2]["view_points"]) + 1,
                           "goals_without_view_points": 1, "starts_off_navmesh": 1, "episodes_without_goals": lost}
    assert len(chk.dataset.goals[k1]["view_points"]) == len(goals[k1]["view_points"]) - 1 and k2 not in chk.dataset.goals
    assert len(chk.dataset.episodes) == len(eps) - 1 - lost
    with pytest.raises(InputError, match="x.json.gz.*goals\\[.*view point 0 .* off the navmesh"):
        check_on_navmesh(bad, nav, "x.json.gz", strict=True)
