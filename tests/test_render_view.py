"""``render_view``: a renderer's scenes seen through another pinhole camera (resolution, HFOV,
camera centre) equal, bit for bit, what a renderer built with that camera draws (every backend
and shading), and leave the renderer's own camera as it was."""
from __future__ import annotations

import numpy as np
import pytest

from bps_runtime.render import RenderOptions
from runtime_scenes import room_scene
from test_runtime_render import _renderer

CASES = [("embree", "native"), ("embree", "warp"), ("warp", None)]


@pytest.mark.parametrize("backend,shading", CASES)
def test_render_view_equals_a_renderer_with_that_camera(backend, shading):
    scene = room_scene()
    kw = {} if shading is None else {"shading": shading}
    own = RenderOptions(resolution=(24, 32), hfov_deg=90.0, max_depth=10.0)
    r = _renderer(backend, scene, own, sid=3, **kw)
    rng = np.random.default_rng(2)
    n = 6
    eye = np.c_[rng.uniform(1, 7, n), rng.uniform(0.5, 2.5, n), rng.uniform(-5.5, -0.5, n)]
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    before = r.render(np.full(n, 3), eye, q, ("depth", "rgb"))
    for res, hfov in [((40, 56), 70.0), ((48, 36), 42.0), ((40, 56), 70.0)]:
        got = r.render_view(np.full(n, 3), eye, q, res, hfov, ("depth", "rgb"))
        cam = RenderOptions(resolution=res, hfov_deg=hfov, sensor_height=0.0, max_depth=10.0)
        want = _renderer(backend, scene, cam, sid=3, **kw).render(np.full(n, 3), eye, q, ("depth", "rgb"))
        assert got["rgb"].shape == (n, *res, 3)
        np.testing.assert_array_equal(got["rgb"].numpy(), want["rgb"].numpy())
        np.testing.assert_array_equal(got["depth"].numpy(), want["depth"].numpy())
    after = r.render(np.full(n, 3), eye, q, ("depth", "rgb"))
    np.testing.assert_array_equal(after["rgb"].numpy(), before["rgb"].numpy())
    assert r.options == own
