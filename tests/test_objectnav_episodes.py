"""ObjectNav goals, view points, episodes and files on a box-built semantic scene whose objects are
known exactly (tests/objectnav_scenes.py), and the bad inputs of ObjectNav files."""
from __future__ import annotations

import gzip
import json
import math
from collections import Counter

import numpy as np
import pytest

from bps_assets.errors import ConfigError, InputError, NavError, OutputExistsError
from bps_assets.nav.objectnav_episodes import (ObjectNavOptions, build_goals, category_maps,
                                               generate_objectnav_episodes, objectnav_scene)
from bps_assets.nav.objectnav_files import (check_on_navmesh, goals_key, read_objectnav_dataset,
                                            write_objectnav_dataset)
from bps_assets.nav.view_points import object_coverage
from bps_assets.raycast import RayCaster
from objectnav_scenes import two_rooms

SID = "two_rooms.glb"


@pytest.fixture(scope="module")
def scene():
    return two_rooms()


@pytest.fixture(scope="module")
def generated(scene):
    st = Counter()
    ds = objectnav_scene(scene.navmesh, scene.vertices, scene.triangles, scene.tri_object, scene.table, SID,
                         18, seed=5, stats=st)
    return ds, st


def test_goals_and_view_points(scene, generated):
    ds, st = generated
    nav, table = scene.navmesh, scene.table
    assert sorted(ds.goals_by_category) == [f"{SID}_chair", f"{SID}_sofa", f"{SID}_table"]
    chairs = ds.goals_by_category[f"{SID}_chair"]
    assert sorted(g["object_id"] for g in chairs) == [1, 2]  # chair 5 is sealed in a crate
    assert st["objects"] == 5 and st["objects_without_view_points"] == 1
    caster = RayCaster(scene.vertices, scene.triangles)
    for goals in ds.goals_by_category.values():
        for g in goals:
            row = int(np.flatnonzero(table.ids == g["object_id"])[0])
            aabb = table.aabb[row].astype(float)
            assert g["position"] == pytest.approx((aabb[:3] + aabb[3:]) / 2)
            ious = [vp["iou"] for vp in g["view_points"]]
            assert ious == sorted(ious, reverse=True) and min(ious) > 0.001
            pos = np.array([vp["agent_state"]["position"] for vp in g["view_points"]])
            assert nav.is_navigable(pos).all()
            # within max_distance (1 m) of the box, plus the snap to the eroded navmesh
            gap = np.linalg.norm(np.maximum(np.maximum(aabb[[0, 2]] - pos[:, [0, 2]], 0),
                                            pos[:, [0, 2]] - aabb[[3, 5]]), axis=1)
            assert gap.max() <= 1.0 + 0.2
            for vp in g["view_points"][:: max(1, len(pos) // 5)]:
                p = np.array(vp["agent_state"]["position"])
                q = vp["agent_state"]["rotation"]
                yaw = 2 * math.atan2(q[1], q[3])
                fwd = np.array([-math.sin(yaw), 0, -math.cos(yaw)])
                to = (aabb[:3] + aabb[3:]) / 2 - p
                to[1] = 0
                assert fwd @ to / np.linalg.norm(to) == pytest.approx(1.0, abs=1e-6)  # faces the object
                eye = p + [0, 0.88, 0]
                cov = sum(object_coverage(caster, scene.tri_object, g["object_id"], aabb, eye, yaw,
                                          math.radians(a)) for a in (-30, 0, 30))
                assert cov == pytest.approx(vp["iou"])


def test_coverage_window_equals_a_full_render(scene):
    """Tracing only the object's projected box gives the same fraction as every pixel."""
    caster = RayCaster(scene.vertices, scene.triangles)
    aabb = scene.table.aabb[0].astype(float)  # chair 1
    eye = np.array([2.2, 0.88, 2.0])
    yaw = math.atan2(-(1.25 - 2.2), -(1.25 - 2.0))
    from bps_assets.nav.view_points import DEFAULTS, camera_basis

    o = DEFAULTS
    for pitch in (-30, 0, 30):
        part = object_coverage(caster, scene.tri_object, 1, aabb, eye, yaw, math.radians(pitch))
        rot = camera_basis(yaw, math.radians(pitch))
        tx = math.tan(math.radians(o.hfov) / 2)
        ty = tx * o.height / o.width
        xx, yy = np.meshgrid(((np.arange(o.width) + 0.5) / o.width * 2 - 1) * tx,
                             (1 - (np.arange(o.height) + 0.5) / o.height * 2) * ty)
        d = np.stack([xx.ravel(), yy.ravel(), -np.ones(xx.size)], 1) @ rot.T
        prim = caster.first_hit(np.broadcast_to(eye, d.shape), d)
        full = np.mean(np.where(prim >= 0, scene.tri_object[np.maximum(prim, 0)], 0) == 1)
        assert part == pytest.approx(full) and (pitch == 30 or full > 0.01)


def test_episodes_follow_habitats_rules(scene, generated):
    ds, st = generated
    nav = scene.navmesh
    assert len(ds.episodes) == 18 and [e["episode_id"] for e in ds.episodes] == [str(i) for i in range(18)]
    assert Counter(e["object_category"] for e in ds.episodes) == {"chair": 6, "sofa": 6, "table": 6}
    starts = np.array([e["start_position"] for e in ds.episodes])
    assert nav.is_navigable(starts).all()
    for e in ds.episodes:
        goals = ds.goals_of(e)
        per_goal = [min(nav.geodesic_distance(np.array(e["start_position"]),
                                              np.array([vp["agent_state"]["position"] for vp in g["view_points"]])))
                    for g in goals]
        d = e["info"]["geodesic_distance"]
        assert 1.0 <= d <= 30.0
        assert d == pytest.approx(min(per_goal), rel=0.02)  # field vs exact line-of-sight distances
        closest = goals[int(np.argmin(per_goal))]["object_id"]
        if sorted(per_goal)[:2] != pytest.approx(sorted(per_goal)[:2][::-1], rel=0.05):
            assert e["info"]["closest_goal_object_id"] == closest
        g = next(g for g in goals if g["object_id"] == e["info"]["closest_goal_object_id"])
        assert e["info"]["euclidean_distance"] == pytest.approx(
            np.linalg.norm(np.array(e["start_position"]) - g["position"]))
        q = e["start_rotation"]
        assert q[0] == q[2] == 0 and q[1] ** 2 + q[3] ** 2 == pytest.approx(1)
    assert st["rejected_range"] > 0  # starts next to a goal were drawn and refused


def test_deterministic_per_seed_and_options(scene, generated):
    ds, _ = generated
    nav = scene.navmesh
    again = generate_objectnav_episodes(nav, ds.goals_by_category, SID, 18, seed=5)
    assert again == ds.episodes
    other = generate_objectnav_episodes(nav, ds.goals_by_category, SID, 18, seed=6)
    assert other != ds.episodes
    far = generate_objectnav_episodes(nav, ds.goals_by_category, SID, 6, seed=5,
                                      options=ObjectNavOptions(closest_dist_limit=3.0))
    assert min(e["info"]["geodesic_distance"] for e in far) >= 3.0
    st = Counter()
    # nothing is 40 m away: every category is given up, with one line naming the scene
    with pytest.raises(NavError, match=SID):
        generate_objectnav_episodes(nav, ds.goals_by_category, SID, 2, seed=5, stats=st,
                                    options=ObjectNavOptions(closest_dist_limit=40.0, furthest_dist_limit=50,
                                                             retries_per_episode=64))
    assert st["categories_given_up"] == 3
    with pytest.raises(ConfigError):
        ObjectNavOptions(closest_dist_limit=5, furthest_dist_limit=1)


def test_category_filter_and_maps(scene):
    task, ann = category_maps(scene.table, {"chair": 0, "bed": 1})
    assert task == {"chair": 0, "bed": 1} and ann == {"chair": 0, "bed": -1}
    gbc = build_goals(scene.navmesh, scene.vertices, scene.triangles, scene.tri_object, scene.table, SID,
                      ["sofa"])
    assert list(gbc) == [f"{SID}_sofa"]
    with pytest.raises(NavError, match="no goal object"):
        generate_objectnav_episodes(scene.navmesh, {}, SID, 1, seed=0)
    with pytest.raises(ConfigError, match="tri_object"):
        build_goals(scene.navmesh, scene.vertices, scene.triangles, scene.tri_object[:-1], scene.table, SID)


def test_files_round_trip_in_habitats_layout(generated, tmp_path):
    ds, _ = generated
    files = write_objectnav_dataset(tmp_path, "val", {"two_rooms": ds}, ds.category_to_task_category_id,
                                    ds.category_to_scene_annotation_category_id)
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["val/val.json.gz",
                                                                  "val/content/two_rooms.json.gz"]
    top = json.loads(gzip.decompress(files[0].read_bytes()))
    assert top == {"episodes": [], "category_to_task_category_id": {"chair": 0, "sofa": 1, "table": 2},
                   "category_to_scene_annotation_category_id": {"chair": 0, "sofa": 1, "table": 2}}
    content = json.loads(gzip.decompress(files[1].read_bytes()))
    assert all(e["goals"] == [] for e in content["episodes"])
    assert set(content["goals_by_category"]) == set(ds.goals_by_category)
    back = read_objectnav_dataset(tmp_path / "val")
    assert back.episodes == ds.episodes and back.goals_by_category == ds.goals_by_category
    assert back.task_category_id(back.episodes[0]) == ds.category_to_task_category_id[ds.episodes[0]["object_category"]]
    assert back.view_points_of(back.episodes[0]).shape[1] == 3
    with pytest.raises(OutputExistsError):
        write_objectnav_dataset(tmp_path, "val", {"two_rooms": ds}, ds.category_to_task_category_id)
    scoped = read_objectnav_dataset(tmp_path / "val" / "val.json.gz", scenes=["two_rooms"], scenes_dir="/data")
    assert scoped.episodes[0]["scene_id"] == f"/data/{SID}" and scoped.goals_of(scoped.episodes[0])


# ------------------------------------------------------------------------------ bad input
def _write_content(tmp_path, doc, name="s"):
    d = tmp_path / "val" / "content"
    d.mkdir(parents=True, exist_ok=True)
    top = {k: doc[k] for k in ("category_to_task_category_id", "category_to_scene_annotation_category_id")
           if k in doc}
    (tmp_path / "val" / "val.json.gz").write_bytes(gzip.compress(json.dumps({"episodes": [], **top}).encode()))
    (d / f"{name}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return d / f"{name}.json.gz"


def _doc(generated):
    ds, _ = generated
    return json.loads(json.dumps({"episodes": ds.episodes[:3], "goals_by_category": ds.goals_by_category,
                                  "category_to_task_category_id": ds.category_to_task_category_id,
                                  "category_to_scene_annotation_category_id":
                                      ds.category_to_scene_annotation_category_id}))


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["episodes"][1].update(object_category="bed"), "episode 1 (id '1'): category 'bed' is not in"),
    (lambda d: d["goals_by_category"].pop(f"{SID}_sofa"), "episode 1 (id '1'): no goal of category 'sofa' in scene"),
    (lambda d: d["goals_by_category"][f"{SID}_chair"][0].pop("object_id"), "object_id is missing"),
    (lambda d: d["goals_by_category"][f"{SID}_table"][0]["view_points"][2]["agent_state"].update(position=[1, 2]),
     "view point 2: agent_state.position must be 3"),
    (lambda d: d["episodes"][2].update(start_rotation=[0, 0, 0, 2]), "episode 2 (id '2'): start_rotation is not a unit"),
    (lambda d: d["category_to_scene_annotation_category_id"].pop("chair"), "name different categories"),
    (lambda d: d["episodes"][0].pop("object_category"), "episode 0 (id '0'): object_category is missing"),
])
def test_bad_files_give_one_line_errors(generated, tmp_path, mutate, message):
    doc = _doc(generated)
    mutate(doc)
    path = _write_content(tmp_path, doc)
    with pytest.raises(InputError) as e:
        read_objectnav_dataset(tmp_path / "val")
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(str(path)) or str(e.value).startswith(str(tmp_path / "val"))


def test_bad_episodes_are_refused_before_writing(generated, tmp_path):
    ds, _ = generated
    bad = type(ds)([dict(ds.episodes[0], object_category="bed")], ds.goals_by_category,
                   ds.category_to_task_category_id, ds.category_to_scene_annotation_category_id)
    with pytest.raises(InputError, match=r"two_rooms.json.gz: episode 0 .*'bed'"):
        write_objectnav_dataset(tmp_path, "val", {"two_rooms": bad}, ds.category_to_task_category_id)
    assert not (tmp_path / "val").exists()


def test_navmesh_check_counts_or_refuses(scene, generated, tmp_path):
    ds, _ = generated
    doc = _doc(generated)
    chair = doc["goals_by_category"][f"{SID}_chair"]
    chair[0]["view_points"][0]["agent_state"]["position"] = [4.07, 0.0, 1.0]     # inside the wall
    for vp in doc["goals_by_category"][f"{SID}_sofa"][0]["view_points"]:        # the only sofa
        vp["agent_state"]["position"] = [20.0, 0.0, 20.0]                         # outside the scene
    doc["episodes"][0]["start_position"] = [1.25, 0.0, 1.25]                      # inside chair 1
    path = _write_content(tmp_path, doc)
    read = read_objectnav_dataset(tmp_path / "val")
    chk = check_on_navmesh(read, scene.navmesh, path)
    sofa_vps = len(doc["goals_by_category"][f"{SID}_sofa"][0]["view_points"])
    assert chk.dropped == {"view_points_off_navmesh": 1 + sofa_vps, "goals_without_view_points": 1,
                           "starts_off_navmesh": 1, "episodes_without_goals": 1}
    assert [e["episode_id"] for e in chk.dataset.episodes] == ["2"]
    assert len(chk.dataset.goals_by_category[f"{SID}_chair"][0]["view_points"]) == len(chair[0]["view_points"]) - 1
    assert "1 starts off navmesh" in chk.summary()
    with pytest.raises(InputError) as e:
        check_on_navmesh(read, scene.navmesh, path, strict=True)
    assert str(e.value).startswith(str(path)) and "object 1: view point 0 at [4.07, 0.0, 1.0] is off the navmesh" in str(e.value)
    clean = check_on_navmesh(ds, scene.navmesh)
    assert not clean.dropped and clean.dataset.episodes == ds.episodes


def test_same_floor_rule_on_two_levels():
    from objectnav_scenes import two_levels

    s = two_levels()
    gbc = build_goals(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, "lv.glb", ["chair"])
    vp_y = {vp["agent_state"]["position"][1] for g in gbc["lv.glb_chair"] for vp in g["view_points"]}
    assert vp_y and all(abs(y - 1.2) < 0.05 for y in vp_y)  # the chair is seen from the upper floor
    st = Counter()
    same = generate_objectnav_episodes(s.navmesh, gbc, "lv.glb", 12, seed=0, stats=st)
    assert all(abs(e["start_position"][1] - 1.2) < 0.5 for e in same)
    assert st["rejected_floor"] > 0
    anyf = generate_objectnav_episodes(s.navmesh, gbc, "lv.glb", 12, seed=0,
                                       options=ObjectNavOptions(same_floor=False))
    low = [e for e in anyf if e["start_position"][1] < 0.5]
    assert low  # the lower floor is the larger one: starts there once the rule is off
    vp_x = min(vp["agent_state"]["position"][0] for g in gbc["lv.glb_chair"] for vp in g["view_points"])
    for e in low:  # their distances are measured up the stairs, to the upper floor's view points
        assert e["info"]["geodesic_distance"] >= vp_x - e["start_position"][0]


def test_pointnav_and_imagenav_episodes_against_the_navmesh(scene, tmp_path):
    from bps_assets.nav.episodes import generate_episodes
    from bps_assets.nav.objectnav_files import check_pointnav_on_navmesh

    eps = generate_episodes(scene.navmesh, SID, 4, seed=0)
    eps[1] = dict(eps[1], start_position=[4.07, 0.0, 1.0])                    # in the wall
    eps[2] = dict(eps[2], goals=[dict(eps[2]["goals"][0], position=[1.25, 0.0, 1.25])])  # in chair 1
    kept, dropped = check_pointnav_on_navmesh(eps, scene.navmesh, tmp_path / "x.json.gz")
    assert [e["episode_id"] for e in kept] == ["0", "3"]
    assert dropped == {"starts_off_navmesh": 1, "goals_off_navmesh": 1}
    with pytest.raises(InputError, match=r"x.json.gz: episode '1': start \[4.07, 0.0, 1.0\] is off"):
        check_pointnav_on_navmesh(eps, scene.navmesh, tmp_path / "x.json.gz", strict=True)
    st = Counter()
    objectnav_scene(scene.navmesh, scene.vertices, scene.triangles, scene.tri_object, scene.table, SID, 1, 0,
                    categories={"chair": 0, "bed": 1, "toilet": 2}, stats=st)
    assert st["categories_not_in_scene"] == 2


def test_on_a_synth_scan_with_ground_truth_objects(tmp_path):
    """A scan-like synth scene (noise, thin furniture parts, a closed room), annotated and
    converted by the real pipeline: goals are seen from where an agent can stand, outside the
    furniture, within reach of their object."""
    from bps_assets.synth.semantic import FURNITURE_LABEL
    from objectnav_scenes import synth_semantic_scene

    s, info = synth_semantic_scene(tmp_path, "Allensville")
    cats = {"chair": 0, "sofa": 1, "table": 2}
    st = Counter()
    ds = objectnav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, "Allensville.glb", 9, seed=0,
                         categories=cats, stats=st)
    want = [f for f in info.furniture if FURNITURE_LABEL.get(f.kind) in cats]
    goals = [g for gs in ds.goals_by_category.values() for g in gs]
    assert len(goals) >= len(want) - 1 and st["objects"] == len(want)  # nearly every one is seen
    rects = [f.rect for f in info.furniture]
    closed = next((r for r in info.rooms if r.closed), None)
    for g in goals:
        x, y, z = g["position"]   # the object's AABB centre: over its piece of furniture
        f, = [f for f in want if f.rect.contains(x, z) and info.storeys[f.storey][0] <= y <= f.top_y]
        assert FURNITURE_LABEL[f.kind] == g["object_category"]
        pos = np.array([vp["agent_state"]["position"] for vp in g["view_points"]])
        assert s.navmesh.is_navigable(pos).all()
        for p in pos:  # where an agent stands: not over any piece of furniture
            assert not any(r.contains(p[0], p[2]) for r in rects)
            gap = max(f.rect.xmin - p[0], p[0] - f.rect.xmax, f.rect.zmin - p[2], p[2] - f.rect.zmax, 0)
            assert gap <= 1.0 + 0.2
        if closed is not None and f.room == closed.id:  # seen from inside the closed room only
            assert all(closed.rect.contains(p[0], p[2]) for p in pos)
    assert len(ds.episodes) == 9
    for e in ds.episodes:
        assert 1.0 <= e["info"]["geodesic_distance"] <= 30.0
