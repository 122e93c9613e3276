"""The camera model (habitat-sim's pinhole depth/RGB sensor), in numpy for every backend.

HFOV 90 deg, square pixels, at the agent's position + 1.25 m straight up (the agent stays upright), looking
along the agent's -Z tilted by ``pitch_deg`` about its +X (habitat's sensor orientation). Depth is the z-distance to the image plane (habitat-sim's depth buffer,
not the ray length); 0 marks "no geometry" (before the clip) as in habitat. Ray directions in camera space are
(x, y, -1), so the ray parameter t that Embree and Warp return for an unnormalized direction
IS the z-depth: no per-pixel cosine correction is needed. The sensor clips it to [min_depth,
max_depth] and may scale it to [0, 1] (``finish_depth``), as habitat-lab's depth sensor does.
"""
from __future__ import annotations

import math

import numpy as np

from bps_assets.errors import ConfigError

from .protocol import RenderOptions


def camera_directions(options: RenderOptions) -> np.ndarray:
    """[H*W, 3] float32 body-space ray directions, row-major from the top-left pixel, through pixel
    centres: the camera's (x right, y up, z = -1) turned by ``pitch_deg`` about +X (a rotation, so
    the ray parameter stays the depth along the tilted camera's axis)."""
    h, w = options.resolution
    t = math.tan(math.radians(options.hfov_deg) / 2.0)
    xs = ((np.arange(w, dtype=np.float64) + 0.5) * (2.0 / w) - 1.0) * t
    ys = (1.0 - (np.arange(h, dtype=np.float64) + 0.5) * (2.0 / h)) * t * (h / w)
    d = np.empty((h, w, 3), np.float64)
    d[..., 0] = xs[None, :]
    d[..., 1] = ys[:, None]
    d[..., 2] = -1.0
    if options.pitch_deg:
        a = math.radians(options.pitch_deg)
        y, z = d[..., 1].copy(), d[..., 2].copy()
        d[..., 1] = y * math.cos(a) - z * math.sin(a)
        d[..., 2] = y * math.sin(a) + z * math.cos(a)
    return d.reshape(-1, 3).astype(np.float32)


def rotation_matrices(rotations: np.ndarray) -> np.ndarray:
    """[N] yaw (radians about +Y, positive turns left) or [N,4] quaternions xyzw -> [N,3,3] f32.

    Quaternions are normalized; a zero quaternion is a ConfigError.
    """
    r = np.asarray(rotations, dtype=np.float64)
    if r.ndim == 1 or (r.ndim == 2 and r.shape[1] == 1):
        yaw = r.reshape(-1)
        c, s = np.cos(yaw), np.sin(yaw)
        m = np.zeros((yaw.shape[0], 3, 3))
        m[:, 0, 0] = c
        m[:, 0, 2] = s
        m[:, 1, 1] = 1.0
        m[:, 2, 0] = -s
        m[:, 2, 2] = c
        return m.astype(np.float32)
    if r.ndim != 2 or r.shape[1] != 4:
        raise ConfigError(None, f"rotations must be [N] yaw or [N,4] quaternions xyzw, got shape {r.shape}")
    n = np.linalg.norm(r, axis=1, keepdims=True)
    if np.any(n < 1e-12):
        raise ConfigError(None, "rotations contain a zero quaternion")
    x, y, z, w = (r / n).T
    m = np.empty((r.shape[0], 3, 3))
    m[:, 0, 0] = 1 - 2 * (y * y + z * z)
    m[:, 0, 1] = 2 * (x * y - z * w)
    m[:, 0, 2] = 2 * (x * z + y * w)
    m[:, 1, 0] = 2 * (x * y + z * w)
    m[:, 1, 1] = 1 - 2 * (x * x + z * z)
    m[:, 1, 2] = 2 * (y * z - x * w)
    m[:, 2, 0] = 2 * (x * z - y * w)
    m[:, 2, 1] = 2 * (y * z + x * w)
    m[:, 2, 2] = 1 - 2 * (x * x + y * y)
    return m.astype(np.float32)


def yaw_to_quaternion(yaw) -> np.ndarray:
    """[N] yaw -> [N,4] xyzw (rotation about +Y), habitat's episode convention."""
    yaw = np.asarray(yaw, dtype=np.float64).reshape(-1)
    q = np.zeros((yaw.shape[0], 4))
    q[:, 1] = np.sin(yaw / 2)
    q[:, 3] = np.cos(yaw / 2)
    return q


def camera_origins(positions: np.ndarray, options: RenderOptions) -> np.ndarray:
    """Agent positions [N,3] + the sensor offset (0, h, 0) -> [N,3] f32. The agent stays upright
    (habitat turns its body about +Y only), so the offset is straight up whatever its rotation:
    a pitched rotation (LOOK_UP / LOOK_DOWN) turns the view about the sensor, not the eye."""
    p = np.asarray(positions, dtype=np.float32).reshape(-1, 3)
    return p + np.array([0.0, options.sensor_height, 0.0], np.float32)


DEPTH_RAW, DEPTH_CLIPPED, DEPTH_NORMALIZED = 0, 1, 2   # depth_mode's values (the kernels take the int)


def depth_mode(options: RenderOptions) -> int:
    """The depth mode of ``options`` (how ``finish_depth`` and the kernels finish z-depth):
    DEPTH_RAW (``raw_depth``: metres as the rays give them), DEPTH_CLIPPED (metres clipped to
    [min_depth, max_depth], habitat-lab's sensor) or DEPTH_NORMALIZED (clipped, then scaled to [0, 1])."""
    if options.raw_depth:
        return DEPTH_RAW
    return DEPTH_NORMALIZED if options.normalize_depth else DEPTH_CLIPPED


def finish_depth(z: np.ndarray, options: RenderOptions) -> np.ndarray:
    """Raw z-depth (0 = miss) -> the sensor's output, finished as ``depth_mode`` says (a miss
    reads min_depth, normalized 0, as habitat-lab clips it)."""
    mode = depth_mode(options)
    if mode == DEPTH_RAW:
        return z
    lo, hi = np.float32(options.min_depth), np.float32(options.max_depth)
    if mode == DEPTH_CLIPPED:
        return np.clip(z, lo, hi)
    return (np.clip(z, lo, hi) - lo) / (hi - lo)
