"""The depth sensor in the env as habitat-lab's: the frame clipped to [min_depth, max_depth]
whether normalized or not, the unnormalized space Box(min_depth, max_depth); Redwood noise on
the raw frame, then the clip (habitat-sim's noise, habitat-lab's sensor after it), held to
tests/noise_reference.py; camera values checked (a ConfigError naming the field and value)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import bps_runtime
from bps_assets.errors import ConfigError

import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)

from noise_reference import redwood_reference

RENDERERS = ["embree", "warp"]


def _reset(manifest, turns: int = 0, **kw):
    """(depth [N,H,W], positions, the env's single observation space) of a seeded env after its
    reset and ``turns`` TURN_LEFT steps (a step's frame: on the Warp renderer, inside the step)."""
    args = dict(split="train", num_envs=8, resolution=(32, 32), seed=1, episodes="sample", sensors=("depth",))
    args.update(kw)
    env = bps_runtime.make(manifest, **args)
    try:
        obs, pos = env.reset(), env.last_info["position"]
        for _ in range(turns):
            obs, _, _, info = env.step(torch.full((env.batch_size,), 2))
            pos = info["position"]
        return obs["depth"][..., 0].numpy().copy(), pos.clone(), env.single_observation_space
    finally:
        env.close()


def _raw(manifest, renderer, turns: int = 0):
    """The frames' z-depth in metres, nothing clipped (the box rooms are far smaller than 100 m)."""
    return _reset(manifest, turns, renderer=renderer, normalize_depth=False,
                  camera={"min_depth": 0.0, "max_depth": 100.0})


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


@pytest.mark.parametrize("turns", [0, 1])
@pytest.mark.parametrize("renderer", RENDERERS)
def test_redwood_noise_reads_the_raw_depth_then_the_sensor_clips(box_rooms_manifest, renderer, turns):
    """max_depth 1.5 m, most walls beyond it: habitat adds the noise to the raw depth, so such a
    pixel stays beyond the range and reads 1.0 (normalized); noise on depth already clipped at
    1.5 m would put about half of them below it. Both against tests/noise_reference.py."""
    from bps_runtime.noise.sensors import load_table

    raw, pos, _ = _raw(box_rooms_manifest, renderer, turns)
    lo, hi = 0.5, 1.5
    noisy, p1, _ = _reset(box_rooms_manifest, turns, renderer=renderer, camera={"min_depth": lo, "max_depth": hi},
                          noise={"depth": "redwood"})
    assert torch.equal(p1, pos)
    gen, table = np.random.default_rng(0), load_table()
    ref = np.stack([(np.clip(redwood_reference(r, table, 1.0, gen), lo, hi) - lo) / (hi - lo) for r in raw])
    assert noisy.min() >= 0.0 and noisy.max() <= 1.0
    far = (raw > hi + 0.4) & (raw < 9.5)
    assert far.sum() > 1000
    ours, theirs = np.mean(noisy[far] == 1.0), np.mean(ref[far] == 1.0)
    assert theirs > 0.8 and abs(ours - theirs) < 0.02, (ours, theirs)
    near = (raw > lo + 0.1) & (raw < hi - 0.1)     # inside the range: the same error distribution
    assert near.sum() > 500
    err, ref_err = noisy[near] - (raw[near] - lo) / (hi - lo), ref[near] - (raw[near] - lo) / (hi - lo)
    assert abs(np.mean(err == -0.5 / (hi - lo)) - np.mean(ref_err == -0.5 / (hi - lo))) < 0.02   # no returns
    assert abs(np.median(err) - np.median(ref_err)) < 0.01 and abs(np.std(err) - np.std(ref_err)) < 0.05


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


def test_depth_noise_refuses_a_renderer_that_clips(box_rooms_manifest, monkeypatch):
    """The noise must read the raw frame: an env whose renderer finishes depth (a World built
    without ``raw_depth``) is refused, not run with noise on clipped depth."""
    from bps_runtime.env import config

    finished = config.SensorConfig.render_options
    monkeypatch.setattr(config.SensorConfig, "render_options",
                        lambda self, threads=None, raw_depth=False: finished(self, threads))
    with pytest.raises(ConfigError, match="depth noise needs the renderer's raw depth"):
        bps_runtime.make(box_rooms_manifest, split="train", num_envs=2, episodes="sample", noise={"depth": "redwood"})


def test_a_raw_depth_renderer_without_depth_noise_is_refused(box_rooms_manifest, monkeypatch):
    """The other direction: a renderer of raw depth (a World built with ``raw_depth``) and no
    depth noise to clip it would serve unclipped metres; refused."""
    from bps_runtime.env import config

    raw = config.SensorConfig.render_options
    monkeypatch.setattr(config.SensorConfig, "render_options",
                        lambda self, threads=None, raw_depth=False: raw(self, threads, raw_depth=True))
    with pytest.raises(ConfigError, match="a renderer of raw depth .* needs depth noise"):
        bps_runtime.make(box_rooms_manifest, split="train", num_envs=2, episodes="sample")
    with pytest.raises(ConfigError, match="needs depth noise"):   # RGB noise does not clip depth
        bps_runtime.make(box_rooms_manifest, split="train", num_envs=2, episodes="sample", sensors=("depth", "rgb"),
                         noise={"rgb": "gaussian"})
