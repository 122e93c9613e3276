"""REFERENCE ONLY (tests): numpy transcriptions of habitat-sim's CPU sensor noise models
(``sensors/noise_models/redwood_depth_noise_model.py`` ``_simulate`` / ``_undistort`` and
``gaussian_noise_model.py``), rewritten vectorised from their semantics, for the statistical
comparisons in tests/test_noise_sensors.py. Not used by the runtime; numpy's generator, so
only distributions (not values) are comparable with the Warp kernels.
"""
from __future__ import annotations

import numpy as np


def redwood_reference(depth: np.ndarray, table: np.ndarray, multiplier: float,
                      gen: np.random.Generator) -> np.ndarray:
    """habitat-sim's CPU Redwood model on one frame ``depth`` [H, W] (metres), ``table`` [80, 80, 5]."""
    h, w = depth.shape
    ymax, xmax = h - 1.0, w - 1.0
    r = gen.standard_normal((h, w, 3)).astype(np.float32)
    jj, ii = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    # pixel shuffle, then the 2x2 downsampling (the even corner of the shuffled pixel)
    y = (np.clip(jj + r[..., 0] * 0.25 * multiplier, 0.0, ymax) + 0.5).astype(np.int64)
    x = (np.clip(ii + r[..., 1] * 0.25 * multiplier, 0.0, xmax) + 0.5).astype(np.int64)
    d = depth[y - y % 2, x - x % 2]
    # distortion: the pixel remapped to the 640 x 480 frame the table was measured on
    ux = (x / max(xmax, 1.0) * 639.0 + 0.5).astype(np.int64) // 8
    uy = (y / max(ymax, 1.0) * 479.0 + 0.5).astype(np.int64) // 6
    i2 = ((d + 1.0) / 2.0).astype(np.int64)
    i1 = i2 - 1
    a = (d - (i1 * 2.0 + 1.0)) / 2.0
    f = (1.0 - a) * table[uy, ux, np.clip(i1, 0, 4)] + a * table[uy, ux, np.minimum(i2, 4)]
    with np.errstate(divide="ignore", invalid="ignore"):
        und = np.where(f < 1e-5, 0.0, d / f)
        # disparity quantised to 1/8 with a Gaussian jitter
        denom = np.round((35.130 / und + r[..., 2] * 0.027778 * multiplier) * 8.0)
        out = np.where(denom <= 1e-5, 0.0, 35.130 * 8.0 / denom)
    out = np.where(und == 0.0, 0.0, out)
    return np.where(d >= 10.0, 0.0, out).astype(np.float32)


def gaussian_reference(image: np.ndarray, intensity: float, mean: float, sigma: float,
                       gen: np.random.Generator) -> np.ndarray:
    """habitat-sim's Gaussian RGB model on a uint8 image."""
    noise = (gen.standard_normal(image.shape) * sigma + mean) * intensity
    return (np.clip(image / 255.0 + noise, 0.0, 1.0) * 255.0).astype(np.uint8)
