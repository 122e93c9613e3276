"""``NoiseOptions``: which sensor and actuation noise an env applies, checked on construction
(``ConfigError`` naming the field); ``DEFAULTS`` is no noise at all (``presets.noise_options``
takes ``make(noise=...)``'s forms: None, a preset name, a dict, a NoiseOptions).

``multiplier`` is habitat's ``noise_multiplier`` for the Redwood depth model and the PyRobot
actuation model alike; ``depth_multiplier`` / ``actuation_multiplier`` override it for one of
them (the challenge preset uses 1.0 for depth and 0.5 for actuation). The RGB models take
habitat-sim's own parameters (``intensity_constant``, mean, sigma; ``s_vs_p``, amount).
``ACTUATION_PARAMS``: PyRobot's measured LoCoBot / LoCoBot-Lite noise per controller, as
published in habitat-sim (``pyrobot_noisy_controls.py``): per motion (a forward move, a turn),
the translation noise (along, across) and the rotation noise, each (means, variances) of a
diagonal Gaussian truncated at 3 standard deviations.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from bps_assets.errors import ConfigError, is_real

DEPTH_KINDS = ("none", "redwood")
RGB_KINDS = ("none", "gaussian", "salt_pepper", "speckle", "poisson")

# (robot, controller) -> ((forward move: translation means, variances, rotation mean, variance),
#                         (turn:         translation means, variances, rotation mean, variance))
ACTUATION_PARAMS = {
    ("locobot", "ilqr"): (((0.014, 0.009), (0.006, 0.005), 0.008, 0.004),
                          ((0.003, 0.003), (0.002, 0.003), 0.023, 0.012)),
    ("locobot", "proportional"): (((0.017, 0.042), (0.007, 0.023), 0.031, 0.026),
                                  ((0.001, 0.005), (0.001, 0.004), 0.043, 0.017)),
    ("locobot", "movebase"): (((0.074, 0.036), (0.019, 0.033), 0.189, 0.038),
                              ((0.002, 0.003), (0.0, 0.002), 0.219, 0.019)),
    ("locobot-lite", "ilqr"): (((0.142, 0.023), (0.008, 0.008), 0.031, 0.028),
                               ((0.002, 0.002), (0.001, 0.002), 0.122, 0.03)),
    ("locobot-lite", "proportional"): (((0.135, 0.043), (0.007, 0.009), 0.049, 0.009),
                                       ((0.002, 0.002), (0.002, 0.001), 0.054, 0.061)),
    ("locobot-lite", "movebase"): (((0.192, 0.117), (0.055, 0.144), 0.128, 0.143),
                                   ((0.002, 0.001), (0.001, 0.001), 0.173, 0.025)),
}
ACTUATION_KINDS = ("none",) + tuple(f"{r}-{c}" for r, c in ACTUATION_PARAMS)


def actuation_params(kind: str):
    """``ACTUATION_PARAMS`` of an actuation kind such as "locobot-lite-ilqr"."""
    robot, _, controller = kind.rpartition("-")
    return ACTUATION_PARAMS[(robot, controller)]


@dataclass(frozen=True)
class NoiseOptions:
    """Sensor and actuation noise (habitat-sim's models; docs/NOISE.md)."""
    depth: str = "none"             # DEPTH_KINDS
    rgb: str = "none"               # RGB_KINDS
    actuation: str = "none"         # ACTUATION_KINDS
    multiplier: float = 1.0         # habitat's noise_multiplier (depth and actuation)
    depth_multiplier: float | None = None
    actuation_multiplier: float | None = None
    rgb_intensity: float = 0.2      # intensity_constant (gaussian, speckle)
    rgb_mean: float = 0.0
    rgb_sigma: float = 1.0
    salt_vs_pepper: float = 0.5     # s_vs_p
    rgb_amount: float = 0.05        # share of channels salt-and-pepper replaces

    def __post_init__(self):
        for name, kinds in (("depth", DEPTH_KINDS), ("rgb", RGB_KINDS), ("actuation", ACTUATION_KINDS)):
            v = getattr(self, name)
            if v not in kinds:
                raise ConfigError(None, f"noise {name} must be one of {', '.join(kinds)}; got {v!r}")
        for f in fields(self):
            if f.name in ("depth", "rgb", "actuation"):
                continue
            v = getattr(self, f.name)
            if v is None and f.name in ("depth_multiplier", "actuation_multiplier"):
                continue
            if not is_real(v) or not math.isfinite(v):
                raise ConfigError(None, f"noise {f.name} must be a finite number; got {v!r}")
            object.__setattr__(self, f.name, float(v))
        for name in ("multiplier", "depth_multiplier", "actuation_multiplier", "rgb_intensity", "rgb_sigma"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v <= 100.0:
                raise ConfigError(None, f"noise {name} must be in [0, 100]; got {v}")
        for name in ("salt_vs_pepper", "rgb_amount"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(None, f"noise {name} must be in [0, 1]; got {getattr(self, name)}")

    @property
    def depth_mult(self) -> float:
        """The Redwood model's multiplier."""
        return self.multiplier if self.depth_multiplier is None else self.depth_multiplier

    @property
    def actuation_mult(self) -> float:
        """The PyRobot model's multiplier."""
        return self.multiplier if self.actuation_multiplier is None else self.actuation_multiplier

    @property
    def any(self) -> bool:
        """Whether any noise is on (without, the env's step is exactly the noiseless one)."""
        return (self.depth, self.rgb, self.actuation) != ("none", "none", "none")

    @property
    def depth_on(self) -> bool:
        """Whether depth noise is on: the renderer then gives raw depth (``RenderOptions.raw_depth``)
        and the noise clips and scales it after its model (the one place this is decided)."""
        return self.depth != "none"

    @property
    def rgb_on(self) -> bool:
        """Whether an RGB noise model is on."""
        return self.rgb != "none"

    @property
    def sensors_on(self) -> bool:
        """Whether depth or RGB noise is on (the sensor noise launch runs)."""
        return self.depth_on or self.rgb_on

    def actuation_reach(self) -> float:
        """How much further than the commanded move a noisy move or turn can go (metres): each
        draw is within 3 sd of its mean, so along + across stay within this bound (0: no noise)."""
        if self.actuation == "none":
            return 0.0
        reach = 0.0
        for means, variances, _, _ in actuation_params(self.actuation):
            reach = max(reach, sum(abs(m) + 3.0 * math.sqrt(v) for m, v in zip(means, variances)))
        return self.actuation_mult * reach

    def to_dict(self) -> dict:
        """Plain data (checkpoints, logs)."""
        return asdict(self)


DEFAULTS = NoiseOptions()
