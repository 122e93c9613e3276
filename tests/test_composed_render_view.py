"""``render_view`` on composed scenes (issue 31, rendering side): a goal-image camera of another
resolution / HFOV sees instances as it sees the flattened scene (its own pixel footprint picks
the mips, on Embree's instances and on Warp's top-level BVH), and the mips kept resident are the
ones the finest declared camera needs (``RenderOptions.view_cameras``; render/mips.py).

ReplicaCAD's stage GLBs are not public: a stand-in box-room stage with ReplicaCAD's textured
chair (``test_composed_runtime.chair_scene``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_composed_runtime import BACKENDS, _both, chair_scene  # noqa: E402
from test_composed_scenes import needs_rcad  # noqa: E402

VIEWS = [((32, 32), 90.0), ((128, 160), 60.0), ((96, 72), 110.0)]   # coarser and finer than 64x64 at 90


def _renderer(backend, **kw):
    from bps_runtime.render.protocol import RenderOptions
    opts = RenderOptions(resolution=(64, 64), threads=1, **kw)
    if backend == "warp":   # the CUDA path's kernels, on Warp's CPU device
        from bps_runtime.render.warp_backend import WarpRenderer
        return WarpRenderer(opts, device="cpu")
    from bps_runtime.render.embree import EmbreeRenderer
    return EmbreeRenderer(opts)


def _cameras(n=6):
    """Camera centres 0.9 m up in the room and [x, y, z, w] rotations looking at the chairs."""
    yaw = np.linspace(-0.4, 0.4, n)
    pitch = np.full(n, -0.25)
    cy, sy, cp, sp = np.cos(yaw / 2), np.sin(yaw / 2), np.cos(pitch / 2), np.sin(pitch / 2)
    quat = np.stack([cy * sp, sy * cp, -sy * sp, cy * cp], 1)   # yaw about +Y, then pitch about x
    return np.tile([[0.0, 0.9, 0.6]], (n, 1)), quat


@needs_rcad
@pytest.mark.parametrize("backend", BACKENDS)
def test_render_view_of_instances_equals_the_flattened_scene(tmp_path, backend):
    """Every level kept (``texture_near = 0``): through cameras coarser and finer than the
    sensor, the instances' depth, RGB and semantic equal the flattened scene's, so each view
    samples the mips of its own pixel footprint (not the sensor's)."""
    r = _renderer(backend, texture_near=0.0)
    _both(r, chair_scene(tmp_path))
    pos, quat = _cameras()
    n = len(pos)
    sensors = ("depth", "rgb", "semantic")
    seen = []
    for res, hfov in VIEWS:
        a = r.render_view(np.zeros(n, np.int64), pos, quat, res, hfov, sensors)
        b = r.render_view(np.ones(n, np.int64), pos, quat, res, hfov, sensors)
        a, b = ({k: v.numpy() for k, v in x.items()} for x in (a, b))
        assert a["rgb"].shape == (n, *res, 3)
        assert np.isclose(a["depth"], b["depth"], rtol=1e-4, atol=1e-4).mean() > 0.999
        assert (a["semantic"] == b["semantic"]).mean() > 0.999 and set(np.unique(a["semantic"])) >= {1, 2, 3}
        assert (np.abs(a["rgb"].astype(int) - b["rgb"]) > 1).any(-1).mean() < 0.002, (res, hfov)
        seen.append(a["rgb"])
    assert len(np.unique(seen[1].reshape(-1, 3), axis=0)) > 50      # textured
