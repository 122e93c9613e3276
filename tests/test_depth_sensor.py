"""The depth sensor in the env as habitat-lab's: the frame clipped to [min_depth, max_depth]
whether normalized or not, the unnormalized space Box(min_depth, max_depth); camera values
checked (a ConfigError naming the field and the value for text, bools, NaN, inf and
non-integer resolutions: nothing cast, truncated or compared as it is)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import bps_runtime
from bps_assets.errors import ConfigError

import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)

RENDERERS = ["embree", "warp"]


def _reset(manifest, **kw):
    """(depth [N,H,W] of a reset, positions, the env's single observation space) of a seeded env."""
    args = dict(split="train", num_envs=8, resolution=(32, 32), seed=1, episodes="sample", sensors=("depth",))
    args.update(kw)
    env = bps_runtime.make(manifest, **args)
    try:
        obs = env.reset()
        return obs["depth"][..., 0].numpy().copy(), env.last_info["position"].clone(), env.single_observation_space
    finally:
        env.close()


def _raw(manifest, renderer):
    """The frames' z-depth in metres, nothing clipped (the box rooms are far smaller than 100 m)."""
    return _reset(manifest, renderer=renderer, normalize_depth=False, camera={"min_depth": 0.0, "max_depth": 100.0})


@pytest.mark.parametrize("renderer", RENDERERS)
def test_depth_is_clipped_normalized_or_not_and_its_space_is_the_range(box_rooms_manifest, renderer):
    raw, pos, _ = _raw(box_rooms_manifest, renderer)
    assert (raw > 1.6).any() and (raw < 1.0).any()
    cam = {"min_depth": 0.5, "max_depth": 1.5}
    metres, p1, space = _reset(box_rooms_manifest, renderer=renderer, normalize_depth=False, camera=cam)
    assert torch.equal(p1, pos)
    np.testing.assert_array_equal(metres, np.clip(raw, np.float32(0.5), np.float32(1.5)))
    box = space["depth"]
    assert (float(box.low.min()), float(box.high.max())) == (0.5, 1.5) and box.contains(metres[0][..., None])
    norm, _, space = _reset(box_rooms_manifest, renderer=renderer, camera=cam)
    np.testing.assert_allclose(norm, (np.clip(raw, 0.5, 1.5) - 0.5) / 1.0, atol=1e-6)
    assert (float(space["depth"].low.min()), float(space["depth"].high.max())) == (0.0, 1.0)


def test_static_depth_spaces_are_the_tasks_depth_range():
    def bounds(**kw):
        box = bps_runtime.single_observation_space(normalize_depth=False, **kw)["depth"]
        return pytest.approx((float(box.low.min()), float(box.high.max())))

    assert bounds() == (0.0, 10.0)                               # PointNav: habitat-lab's 0-10 m
    assert bounds(task="objectnav") == (0.5, 5.0)                # ObjectNav's camera
    assert bounds(depth_range=(0.2, 3.0)) == (0.2, 3.0)
    box = bps_runtime.observation_space(4, normalize_depth=False, task="objectnav")["depth"]
    assert box.shape == (4, 64, 64, 1) and float(box.high.max()) == 5.0
    assert float(bps_runtime.single_observation_space()["depth"].high.max()) == 1.0


@pytest.mark.parametrize("camera, message", [
    ({"hfov_deg": "90"}, r"hfov_deg='90': expected a number"),
    ({"sensor_height": float("nan")}, r"sensor_height=nan: must be finite"),
    ({"max_depth": float("inf")}, r"max_depth=inf: must be finite"),
    ({"min_depth": float("nan")}, r"min_depth=nan: must be finite"),
    ({"pitch_deg": True}, r"pitch_deg=True: expected a number"),
    ({"view_cameras": [((32, 32), "42")]}, r"view_cameras hfov_deg='42': expected a number"),
])
def test_camera_values_are_checked(box_rooms_manifest, camera, message):
    with pytest.raises(ConfigError, match=message):
        bps_runtime.make(box_rooms_manifest, split="train", num_envs=2, episodes="sample", camera=camera)


@pytest.mark.parametrize("resolution", [(64.5, 64), (64, 64.0), ("64", 64), 64.5, "64"])
def test_resolution_is_never_truncated_or_parsed(resolution):
    from bps_runtime.render import RenderOptions

    with pytest.raises(ConfigError, match=r"resolution=.*must be ints"):
        RenderOptions(resolution=resolution)
    with pytest.raises(ConfigError, match=r"resolution=.*must be ints"):
        bps_runtime.EnvConfig.from_kwargs(resolution=resolution)
    assert RenderOptions(resolution=(np.int64(48), 64)).resolution == (48, 64)
