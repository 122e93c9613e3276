"""frame, clean, merge, quantize, weld, reorder, meshlets on in-memory scenes."""
from __future__ import annotations

import numpy as np
import pytest

from bps_assets.errors import ConfigError
from bps_assets.scene import Mesh, SceneDocument
from bps_assets.transforms import clean, frame, merge, meshlets, quantize, reorder, weld
from packed_scene_fixtures import grid_mesh, make_doc


def _pipeline(doc, position_error=1e-3):
    frame.frame(frame.Options(dataset="generic"))(doc)
    clean.clean()(doc)
    g = merge(doc)
    src_pos = g.positions.copy()
    src_idx = g.indices.copy()
    src_uv = None if g.uvs is None else g.uvs.copy()
    quantize.quantize(quantize.Options(position_error=position_error))(g)
    weld.weld()(g)
    reorder.reorder()(g)
    meshlets.meshlets()(g)
    return g, src_pos, src_idx, src_uv


def _corner_errors(g, src_pos, src_idx):
    """Euclidean distance of every output triangle corner from its source corner."""
    out = g.positions[g.indices].astype(np.float64)
    ref = src_pos[src_idx[g.tri_source]].astype(np.float64)
    return np.linalg.norm(out - ref, axis=2)


# ------------------------------------------------------------------------------------ frame

def test_frame_gibson_is_x_z_minus_y_and_generic_is_identity():
    p = np.array([[1.0, 2.0, 3.0], [-4.0, 5.5, -6.25]], np.float32)
    for dataset, want in (("gibson", [[1, 3, -2], [-4, -6.25, -5.5]]), ("mp3d", [[1, 3, -2], [-4, -6.25, -5.5]]),
                          ("generic", p)):
        doc = SceneDocument(meshes=[Mesh(p.copy(), np.array([[0, 1, 0]], np.uint32))])
        frame.frame(frame.Options(dataset=dataset))(doc)
        np.testing.assert_array_equal(doc.meshes[0].positions, np.asarray(want, np.float32))
        assert doc.frame == "habitat"
    # --up overrides the preset both ways
    assert np.array_equal(frame.frame_matrix(frame.Options("gibson", up="y")), np.eye(4))
    m = frame.frame_matrix(frame.Options("generic", up="z"))
    assert np.array_equal(m @ [1, 2, 3, 1], [1, 3, -2, 1])


def test_frame_rejects_unknown_preset():
    with pytest.raises(ConfigError):
        frame.frame_matrix(frame.Options(dataset="replica"))
    with pytest.raises(ConfigError):
        frame.frame_matrix(frame.Options(up="x"))


# ------------------------------------------------------------------------------------ clean

def test_clean_counts_each_kind_of_bad_triangle():
    p = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [2, 0, 0], [np.nan, 0, 0], [1, 1, 0]], np.float32)
    t = np.array([
        [0, 1, 2],   # good
        [0, 0, 2],   # repeated index -> degenerate
        [0, 1, 3],   # collinear -> degenerate (zero area)
        [0, 4, 2],   # NaN corner -> nonfinite
        [0, 1, 9],   # out of range -> invalid
        [1, 5, 2],   # good
    ], np.uint32)
    uv = np.zeros((6, 2), np.float32)
    uv[3] = np.inf
    doc = SceneDocument(meshes=[Mesh(p, t, uvs=uv)])
    clean.clean()(doc)
    assert doc.stats["degenerate_triangles"] == 2
    assert doc.stats["nonfinite_triangles"] == 1
    assert doc.stats["invalid_index_triangles"] == 1
    assert doc.stats["nonfinite_uvs"] == 1
    np.testing.assert_array_equal(doc.meshes[0].indices, [[0, 1, 2], [1, 5, 2]])
    assert np.isfinite(doc.meshes[0].uvs).all()


# ------------------------------------------------------------------------------------ quantize

@pytest.mark.parametrize("extent,seed", [(1.0, 0), (37.0, 1), (180.0, 2), (2500.0, 3)])
def test_quantized_positions_stay_within_1mm(extent, seed):
    rng = np.random.default_rng(seed)
    n = 20000
    # random triangles anywhere in a box offset from the origin (large coordinates too)
    p = (rng.random((n * 3, 3)) * extent + rng.normal(0, min(extent, 300.0), 3)).astype(np.float32)
    t = np.arange(n * 3, dtype=np.uint32).reshape(-1, 3)
    doc = SceneDocument(meshes=[Mesh(p, t, uvs=rng.random((n * 3, 2)).astype(np.float32) * 40 - 20)])
    g, src_pos, src_idx, src_uv = _pipeline(doc)
    err = _corner_errors(g, src_pos, src_idx)
    assert err.max() <= 1e-3
    assert err.max() <= g.position_grid.bound <= 1e-3
    assert g.positions_q.dtype == (np.uint16 if extent < 60 else np.uint32)
    # the reported bound is not vacuous: errors do reach a good fraction of it
    assert err.max() > 0.2 * g.position_grid.bound
    # uv bound (per component)
    uv_err = np.abs(g.uvs[g.indices] - src_uv[src_idx[g.tri_source]]).max()
    assert uv_err <= g.uv_grid.bound <= 2 ** -15


def test_quantize_refuses_coordinates_float32_cannot_hold():
    with pytest.raises(Exception, match="float32"):
        quantize.plan_grid([1e5, 0, 0], [1e5 + 10, 1, 1], 1e-3)


# ------------------------------------------------------------------------------------ weld

def test_weld_merges_split_vertices_and_keeps_uv_seams():
    p, t, uv = grid_mesh(21, split=True)
    n_unique = 21 * 21
    doc = SceneDocument(meshes=[Mesh(p, t, uvs=uv)])
    g, *_ = _pipeline(doc)
    assert g.vertex_count == n_unique
    assert g.stats["welded_vertices"] == len(p) - n_unique
    # a UV seam: same positions, different UVs must stay separate vertices
    uv2 = uv.copy()
    uv2[: len(uv) // 2] += 0.5
    doc = SceneDocument(meshes=[Mesh(p, t, uvs=uv2)])
    g2, *_ = _pipeline(doc)
    assert g2.vertex_count > n_unique


def test_weld_drops_triangles_collapsed_by_quantization():
    p = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0.000001, 0, 0], [0, 0.000001, 0]], np.float32)
    # second triangle is 1 um wide: its corners land on the same grid points
    t = np.array([[0, 1, 2], [0, 3, 4]], np.uint32)
    doc = SceneDocument(meshes=[Mesh(p, t)])
    clean.clean(clean.Options(min_area=0.0))(doc)
    g = merge(doc)
    quantize.quantize()(g)
    weld.weld()(g)
    assert g.triangle_count == 1 and g.stats["collapsed_triangles"] == 1


# ------------------------------------------------------------------------------------ reorder

def test_reorder_keeps_the_triangle_set_and_orders_vertices_by_first_use():
    doc = make_doc(30, split=True)
    frame.frame()(doc)
    g = merge(doc)
    before = {tuple(np.round(g.positions[tri].ravel(), 6)) for tri in g.indices}
    mat_before = dict(zip(g.tri_source.tolist(), g.tri_material.tolist()))
    g.positions = np.vstack([g.positions, [[99, 99, 99]]]).astype(np.float32)  # an unused vertex
    g.uvs = np.vstack([g.uvs, [[0, 0]]]).astype(np.float32)
    g.colors = np.vstack([g.colors, [[0, 0, 0, 0]]]).astype(np.uint8)
    reorder.reorder()(g)
    after = {tuple(np.round(g.positions[tri].ravel(), 6)) for tri in g.indices}
    assert before == after and g.triangle_count == len(before)
    assert g.stats["unused_vertices"] == 1
    assert dict(zip(g.tri_source.tolist(), g.tri_material.tolist())) == mat_before
    flat = g.indices.reshape(-1)
    _, first = np.unique(flat, return_index=True)
    assert np.all(np.diff(first) > 0)  # vertex k is first used before vertex k+1
    # spatial coherence: consecutive triangles are much closer than in random order
    c = g.positions[g.indices].mean(1)
    step = np.linalg.norm(np.diff(c, axis=0), axis=1).mean()
    rnd = np.linalg.norm(np.diff(c[np.random.default_rng(0).permutation(len(c))], axis=0), axis=1).mean()
    assert step < rnd / 5


# ------------------------------------------------------------------------------------ meshlets

def test_meshlet_limits_and_spheres_contain_their_triangles():
    doc = make_doc(80, split=True)
    g, *_ = _pipeline(doc)
    ml = g.meshlets
    opts = meshlets.DEFAULTS
    # meshlets tile the triangle list exactly
    assert ml.meshlet_tris[0, 0] == 0
    np.testing.assert_array_equal(ml.meshlet_tris[1:, 0], np.cumsum(ml.meshlet_tris[:, 1])[:-1])
    assert ml.meshlet_tris[:, 1].sum() == g.triangle_count
    for first, count in ml.meshlet_tris:
        tri = g.indices[first:first + count]
        assert 1 <= count <= opts.max_triangles
        assert len(np.unique(tri)) <= opts.max_vertices
    # greedy filling: meshlets are not trivially small
    assert ml.meshlet_tris[:, 1].mean() > 30
    # chunks group consecutive meshlets and tile the triangles too
    assert ml.chunk_tris[:, 1].sum() == g.triangle_count
    assert (ml.chunk_meshlets[:, 1] <= opts.chunk_meshlets).all()
    for spheres, ranges in ((ml.meshlet_spheres, ml.meshlet_tris), (ml.chunk_spheres, ml.chunk_tris)):
        for (first, count), s in zip(ranges, spheres):
            corners = g.positions[g.indices[first:first + count]].reshape(-1, 3)
            d = np.linalg.norm(corners.astype(np.float32) - s[:3], axis=1)
            assert (d <= s[3]).all()
            assert s[3] < 1.01 * d.max() + 1e-4  # and not absurdly loose


def test_meshlets_of_600k_triangles_take_seconds_not_minutes():
    import time

    p, t, _ = grid_mesh(549)  # 600,608 triangles
    g = merge(SceneDocument(meshes=[Mesh(p, t)]))
    reorder.reorder()(g)
    t0 = time.perf_counter()
    ml = meshlets.build_meshlets(g)
    assert time.perf_counter() - t0 < 20  # ~1 s here; a generous bound for a loaded machine
    assert ml.meshlet_tris[:, 1].sum() == len(t)
