"""A NavMesh drawn top-down as an image array (the semantic preview draws on it): one panel per
floor, islands coloured; ``bps-assets preview`` itself draws with ``nav.topdown``.

Floors are the heights holding a large share of the navigable area (histogram peaks, 0.25 m
bins, >= 5% of the area, peaks closer than 1 m merged); every span is drawn on the highest floor
at most 0.5 m above it, so stairs appear on the floor they start from. x runs to the right,
z downwards (habitat's top-down map orientation).
"""
from __future__ import annotations

import numpy as np

from .grid import NavMesh

_PALETTE = np.array([
    [31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189],
    [140, 86, 75], [227, 119, 194], [188, 189, 34], [23, 190, 207], [174, 199, 232],
    [255, 187, 120], [152, 223, 138], [255, 152, 150], [197, 176, 213], [196, 156, 148],
    [247, 182, 210], [219, 219, 141], [158, 218, 229], [127, 127, 127], [100, 100, 255]], np.uint8)


def floor_levels(nav: NavMesh) -> np.ndarray:
    """Heights of the floors (ascending)."""
    y = nav.span_pos[:, 1]
    if y.size == 0:
        return np.zeros(1)
    b = 0.25
    lo = np.floor(y.min() / b) * b
    idx = np.floor((y - lo) / b).astype(np.int64)
    cnt = np.bincount(idx)
    thr = max(0.05 * y.size, 1.0 / nav.cell_size ** 2)
    peaks = [i for i in range(cnt.size) if cnt[i] >= thr and cnt[i] >= cnt[max(i - 1, 0)] and
             cnt[i] >= cnt[min(i + 1, cnt.size - 1)]]
    if not peaks:
        peaks = [int(cnt.argmax())]
    levels = []
    for i in peaks:
        h = float(np.median(y[idx == i]))
        if levels and h - levels[-1] < 1.0:
            continue
        levels.append(h)
    return np.array(levels)


PLAIN = (228, 228, 228)   # navigable area's colour with ``islands=False`` (the top-down map's)


def render(nav: NavMesh, max_size: int = 1600, islands: bool = True, margin: int = 0) -> tuple[np.ndarray, int]:
    """RGB uint8 image with one panel per floor (left to right); returns (image, floors).
    ``islands=False``: the navigable area in one grey (shaded by height), so colours drawn on
    the map (the semantic preview's categories) are never the floor's. ``margin``: cells of
    not-navigable border around each panel's grid (room for objects against the outer walls)."""
    levels = floor_levels(nav)
    L, D, W = nav.shape
    D, W = D + 2 * margin, W + 2 * margin
    y = nav.span_pos[:, 1]
    lvl = np.searchsorted(levels, y + 0.5, side="right") - 1
    lvl = np.clip(lvl, 0, len(levels) - 1)
    F = len(levels)
    pad = 2
    scale = max(1, min(8, int(max_size // max(W * F + pad * (F + 1), D + 2 * pad, 1))))
    panel_w, panel_h = W * scale, D * scale
    img = np.full((panel_h + 2 * pad + 14, F * panel_w + (F + 1) * pad, 3), 245, np.uint8)
    l_, r_, c_ = nav.span_lrc.T
    r_, c_ = r_ + margin, c_ + margin
    col = (_PALETTE[nav.span_island % len(_PALETTE)] if islands else
           np.broadcast_to(np.array(PLAIN, np.uint8), (len(y), 3))).astype(np.float32)
    # shade by height within the floor: higher = lighter
    rel = np.clip((y - levels[lvl] + 0.5) / 1.5, 0, 1)
    col = col * (0.7 + 0.3 * rel[:, None])
    for f in range(F):
        panel = np.full((D, W, 3), 60, np.uint8)  # not navigable: dark
        m = lvl == f
        # draw lower spans first so the top-most span of a column wins
        order = np.argsort(y[m], kind="stable")
        rr, cc, cf = r_[m][order], c_[m][order], col[m][order]
        panel[rr, cc] = cf.astype(np.uint8)
        big = np.repeat(np.repeat(panel, scale, 0), scale, 1)
        x0 = pad + f * (panel_w + pad)
        img[pad + 14:pad + 14 + panel_h, x0:x0 + panel_w] = big
    return img, F
