"""Resident bytes by part (scenes.footprint): the parts sum to what the cache charges, the BVH
shares the shading tables' index buffer, the renders do not change, and `bps-assets info`
reports the breakdown."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bps_runtime.render import RenderOptions, build_shading_data, make_renderer
from bps_runtime.render import embree_bridge
from bps_runtime.scenes.cache import CacheOptions, SceneCache
from bps_runtime.scenes.footprint import PARTS, accel_bytes, add_footprints, scene_footprint
from bps_runtime.scenes.loader import SceneLoader, SceneSource
from runtime_scenes import MemoryReader, room_scene

bridge = pytest.mark.skipif(not embree_bridge.available(), reason="the Embree bridge is not compiled")


def _reader(n=3):
    return MemoryReader({f"mem/{i}": room_scene((4.0 + i, 3.0, 5.0), scene_id=f"s{i}") for i in range(n)})


@pytest.mark.parametrize("backend", ["embree", "embreex", "warp"])
def test_footprint_sums_to_the_charge(backend):
    if backend == "warp":
        import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    kw = {"engine": "embreex"} if backend == "embreex" else {}
    r = make_renderer("embree" if backend == "embreex" else backend, RenderOptions(resolution=(8, 8), threads=1), **kw)
    reader = _reader(1)
    loader = SceneLoader(r, threads=1, reader=reader)
    ls = loader.submit(SceneSource("s0", "mem/0")).result()
    loader.close()
    assert set(ls.footprint) == set(PARTS)
    assert sum(ls.footprint.values()) == ls.nbytes
    sd = ls.shading
    assert ls.footprint["textures"] == sd.tex_data.nbytes + sd.level_info.nbytes + sd.tex_nlevels.nbytes \
        + sd.tex_format.nbytes
    # the index buffer is counted once, in geometry, beside the renderer's vertex buffer
    assert ls.footprint["geometry"] >= sd.indices.nbytes + 12 * ls.num_vertices
    assert ls.footprint["shading"] == sd.nbytes - sd.indices.nbytes - ls.footprint["textures"]
    assert ls.footprint["bvh"] > 0 and ls.footprint["navigation"] == 0
    r.attach(0, sd, ls.accel)  # the loaded scene renders (embreex: the fallback without the bridge)
    out = r.render(np.zeros(2, np.int64), np.float32([[2, 0, -2], [1, 0, -1]]), np.float32([0, 1]), ("depth", "rgb"))
    assert (out["depth"].numpy() > 0).mean() > 0.9 and out["rgb"].numpy().any()
    # the navigation bytes given are their own part; the renderer's split is the rest
    f = scene_footprint(sd, r, ls.num_vertices, ls.num_triangles, 7)
    assert f["navigation"] == 7 and sum(f.values()) == sd.nbytes + accel_bytes(r, ls.num_vertices, ls.num_triangles) + 7
    r.close()


def test_cache_report_breakdown_sums_to_resident_bytes():
    r = make_renderer("embree", RenderOptions(resolution=(8, 8), threads=1))
    reader = _reader(3)
    sources = [SceneSource(f"s{i}", f"mem/{i}") for i in range(3)]
    cache = SceneCache(sources, r, 6, CacheOptions(slots=3, prefetch=False), reader=reader)
    cache.start()
    try:
        rep = cache.take_report()
        assert rep.resident_scenes == 3
        assert sum(rep.resident_footprint.values()) == rep.resident_bytes
        assert rep.resident_footprint == add_footprints(cache.scene(i).footprint for i in cache.resident_scene_indices)
    finally:
        cache.close()
        r.close()


@bridge
def test_bvh_shares_the_shading_indices_and_renders_the_same():
    s = room_scene((6.0, 3.0, 5.0))
    opts = RenderOptions(resolution=(24, 24), threads=1)
    r = make_renderer("embree", opts)
    sd = build_shading_data(s)
    accel = r.prepare(sd, s.positions, s.indices)
    assert np.shares_memory(accel._triangles, sd.indices)  # no second index copy
    # the code before: Embree's default BVH (vertex copies in its leaves) over a private index copy
    before = embree_bridge.BridgeAccel(s.positions, np.array(s.indices, np.uint32), tri_accel=None)
    from bps_runtime.render.camera import camera_directions, camera_origins, rotation_matrices
    rng = np.random.default_rng(3)
    n = 16
    pos = np.c_[rng.uniform(0.5, 5.5, n), np.zeros(n), rng.uniform(-4.5, -0.5, n)].astype(np.float32)
    yaw = rng.uniform(-np.pi, np.pi, n).astype(np.float32)
    rot = rotation_matrices(yaw)
    cam, dirs = camera_origins(pos, opts), camera_directions(opts)
    hits = {}
    for k, a in {"now": accel, "before": before}.items():
        z = np.empty(n * dirs.shape[0], np.float32)
        hits[k] = a.trace_cameras(cam, rot, dirs, z, hits=True)
    assert (hits["now"]["tfar"] > 0).mean() > 0.9
    for k in ("tfar", "primID", "u", "v", "Ng"):  # the same hits, bit for bit
        assert np.array_equal(hits["now"][k], hits["before"][k]), k
    # whole frames (depth, RGB, semantic) through the renderer, against the same scene over the
    # code before's BVH
    r.attach(0, sd, accel)
    frame = r.render(np.zeros(n, np.int64), pos, yaw, ("depth", "rgb", "semantic"))
    before.native_shading = accel.native_shading
    r.attach(0, sd, before)
    old = r.render(np.zeros(n, np.int64), pos, yaw, ("depth", "rgb", "semantic"))
    for k in frame:
        assert np.array_equal(frame[k].numpy(), old[k].numpy()), k
    # compact_bvh: Embree's smaller BVH (indexed leaves), charged less, the same frames
    rc = make_renderer("embree", opts, compact_bvh=True)
    assert rc.accel_breakdown(100, 1000)["bvh"] < r.accel_breakdown(100, 1000)["bvh"]
    rc.attach(0, sd, rc.prepare(sd, s.positions, s.indices))
    small = rc.render(np.zeros(n, np.int64), pos, yaw, ("depth", "rgb", "semantic"))
    for k in frame:
        assert np.array_equal(frame[k].numpy(), small[k].numpy()), k
    r.close()
    rc.close()


def test_warp_mesh_uses_the_shading_indices():
    import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    s = room_scene((6.0, 3.0, 5.0))
    r = make_renderer("warp", RenderOptions(resolution=(8, 8), threads=1))
    sd = build_shading_data(s)
    scene = r.prepare(sd, s.positions, s.indices)
    assert scene.tri_indices is scene.shading.indices
    assert np.shares_memory(scene.tri_indices.numpy(), sd.indices)  # CPU: zero-copy views
    r.close()


def test_info_reports_resident_bytes(tmp_path):
    from click.testing import CliRunner

    from bps_assets.packed_scene import convert_scene
    from cli.main import main as cli
    from runtime_scenes import room_document

    dst = tmp_path / "room.bps"
    convert_scene(room_document(), dst)
    res = CliRunner().invoke(cli, ["info", str(dst), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["resident_bytes"]
    assert out["decoded_scan"] > 0
    for who in ("embree", "warp"):
        assert set(out[who]) == set(PARTS) and all(v >= 0 for v in out[who].values())
    text = CliRunner().invoke(cli, ["info", str(dst)])
    assert text.exit_code == 0 and "resident bytes" in text.output and "bvh" in text.output
