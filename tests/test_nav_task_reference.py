"""The numpy reference of the ObjectNav / ImageNav rules (tests/nav_task_reference.py): hand-computed
cases, a real navmesh (walls, sliding off, the multi-source view-point field), and habitat-lab's
own measure classes (Success, SPL, SoftSPL, DistanceToGoal, DistanceToGoalReward) driven in
lockstep over random actions on episodes habitat-lab read from our files."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import nav_task_reference as ref
from bps_assets.nav.imagenav import goal_heading, goal_rotation
from habitat_lab_stub import habitat_lab  # noqa: F401 - the fixture
from objectnav_scenes import two_rooms


def plane(goal):
    goal = np.asarray(goal, float)
    return ref.TaskReference(ref.OBJECTNAV, lambda p: float(np.linalg.norm(p - goal)), lambda a, b: b)


def test_forward_reward_and_stop_short_of_goal():
    t = plane([0, 0, -2.0])
    m = t.reset([0, 0, 0], 0.0)
    assert m["distance_to_goal"] == 2.0 and m["spl"] == 0 and m["soft_spl"] == 0
    for k in range(4):
        m = t.step(ref.MOVE_FORWARD)
        assert m["reward"] == pytest.approx(0.25 - 0.01)
        assert m["distance_to_goal"] == pytest.approx(2.0 - 0.25 * (k + 1))
    m = t.step(ref.STOP)
    assert m["done"] and m["success"] == 0 and m["spl"] == 0
    assert m["reward"] == pytest.approx(-0.01)
    assert m["soft_spl"] == pytest.approx((1 - 1.0 / 2.0) * 2.0 / max(2.0, 1.0))  # 0.5


def test_success_spl_and_strict_threshold():
    t = plane([0, 0, -1.05])
    t.reset([0, 0, 0], 0.0)
    for _ in range(4):
        t.step(ref.MOVE_FORWARD)
    m = t.step(ref.STOP)  # d = 0.05 < 0.1
    assert m["success"] == 1 and m["reward"] == pytest.approx(2.5 - 0.01)
    assert m["spl"] == pytest.approx(1.05 / max(1.05, 1.0))
    # a detour: path 1.5 m for d0 = 1.05 -> spl = 1.05 / 1.5
    t.reset([0, 0, 0], 0.0)
    for a in [ref.TURN_LEFT] * 6 + [ref.MOVE_FORWARD] + [ref.TURN_LEFT] * 6 + [ref.MOVE_FORWARD] * 5:
        t.step(a)
    assert t.pos == pytest.approx([0, 0, -1.0])
    m = t.step(ref.STOP)
    assert m["success"] == 1 and m["spl"] == pytest.approx(1.05 / 1.5)
    # exactly at the threshold is not a success (habitat: distance < success_distance)
    t = ref.TaskReference(ref.OBJECTNAV, lambda p: 0.1, lambda a, b: b)
    t.reset([0, 0, 0], 0.0)
    assert t.step(ref.STOP)["success"] == 0


def test_turns_pitch_limits_and_episode_length():
    t = plane([0, 0, -100.0])
    t.reset([0, 0, 0], 0.0)
    for _ in range(3):
        t.step(ref.TURN_LEFT)
    assert ref.forward_vector(t.yaw) == pytest.approx([-1, 0, 0])  # left of -Z is -X
    t.step(ref.MOVE_FORWARD)
    assert t.pos == pytest.approx([-0.25, 0, 0])
    t.step(ref.LOOK_UP)
    t.step(ref.LOOK_UP)
    assert t.pitch == pytest.approx(math.radians(30))
    for _ in range(3):
        t.step(ref.LOOK_DOWN)
    assert t.pitch == pytest.approx(math.radians(-30))
    free = ref.TaskReference(ref.Rules(max_pitch_deg=None), t.distance, t.move)
    free.reset([0, 0, 0], 0.0)
    free.step(ref.LOOK_UP)
    free.step(ref.LOOK_UP)
    assert free.pitch == pytest.approx(math.radians(60))
    t.reset([0, 0, 0], 0.0)
    for i in range(500):
        m = t.step(ref.TURN_RIGHT)
        assert m["done"] == (i == 499)
    assert m["success"] == 0 and t.yaw == pytest.approx(-500 * math.radians(30))


def test_imagenav_rules_success_distance_and_no_look_actions():
    goal = np.array([0, 0, -1.0])
    dist = lambda p: float(np.linalg.norm(p - goal))  # noqa: E731
    got = {}
    for rules in (ref.IMAGENAV, ref.IMAGENAV_1M):
        t = ref.TaskReference(rules, dist, lambda a, b: b)
        t.reset([0, 0, 0], 0.0)
        t.step(ref.MOVE_FORWARD)
        t.step(ref.MOVE_FORWARD)  # d = 0.5
        got[rules.success_distance] = t.step(ref.STOP)
        with pytest.raises(AssertionError):
            t.reset([0, 0, 0], 0.0)
            t.step(ref.LOOK_UP)
    assert got[0.2]["success"] == 0 and got[1.0]["success"] == 1
    assert got[1.0]["reward"] == pytest.approx(2.5 - 0.01) and got[1.0]["spl"] == pytest.approx(1.0)
    t = ref.TaskReference(ref.IMAGENAV, dist, lambda a, b: b)
    t.reset([0, 0, 0], 0.0)
    for _ in range(9):
        t.step(ref.TURN_LEFT)
    assert ref.forward_vector(t.yaw) == pytest.approx([-1, 0, 0])  # 9 x 10 deg
    for _ in range(990):
        assert not t.step(ref.TURN_LEFT)["done"]
    assert t.step(ref.TURN_LEFT)["done"] and t.steps == 1000  # imagenav_gibson: 1000 steps


@pytest.fixture(scope="module")
def scene():
    return two_rooms()


def test_sliding_off_stops_at_the_wall(scene):
    nav = scene.navmesh
    move = lambda a, b: nav.try_step(a, b, sliding=False)  # noqa: E731
    slide = lambda a, b: nav.try_step(a, b, sliding=True)  # noqa: E731
    start = nav.snap_point([3.6, 0, 1.0])  # room A, 0.4 m from the dividing wall at x = 4.0
    yaw = ref.math.atan2(-1.0, -0.3)  # towards +x (and a little +z): obliquely into the wall
    outs = {}
    for name, mv in (("off", move), ("on", slide)):
        t = ref.TaskReference(ref.OBJECTNAV, lambda p: 0.0, mv)
        t.reset(start, yaw)
        for _ in range(6):
            t.step(ref.MOVE_FORWARD)
        outs[name] = (t.pos.copy(), t.path)
    (p_off, path_off), (p_on, _) = outs["off"], outs["on"]
    assert p_off[0] < 4.0 - 0.18 + 0.06  # held at the wall (radius 0.18 eroded)
    assert path_off < 0.4  # blocked steps add no path length
    assert abs(p_off[2] - start[2]) < 0.15  # sliding off: no travel along the wall
    assert p_on[2] - start[2] > 0.3  # sliding on: it slides along the wall


def test_view_point_field_is_the_nearest_view_point(scene, monkeypatch):
    nav = scene.navmesh
    vps = np.array([[1.25, 0, 2.3], [6.2, 0, 1.25], [2.6, 0, 3.3]])
    vps = nav.snap_point(vps)
    field = nav.distance_field_to_any(vps)
    q = nav.sample_navigable_point(40, seed=3)
    multi = nav.distance_at(field, q)
    single = np.min([nav.distance_at(nav.distance_field(v), q) for v in vps], axis=0)
    assert np.all(np.isfinite(multi))
    np.testing.assert_allclose(multi, single, rtol=0, atol=1e-5)
    from bps_assets.nav import geodesic  # scipy's search (no compiled helper) gives the same field

    monkeypatch.setattr(geodesic, "_native_dijkstra", lambda: None)
    np.testing.assert_allclose(nav.distance_field_to_any(vps), field, rtol=0, atol=1e-5)
    assert np.isinf(nav.distance_field_to_any(np.zeros((0, 3)))).all()
    # and it is a geodesic distance: the door makes room B's view point farther than euclidean
    far = nav.distance_at(nav.distance_field(vps[1]), [[1.0, 0, 0.5]])[0]
    assert far > np.linalg.norm(vps[1] - [1.0, 0, 0.5]) + 0.8


def test_imagenav_goal_heading_is_habitats_draw_and_reproducible():
    for eid in ["0", "17", "abc"]:
        a = goal_heading(eid)
        assert a == ref.imagenav_goal_heading(eid) and 0 <= a < 2 * np.pi
        q = goal_rotation(eid)
        assert q == pytest.approx([0, math.sin(a / 2), 0, math.cos(a / 2)])
    assert len({goal_heading(str(i)) for i in range(20)}) == 20
    code = "from bps_assets.nav.imagenav import goal_heading; print(repr(goal_heading('42')))"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": s}).stdout for s in ("1", "2")}
    assert outs == {repr(goal_heading("42")) + "\n"}  # unlike habitat's hash(), not salted


# ------------------------------------------------------------------ against habitat-lab's measures
class _Measures:
    def __init__(self):
        self.measures = {}

    def check_measure_dependencies(self, uuid, deps):
        assert all(d in self.measures for d in deps)


class _Lockstep:
    """habitat-lab's DistanceToGoal, Success, SPL, SoftSPL and DistanceToGoalReward (in its
    config order) over a fake simulator whose geodesic distance is our multi-source field to the
    targets habitat passes, run step by step beside the reference and compared at every step."""

    def __init__(self, h, nav, success_distance, distance_to):
        self.h, self.nav, self.fields = h, nav, {}
        self.cfg = SimpleNamespace(distance_to=distance_to, success_distance=success_distance)
        self.position = np.zeros(3)
        self.sim = SimpleNamespace(get_agent_state=lambda: SimpleNamespace(position=self.position.copy()),
                                   geodesic_distance=lambda p, t, ep=None: self.distance(p, t))
        self.steps = self.stops = self.successes = 0

    def distance(self, p, targets) -> float:
        key = tuple(np.round(np.asarray(targets, float).ravel(), 6))
        if key not in self.fields:
            self.fields[key] = self.nav.distance_field_to_any(np.asarray(targets, float))
        return float(self.nav.distance_at(self.fields[key], p))

    def run(self, t, ep, start, yaw, choose):
        """One episode from ``start``: ``choose(t)`` gives each action until the reference ends it."""
        nav = self.h.nav
        measures = [cls(sim=self.sim, config=self.cfg) for cls in (
            nav.DistanceToGoal, nav.Success, nav.SPL, nav.SoftSPL, nav.DistanceToGoalReward)]
        task = SimpleNamespace(measurements=_Measures(), is_stop_called=False)
        task.measurements.measures = {m.uuid: m for m in measures}
        self.position = np.asarray(start, float)
        t.reset(start, yaw)
        for m in measures:
            m.reset_metric(episode=ep, task=task)
        while not t.done:
            a = choose(t)
            out = t.step(a)
            self.position = t.pos.copy()
            task.is_stop_called = a == ref.STOP
            for m in measures:
                m.update_metric(episode=ep, task=task)
            got = {m.uuid: m.get_metric() for m in measures}
            for k in ("distance_to_goal", "success", "spl", "soft_spl"):
                assert out[k] == pytest.approx(got[k], abs=1e-9), (k, self.steps)
            assert out["reward"] == pytest.approx(got["distance_to_goal_reward"] - 0.01 + 2.5 * got["success"],
                                                  abs=1e-9)
            self.steps += 1
            self.stops += a == ref.STOP
            self.successes += out["success"] == 1


def _habitat_reads(cls, root):
    return cls(SimpleNamespace(data_path=str(root / "{split}" / "{split}.json.gz"), split="val",
                               scenes_dir="data/scene_datasets", content_scenes=["*"]))


def test_imagenav_reference_equals_habitat_lab_measures(scene, habitat_lab, tmp_path):
    """ImageNav: PointNav episodes read by habitat-lab, distance to the goal POINT, sliding on,
    success within 1 m (the published benchmarks' distance)."""
    from bps_assets.nav.episodes import generate_episodes, write_pointnav_dataset

    nav = scene.navmesh
    write_pointnav_dataset(tmp_path, "val", {"two_rooms": generate_episodes(nav, "two_rooms.glb", 6, seed=4)})
    hds = _habitat_reads(habitat_lab.PointNavDatasetV1, tmp_path)
    ls = _Lockstep(habitat_lab, nav, 1.0, "POINT")
    rng = np.random.default_rng(1)
    for ep in hds.episodes:
        goal = [list(ep.goals[0].position)]
        for trial in range(3):
            start = np.array(ep.start_position) if trial < 2 else nav.snap_point(np.array(goal[0]) + [0.5, 0, 0])
            t = ref.TaskReference(ref.IMAGENAV_1M, lambda p: ls.distance(p, goal),
                                  lambda a, b: nav.try_step(a, b, sliding=True))
            ls.run(t, ep, start, float(rng.uniform(0, 2 * np.pi)),
                   lambda t: ref.STOP if trial == 2 and t.steps == 0 else
                   int(rng.choice(4, p=[0.03, 0.61, 0.18, 0.18])))
    assert ls.steps > 300 and ls.successes >= 3


def test_reference_equals_habitat_lab_measures(scene, habitat_lab, tmp_path):
    """Random actions (looking up and down, blocked moves, STOP on and off a view point): the
    reference's distance, success, spl, soft_spl and reward equal habitat-lab's measures."""
    from bps_assets.nav.objectnav_episodes import objectnav_scene
    from bps_assets.nav.objectnav_files import write_objectnav_dataset

    nav = scene.navmesh
    ds = objectnav_scene(nav, scene.vertices, scene.triangles, scene.tri_object, scene.table, "two_rooms.glb",
                         6, seed=1)
    write_objectnav_dataset(tmp_path, "val", {"two_rooms": ds}, ds.category_to_task_category_id,
                            ds.category_to_scene_annotation_category_id)
    hds = _habitat_reads(habitat_lab.ObjectNavDatasetV1, tmp_path)
    ls = _Lockstep(habitat_lab, nav, 0.1, "VIEW_POINTS")
    rng = np.random.default_rng(0)

    def choose(t, near):
        if near and t.steps < 2 and rng.random() < 0.4:
            return ref.STOP  # STOP next to (or one step off) a view point
        return int(rng.choice(6, p=[0.02, 0.56, 0.12, 0.12, 0.09, 0.09]))

    for ep in hds.episodes:
        vps = np.array([vp.agent_state.position for g in ep.goals for vp in g.view_points], float)
        for trial in range(6):
            near = trial % 2 == 1
            # near: 3 cm from a view point (exactly on one, d0 is 0 as in habitat, whose SPL then
            # divides 0 by 0)
            a = rng.uniform(0, 2 * np.pi)
            start = (nav.snap_point(vps[rng.integers(len(vps))] + [0.03 * np.cos(a), 0, 0.03 * np.sin(a)]) if near
                     else np.array(ep.start_position))
            t = ref.TaskReference(ref.OBJECTNAV, lambda p: ls.distance(p, vps),
                                  lambda a, b: nav.try_step(a, b, sliding=False))
            ls.run(t, ep, start, float(rng.uniform(0, 2 * np.pi)), lambda t: choose(t, near))
    assert ls.steps > 800 and ls.stops >= 10 and ls.successes >= 3
