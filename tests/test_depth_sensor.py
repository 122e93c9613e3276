"""Camera values checked as habitat-lab's config would need them: a ConfigError naming the
field and the value for text, bools, NaN, inf and non-integer resolutions (nothing cast,
truncated or compared as it is)."""
from __future__ import annotations

import numpy as np
import pytest

import bps_runtime
from bps_assets.errors import ConfigError


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
