"""Checks of what callers hand a renderer (sensors, scene indices, poses), shared by every
backend (agents grouped by scene: ``bps_runtime.grouping``)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bps_assets.errors import ConfigError

from .camera import rotation_matrices
from .protocol import SENSORS


def check_sensors(sensors: Sequence[str]) -> tuple[str, ...]:
    """``sensors`` (one name or a sequence) as a tuple; ConfigError when empty, repeated or naming
    an unknown sensor (the one check: renderers and the env's config)."""
    s = (sensors,) if isinstance(sensors, str) else tuple(sensors)
    bad = [x for x in s if x not in SENSORS]
    if bad or not s:
        raise ConfigError(None, f"sensors={s!r}: unknown sensors {bad or s!r}: expected a non-empty subset of "
                                f"{SENSORS}")
    repeated = sorted({x for x in s if s.count(x) > 1}, key=s.index)
    if repeated:
        raise ConfigError(None, f"sensors={s!r}: repeated sensors {repeated!r}: name each sensor once")
    return s


def as_numpy(x, dtype, name: str, shape_tail: tuple = ()) -> np.ndarray:
    """Tensor / array -> numpy (CPU copy if needed) with a precise error on a bad shape."""
    import torch

    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu").numpy()
    a = np.asarray(x, dtype=dtype)
    if shape_tail and a.shape[1:] != shape_tail:
        raise ConfigError(None, f"{name} must have shape [N, {', '.join(map(str, shape_tail))}], got {a.shape}")
    return a


def check_render_inputs(scene_index, positions, rotations, resident) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scene ids [N], positions [N,3], rotation matrices [N,3,3]) checked for every backend:
    same N everywhere, and every scene id resident in the renderer."""
    scene_index = as_numpy(scene_index, np.int64, "scene_index").reshape(-1)
    pos = as_numpy(positions, np.float32, "positions", (3,))
    rot = rotation_matrices(as_numpy(rotations, np.float32, "rotations"))
    n = scene_index.shape[0]
    if pos.shape[0] != n or rot.shape[0] != n:
        raise ConfigError(None, f"scene_index, positions and rotations disagree on N: "
                                f"{n}, {pos.shape[0]}, {rot.shape[0]}")
    check_resident(scene_index, resident)
    return scene_index, pos, rot


def check_resident(scene_index: np.ndarray, resident) -> None:
    """Every scene id (numpy [N]) names a scene the renderer holds."""
    missing = sorted(set(np.unique(scene_index).tolist()) - set(resident))
    if missing:
        raise ConfigError(None, f"scene ids {missing[:8]} are not resident in the renderer")
