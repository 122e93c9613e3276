"""Named presets: habitat's realistic PointNav settings as data (``PRESETS``), for ``make(...,
preset=NAME)`` to apply and ``preset_noise(NAME)`` for their noise alone; ``noise_options(value)``
reads ``make(noise=...)`` / ``bps-train --noise``: None or "", a preset name, a dict of
NoiseOptions fields (with "preset": that preset's noise, the other keys changed), the same as
"key=value,..." text, or a NoiseOptions.

"challenge2021": the Habitat Challenge 2021 PointNav track (Partsey et al., CVPR 2022 report
it as "realistic PointNav"), read from its published task config
``configs/challenge_pointnav2021.local.rgbd.yaml`` (github.com/facebookresearch/habitat-challenge,
branch challenge-2021; the 2020 file differs only in the camera tilt and the dataset): RGB and
depth 640 wide x 360 high, HFOV 70, camera at 0.88 m tilted 20 deg down, depth 0.1-10 m;
Gaussian RGB noise with intensity_constant 0.1; Redwood depth noise (multiplier 1);
PyRobot LoCoBot / Proportional actuation noise with multiplier 0.5; MOVE_FORWARD 0.25 m,
TURN 30 deg; agent radius 0.18, height 0.88; sliding off; success within 0.36 m; 500 steps;
the goal as (distance, angle) from the start only (no GPS+compass); SPL, soft SPL (info "soft_spl").
"""
from __future__ import annotations

from bps_assets.errors import ConfigError

from dataclasses import fields, replace

from .options import DEFAULTS, NoiseOptions

PRESETS = {
    "challenge2021": {
        "source": "habitat-challenge configs/challenge_pointnav2021.local.rgbd.yaml (challenge-2021)",
        "noise": NoiseOptions(depth="redwood", rgb="gaussian", actuation="locobot-proportional",
                              multiplier=1.0, actuation_multiplier=0.5, rgb_intensity=0.1),
        "sensors": {"kinds": ("rgb", "depth"), "resolution": (360, 640), "hfov_deg": 70.0,
                    "sensor_height": 0.88, "pitch_deg": -20.0,
                    "min_depth": 0.1, "max_depth": 10.0},
        # the task's name and TaskOptions fields
        "task": {"name": "pointnav", "forward_step": 0.25, "turn_degrees": 30.0, "sliding": False,
                 "success_distance": 0.36, "max_episode_steps": 500, "gps_compass": False,
                 "agent_radius": 0.18, "agent_height": 0.88},
    },
}


def preset(name: str) -> dict:
    """The settings of preset ``name`` (ConfigError naming the known ones)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(None, f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None


def preset_noise(name: str) -> NoiseOptions:
    """The noise of preset ``name``."""
    return preset(name)["noise"]


def noise_options(value) -> NoiseOptions:
    """``make(noise=...)`` as NoiseOptions (ConfigError for anything else or an unknown key)."""
    if value is None or value == "":
        return DEFAULTS
    if isinstance(value, NoiseOptions):
        return value
    if isinstance(value, str):
        return noise_options(parse_noise_text(value)) if "=" in value else preset_noise(value)
    if isinstance(value, dict):
        d = dict(value)
        base = preset_noise(d.pop("preset")) if "preset" in d else DEFAULTS
        known = {f.name for f in fields(NoiseOptions)}
        bad = sorted(set(d) - known)
        if bad:
            raise ConfigError(None, f"unknown noise setting(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
        return replace(base, **d)
    raise ConfigError(None, f"noise must be None, a preset name, a dict or NoiseOptions; got {type(value).__name__}")


def parse_noise_text(text: str) -> dict:
    """"depth=redwood,multiplier=0.5" -> {"depth": "redwood", "multiplier": 0.5} (numbers as floats)."""
    out = {}
    for part in text.split(","):
        key, eq, val = part.partition("=")
        key, val = key.strip(), val.strip()
        if not eq or not key:
            raise ConfigError(None, f"noise {text!r}: expected key=value pairs separated by commas, got {part!r}")
        try:
            out[key] = float(val)
        except ValueError:
            out[key] = val
    return out
