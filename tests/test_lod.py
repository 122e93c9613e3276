"""Levels of detail (bps_assets.transforms.lod): the simplified surface stays within the stated
error of the source (ray cast), and object boundaries and semantic ids survive."""
from __future__ import annotations

import numpy as np
import pytest

import meshoptimizer  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
import embreex  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)

from bps_assets.errors import ConfigError  # noqa: E402
from bps_assets.raycast import RayCaster  # noqa: E402
from bps_assets.transforms.lod import Options, simplify  # noqa: E402


def _terrain(n=121, size=6.0, seed=0):
    """A scan-like floor: gentle bumps (5 cm) + 2 mm noise; object 1 for x < 3 m, object 2 beyond."""
    rng = np.random.default_rng(seed)
    x, z = np.meshgrid(np.linspace(0, size, n), np.linspace(0, size, n))
    y = 0.05 * np.sin(x * 1.3) * np.cos(z * 0.9) + rng.uniform(-0.002, 0.002, x.shape)
    pos = np.c_[x.ravel(), y.ravel(), z.ravel()].astype(np.float32)
    i = np.arange(n * n).reshape(n, n)
    a, b, c, d = i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, :-1].ravel(), i[1:, 1:].ravel()
    tri = np.r_[np.c_[a, c, b], np.c_[b, c, d]].astype(np.uint32)
    centre_x = pos[tri][:, :, 0].mean(1)
    obj = np.where(centre_x < size / 2, 1, 2).astype(np.int32)
    return pos, tri, obj


def _drop(pos, tri, xz):
    """Height of the surface under each (x, z) (ray cast straight down) and the hit triangle."""
    org = np.c_[xz[:, 0], np.full(len(xz), 5.0), xz[:, 1]].astype(np.float32)
    hit = RayCaster(pos, tri).intersect(org, np.tile(np.float32([0, -1, 0]), (len(xz), 1)))
    return 5.0 - hit["tfar"], hit["primID"]


@pytest.mark.parametrize("err", [0.01, 0.05])
def test_lod_error_bound_and_object_ids(err):
    pos, tri, obj = _terrain()
    lod = simplify(pos, tri, obj, Options(max_error=err))
    assert len(lod.indices) < 0.5 * len(tri)  # it did simplify
    assert lod.result_error <= err
    rng = np.random.default_rng(1)
    xz = rng.uniform(0.01, 5.99, (20000, 2))
    y_full, p_full = _drop(pos, tri, xz)
    y_lod, p_lod = _drop(pos, lod.indices, xz)
    assert (p_full >= 0).all() and (p_lod >= 0).all()  # no holes: the LOD covers the floor
    dy = np.abs(y_lod - y_full)
    assert np.median(dy) <= err / 2 and dy.max() <= err * 1.5, (np.median(dy), dy.max())
    # the object boundary (x = 3 m) is kept: every sample has the same object id on both meshes
    away = np.abs(xz[:, 0] - 3.0) > 1e-4
    assert np.array_equal(obj[lod.tri_source[p_lod[away]]], obj[p_full[away]])
    # each LOD triangle uses only its own object's vertices
    for o in (1, 2):
        own = np.unique(tri[obj == o])
        assert np.isin(lod.indices[obj[lod.tri_source] == o], own).all()


def test_lod_rejects_bad_arguments():
    pos, tri, obj = _terrain(n=5)
    with pytest.raises(ConfigError):
        simplify(pos, tri, obj, Options(max_error=0.0))
    with pytest.raises(ConfigError):
        simplify(pos, tri, obj[:3])
