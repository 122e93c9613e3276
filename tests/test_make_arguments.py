"""make()'s keywords refused with one ConfigError line, as ``seed`` is: a bool or a float for
``num_envs`` / ``batch_size`` (``True``, ``4.0``), an unknown keyword (named, with the close
matches), sensor noise for a sensor not asked for (habitat-sim configures noise per sensor, so
none is set without its sensor; a preset's sensor noise follows the sensors instead). Refused
before the dataset is read: no manifest is needed."""
from __future__ import annotations

import numpy as np
import pytest

import bps_runtime
from bps_assets.errors import ConfigError
from bps_runtime.env.config import EnvConfig
from bps_runtime.noise.options import NoiseOptions
from bps_runtime.noise.presets import preset_noise


@pytest.mark.parametrize("kw,match", [
    ({"num_envs": True}, "num_envs=True"), ({"num_envs": 4.0}, "num_envs=4.0"), ({"num_envs": "4"}, "num_envs='4'"),
    ({"num_envs": 2, "batch_size": True}, "batch_size=True"), ({"num_envs": 4, "batch_size": 2.0}, "batch_size=2.0"),
])
def test_bools_and_floats_are_not_counts(kw, match):
    with pytest.raises(ConfigError, match=match):
        bps_runtime.make("nowhere/manifest.json", **kw)
    with pytest.raises(ConfigError, match=match):
        bps_runtime.observation_space(**kw)


def test_integer_counts_still_pass():
    assert EnvConfig.from_kwargs(num_envs=np.int64(4), batch_size=np.int32(2)).batch_size == 2


def test_an_unknown_keyword_is_named_with_its_close_matches():
    with pytest.raises(ConfigError, match=r"unknown argument\(s\) 'foo'") as e:
        bps_runtime.make("nowhere/manifest.json", foo=1)
    assert "num_envs" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"'num_env': did you mean 'num_envs'"):
        bps_runtime.make("nowhere/manifest.json", num_env=2)


@pytest.mark.parametrize("noise", [{"rgb": "gaussian"}, "rgb=gaussian", NoiseOptions(rgb="poisson"),
                                   {"preset": "challenge2021", "rgb": "gaussian"}])
def test_rgb_noise_without_the_rgb_sensor_is_refused(noise):
    with pytest.raises(ConfigError, match="without the rgb sensor"):
        bps_runtime.make("nowhere/manifest.json", sensors=("depth",), noise=noise)
    assert EnvConfig.from_kwargs(sensors=("depth", "rgb"), noise=noise).noise.rgb != "none"


def test_a_presets_sensor_noise_follows_the_sensors():
    full = preset_noise("challenge2021")
    assert EnvConfig.from_kwargs(sensors=("depth", "rgb"), noise="challenge2021").noise == full
    depth_only = EnvConfig.from_kwargs(sensors=("depth",), noise="challenge2021").noise
    assert depth_only.rgb == "none" and depth_only.depth == full.depth and depth_only.actuation == full.actuation
    assert EnvConfig.from_kwargs(sensors=("depth",), noise={"preset": "challenge2021"}).noise == depth_only
    from bps_runtime.env.config import preset_kwargs

    kw = {**preset_kwargs("challenge2021"), "sensors": ("depth",)}   # make(preset=..., sensors=("depth",))
    assert EnvConfig.from_kwargs(**kw).noise == depth_only
