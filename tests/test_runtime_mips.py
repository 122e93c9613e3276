"""Texture mips kept for the sensor (render.mips): levels no pixel can select from a camera
texture_near away are dropped, and the frames of cameras beyond it do not change."""
from __future__ import annotations

import numpy as np
import pytest

from bps_runtime.render import RenderOptions, build_shading_data, make_renderer
from bps_runtime.render.mips import first_levels, sensor_mips
from runtime_scenes import room_scene


def _frames(r, sd, scene, pos, yaw):
    r.attach(0, sd, r.prepare(sd, scene.positions, scene.indices))
    return r.render(np.zeros(len(pos), np.int64), pos, yaw, ("depth", "rgb"))


@pytest.mark.parametrize("backend", ["embree", "warp"])
def test_dropped_levels_change_no_pixel_beyond_near(backend):
    if backend == "warp":
        import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    s = room_scene((6.0, 3.0, 5.0))
    full = build_shading_data(s)
    # a low-resolution sensor far from the walls: its pixels cover many texels
    opts = RenderOptions(resolution=(8, 8), threads=1, texture_near=1.0)
    first = first_levels(full, opts)
    assert first.max() >= 1  # something to drop in this scene
    kept = sensor_mips(full, opts)
    assert kept.tex_data.nbytes < full.tex_data.nbytes
    for t in range(full.level_info.shape[0]):  # kept levels: the same bytes; dropped: alias the first kept
        for lv in range(int(full.tex_nlevels[t])):
            k = max(lv, int(first[t]))
            o, w, h = kept.level_info[t, lv]
            o0, w0, h0 = full.level_info[t, k]
            assert (w, h) == (w0, h0)
            n = w * h // 2 if full.tex_format[t] == 1 else w * h * 4
            assert np.array_equal(kept.tex_data[o:o + max(n, 8)], full.tex_data[o0:o0 + max(n, 8)])
    # cameras >= 1 m from every wall (the room is 6 x 5 m; they look horizontally)
    rng = np.random.default_rng(0)
    n = 24
    pos = np.c_[rng.uniform(1.8, 4.2, n), np.zeros(n), rng.uniform(-3.2, -1.8, n)].astype(np.float32)
    yaw = rng.uniform(-np.pi, np.pi, n).astype(np.float32)
    r = make_renderer(backend, opts)
    a = _frames(r, full, s, pos, yaw)
    b = _frames(r, kept, s, pos, yaw)
    assert np.array_equal(a["depth"].numpy(), b["depth"].numpy())
    assert np.array_equal(a["rgb"].numpy(), b["rgb"].numpy())
    r.close()


def test_texture_near_zero_keeps_every_level():
    s = room_scene((6.0, 3.0, 5.0))
    full = build_shading_data(s)
    opts = RenderOptions(resolution=(8, 8), threads=1, texture_near=0.0)
    assert not first_levels(full, opts).any()
    assert sensor_mips(full, opts) is full
    with pytest.raises(Exception):
        RenderOptions(texture_near=-1.0)


@pytest.mark.parametrize("backend", ["embree", "warp"])
def test_declared_view_camera_keeps_the_levels_its_finer_pixels_select(backend):
    """A goal-image camera finer than the sensor (``view_cameras``): its ``render_view`` frames
    are drawn from the levels its pixels select (equal to every level kept); undeclared, it
    samples the sensor's finest kept level instead (the documented clamp)."""
    if backend == "warp":
        import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    s = room_scene((6.0, 3.0, 5.0))
    full = build_shading_data(s)
    view = ((96, 128), 60.0)
    sensor = RenderOptions(resolution=(8, 8), threads=1, texture_near=1.0)
    declared = RenderOptions(resolution=(8, 8), threads=1, texture_near=1.0, view_cameras=(view,))
    assert (first_levels(full, declared) < first_levels(full, sensor)).any()
    rng = np.random.default_rng(1)
    n = 12
    pos = np.c_[rng.uniform(1.8, 4.2, n), np.full(n, 1.25), rng.uniform(-3.2, -1.8, n)].astype(np.float32)
    yaw = rng.uniform(-np.pi, np.pi, n).astype(np.float32)
    frames = {}
    for name, opts in (("full", sensor), ("declared", declared), ("sensor", sensor)):
        sd = full if name == "full" else sensor_mips(full, opts)
        r = make_renderer(backend, opts)
        r.attach(0, sd, r.prepare(sd, s.positions, s.indices))
        frames[name] = r.render_view(np.zeros(n, np.int64), pos, yaw, *view, ("rgb",))["rgb"].numpy()
        r.close()
    assert np.array_equal(frames["declared"], frames["full"])
    assert not np.array_equal(frames["sensor"], frames["full"])


def test_view_cameras_are_checked():
    assert RenderOptions(view_cameras=[[[48, 64], 70]]).view_cameras == (((48, 64), 70.0),)
    for bad in ([((0, 64), 70.0)], [((48, 64), 180.0)], [(48, 70.0)], [((48, 64),)], 5):
        with pytest.raises(Exception, match="view_cameras|resolution"):
            RenderOptions(view_cameras=bad)


def test_make_camera_declares_view_cameras_for_the_renderer():
    """``make(camera={"view_cameras": ...})`` reaches the renderer's options and survives the
    config's plain-data round trip (checkpoints)."""
    import json

    from bps_runtime.env.config import EnvConfig

    c = EnvConfig.from_kwargs(camera={"view_cameras": [[[512, 512], 60]]})
    assert c.sensors.render_options().view_cameras == (((512, 512), 60.0),)
    assert EnvConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert EnvConfig.from_kwargs().sensors.render_options().view_cameras == ()
