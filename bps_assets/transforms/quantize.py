"""Quantize vertex positions and UVs onto integer grids with a guaranteed error bound.

Positions: each axis is mapped onto ``origin + q * step`` with ``q`` an unsigned integer. The
step is chosen so that the Euclidean distance between a source position and the float32
position a reader reconstructs is at most ``position_error`` (default 1 mm): rounding to the
grid moves each axis by at most step/2 (sqrt(3) * step/2 in 3-D), and the final float32
conversion adds at most half an ulp of the largest coordinate per axis; both are budgeted. When
the extent fits 65536 levels at that step, uint16 is used over the full range (finer than
needed, for free); otherwise uint32 at the largest allowed step. UVs work the same way with a
per-component bound ``uv_error`` (default 2^-15, 1/16 texel of a 2048 texture).

The integers are stored with the delta+shuffle filter after ``reorder`` has made neighbouring
vertices spatially close, which is what makes them compress well.

Tried and dropped: float16 UVs (0.03 UV-unit steps at |uv| = 50: tiled floors lose texels).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .merged import MergedGeometry

F32_HALF_ULP = 2.0 ** -24  # relative


@dataclass(frozen=True)
class Options:
    position_error: float = 1e-3   # metres, Euclidean, source -> reconstructed float32
    uv_error: float = 2.0 ** -15   # UV units, per component


DEFAULTS = Options()


@dataclass(frozen=True)
class Grid:
    """``value = origin + q * step`` per component; ``dtype`` is ``u2`` or ``u4``."""

    origin: tuple
    step: tuple
    dtype: str
    bound: float   # guaranteed max error (Euclidean over the components)

    @property
    def np_dtype(self):
        return np.uint16 if self.dtype == "u2" else np.uint32

    def to_json(self) -> dict:
        return {"dtype": self.dtype, "origin": list(self.origin), "step": list(self.step),
                "error_bound": self.bound}

    @classmethod
    def from_json(cls, d: dict) -> "Grid":
        return cls(tuple(float(x) for x in d["origin"]), tuple(float(x) for x in d["step"]),
                   str(d["dtype"]), float(d["error_bound"]))


def plan_grid(lo, hi, max_error: float, per_component: bool = False, what: str = "positions") -> Grid:
    """The coarsest-needed grid over [lo, hi] whose reconstruction error is <= ``max_error``.

    ``max_error`` is Euclidean over all components, or per component with ``per_component``.
    """
    lo = np.asarray(lo, np.float64)
    hi = np.asarray(hi, np.float64)
    k = lo.size
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise InputError(None, f"{what}: non-finite bounds")
    norm = 1.0 if per_component else float(np.sqrt(k))
    f32_err = norm * max(float(np.abs(lo).max(initial=0)), float(np.abs(hi).max(initial=0))) * F32_HALF_ULP
    budget = max_error - f32_err
    if budget <= max_error * 0.05:
        # the CLI option that sets this bound, and the least bound float32 can hold here
        option = {"positions": "--position-error", "uvs": "--uv-error"}.get(what, "a larger error bound")
        least = float(f"{f32_err / 0.95 * 1.05:.2g}")
        raise InputError(None, f"{what}: coordinates up to {max(np.abs(lo).max(), np.abs(hi).max()):.4g} "
                               f"cannot hold an error of {max_error:g} in float32: pass {option} {least:g} "
                               f"or more")
    step_max = 2.0 * budget / norm
    extent = hi - lo
    levels = np.ceil(extent / step_max)
    if levels.max(initial=0) <= 65535:
        dtype = "u2"
        step = np.where(extent > 0, extent / 65535.0, 1.0)
    elif levels.max() <= 2**32 - 1:
        dtype = "u4"
        step = np.full(k, step_max)
    else:
        raise InputError(None, f"{what}: extent {extent.max():.4g} too large for 32-bit quantization")
    step = np.minimum(step, step_max)
    bound = float(norm * step.max() / 2.0 + f32_err)
    return Grid(tuple(lo.tolist()), tuple(step.tolist()), dtype, bound)


def quantize_values(v: np.ndarray, grid: Grid) -> np.ndarray:
    o = np.asarray(grid.origin)
    s = np.asarray(grid.step)
    with np.errstate(over="ignore", invalid="ignore"):   # non-finite inputs: clipped below, dropped by clean
        q = np.rint((np.nan_to_num(v.astype(np.float64)) - o) / s)
    hi = 65535 if grid.dtype == "u2" else 2**32 - 1
    return np.clip(q, 0, hi).astype(grid.np_dtype)


_DEQUANT_ROWS = 1 << 14  # rows per float64 block: the temporary stays in cache


def dequantize(q: np.ndarray, grid: Grid) -> np.ndarray:
    """Reconstruct float32 values (computed in float64, rounded once). Block by block through
    one small float64 buffer: a whole-array float64 temporary (8 B per value) was most of a
    packed scene's load time beyond decompression, in first-touch page faults."""
    out = np.empty(q.shape, np.float32)
    step, origin = np.asarray(grid.step, np.float64), np.asarray(grid.origin, np.float64)
    if q.dtype == np.uint16 and q.ndim == 2 and len(q) > 1 << 16 and step.shape == (q.shape[1],):
        # every value a 16-bit code can take, per axis, by the same float64 formula: a lookup
        # returns the same float32 bits as the arithmetic, in one gather per value
        codes = np.arange(1 << 16, dtype=np.float64)
        luts = [(codes * step[k] + origin[k]).astype(np.float32) for k in range(q.shape[1])]
        for a in range(0, len(q), _DEQUANT_ROWS):
            b = min(a + _DEQUANT_ROWS, len(q))
            for k, lut in enumerate(luts):
                out[a:b, k] = lut[q[a:b, k]]
        return out
    tmp = np.empty((min(len(q), _DEQUANT_ROWS),) + q.shape[1:], np.float64)
    for a in range(0, len(q), _DEQUANT_ROWS):
        b = min(a + _DEQUANT_ROWS, len(q))
        t = tmp[:b - a]
        np.multiply(q[a:b], step, out=t)
        t += origin
        out[a:b] = t
    return out


def quantize(options: Options = DEFAULTS):
    """Factory: a callable that quantizes a MergedGeometry in place.

    Sets ``positions_q`` / ``uvs_q`` and the grids, and replaces ``positions`` / ``uvs`` with
    their reconstruction, so later steps (weld on exact equality, bounding spheres) see exactly
    what a reader will. Records the measured max error in ``stats``.
    """

    def apply(g: MergedGeometry) -> MergedGeometry:
        lo, hi = g.used_bounds()
        g.position_grid = plan_grid(lo, hi, options.position_error, what="positions")
        src = g.positions
        g.positions_q = quantize_values(src, g.position_grid)
        g.positions = dequantize(g.positions_q, g.position_grid)
        used = np.zeros(len(src), bool)
        used[g.indices.reshape(-1)] = True
        err = np.linalg.norm(g.positions[used].astype(np.float64) - src[used], axis=1)
        g.stats["position_max_error"] = float(err.max(initial=0.0))
        if g.uvs is not None:
            u = g.uvs[used] if used.any() else np.zeros((1, 2), np.float32)
            g.uv_grid = plan_grid(u.min(0), u.max(0), options.uv_error, per_component=True, what="uvs")
            src_uv = g.uvs
            g.uvs_q = quantize_values(src_uv, g.uv_grid)
            g.uvs = dequantize(g.uvs_q, g.uv_grid)
            uerr = np.abs(g.uvs[used].astype(np.float64) - src_uv[used])
            g.stats["uv_max_error"] = float(uerr.max(initial=0.0))
        return g

    return apply
