"""bps_runtime.nav.buffers + the fused step's navigation kernels (try_step / geodesic over the
flat buffers) against the NavMesh's own numpy queries."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bps_assets.nav import NavMesh
import nav_task_reference as reference
from bps_runtime.nav.buffers import TABLE_WIDTH, Arena, FieldWorker, GoalFields, NavBuffers, SceneNav
from bps_runtime.nav.kernels import host_distance
from nav_queries import NavQueries


def _tiled_navmesh(seed=0):
    """8 x 8 m of 1 m floor tiles, ~20% missing (walls of holes), a 15 cm raised corner (a step
    the agent can climb) and a second floor 2.5 m above part of it (two layers, own island)."""
    rng = np.random.default_rng(seed)
    V, T = [], []
    for i in range(8):
        for j in range(8):
            if rng.random() < 0.2 and (i, j) != (0, 0):
                continue
            y = 0.15 if (i >= 5 and j >= 5) else 0.0
            b = len(V)
            V += [[i, y, -j], [i + 1, y, -j], [i + 1, y, -j - 1], [i, y, -j - 1]]
            T += [[b, b + 1, b + 2], [b, b + 2, b + 3]]
    b = len(V)
    V += [[0, 2.5, 0], [3, 2.5, 0], [3, 2.5, -3], [0, 2.5, -3]]
    T += [[b, b + 1, b + 2], [b, b + 2, b + 3]]
    return NavMesh.from_walkable_triangles(np.array(V, float), np.array(T))


@pytest.fixture(scope="module")
def nm():
    return _tiled_navmesh()


@pytest.fixture(scope="module")
def bufs(nm):
    """Buffers with the scene published under resident id 2 (ids need not start at 0)."""
    b = NavBuffers(capacity=4)
    scene = SceneNav(nm, b)
    b.publish(2, scene, GoalFields(scene, capacity=2))
    return b


def _steps(nm, n, seed, length=0.25):
    rng = np.random.default_rng(seed)
    p = nm.sample_navigable_point(n, seed=seed).astype(np.float32)
    a = rng.uniform(0, 2 * np.pi, n)
    e = (p + length * np.stack([-np.sin(a), np.zeros(n), -np.cos(a)], 1)).astype(np.float32)
    return p, e


def _try(bufs, key, p, e):
    keys = torch.full((len(p),), key, dtype=torch.int32)
    return NavQueries(bufs).try_step(keys, torch.from_numpy(p), torch.from_numpy(e)).numpy()


def test_layers_and_islands_present(nm):
    assert nm.shape[0] == 2 and nm.num_islands >= 2


@pytest.mark.parametrize("length,n", [(0.25, 1500), (0.6, 400)])
def test_try_step_matches_navmesh(nm, bufs, length, n):
    p, e = _steps(nm, n, seed=1, length=length)
    ref = nm.try_step(p.astype(np.float64), e.astype(np.float64))
    got = _try(bufs, 2, p, e)
    np.testing.assert_allclose(got, ref, atol=2e-5)
    # the cases that matter happened: blocked/slid steps and free steps
    moved = np.linalg.norm(got - p, axis=1)
    assert (moved < length - 1e-3).sum() > 20 and (np.abs(moved - length) < 1e-4).sum() > n // 3


def test_try_step_walk_stays_on_mesh_and_matches(nm, bufs):
    """Chained steps (each start is the previous result), as agents walk."""
    rng = np.random.default_rng(7)
    p = nm.sample_navigable_point(300, seed=7).astype(np.float32)
    q = p.copy()
    for _ in range(12):
        a = rng.uniform(0, 2 * np.pi, len(p))
        e = (p + 0.25 * np.stack([-np.sin(a), np.zeros(len(p)), -np.cos(a)], 1)).astype(np.float32)
        ref = nm.try_step(q.astype(np.float64), e.astype(np.float64)).astype(np.float32)
        p = _try(bufs, 2, p, e)
        np.testing.assert_allclose(p, ref, atol=2e-5)
        q = p.copy()
        assert nm.is_navigable(p.astype(np.float64)).all()


def test_geodesic_lookup_matches_distance_at(nm, bufs):
    fields = bufs.fields[2]
    goals = nm.sample_navigable_point(5, seed=3, island=0)
    base0 = fields.base
    rows = [fields.add(g) for g in goals]          # grows past its capacity: the table moves
    assert fields.capacity >= 5 and fields.base != base0
    assert bufs.refresh()                          # the step thread re-publishes the base
    pts = nm.sample_navigable_point(2000, seed=4).astype(np.float32)
    q = NavQueries(bufs)
    for g, row in zip(goals, rows):
        ref = nm.distance_at(nm.distance_field(g), pts.astype(np.float64))
        got = q.geodesic(torch.full((len(pts),), 2), torch.full((len(pts),), row), torch.from_numpy(pts)).numpy()
        fin = np.isfinite(ref)
        assert fin.sum() > 100 and np.array_equal(fin, np.isfinite(got))
        np.testing.assert_allclose(got[fin], ref[fin], atol=1e-4)
        # the host query (the episode supplies' check, on Warp's CPU device over the scene's host
        # arrays) is the step's own rule: the same numbers bit for bit, infinities included
        near = fields.near[row]
        assert np.array_equal(host_distance(fields.scene, fields.host[row], pts, near), got.astype(np.float64))
        # and the numpy reference of the rule agrees
        np.testing.assert_allclose(reference.geodesic(fields.scene, fields.host[row], pts, near)[fin], got[fin], atol=1e-6)
    # refcounts: a released row is reused
    fields.release(rows[0])
    assert fields.add(goals[1]) == rows[0]


def test_goal_fields_nbytes_counts_int64_table_rows_and_moved_regions(nm):
    b = NavBuffers(capacity=2)
    s = SceneNav(nm, b)
    f = GoalFields(s, capacity=1)
    b.publish(0, s, f)
    row_bytes = 4 * f.S + 8 * TABLE_WIDTH                # a field row + its (offset, count, gate) int64
    assert f.nbytes == row_bytes
    g = nm.sample_navigable_point(2, seed=3, island=0)
    r0 = f.add(g[0])
    assert f.nbytes == row_bytes + 8 * f.near[r0].size
    r1 = f.add(g[1])                                   # the table moves; the old one is held until refresh
    held = 2 * row_bytes + 8 * (f.near[r0].size + f.near[r1].size)
    assert f.nbytes == held + row_bytes
    assert b.refresh()
    assert f.nbytes == held


def test_queries_over_two_scenes_and_slot_reuse(nm):
    other = _tiled_navmesh(seed=5)
    b = NavBuffers(capacity=8)
    s1 = SceneNav(nm, b)
    b.size_for(s1, goal_rows=16)                       # room for 8 such scenes, as World does
    v = b.version
    s2 = SceneNav(other, b)
    f1, f2 = GoalFields(s1), GoalFields(s2)
    b.publish(3, s1, f1)
    b.publish(7, s2, f2)
    g1, g2 = nm.sample_navigable_point(1, seed=1)[0], other.sample_navigable_point(1, seed=1)[0]
    r1, r2 = f1.add(g1), f2.add(g2)
    p1, e1 = _steps(nm, 50, seed=2)
    p2, e2 = _steps(other, 50, seed=3)
    keys = torch.tensor([3, 7] * 50)
    start = torch.from_numpy(np.stack([p1, p2], 1).reshape(-1, 3))
    end = torch.from_numpy(np.stack([e1, e2], 1).reshape(-1, 3))
    q = NavQueries(b)
    out = q.try_step(keys, start, end).numpy()
    np.testing.assert_allclose(out[0::2], nm.try_step(p1.astype(float), e1.astype(float)), atol=2e-5)
    np.testing.assert_allclose(out[1::2], other.try_step(p2.astype(float), e2.astype(float)), atol=2e-5)
    rows = torch.tensor([r1, r2] * 50)
    d = q.geodesic(keys, rows, torch.from_numpy(out.astype(np.float32))).numpy()
    ref1 = nm.distance_at(nm.distance_field(g1), out[0::2].astype(np.float32).astype(float))
    fin = np.isfinite(ref1)
    np.testing.assert_allclose(d[0::2][fin], ref1[fin], atol=1e-4)
    # scene 3 leaves; its arena space is reused in place by the next scene under id 3
    used = b.ints.used
    b.unpublish(3)
    assert b.ints.used < used and 3 not in b.scenes
    s3 = SceneNav(other, b)
    b.publish(3, s3, GoalFields(s3))
    assert b.version == v                              # no buffer was reallocated since sizing
    out2 = q.try_step(torch.full((50,), 3), torch.from_numpy(p2), torch.from_numpy(e2)).numpy()
    np.testing.assert_allclose(out2, out[1::2], atol=1e-6)


def test_arena_allocates_first_fit_and_grows_keeping_offsets():
    a = Arena(torch.int32, "cpu", capacity=10, fill=-1)
    o1 = a.alloc(4)
    a.write(o1, np.arange(4))
    o2 = a.alloc(5)
    a.release(o1, 4)
    assert a.alloc(3) == o1                            # first fit reuses the hole
    o3 = a.alloc(20)                                   # does not fit: grows, offsets kept
    assert a.version == 1 and a.buf.numel() >= 29 and o3 >= 9 and o2 == 4
    a.write(o3, np.ones(20))
    assert int(a.buf[o3:o3 + 20].sum()) == 20


def test_field_worker_prepares_off_thread(bufs, nm):
    import threading

    w = FieldWorker()
    fields = bufs.fields[2]
    seen = []
    orig = fields.field   # the search (``compute`` is its flat field alone)

    def spy(goal):
        seen.append(threading.current_thread().name)
        return orig(goal)

    fields.field = spy
    row = w.submit(fields, nm.sample_navigable_point(1, seed=9)[0]).result(timeout=60)
    assert fields.refs[row] == 1 and seen and seen[0].startswith("bps-nav-fields")
    w.close()
