"""The C bridge over Embree 4 (GIL-free builds and packet tracing) against embreex."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from bps_assets.errors import ConfigError
from bps_runtime.render import RenderOptions, build_shading_data, make_renderer
from bps_runtime.render import embree_bridge
from bps_runtime.render.camera import camera_directions
from bps_runtime.render.embree import EmbreeAccel
from runtime_scenes import room_scene
from shading_reference import reference_rgb

pytestmark = pytest.mark.skipif(not embree_bridge.available(),
                                reason="the Embree bridge was not compiled (no C compiler at install)")


def _rays(n, seed=0):
    rng = np.random.default_rng(seed)
    org = np.c_[rng.uniform(0.5, 7.5, n), rng.uniform(0.2, 2.8, n), rng.uniform(-5.5, -0.5, n)]
    return org.astype(np.float32), rng.normal(size=(n, 3)).astype(np.float32)


def test_bridge_traces_what_embreex_traces():
    s = room_scene()
    org, dirs = _rays(20000)
    ours, ref = embree_bridge.BridgeAccel(s.positions, s.indices), EmbreeAccel(s.positions, s.indices)
    np.testing.assert_allclose(ours.distance(org, dirs), ref.distance(org, dirs), rtol=1e-5)
    a, b = ours.intersect(org, dirs), ref.intersect(org, dirs)
    assert (a["primID"] >= 0).all()  # inside a closed room every ray hits
    # rays through a quad's diagonal may pick either of its two triangles
    assert (a["primID"] == b["primID"]).mean() > 0.999
    same = a["primID"] == b["primID"]
    np.testing.assert_allclose(a["tfar"], b["tfar"], rtol=1e-5)
    for k in ("u", "v", "Ng"):
        np.testing.assert_allclose(a[k][same], b[k][same], atol=1e-4)


def test_camera_rays_generated_in_c_match_numpy_rays():
    s = room_scene()
    acc = embree_bridge.BridgeAccel(s.positions, s.indices)
    cam_dirs = camera_directions(RenderOptions(resolution=(12, 20)))
    rng = np.random.default_rng(3)
    n = 7
    origins = np.c_[rng.uniform(1, 7, n), np.full(n, 1.25), rng.uniform(-5, -1, n)].astype(np.float32)
    q, _ = np.linalg.qr(rng.normal(size=(n, 3, 3)))
    rot = q.astype(np.float32)
    world = np.matmul(cam_dirs[None], rot.transpose(0, 2, 1)).reshape(-1, 3)
    org = np.repeat(origins, cam_dirs.shape[0], axis=0)
    t = np.empty(org.shape[0], np.float32)
    hit = acc.trace_cameras(origins, rot, cam_dirs, t, hits=True)
    ref = acc.intersect(org, world)
    np.testing.assert_allclose(hit["dirs"], world, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(hit["primID"], ref["primID"])
    np.testing.assert_allclose(t, ref["tfar"], rtol=1e-5)
    t2 = np.empty_like(t)
    assert acc.trace_cameras(origins, rot, cam_dirs, t2) is None
    np.testing.assert_array_equal(t, t2)


def test_misses_and_empty_scenes():
    s = room_scene()
    keep = s.tri_material == 0  # the floor only
    acc = embree_bridge.BridgeAccel(s.positions, s.indices[keep])
    up = np.array([[4.0, 1.0, -3.0]], np.float32), np.array([[0.0, 1.0, 0.0]], np.float32)
    hit = acc.intersect(*up, miss=-5.0)
    assert hit["primID"][0] == -1 and hit["tfar"][0] == -5.0
    assert acc.distance(*up)[0] == np.float32(1e37)
    empty = embree_bridge.BridgeAccel(s.positions, np.zeros((0, 3), np.uint32))
    t = np.empty(4, np.float32)
    empty.trace_cameras(up[0], np.eye(3, dtype=np.float32)[None], np.ones((4, 3), np.float32), t, miss=0.0)
    np.testing.assert_array_equal(t, 0.0)


def test_bad_geometry_and_options_are_typed_errors():
    s = room_scene()
    bad = s.indices.copy()
    bad[0, 0] = s.positions.shape[0]
    with pytest.raises(embree_bridge.EmbreeError, match="out of range"):
        embree_bridge.BridgeAccel(s.positions, bad)
    with pytest.raises(ConfigError, match="engine must be"):
        make_renderer("embree", engine="optix")
    with pytest.raises(ConfigError, match="engine='bridge'"):
        make_renderer("embree", engine="embreex", shading="native")
    assert make_renderer("embree").shading == "native"
    acc = embree_bridge.BridgeAccel(s.positions, s.indices)
    with pytest.raises(ConfigError, match="t_out"):
        acc.trace_cameras(np.zeros((1, 3), np.float32), np.eye(3, dtype=np.float32)[None],
                          np.ones((4, 3), np.float32), np.empty(3, np.float32))


@pytest.mark.parametrize("threads", [1, 2])
def test_engines_render_the_same_frames_as_the_reference(threads):
    scenes = {3: room_scene(), 8: room_scene(size=(5.0, 2.6, 4.0), vertex_colors=False)}
    o = RenderOptions(resolution=(24, 32), threads=threads)
    rng = np.random.default_rng(11)
    n = 10
    sid = np.array([3, 8] * (n // 2))
    pos = np.c_[rng.uniform(0.5, 4.5, n), rng.uniform(-0.3, 0.5, n), rng.uniform(-3.5, -0.5, n)]
    rot = rng.normal(size=(n, 4))
    ref = np.empty((n, 24, 32, 3), np.uint8)
    for k, s in scenes.items():
        ref[sid == k] = reference_rgb(s, pos[sid == k], rot[sid == k], o)
    outs = []
    for engine, shading in (("bridge", "native"), ("embreex", "warp")):
        r = make_renderer("embree", o, engine=engine)
        assert (r.engine, r.shading) == (engine, shading)  # what "auto" shading picks per engine
        for k, s in scenes.items():
            sd = build_shading_data(s)
            r.attach(k, sd, r.prepare(sd, s.positions, s.indices))
        outs.append(r.render(sid, pos, rot, ("depth", "rgb")))
        r.close()
        diff = np.abs(outs[-1]["rgb"].numpy().astype(int) - ref.astype(int)).max(-1)
        assert (diff <= 1).mean() > 0.995, engine
    a, b = outs
    np.testing.assert_allclose(a["depth"].numpy(), b["depth"].numpy(), rtol=1e-5, atol=1e-6)
    diff = np.abs(a["rgb"].numpy().astype(int) - b["rgb"].numpy().astype(int)).max(-1)
    assert (diff <= 1).mean() > 0.995


def test_a_missing_library_falls_back_to_embreex_with_a_clear_error(tmp_path):
    code = (
        "import logging, numpy as np\n"
        "logging.basicConfig()\n"
        "from bps_assets.errors import MissingDependencyError\n"
        "from bps_runtime.render import embree_bridge, make_renderer\n"
        "try:\n"
        "    embree_bridge.bridge()\n"
        "except MissingDependencyError as e:\n"
        "    print('ERROR', e)\n"
        "r = make_renderer('embree')\n"
        "print('ENGINE', r.engine, r.shading)\n"
    )
    env = dict(os.environ, BPS_EMBREE_LIBRARY=str(tmp_path / "libembree4.so.4"))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "ERROR" in p.stdout and "libembree4.so.4" in p.stdout and "pip install" in p.stdout
    assert "ENGINE embreex warp" in p.stdout  # embreex gets RGB from the Warp CPU shader
    assert "GIL-free Embree bridge is not" in p.stderr


def test_short_camera_inputs_are_refused_by_both_traces_before_any_ray():
    """The plain and the instanced camera traces check their inputs with one function: arrays
    smaller than ``agents`` / ``ndirs`` say give that code (-1 origins, -2 rotations, -3 dirs)
    and no output is written; inputs that fit trace every ray."""
    from bps_runtime.render import embree_instances

    s = room_scene()
    acc = embree_bridge.BridgeAccel(s.positions, s.indices)
    inst = embree_instances.InstancedAccel([(acc, None, np.eye(4), 0)])
    lib = embree_instances._lib().lib
    o = np.tile(np.float32([[4.0, 1.5, -3.0]]), (2, 1))
    r = np.tile(np.eye(3, dtype=np.float32), (2, 1, 1))
    d = camera_directions(RenderOptions(resolution=(2, 2))).astype(np.float32).reshape(-1, 3)
    ptr = embree_bridge._ptr

    def plain(t, rows_o, rows_r, floats_d):
        return lib.bps_trace_cameras(acc._scene, 2, ptr(o), rows_o, ptr(r), rows_r, 4, ptr(d), floats_d, ptr(t),
                                     *[None] * 9, 0, -1.0)

    def instanced(t, rows_o, rows_r, floats_d):
        return lib.bps_trace_cameras_instanced(inst._scene, ctypes.addressof(inst._own[0]), 2, ptr(o), rows_o,
                                               ptr(r), rows_r, 4, ptr(d), floats_d, ptr(t), None, None, -1.0)

    for trace in (plain, instanced):
        for (rows_o, rows_r, floats_d), code in (((1, 2, 12), -1), ((2, 1, 12), -2), ((2, 2, 11), -3), ((2, 2, 12), 0)):
            t = np.full(8, 7.0, np.float32)
            assert trace(t, rows_o, rows_r, floats_d) == code, (trace.__name__, code)
            assert (t == 7.0).all() if code else ((t > 0) & (t < 7.0)).all(), (trace.__name__, code, t)
