"""NoiseOptions validation, make(noise=...)'s accepted forms, and the challenge2021 preset's
settings against the published Habitat Challenge 2021 PointNav config (as recorded in
bps_runtime.noise.presets)."""
from __future__ import annotations

import pytest

from bps_assets.errors import ConfigError
from bps_runtime.noise.options import ACTUATION_KINDS, DEFAULTS, NoiseOptions
from bps_runtime.noise.presets import PRESETS, noise_options, preset, preset_noise


def test_defaults_are_no_noise():
    assert not DEFAULTS.any and not DEFAULTS.sensors_on
    assert (DEFAULTS.depth, DEFAULTS.rgb, DEFAULTS.actuation) == ("none", "none", "none")


@pytest.mark.parametrize("bad,word", [
    ({"depth": "kinect"}, "depth"), ({"rgb": "blur"}, "rgb"), ({"actuation": "locobot"}, "actuation"),
    ({"multiplier": -1.0}, "multiplier"), ({"multiplier": float("nan")}, "multiplier"),
    ({"multiplier": True}, "multiplier"), ({"rgb_amount": 1.5}, "rgb_amount"),
    ({"actuation_multiplier": "0.5"}, "actuation_multiplier"),
])
def test_bad_settings_are_config_errors_naming_the_field(bad, word):
    with pytest.raises(ConfigError, match=word):
        NoiseOptions(**bad)


def test_multipliers_and_kinds():
    o = NoiseOptions(depth="redwood", actuation="locobot-lite-movebase", multiplier=0.5, depth_multiplier=2)
    assert o.depth_mult == 2.0 and o.actuation_mult == 0.5 and o.any and o.sensors_on
    assert len(ACTUATION_KINDS) == 7 and "locobot-lite-ilqr" in ACTUATION_KINDS


def test_make_noise_forms():
    assert noise_options(None) is DEFAULTS
    o = noise_options({"depth": "redwood", "rgb": "gaussian", "actuation": "locobot-ilqr", "multiplier": 0.5})
    assert (o.depth, o.rgb, o.actuation, o.multiplier) == ("redwood", "gaussian", "locobot-ilqr", 0.5)
    assert noise_options(o) is o
    assert noise_options("challenge2021") == preset_noise("challenge2021")
    changed = noise_options({"preset": "challenge2021", "actuation": "none"})
    assert changed.actuation == "none" and changed.depth == "redwood"
    with pytest.raises(ConfigError, match="unknown noise setting"):
        noise_options({"depht": "redwood"})
    with pytest.raises(ConfigError, match="unknown preset"):
        noise_options("challenge2030")
    with pytest.raises(ConfigError, match="noise must be"):
        noise_options(3)
    # bps-train --noise: the same as text
    assert noise_options("depth=redwood, rgb=gaussian,actuation=locobot-ilqr,multiplier=0.5") == o
    assert noise_options("preset=challenge2021,actuation_multiplier=1") == \
        noise_options({"preset": "challenge2021", "actuation_multiplier": 1.0})
    assert noise_options("") is DEFAULTS
    with pytest.raises(ConfigError, match="key=value"):
        noise_options("depth=redwood,oops")


def test_challenge2021_preset_is_the_published_config():
    p = preset("challenge2021")
    assert "challenge_pointnav2021" in p["source"]
    n = p["noise"]
    assert (n.depth, n.rgb, n.actuation) == ("redwood", "gaussian", "locobot-proportional")
    assert (n.depth_mult, n.actuation_mult, n.rgb_intensity) == (1.0, 0.5, 0.1)
    s, t = p["sensors"], p["task"]
    assert s["resolution"] == (360, 640) and s["hfov_deg"] == 70.0 and s["sensor_height"] == 0.88
    assert (s["min_depth"], s["max_depth"]) == (0.1, 10.0) and set(s["kinds"]) == {"rgb", "depth"}
    assert t["turn_degrees"] == 30.0 and t["sliding"] is False and t["gps_compass"] is False
    assert t["success_distance"] == 0.36 and t["max_episode_steps"] == 500 and t["name"] == "pointnav"
    assert set(PRESETS) == {"challenge2021"}


def test_bps_train_noise_flag():
    from bps_train.args import parse
    from bps_train.train import Args, check_args

    a = parse(Args, ["--noise", "depth=redwood,actuation=locobot-proportional,multiplier=0.5"])
    assert a.noise == "depth=redwood,actuation=locobot-proportional,multiplier=0.5"
    check_args(a)
    check_args(parse(Args, ["--noise", "challenge2021"]))
    with pytest.raises(ConfigError, match="noise depth"):
        check_args(parse(Args, ["--noise", "depth=kinect"]))
