"""Distances near goals are exact (the straight line to a goal the point sees), in the host API
(``NavMesh.distance_at`` on ``distance_field`` / ``distance_field_to_any``), in the step's Warp
``geodesic`` (Warp's CPU device) and through the env: STOP 0.09 m from an ObjectNav view point,
0.19 m from a PointNav goal and 0.95-0.99 m from an ImageNav goal (success distance 1.0 m: the
task's gate, ``near_gate``) succeeds, as under habitat's geodesic rule; a goal behind a thin
wall never counts as near (docs/NAVMESH.md section 4)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from bps_assets.nav import NavMesh
from bps_assets.nav.geodesic import NEAR_EXACT, near_gate
from bps_runtime.episodes.dataset import EpisodeGoal
from bps_runtime.nav.buffers import GoalFields, NavBuffers, SceneNav
from bps_runtime.nav.kernels import host_distance
from bps_runtime.tasks import imagenav, objectnav
from inmemory_scenes import floor_tiles, episode, make_env, room
import nav_task_reference as ref
from nav_queries import NavQueries

HABITAT = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / "habitat_test_scenes_navmesh"
OFFSETS = (0.0, 0.01, 0.03, 0.06, 0.09, 0.15, 0.19)
DIRS = [(math.cos(a), math.sin(a)) for a in np.linspace(0, 2 * math.pi, 8, endpoint=False)]


@pytest.fixture(scope="module")
def scene():
    """A 4 x 6 m room with a pillar (walls, corners), its navmesh."""
    return room("r", 4.0, 6.0, pillars=[(1.0, -3.0, 2.5, -2.0)])


@pytest.fixture(scope="module")
def walled():
    """4 x 4 m floor with a 0.2 m long, ~0.1 m thick wall (a gap in the floor) at x = 2: points on
    either side are 0.13 m apart in a straight line, 0.31 m apart around the wall's end."""
    v, t = floor_tiles(4.0, 4.0, [(1.975, -2.1, 2.025, -1.9)], tile=0.05)
    return NavMesh.from_walkable_triangles(v, t)


def _near_points(nm, goals, offsets=OFFSETS, seed=0):
    """(goal index [M], point [M, 3], offset [M]) of points at ``offsets`` m from each goal in 8
    directions (rotated per goal), kept where the point is navigable and sees the goal."""
    rng = np.random.default_rng(seed)
    gi, pts, off = [], [], []
    for i, g in enumerate(goals):
        rot = rng.uniform(0, 2 * math.pi)
        for dx, dz in DIRS:
            c, s = math.cos(rot), math.sin(rot)
            for r in offsets:
                gi.append(i)
                pts.append(g + r * np.array([c * dx - s * dz, 0.0, s * dx + c * dz]))
                off.append(r)
    gi, pts, off = np.array(gi), np.array(pts), np.array(off)
    straight = np.abs(nm.geodesic_distance(goals[gi], pts) - off) < 1e-9   # sees it: exact straight line
    keep = np.asarray(nm.is_navigable(pts)) & straight
    return gi[keep], pts[keep], off[keep]


def _goals(nm, n, seed):
    return np.asarray(nm.snap_point(nm.sample_navigable_point(n, seed=seed)), np.float64)


def test_point_goal_reads_are_exact_near_it(scene):
    nm = scene[4]
    goals = _goals(nm, 12, 1)
    gi, pts, off = _near_points(nm, goals)
    assert len(pts) > 400 and (off == 0.09).sum() > 50
    for i, g in enumerate(goals):
        f = nm.distance_field(g)
        m = gi == i
        # before: 0.04-0.1 m at the goal itself, above the offset (not monotonic) within 0.1 m
        np.testing.assert_allclose(nm.distance_at(f, pts[m]), off[m], atol=1e-6)
        # a plain array (or a ufunc's result) has no goals: ``goals=`` gives them
        assert getattr(f + 0, "goal_points", None) is None and f.copy().goal_points is f.goal_points
        np.testing.assert_allclose(nm.distance_at(np.asarray(f), pts[m], goals=g), off[m], atol=1e-6)


@pytest.mark.parametrize("name", ["van-gogh-room", "apartment_1"])
def test_habitat_navmesh_reads_are_exact_near_goals(name):
    """Real navmeshes (habitat's test scenes, built by Recast): the host read and the step's
    kernel are exact near point goals and near view points."""
    path = HABITAT / f"{name}.navmesh"
    if not path.is_file():
        pytest.skip("shared assets absent")
    from bps_assets.nav.detour import import_detour

    nm = import_detour(path)
    goals = _goals(nm, 10, 12)
    gi, pts, off = _near_points(nm, goals, seed=13)
    assert len(pts) > 300
    b, fields = _published(nm)
    q = NavQueries(b)
    f32 = pts.astype(np.float32)
    for k, g in enumerate(goals):
        m = gi == k
        np.testing.assert_allclose(nm.distance_at(nm.distance_field(g), pts[m]), off[m], atol=1e-6)
        row = fields.add(g)
        b.refresh()
        got = q.geodesic(torch.full((int(m.sum()),), 1), torch.full((int(m.sum()),), row), torch.from_numpy(f32[m]))
        np.testing.assert_allclose(got.numpy(), off[m], atol=2e-6)
        fields.release(row)
    each = np.stack([nm.geodesic_distance(np.repeat(v[None], len(pts), 0), pts) for v in goals], 1)
    np.testing.assert_allclose(nm.distance_at(nm.distance_field_to_any(goals), pts), each.min(axis=1), atol=1e-6)


def test_view_point_field_reads_the_nearest_seen_view_point(scene):
    """ObjectNav: one field to many view points; near them, the nearest one it sees in a line."""
    nm = scene[4]
    vps = _goals(nm, 40, 2)
    f = nm.distance_field_to_any(vps)
    gi, pts, off = _near_points(nm, vps, seed=3)
    got = nm.distance_at(f, pts)
    each = np.stack([nm.geodesic_distance(np.repeat(v[None], len(pts), 0), pts) for v in vps], 1)
    want = each.min(axis=1)
    assert (want < off - 1e-3).sum() > 5      # some points are nearer another view point
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (got[off == 0.09] < 0.1).all()


def test_thin_wall_goal_is_not_near(walled):
    nm = walled
    g, p = np.array([1.93, 0.0, -2.0]), np.array([2.06, 0.0, -2.0])
    assert nm.is_navigable(np.stack([g, p])).all()
    geo = nm.geodesic_distance(g, p)
    assert 0.25 < geo < NEAR_EXACT          # a short way round: the near rule is consulted
    for f in (nm.distance_field(g), nm.distance_field_to_any(np.stack([g, g + [0, 0, 0.6]]))):
        assert nm.distance_at(f, p) == pytest.approx(geo, abs=1e-6)
    # and the goal's own side of the wall is exact
    assert nm.distance_at(nm.distance_field(g), g - [0.05, 0, 0]) == pytest.approx(0.05, abs=1e-9)


def _published(nm):
    b = NavBuffers(capacity=2)
    s = SceneNav(nm, b)
    fields = GoalFields(s, capacity=1)
    b.publish(1, s, fields)
    return b, fields


@pytest.mark.parametrize("multi", [False, True])
def test_step_geodesic_is_exact_near_goals(scene, walled, multi):
    """The step's Warp ``geodesic`` (and ``host_distance``, the same code) equals the host API:
    exact near the goals, the way round behind the thin wall."""
    for nm, extra in ((scene[4], None), (walled, (np.array([1.93, 0.0, -2.0]), np.array([[2.06, 0.0, -2.0]])))):
        b, fields = _published(nm)
        goals = _goals(nm, 6, 4)
        if extra is not None:
            goals[0] = extra[0]
        rows = [fields.add(goals)] if multi else [fields.add(g) for g in goals]
        b.refresh()                                    # the table (capacity 1) moved
        q = NavQueries(b)
        gi, pts, off = _near_points(nm, goals, seed=5)
        if extra is not None:
            pts = np.concatenate([pts, extra[1]])
        f32 = pts.astype(np.float32)
        for k, row in enumerate(rows):
            want = nm.distance_at(nm.distance_field_to_any(goals) if multi else nm.distance_field(goals[k]),
                                  f32.astype(np.float64))
            got = q.geodesic(torch.full((len(pts),), 1), torch.full((len(pts),), row), torch.from_numpy(f32)).numpy()
            np.testing.assert_allclose(got, want, atol=2e-6)
            assert np.array_equal(host_distance(fields.scene, fields.host[row], f32, fields.near[row]),
                                  got.astype(np.float64))
            if not multi:
                m = gi == k
                np.testing.assert_allclose(got[:len(gi)][m], off[m], atol=2e-6)
            else:                                      # the nearest goal is at most that far
                assert (got[:len(gi)] <= off + 2e-6).all()
        if extra is not None:
            assert got[-1] > 0.25                      # behind the wall: never the straight 0.13 m


def _stop_run(task, episodes, goals, n, scene=None, sensors=("depth",)):
    """Reset ``n`` envs on the given episodes, STOP at once: the first episode's metrics."""
    scene = scene or room("r", 4.0, 6.0, pillars=[(1.0, -3.0, 2.5, -2.0)])
    env = make_env([scene], num_envs=n, episodes={scene[0]: episodes}, goals=goals, task=task, sensors=sensors)
    try:
        env.reset()
        d0 = env.last_info["distance_to_goal"].clone()
        _, _, done, info = env.step(torch.zeros(n, dtype=torch.int64))
        assert done.all()
        epi = info["episode"]
        return d0, epi["distance_to_goal"].clone(), epi["success"].clone()
    finally:
        env.close()


def test_stop_near_a_view_point_succeeds(scene):
    """ObjectNav: starts 0.09 m (in a straight line) from a view point; STOP succeeds in every
    episode, distance 0.09 (habitat: geodesic < 0.1); before: 0.1025-0.1049 m, no success."""
    nm = scene[4]
    vps = _goals(nm, 6, 6)
    gi, pts, off = _near_points(nm, vps, offsets=(0.09,), seed=7)
    each = np.stack([nm.geodesic_distance(np.repeat(v[None], len(pts), 0), pts) for v in vps], 1)
    pts = pts[np.abs(each.min(axis=1) - 0.09) < 1e-9][:12]     # no other view point nearer
    assert len(pts) == 12
    eps = [episode(f"e{i}", "r", p, vps[0]) for i, p in enumerate(pts)]
    goals = {"r": {e["episode_id"]: EpisodeGoal(vps, "r_chair", 4) for e in eps}}
    d0, d, success = _stop_run(objectnav.TaskOptions(), eps, goals, 12)
    np.testing.assert_allclose(d.numpy(), 0.09, atol=2e-6)
    np.testing.assert_allclose(d0.numpy(), 0.09, atol=2e-6)
    assert success.all()


def test_stop_near_a_point_goal_succeeds(scene):
    """PointNav: starts 0.19 m from the goal; STOP succeeds (habitat: geodesic < 0.2)."""
    nm = scene[4]
    goals = _goals(nm, 8, 8)
    gi, pts, off = _near_points(nm, goals, offsets=(0.19,), seed=9)
    idx = np.concatenate([np.nonzero(gi == i)[0][:2] for i in range(len(goals))])[:8]
    eps = [episode(f"p{j}", "r", pts[k], goals[gi[k]]) for j, k in enumerate(idx)]
    d0, d, success = _stop_run(None, eps, None, len(eps))
    np.testing.assert_allclose(d.numpy(), 0.19, atol=2e-6)
    assert success.all()


IMAGENAV_1M = imagenav.TaskOptions(success_distance=imagenav.BENCHMARK_SUCCESS_DISTANCE)
WALL = (1.95, -2.3, 2.05, -1.7)      # 0.1 m thick, 0.6 m long: 0.9 m through it, 1.11 m round it


def test_gate_covers_the_success_distance():
    """The gate: 0.5 m unless a task's success distance + 0.3 m is more (ObjectNav's many view
    points keep 0.5 m); PointNav's 0.2 m keeps 0.5 m exactly (its seeded trace is unchanged)."""
    assert near_gate(0.2) == NEAR_EXACT == near_gate(objectnav.DEFAULTS.success_distance) == 0.5
    assert near_gate(IMAGENAV_1M.success_distance) == pytest.approx(1.3)
    assert ref.gate(1.0) == near_gate(1.0)


def test_reads_are_exact_inside_a_raised_gate(scene):
    """Host API: 0.95-0.99 m from a goal it sees, the read with ImageNav's gate is the straight
    line; the 0.5 m gate leaves the field read's detour (what made a STOP at 1 m miss)."""
    nm = scene[4]
    goals = _goals(nm, 8, 21)
    gi, pts, off = _near_points(nm, goals, offsets=(0.95, 0.97, 0.99), seed=22)
    assert len(pts) > 60
    over = []
    for i, g in enumerate(goals):
        m, f = gi == i, nm.distance_field(g)
        np.testing.assert_allclose(nm.distance_at(f, pts[m], gate=near_gate(1.0)), off[m], atol=1e-6)
        over.append(nm.distance_at(f, pts[m]) - off[m])
    over = np.concatenate(over)
    assert (over >= -1e-6).all() and (over > 5e-3).sum() > 10


def test_stop_at_imagenav_success_boundary_succeeds(scene):
    """ImageNav, success distance 1.0 m: starts 0.95-0.99 m from the goal in a clear straight
    line; distance_to_goal is that line (start and STOP) and STOP succeeds in every episode
    (before: the 0.5 m gate left the field read, up to ~5 cm over: some were > 1 m)."""
    nm = scene[4]
    goals = _goals(nm, 8, 23)
    gi, pts, off = _near_points(nm, goals, offsets=(0.95, 0.97, 0.99), seed=24)
    idx = np.concatenate([np.nonzero(gi == i)[0][:3] for i in range(len(goals))])[:12]
    assert len(idx) == 12 and set(off[idx]) == {0.95, 0.97, 0.99}
    eps = [episode(f"i{j}", "r", pts[k], goals[gi[k]]) for j, k in enumerate(idx)]
    d0, d, success = _stop_run(IMAGENAV_1M, eps, None, len(eps), sensors=("rgb",))
    want = np.sort(off[idx])              # the envs take the episodes in the supply's order
    np.testing.assert_allclose(np.sort(d0.numpy()), want, atol=2e-6)
    np.testing.assert_allclose(np.sort(d.numpy()), want, atol=2e-6)
    assert success.all()


def test_wall_at_imagenav_boundary_is_not_near():
    """ImageNav's 1.3 m gate consults the straight line, but a goal 0.9 m away through a thin
    wall (1.11 m round it) is never near: the host read, the step's ``geodesic`` and the env
    give the way round, and STOP there fails."""
    base = room("w", 4.0, 4.0, pillars=[WALL])
    nm = NavMesh.from_walkable_triangles(*floor_tiles(4.0, 4.0, [WALL], tile=0.05))
    g, p = np.array([1.55, 0.0, -2.0]), np.array([2.45, 0.0, -2.0])
    geo = nm.geodesic_distance(g, p)
    assert nm.is_navigable(np.stack([g, p])).all() and 1.05 < geo < near_gate(1.0)   # the gate is consulted
    assert nm.distance_at(nm.distance_field(g), p, gate=near_gate(1.0)) == pytest.approx(geo, abs=1e-6)
    b = NavBuffers(capacity=2)
    fields = GoalFields(SceneNav(nm, b), capacity=1, gate=near_gate(1.0))
    b.publish(1, fields.scene, fields)
    row = fields.add(g)
    b.refresh()
    got = NavQueries(b).geodesic(torch.ones(1, dtype=torch.int32), torch.full((1,), row),
                                 torch.from_numpy(p.astype(np.float32)[None])).numpy()
    assert got[0] == pytest.approx(geo, abs=2e-6)
    d0, d, success = _stop_run(IMAGENAV_1M, [episode("w0", "w", p, g)], None, 1, scene=base[:4] + (nm,),
                               sensors=("rgb",))
    assert float(d[0]) == pytest.approx(geo, abs=2e-6) and float(d0[0]) > 1.0 and not success.any()


def test_goal_blocks_follow_their_rows(scene):
    """A released row's goals go back to the goal arena at the next ``add`` (the step thread,
    which releases rows, writes no device memory); a reused row reads its new goals; a full table
    moves with its goal table; a scene that leaves gives every block back."""
    nm = scene[4]
    b, fields = _published(nm)
    g = _goals(nm, 3, 11)
    r0 = fields.add(g[0])
    before = b.goal_arena.buf.clone()
    fields.release(r0)
    assert torch.allclose(b.goal_arena.buf, before, rtol=0, atol=0, equal_nan=True) and fields._stale
    r1 = fields.add(g[1])                        # reuses row r0; the old block is released here
    assert r1 == r0 and not fields._stale and b.goal_arena.used == 4
    r2 = fields.add(np.stack([g[2], g[0]]))      # the table (capacity 1) moves
    assert b.refresh() and fields.capacity == 2
    q = NavQueries(b)
    for row, goal in ((r1, g[1]), (r2, g[2]), (r2, g[0])):
        p = (goal + [0.03, 0, 0]).astype(np.float32)[None]
        got = q.geodesic(torch.ones(1, dtype=torch.int32), torch.full((1,), row), torch.from_numpy(p)).numpy()
        assert got[0] == pytest.approx(0.03, abs=2e-6)
    b.unpublish(1)
    assert b.goal_arena.used == 0 and b.goal_table.used == 0


def test_make_sets_each_tasks_gate_in_its_rows(tmp_path):
    """``make``: every field row's goal-table entry holds the task's gate, in micrometres (ImageNav
    at 1.0 m: 1.3 m; PointNav: 0.5 m), and the step reads by it."""
    from click.testing import CliRunner

    from bps_runtime import make
    from bps_runtime.nav.buffers import GATE_SCALE, T_GATE, TABLE_WIDTH
    from cli.main import main

    src, out = tmp_path / "src", tmp_path / "out"
    for args in (["synth", src, "--layout", "mp3d", "-n", 1],
                 ["preprocess", src, "-o", out, "--dataset", "mp3d", "--split", "benchmark", "--workers", 1]):
        r = CliRunner().invoke(main, [str(a) for a in args])
        assert r.exit_code == 0, r.output
    for task, want in ((IMAGENAV_1M, 1.3), ("pointnav", 0.5)):
        with make(out, split="train", task=task, num_envs=2, resolution=(8, 8), sensors=("rgb",)) as env:
            env.reset()
            nav = env.world.nav
            assert env.world.episodes.near_gate == pytest.approx(want)
            gates = [int(nav.goal_table.buf[f.goal_base + TABLE_WIDTH * row + T_GATE]) for f in nav.fields.values()
                     for row in f.near]
            assert gates and set(gates) == {round(want * GATE_SCALE)}


@pytest.mark.parametrize("task", ["pointnav", IMAGENAV_1M, "objectnav", "instance_imagenav"])
def test_a_supply_made_by_its_task_outside_make_has_the_tasks_gate(task):
    """The gate comes in with the supply (``SupplyRequest.near_gate``), so a supply a task's spec
    makes outside ``make()``'s ``build_world`` reads as ``make()``'s does (ImageNav at 1.0 m: 1.3 m)."""
    from bps_runtime.env.config import EnvConfig, EpisodeConfig, task_options
    from bps_runtime.nav.buffers import FieldWorker
    from bps_runtime.tasks import spec_for
    from bps_runtime.tasks.spec import SupplyRequest

    config = EnvConfig(task=task_options(task), episodes=EpisodeConfig("sample"))
    worker = FieldWorker()
    try:
        supply, _ = spec_for(config.task).supply(SupplyRequest(None, None, [], config, worker))
        assert supply.near_gate == pytest.approx(near_gate(config.task.success_distance))
        assert supply.near_gate == pytest.approx(1.3 if task is IMAGENAV_1M else NEAR_EXACT)
    finally:
        worker.close()
