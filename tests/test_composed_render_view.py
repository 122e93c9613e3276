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
from test_composed_runtime import BACKENDS, _both, chair_scene, pack_s  # noqa: E402
from test_composed_scenes import _crate_room, needs_rcad  # noqa: E402

VIEWS = [((32, 32), 90.0), ((128, 160), 60.0), ((96, 72), 110.0)]   # coarser and finer than 64x64 at 90


def _renderer(backend, resolution=(64, 64), **kw):
    from bps_runtime.render.protocol import RenderOptions
    opts = RenderOptions(resolution=resolution, threads=1, **kw)
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
        assert (a["semantic"] == b["semantic"]).mean() > 0.999 and set(np.unique(a["semantic"])) == {0, 20}   # the chairs' semantic_id
        assert (np.abs(a["rgb"].astype(int) - b["rgb"]) > 1).any(-1).mean() < 0.002, (res, hfov)
        seen.append(a["rgb"])
    assert len(np.unique(seen[1].reshape(-1, 3), axis=0)) > 50      # textured



def _textured_room_composed(tmp_path) -> Path:
    """A packed composed scene whose stage is ``runtime_scenes``' textured 8 x 3 x 6 m room
    (checker textures: their mips drop for a coarse sensor) with two 0.6 m crates."""
    from bps_assets.writers.glb import write_glb
    from runtime_scenes import room_document

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [x, 0, -3]} for x in (2.0, 6.0)])
    write_glb(room_document(), tmp_path / "src" / "stages" / "room.glb", overwrite=True)
    return pack_s(cfg, tmp_path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_declared_goal_camera_keeps_its_mips_on_composed_and_flattened_scenes(tmp_path, backend):
    """A coarse 8x8 sensor at least 1 m from every surface drops the textured stage's finer mips;
    a 96x128 goal camera at 60 deg declared in ``view_cameras`` keeps the levels its pixels
    select: its ``render_view`` equals the one with every level kept, on the instanced and the
    flattened scene. Undeclared, it samples the sensor's finest kept level (the clamp)."""
    from bps_runtime.render.mips import first_levels

    dst = _textured_room_composed(tmp_path)
    view = ((96, 128), 60.0)
    rng = np.random.default_rng(3)
    n = 8
    pos = np.c_[rng.uniform(1.8, 6.2, n), np.full(n, 1.25), rng.uniform(-4.2, -1.8, n)]   # >= 1 m from the walls
    yaw = rng.uniform(-np.pi, np.pi, n)
    rgb, kept = {}, {}
    for name, kw in (("all", {"texture_near": 0.0}), ("declared", {"texture_near": 1.0, "view_cameras": (view,)}),
                     ("sensor", {"texture_near": 1.0})):
        r = _renderer(backend, resolution=(8, 8), **kw)
        inst, flat = _both(r, dst)
        kept[name] = first_levels(inst.shading, r.options)
        rgb[name] = [r.render_view(np.full(n, k, np.int64), pos, yaw, *view, ("rgb",))["rgb"].numpy() for k in (0, 1)]
        r.close()
    assert (kept["declared"] < kept["sensor"]).any()
    for k in (0, 1):   # instanced, flattened
        assert np.array_equal(rgb["declared"][k], rgb["all"][k])
        assert not np.array_equal(rgb["sensor"][k], rgb["all"][k])
    assert (np.abs(rgb["all"][0].astype(int) - rgb["all"][1]) > 1).any(-1).mean() < 0.002
