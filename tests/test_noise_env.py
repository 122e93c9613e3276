"""Noise inside the env (make(noise=...)): a seeded run with sensor and actuation noise repeats
bit for bit (scene swaps included); the noise reaches the observations and the poses; a
forward move in open space carries the actuation model's spread; the config round-trips and
enters the checkpoint identity only when on."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bps_assets.errors import ConfigError, DatasetError

import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)

NOISE = {"depth": "redwood", "rgb": "gaussian", "actuation": "locobot-ilqr", "multiplier": 1.0}


@pytest.fixture
def manifest(box_rooms_manifest):
    return box_rooms_manifest   # box rooms with a pillar, preprocessed (two train scenes; conftest)


def _make(manifest, **kw):
    from bps_runtime import make

    args = dict(split="train", num_envs=4, resolution=(16, 16), seed=0, episodes="sample",
                sensors=("depth", "rgb"))
    args.update(kw)
    return make(manifest, **args)


def _run(manifest, steps=24, **kw):
    """([(depth, rgb, position or None at the reset)] per step, the scene ids seen)."""
    env = _make(manifest, **kw)
    g = torch.Generator().manual_seed(0)
    obs = env.reset()
    trace = [(obs["depth"].clone(), obs["rgb"].clone(), None)]
    scenes = set(env.last_info["scene_id"])
    for _ in range(steps):
        obs, rew, done, info = env.step(torch.randint(0, 4, (4,), generator=g))
        trace.append((obs["depth"].clone(), obs["rgb"].clone(), info["position"].clone()))
        scenes |= set(info["scene_id"])
    env.close()
    return trace, scenes


def test_seeded_swaps_with_noise_repeat_bit_for_bit(manifest):
    kw = dict(noise=NOISE, cache={"slots": 1, "swap_every": 3}, seed=3)
    (a, seen), (b, _) = _run(manifest, **kw), _run(manifest, **kw)
    assert len(seen) == 2      # the one slot swapped between the two train scenes
    for (d1, c1, p1), (d2, c2, p2) in zip(a, b):
        assert torch.equal(d1, d2) and torch.equal(c1, c2)
        assert p1 is None or torch.equal(p1, p2)
    clean, _ = _run(manifest, cache={"slots": 1, "swap_every": 3}, seed=3)
    assert not torch.equal(a[0][0], clean[0][0]) and not torch.equal(a[0][1], clean[0][1])
    # another seed: other noise
    other, _ = _run(manifest, steps=0, noise=NOISE, cache={"slots": 1, "swap_every": 3}, seed=4)
    assert not torch.equal(other[0][1], a[0][1])


def test_noise_off_is_the_noiseless_env(manifest):
    off = {"depth": "none", "rgb": "none", "actuation": "none"}
    (a, _), (b, _) = _run(manifest, steps=6, seed=2), _run(manifest, steps=6, seed=2, noise=off)
    for (d1, c1, p1), (d2, c2, p2) in zip(a, b):
        assert torch.equal(d1, d2) and torch.equal(c1, c2) and (p1 is None or torch.equal(p1, p2))


def test_forward_moves_in_open_space_carry_the_actuation_noise(manifest):
    """MOVE_FORWARD from the episode starts (synthetic rooms: most first moves are free):
    the displacements spread as the model says, where a noiseless env moves exactly 0.25 m."""
    from bps_runtime.noise.options import actuation_params

    n = 64
    env = _make(manifest, num_envs=n, noise={"actuation": "locobot-ilqr"}, sensors=("depth",), seed=1)
    env.reset()
    p0 = env.last_info["position"].clone()
    obs, rew, done, info = env.step(torch.ones(n, dtype=torch.int64))
    step = (info["position"] - p0)[:, [0, 2]].norm(dim=1)
    env.close()
    moved = step[(step > 0.1) & ~done]
    assert len(moved) > n // 2
    (tm, tv, _, _), _ = actuation_params("locobot-ilqr")
    assert not torch.allclose(moved, torch.full_like(moved, 0.25), atol=1e-3)
    # |(0.25 + n0, n1)| has mean ~0.25 + 0.014 and a spread of ~sqrt(0.006): loose bounds for 30+ samples
    assert abs(float(moved.mean()) - (0.25 + tm[0])) < 4 * math.sqrt(tv[0]) / math.sqrt(len(moved)) + 0.01
    assert 0.3 * math.sqrt(tv[0]) < float(moved.std()) < 2.0 * math.sqrt(tv[0])


def test_config_and_identity(manifest):
    from bps_runtime.env.config import EnvConfig
    from bps_runtime.noise.options import NoiseOptions
    from bps_train import checkpoint

    c = EnvConfig.from_kwargs(sensors=("depth", "rgb"), noise=NOISE)   # its RGB noise needs the RGB sensor
    assert c.noise == NoiseOptions(**NOISE)
    assert EnvConfig.from_dict(c.to_dict()) == c
    plain = EnvConfig.from_kwargs()
    assert "noise" not in checkpoint.env_identity(plain)       # identity of noiseless runs unchanged
    # every model off: still a noiseless run, whatever the other settings say
    for quiet in ({"multiplier": 0.5}, {"rgb_intensity": 0.3, "depth": "none"}, {"actuation_multiplier": 2.0}):
        qc = EnvConfig.from_kwargs(noise=quiet)
        assert qc.noise != NoiseOptions() and checkpoint.env_identity(qc) == checkpoint.env_identity(plain), quiet
    rgb = EnvConfig.from_kwargs(sensors=("depth", "rgb"), noise={"rgb": "poisson"})   # RGB noise needs the sensor
    assert checkpoint.env_identity(rgb)["noise"]["rgb"] == "poisson"
    assert checkpoint.env_identity(c)["noise"]["depth"] == "redwood"
    with pytest.raises(ConfigError, match="cannot resume"):
        checkpoint.check_same_run("ck.pt", {"env": checkpoint.env_identity(plain)},
                                  {"env": checkpoint.env_identity(c)})
    with pytest.raises(ConfigError, match="noise depth"):
        _make(manifest, noise={"depth": "kinect"})
    assert np.isfinite(c.noise.multiplier)


def test_challenge2021_preset_as_make_keywords(manifest):
    from bps_runtime.env.config import EnvConfig, preset_kwargs
    from bps_runtime.noise.presets import preset_noise

    c = EnvConfig.from_kwargs(**preset_kwargs("challenge2021"))
    assert set(c.sensors.kinds) == {"rgb", "depth"} and c.sensors.resolution == (360, 640)
    assert (c.sensors.hfov_deg, c.sensors.sensor_height, c.sensors.min_depth, c.sensors.max_depth) == (70.0, 0.88, 0.1, 10.0)
    t = c.task
    assert (t.turn_degrees, t.forward_step, t.success_distance, t.max_episode_steps) == (30.0, 0.25, 0.36, 500)
    assert (t.agent_radius, t.agent_height, t.sliding, t.gps_compass) == (0.18, 0.88, False, False)
    assert c.noise == preset_noise("challenge2021")
    # keywords given override the preset's; the test dataset is built for habitat's 0.1 m agent,
    # so make() refuses the preset's 0.18 m one (the preset reached the config)
    with pytest.raises(DatasetError, match="radius 0.1 m, not 0.18 m"):
        _make(manifest, preset="challenge2021", resolution=(16, 16))
    with pytest.raises(ConfigError, match="unknown preset"):
        _make(manifest, preset="challenge2030")


def test_warp_frame_path_with_noise_matches_embree(manifest):
    """The Warp renderer's frame (inside the step) gets the same noise as the Embree path's
    (same keys and counters): the noisy frames agree up to the renderers' own ~1e-6 differences."""
    warp, embree = (_run(manifest, steps=4, noise=NOISE, seed=5, renderer=r)[0] for r in ("warp", "embree"))
    for (dw, cw, pw), (de, ce, pe) in zip(warp, embree):
        assert pw is None or torch.equal(pw, pe)
        assert ((dw - de).abs() < 1e-4).float().mean() > 0.98
        assert (cw.int() - ce.int()).abs().float().mean() < 1.0


def test_pointgoal_without_gps_compass_stays_the_start_one(manifest):
    """gps_compass=False (the challenge's POINTGOAL_SENSOR): the pointgoal is the one of the
    episode's start until the episode ends, while the agent moves; with it, it follows the agent."""
    from dataclasses import replace

    from bps_runtime.tasks.pointnav import DEFAULTS
    from bps_train import checkpoint

    for gps in (False, True):
        env = _make(manifest, task=replace(DEFAULTS, gps_compass=gps), sensors=("depth",))
        first = env.reset()["pointgoal"].clone()
        changed, g = False, torch.Generator().manual_seed(0)
        for _ in range(6):
            obs, rew, done, info = env.step(torch.randint(1, 4, (4,), generator=g))   # no STOP
            assert not done.any()
            changed = changed or not torch.equal(obs["pointgoal"], first)
        assert changed == gps
        env.close()
    # an older PointNav checkpoint's identity (no sliding / gps_compass) still matches the defaults
    from bps_runtime.env.config import EnvConfig
    ident = checkpoint.env_identity(EnvConfig.from_kwargs())
    assert "sliding" not in ident["task"] and "gps_compass" not in ident["task"]
    assert checkpoint.env_identity(EnvConfig.from_kwargs(task=replace(DEFAULTS, sliding=False)))["task"]["sliding"] is False


@pytest.mark.parametrize("renderer", ["embree", "warp"])
@pytest.mark.parametrize("noisy", ["depth", "rgb"])
def test_a_sensor_without_noise_is_returned_as_rendered(manifest, renderer, noisy):
    """Noise on one sensor only: the other sensors' frames (and the semantic sensor's) are the
    noiseless env's, on the Embree path (``render``) and on the Warp frame path (the frame inside
    the step) alike; the noisy one differs."""
    only = {"depth": "redwood" if noisy == "depth" else "none", "rgb": "gaussian" if noisy == "rgb" else "none"}
    clean = "rgb" if noisy == "depth" else "depth"
    kw = dict(seed=6, renderer=renderer, sensors=("depth", "rgb", "semantic"))
    envs = [_make(manifest, **kw), _make(manifest, noise=only, **kw)]
    obs = [e.reset() for e in envs]
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        assert torch.equal(obs[0][clean], obs[1][clean]), (step, clean)
        assert torch.equal(obs[0]["semantic"], obs[1]["semantic"]), step
        assert not torch.equal(obs[0][noisy], obs[1][noisy]), (step, noisy)
        a = torch.randint(0, 4, (4,), generator=g)
        obs = [e.step(a)[0] for e in envs]
    if renderer == "warp":   # the noisy sensor's raw frame is the only one kept apart, per group
        assert all(set(kept) == {noisy} for kept in envs[1].sim._raw.values()) and envs[1].sim._raw
    for e in envs:
        e.close()

