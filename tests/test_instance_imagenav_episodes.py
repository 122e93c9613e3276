"""InstanceImageNav goals, goal cameras and episodes on box-built semantic scenes whose objects are
known exactly (tests/objectnav_scenes.py), the coverage measures on geometry with known answers,
and `bps-assets episodes --task instance_imagenav`."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.errors import ConfigError
from bps_assets.nav.instance_imagenav_episodes import (InstanceImageNavOptions, instance_imagenav_scene,
                                                       surface_samples, visible_fraction)
from bps_assets.nav.instance_imagenav_files import read_instance_imagenav_dataset
from bps_assets.nav.view_points import camera_basis, yaw_facing
from bps_assets.raycast import RayCaster
from bps_assets.semantics import object_ids
from objectnav_scenes import box, two_rooms

SID = "two_rooms.glb"
O = InstanceImageNavOptions()


def _scene(s, n=12, seed=7, **kw):
    return instance_imagenav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, SID, n, seed=seed, **kw)


scene = pytest.fixture(scope="module")(two_rooms)


@pytest.fixture(scope="module")
def generated(scene):
    st = Counter()
    return _scene(scene, stats=st), st


def _forward(q):
    """The camera's forward (-Z) in the world, from an [x, y, z, w] quaternion."""
    x, y, z, w = q
    return -np.array([2 * (x * z + y * w), 2 * (y * z - x * w), 1 - 2 * (x * x + y * y)])


def _full_frame_coverage(caster, tri_object, oid, eye, fwd_yaw, pitch, hfov, w, h):
    """Every pixel traced (no window): the fraction whose first hit is object ``oid``."""
    tx = math.tan(math.radians(hfov) / 2)
    ty = tx * h / w
    xx, yy = np.meshgrid(((np.arange(w) + 0.5) / w * 2 - 1) * tx, (1 - (np.arange(h) + 0.5) / h * 2) * ty)
    d = np.stack([xx.ravel(), yy.ravel(), -np.ones(xx.size)], 1) @ camera_basis(fwd_yaw, pitch).T
    ids = object_ids(tri_object, caster.first_hit(np.broadcast_to(eye, d.shape), d))
    return np.count_nonzero(ids == oid) / ids.size


def test_goals_and_cameras(scene, generated):
    ds, st = generated
    table = scene.table
    # chair 5 is sealed in a crate: no view point, so no goal; the other four objects are goals
    assert sorted(g["object_id"] for g in ds.goals.values()) == [1, 2, 3, 4]
    assert st["objects_without_view_points"] == 1 and st["objects_without_image_goals"] == 0
    caster = RayCaster(scene.vertices, scene.triangles)
    for key, g in ds.goals.items():
        assert key == f"two_rooms_{g['object_id']}"
        row = int(np.flatnonzero(table.ids == g["object_id"])[0])
        aabb = table.aabb[row].astype(float)
        lo, hi = aabb[:3], aabb[3:]
        sx, sy, sz = hi - lo
        assert g["object_surface_area"] == pytest.approx(2 * (sx * sy + sy * sz + sx * sz), rel=1e-5)
        assert 1 <= len(g["image_goals"]) <= O.image_goals_per_object and g["view_points"]
        centre = (lo + hi) / 2
        for cam in g["image_goals"]:
            eye, q = np.array(cam["position"]), cam["rotation"]
            assert O.height[0] - 1e-6 <= eye[1] <= O.height[1] + 1e-6       # the floor is y = 0
            assert O.hfov[0] <= cam["hfov"] <= O.hfov[1] and cam["image_dimensions"] == [512, 512]
            # it looks at the object: the yaw off the centre by at most the jitter
            fwd = _forward(q)
            yaw, pitch = math.atan2(-fwd[0], -fwd[2]), math.asin(np.clip(fwd[1], -1, 1))
            off = abs(yaw - yaw_facing(centre - eye)) % (2 * math.pi)
            off = min(off, 2 * math.pi - off)
            assert off <= O.aim_jitter * math.radians(cam["hfov"]) / 2 + 1e-6
            gap = np.maximum(np.maximum(lo[[0, 2]] - eye[[0, 2]], 0), eye[[0, 2]] - hi[[0, 2]])
            assert np.linalg.norm(gap) <= O.distance[1] + 0.5
            # the stored coverages are what a full trace of the frame gives, and pass the minimums
            w = O.measure_width
            fc = _full_frame_coverage(caster, scene.tri_object, int(table.ids[row]), eye, yaw, pitch,
                                      cam["hfov"], w, w)
            assert cam["frame_coverage"] == pytest.approx(fc, abs=1e-9) and fc >= O.min_frame_coverage
            assert O.min_object_coverage <= cam["object_coverage"] <= 0.75   # a box shows at most 3 faces


def test_episodes(scene, generated):
    ds, st = generated
    nav = scene.navmesh
    assert [e["episode_id"] for e in ds.episodes] == [str(i) for i in range(12)]
    # goals in turn: every goal gets episodes
    assert Counter(e["goal_object_id"] for e in ds.episodes) == {"1": 3, "2": 3, "3": 3, "4": 3}
    starts = np.array([e["start_position"] for e in ds.episodes])
    assert nav.is_navigable(starts).all()
    for e in ds.episodes:
        g = ds.goal_of(e)
        assert 0 <= e["goal_image_id"] < len(g["image_goals"]) and e["object_category"] == g["object_category"]
        field = nav.distance_field_to_any(ds.view_points_of(e), limit=40.0)
        d = float(np.asarray(nav.distance_at(field, np.array([e["start_position"]]))).reshape(-1)[0])
        assert d == pytest.approx(e["info"]["geodesic_distance"], abs=1e-4)
        assert O.objectnav.closest_dist_limit <= d <= O.objectnav.furthest_dist_limit
    assert len({e["goal_image_id"] for e in ds.episodes}) > 1
    # a seed reproduces the dataset; another seed gives another
    again = _scene(scene)
    assert again.episodes == ds.episodes and again.goals == ds.goals
    other = _scene(scene, seed=8)
    assert other.episodes != ds.episodes


def test_categories_and_options(scene):
    ds = _scene(scene, 2, 1, categories=["sofa"])
    assert [g["object_category"] for g in ds.goals.values()] == ["sofa"]
    with pytest.raises(ConfigError, match="instance_imagenav"):
        InstanceImageNavOptions(hfov=(60.0, 200.0))
    with pytest.raises(ConfigError):
        InstanceImageNavOptions(image_dimensions=(0, 512))


def test_visible_fraction_on_a_cube():
    """A unit cube alone: seen face-on, 1 of its 6 faces; seen from a corner, 3; behind a wall, none;
    outside the frame, none."""
    v, t = box((-0.5, -0.5, -0.5), (0.5, 0.5, 0.5))
    rng = np.random.default_rng(0)
    pts, area = surface_samples(v, t, 6000, rng)
    assert area == pytest.approx(6.0)
    tri_object = np.ones(len(t), np.int32)
    caster = RayCaster(v, t)
    eye = np.array([0.0, 0.0, 6.0])
    assert visible_fraction(caster, tri_object, 1, pts, eye, 0.0, 0.0, 60.0, 1.0) == pytest.approx(1 / 6, abs=0.02)
    corner = np.array([4.0, 4.0, 4.0])
    yaw, pitch = yaw_facing(-corner), math.atan2(-4.0, math.hypot(4.0, 4.0))
    assert visible_fraction(caster, tri_object, 1, pts, corner, yaw, pitch, 60.0, 1.0) == pytest.approx(0.5, abs=0.03)
    assert visible_fraction(caster, tri_object, 1, pts, eye, math.pi, 0.0, 60.0, 1.0) == 0.0   # looking away
    wv, wt = box((-2, -2, 2.9), (2, 2, 3.0))
    caster2 = RayCaster(np.concatenate([v, wv]), np.concatenate([t, wt + len(v)]))
    tri2 = np.concatenate([tri_object, np.zeros(len(wt), np.int32)])
    assert visible_fraction(caster2, tri2, 1, pts, eye, 0.0, 0.0, 60.0, 1.0) == 0.0


def test_cli_instance_imagenav(tmp_path):
    from cli.main import main
    from test_cli_episodes_objectnav import _packed_with_objects

    s = two_rooms()
    (tmp_path / "navmeshes").mkdir()
    s.navmesh.save(tmp_path / "navmeshes" / "TwoRooms.navmesh.bps")
    _packed_with_objects(s, tmp_path / "scenes" / "TwoRooms.bps")
    args = ["episodes", str(tmp_path / "navmeshes" / "TwoRooms.navmesh.bps"), "--task", "instance_imagenav",
            "-o", str(tmp_path / "iin"), "--split", "val", "--per-scene", "4", "--seed", "3"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    ds = read_instance_imagenav_dataset(tmp_path / "iin" / "val")
    # default --categories hm3d: the chairs and the sofa, not the table
    assert {g["object_category"] for g in ds.goals.values()} == {"chair", "sofa"}
    assert len(ds.episodes) == 4 and {e["scene_id"] for e in ds.episodes} == {"TwoRooms.glb"}
    r = CliRunner().invoke(main, args)
    assert r.exit_code != 0 and "already exists" in r.output


def test_objects_sharing_a_habitat_id_are_no_goals(scene, monkeypatch):
    """habitat-lab keys an instance goal by its object's id: two objects given one habitat id (9,
    as a composed scene's instances of one template) are left out, counted and named in the
    stats, not one kept in the other's place; each other object's cameras are computed once."""
    import dataclasses

    from bps_assets.nav import instance_imagenav_episodes as iin

    src = np.asarray(scene.table.ids, np.int64).copy()
    src[np.isin(scene.table.ids, [1, 2])] = 9
    shared = dataclasses.replace(scene.table, source_ids=src)
    rows = []
    real = iin.goal_cameras
    monkeypatch.setattr(iin, "goal_cameras", lambda *a, **k: rows.append(a[6]) or real(*a, **k))
    st = Counter()
    ds = instance_imagenav_scene(scene.navmesh, scene.vertices, scene.triangles, scene.tri_object, shared, SID, 4,
                                 seed=7, stats=st)
    assert sorted(g["object_id"] for g in ds.goals.values()) == [3, 4]
    assert st["objects_with_shared_ids"] == 2 and st["shared_ids"] == [9]
    assert st["objects_without_image_goals"] == 0 and len(rows) == len(set(rows)) == 2


def test_cli_reports_objects_sharing_a_habitat_id(tmp_path, monkeypatch):
    """`episodes --task instance_imagenav`: the objects left out for a shared habitat id are in
    the per-scene line and in --json (never silently)."""
    import dataclasses
    import json

    from bps_assets.nav import objectnav_episodes as on
    from cli.main import main
    from test_cli_episodes_objectnav import _packed_with_objects

    s = two_rooms()
    (tmp_path / "navmeshes").mkdir()
    s.navmesh.save(tmp_path / "navmeshes" / "TwoRooms.navmesh.bps")
    _packed_with_objects(s, tmp_path / "scenes" / "TwoRooms.bps")
    real = on.semantic_scene

    def shared(path):   # chairs 1 and 2 given one habitat id, as one template's instances
        v, t, tri_object, table = real(path)
        src = np.asarray(table.ids, np.int64).copy()
        src[np.isin(table.ids, [1, 2])] = 9
        return v, t, tri_object, dataclasses.replace(table, source_ids=src)

    monkeypatch.setattr(on, "semantic_scene", shared)
    base = ["episodes", str(tmp_path / "navmeshes" / "TwoRooms.navmesh.bps"), "--task", "instance_imagenav",
            "--split", "val", "--per-scene", "2", "--seed", "3"]
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    assert "2 object(s) no goal: habitat id(s) [9] shared in the scene" in r.output
    r = CliRunner().invoke(main, base + ["-o", str(tmp_path / "b"), "--json"])
    rep = json.loads(r.stdout[r.stdout.index("{"):])["scenes"][0]
    assert rep["objects_with_shared_ids"] == 2 and rep["shared_ids"] == [9]
