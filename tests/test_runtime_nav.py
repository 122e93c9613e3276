"""bps_runtime.nav (device try_step / geodesic) against the NavMesh's own numpy queries."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from bps_assets.nav import NavMesh
from bps_runtime.nav import BatchNav, DeviceNavMesh, FieldWorker, GoalFields


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
def dev(nm):
    return DeviceNavMesh(nm)


def _steps(nm, n, seed, length=0.25):
    rng = np.random.default_rng(seed)
    p = nm.sample_navigable_point(n, seed=seed).astype(np.float32)
    a = rng.uniform(0, 2 * np.pi, n)
    e = (p + length * np.stack([-np.sin(a), np.zeros(n), -np.cos(a)], 1)).astype(np.float32)
    return p, e


def test_layers_and_islands_present(nm):
    assert nm.shape[0] == 2 and nm.num_islands >= 2


@pytest.mark.parametrize("length,n", [(0.25, 1500), (0.6, 400)])
def test_try_step_matches_navmesh(nm, dev, length, n):
    p, e = _steps(nm, n, seed=1, length=length)
    ref = nm.try_step(p.astype(np.float64), e.astype(np.float64))
    got = dev.try_step(torch.from_numpy(p), torch.from_numpy(e)).numpy()
    np.testing.assert_allclose(got, ref, atol=2e-5)
    # the cases that matter happened: blocked/slid steps and free steps
    moved = np.linalg.norm(got - p, axis=1)
    assert (moved < length - 1e-3).sum() > 20 and (np.abs(moved - length) < 1e-4).sum() > n // 3


def test_try_step_walk_stays_on_mesh_and_matches(nm, dev):
    """Chained steps (each start is the previous result), as agents walk."""
    rng = np.random.default_rng(7)
    p = nm.sample_navigable_point(300, seed=7).astype(np.float32)
    q = p.copy()
    for _ in range(12):
        a = rng.uniform(0, 2 * np.pi, len(p))
        e = (p + 0.25 * np.stack([-np.sin(a), np.zeros(len(p)), -np.cos(a)], 1)).astype(np.float32)
        ref = nm.try_step(q.astype(np.float64), e.astype(np.float64)).astype(np.float32)
        p = dev.try_step(torch.from_numpy(p), torch.from_numpy(e)).numpy()
        np.testing.assert_allclose(p, ref, atol=2e-5)
        q = p.copy()
        assert nm.is_navigable(p.astype(np.float64)).all()


def test_geodesic_lookup_matches_distance_at(nm, dev):
    fields = GoalFields(dev, capacity=2)
    goals = nm.sample_navigable_point(5, seed=3, island=0)
    rows = [fields.add(g) for g in goals]          # grows past its capacity
    assert fields.table.shape[0] >= 5
    pts = nm.sample_navigable_point(2000, seed=4).astype(np.float32)
    for g, row in zip(goals, rows):
        ref = nm.distance_at(nm.distance_field(g), pts.astype(np.float64))
        got = fields.lookup(torch.full((len(pts),), row), torch.from_numpy(pts)).numpy()
        fin = np.isfinite(ref)
        assert fin.sum() > 100 and np.array_equal(fin, np.isfinite(got))
        np.testing.assert_allclose(got[fin], ref[fin], atol=1e-4)
    # refcounts: a released row is reused
    fields.release(rows[0])
    assert fields.add(goals[1]) == rows[0]


def test_batch_nav_over_two_scenes(nm, dev):
    other = _tiled_navmesh(seed=5)
    d2 = DeviceNavMesh(other)
    bn = BatchNav()
    f1, f2 = GoalFields(dev), GoalFields(d2)
    bn.add(3, dev, f1)
    bn.add(7, d2, f2)
    g1, g2 = nm.sample_navigable_point(1, seed=1)[0], other.sample_navigable_point(1, seed=1)[0]
    r1, r2 = f1.add(g1), f2.add(g2)
    p1, e1 = _steps(nm, 50, seed=2)
    p2, e2 = _steps(other, 50, seed=3)
    keys = torch.tensor([3, 7] * 50)
    start = torch.from_numpy(np.stack([p1, p2], 1).reshape(-1, 3))
    end = torch.from_numpy(np.stack([e1, e2], 1).reshape(-1, 3))
    out = bn.try_step(keys, start, end).numpy()
    np.testing.assert_allclose(out[0::2], nm.try_step(p1.astype(float), e1.astype(float)), atol=2e-5)
    np.testing.assert_allclose(out[1::2], other.try_step(p2.astype(float), e2.astype(float)), atol=2e-5)
    rows = torch.tensor([r1, r2] * 50)
    d = bn.geodesic(keys, rows, torch.from_numpy(out.astype(np.float32))).numpy()
    ref1 = nm.distance_at(nm.distance_field(g1), out[0::2].astype(np.float32).astype(float))
    fin = np.isfinite(ref1)
    np.testing.assert_allclose(d[0::2][fin], ref1[fin], atol=1e-4)


def test_field_worker_prepares_off_thread(dev, nm):
    import threading

    w = FieldWorker()
    fields = GoalFields(dev)
    seen = []
    orig = fields.compute

    def spy(goal):
        seen.append(threading.current_thread().name)
        return orig(goal)

    fields.compute = spy
    row = w.submit(fields, nm.sample_navigable_point(1, seed=9)[0]).result(timeout=60)
    assert fields.refs[row] == 1 and seen and seen[0].startswith("bps-nav-fields")
    w.close()
