"""A tilted camera (``RenderOptions.pitch_deg``; habitat's sensor ORIENTATION about x, e.g. the
2021 PointNav challenge's -20 deg): its depth over a floor is the z-depth along the tilted axis
that the geometry gives, on every backend; ``render_view`` cameras are untilted."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bps_runtime.render import RenderOptions
from runtime_scenes import room_scene
from test_runtime_render import _renderer

SIZE = (40.0, 3.0, 40.0)       # a big room: the lower half of the view is floor


def expected_depth(options: RenderOptions, eye) -> np.ndarray:
    """[H, W] depth (m along the tilted optical axis) of the nearest of the room's six planes."""
    h, w = options.resolution
    t = math.tan(math.radians(options.hfov_deg) / 2)
    xs = ((np.arange(w) + 0.5) * 2 / w - 1) * t
    ys = (1 - (np.arange(h) + 0.5) * 2 / h) * t * h / w
    x, y = np.meshgrid(xs, ys)
    a = math.radians(options.pitch_deg)
    dx, dy, dz = x, y * math.cos(a) + math.sin(a), y * math.sin(a) - math.cos(a)   # Rx(a) (x, y, -1)
    ex, ey, ez = eye[0], eye[1] + options.sensor_height, eye[2]
    best = np.full((h, w), np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for d, e, planes in ((dx, ex, (0.0, SIZE[0])), (dy, ey, (0.0, SIZE[1])), (dz, ez, (0.0, -SIZE[2]))):
            for p in planes:
                tt = (p - e) / d
                best = np.where((tt > 0) & (tt < best), tt, best)
    return best


@pytest.mark.parametrize("backend", ["embree", "warp"])
def test_tilted_camera_depth_over_a_floor_matches_geometry(backend):
    eye = np.array([20.0, 0.0, -20.0])
    for pitch in (-20.0, 0.0, 15.0):
        o = RenderOptions(resolution=(36, 64), hfov_deg=70.0, sensor_height=0.88, pitch_deg=pitch, max_depth=100.0)
        r = _renderer(backend, room_scene(SIZE), o)
        got = r.render(torch.zeros(1, dtype=torch.long), torch.from_numpy(eye[None].astype(np.float32)),
                       torch.zeros(1), ("depth",))["depth"].numpy()[0, :, :, 0]
        want = expected_depth(o, eye)
        np.testing.assert_allclose(got, want, rtol=2e-4, err_msg=f"pitch {pitch}")
        if pitch == -20.0:
            # the centre row looks down at the floor 0.88 / tan(20 deg) = 2.42 m ahead: depth
            # along the axis 0.88 / sin(20 deg) = 2.57 m (untilted it would see the far wall)
            mid = 0.5 * (got[17, 31:33].mean() + got[18, 31:33].mean())
            assert abs(mid - 0.88 / math.sin(math.radians(20))) < 0.05, mid
            tilted = got
    untilted = expected_depth(RenderOptions(resolution=(36, 64), hfov_deg=70.0, sensor_height=0.88), eye)
    assert np.abs(tilted - untilted).max() > 1.0


def test_pitch_is_checked_and_render_view_is_untilted():
    from bps_assets.errors import ConfigError
    from bps_runtime.render.protocol import view_options

    with pytest.raises(ConfigError, match="pitch_deg"):
        RenderOptions(pitch_deg=95.0)
    assert view_options(RenderOptions(pitch_deg=-20.0), (8, 8), 60.0).pitch_deg == 0.0


def test_sensor_config_carries_the_tilt_and_old_identities_hold():
    from bps_runtime.env.config import EnvConfig, preset_kwargs
    from bps_train import checkpoint

    c = EnvConfig.from_kwargs(**preset_kwargs("challenge2021"))
    assert c.sensors.pitch_deg == -20.0 and c.sensors.render_options().pitch_deg == -20.0
    assert checkpoint.env_identity(c)["sensors"]["pitch_deg"] == -20.0
    plain = EnvConfig.from_kwargs()
    assert plain.sensors.render_options().pitch_deg == 0.0
    assert "pitch_deg" not in checkpoint.env_identity(plain)["sensors"]    # untilted: the identity it had
    # nor do this session's other sensor fields at their defaults (view cameras, LODs)
    assert not set(checkpoint.env_identity(plain)["sensors"]) & {"view_cameras", "lod"}
    from dataclasses import replace
    full = replace(plain, sensors=replace(plain.sensors, lod="full"))
    assert checkpoint.env_identity(full)["sensors"]["lod"] == "full"     # set: part of the run
    assert EnvConfig.from_kwargs(camera={"pitch_deg": 10.0}).sensors.render_options().pitch_deg == 10.0
