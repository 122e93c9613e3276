"""Sensor noise for the whole batch in one Warp launch (CPU or CUDA, one source): habitat-sim's
Redwood depth model and its RGB models (Gaussian, salt-and-pepper, speckle, Poisson).

``SensorNoise(options, device, normalized, min_depth, max_depth, native)`` holds the Redwood
table; ``launch(depth_in, depth_out, rgb_in, rgb_out, keys, counters, lo, hi, stream)`` writes
noisy copies of envs ``lo:hi`` of depth [N,H,W,1] float32 (the raw frame in, metres, 0 = miss,
unclipped: habitat-sim's noise reads its raw frame; out: metres, or with ``min_depth`` /
``max_depth`` clipped to them, ``normalized`` then scaled to 0-1: habitat-lab's sensor after it)
and / or RGB [N,H,W,C] uint8 (alpha kept). Outputs must not alias inputs (the shuffle reads
neighbours), except with ``native``: depth through the Embree bridge's C pass (the CPU; the
kernel's values bit for bit; in place allowed). Env e's draws: ``rng.stream(keys[e],
counters[e], domain, row)``; the caller advances ``counters`` (the fused step does), so nothing
here waits. Semantics, the two deliberate differences from habitat-sim: docs/NOISE.md.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import torch
import warp as wp

from bps_assets.errors import ConfigError

from . import rng
from ..nav.kernels import set_module_options
from ..render.camera import DEPTH_CLIPPED, DEPTH_NORMALIZED, DEPTH_RAW
from .options import NoiseOptions

TABLE_PATH = Path(__file__).with_name("data") / "redwood-depth-dist-model.npy"
RGB_KINDS = {"none": 0, "gaussian": 1, "salt_pepper": 2, "speckle": 3, "poisson": 4}
_RAW, _NORMALIZED = wp.constant(DEPTH_RAW), wp.constant(DEPTH_NORMALIZED)   # camera.depth_mode
POISSON_LEVELS = 256.0

set_module_options(__name__)   # no gradients; safe side-by-side CPU launches (CpuLaunches)


@wp.struct
class SensorParams:
    """The kernel's parameters: which models, their settings, the device tables."""
    depth_on: int
    depth_mult: float
    # how the noisy depth leaves (camera.depth_mode's values): 0 metres as the model gives
    # them, 1 clipped to [lo, hi], 2 clipped and scaled to [0, 1]; it arrives as raw metres
    depth_mode: int
    depth_lo: float
    depth_inv: float            # 1 / (hi - lo): a multiply per pixel, not a division
    depth_hi: float
    table: wp.array3d(dtype=float)
    zig: wp.array(dtype=float)   # rng.zig_table()
    shuffle: wp.array(dtype=wp.uint32)   # shuffle_cdf(depth_mult)
    rgb_kind: int
    rgb_intensity: float
    rgb_mean: float
    rgb_sigma: float
    salt_vs_pepper: float
    amount: float


def load_table() -> np.ndarray:
    """The Redwood distortion table, float32 [80 rows of 6 px, 80 columns of 8 px, 5 depths]."""
    t = np.load(TABLE_PATH)
    if t.shape != (80, 400) or t.dtype != np.float32:
        raise ValueError(f"{TABLE_PATH}: expected float32 (80, 400), got {t.dtype} {t.shape}")
    return t.reshape(80, 80, 5)


@wp.func
def distortion(x: int, y: int, z: float, table: wp.array3d(dtype=float)) -> float:
    """The table's factor f for depth ``z`` (m) at pixel (x, y) of a 640x480 frame (habitat's
    undistorted depth is z / f; 0 where f < 1e-5)."""
    # floored at -1 before the cast (a negative or huge depth: no out-of-range conversion), both
    # slices clamped to the table's 5 depths
    i2 = int(wp.max((z + 1.0) / 2.0, -1.0))
    i1 = i2 - 1
    a = (z - (float(i1) * 2.0 + 1.0)) / 2.0
    tx = x / 8
    ty = y / 6
    return (1.0 - a) * table[ty, tx, wp.clamp(i1, 0, 4)] + a * table[ty, tx, wp.clamp(i2, 0, 4)]


@wp.func
def shuffle_offset(u: wp.uint32, cdf: wp.array(dtype=wp.uint32)) -> int:
    """The pixel offset whose CDF bin holds ``u`` (``shuffle_cdf``): the first k with u < cdf[k]
    (offset 0, ~91 % of draws at multiplier 1, answered by the first two comparisons)."""
    k = (cdf.shape[0] - 1) / 2
    lo = int(0)
    hi = cdf.shape[0] - 1
    if u < cdf[k] and (k == 0 or u >= cdf[k - 1]):
        lo = k
        hi = k
    while lo < hi:
        mid = (lo + hi) / 2
        if u < cdf[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo - k


@wp.func
def redwood(p: SensorParams, depth: wp.array3d(dtype=float), e: int, j: int, i: int, sx: float,
            sy: float, rs: wp.uint32) -> float:
    """Noisy depth (m) of pixel (j, i) of env e, row state ``rs``. The shuffle: habitat rounds
    j + N(0, (0.25 m)^2) to the nearest pixel (clamped to the frame), i.e. adds k with
    P(k) = P(k - 1/2 <= 0.25 m z < k + 1/2): drawn from that CDF (one 32-bit draw, no normal).
    Draws 4i..4i+3 of the row (``rng.draw``): none depends on another pixel's."""
    h = depth.shape[1]
    w = depth.shape[2]
    y = wp.clamp(j + shuffle_offset(rng.draw(rs, 4 * i), p.shuffle), 0, h - 1)
    x = wp.clamp(i + shuffle_offset(rng.draw(rs, 4 * i + 1), p.shuffle), 0, w - 1)
    d = depth[e, y - y % 2, x - x % 2]
    out = float(0.0)
    if d < 10.0:
        f = distortion(int(float(x) * sx + 0.5), int(float(y) * sy + 0.5), d, p.table)
        if f >= 1e-5 and d != 0.0:   # habitat: undistorted depth d / f, 0 (no return) where f < 1e-5
            # drawn only where habitat's CUDA model draws it
            dz, _ = rng.normal_from(rng.draw(rs, 4 * i + 2), rng.draw(rs, 4 * i + 3), p.zig)
            denom = wp.round((35.130 * f / d + dz * 0.027778 * p.depth_mult) * 8.0)
            if denom > 1e-5:
                out = 35.130 * 8.0 / denom
    return out


@wp.func
def rgb_value(p: SensorParams, v: wp.uint8, s: wp.uint32):
    """One noisy colour channel (habitat's formulas; uint8 by truncation) -> (value, state)."""
    img = float(v) / 255.0
    out = img
    k = p.rgb_kind
    if k == 1 or k == 3:
        z, s = rng.normal(s, p.zig)
        n = (z * p.rgb_sigma + p.rgb_mean) * p.rgb_intensity
        if k == 3:
            n = img * n
        out = wp.clamp(img + n, 0.0, 1.0)
    elif k == 2:
        u = wp.randf(s)
        if u < p.amount * p.salt_vs_pepper:
            out = 1.0
        elif u < p.amount:
            out = 0.0
    elif k == 4:
        out = wp.clamp(float(wp.poisson(s, img * POISSON_LEVELS)) / POISSON_LEVELS, 0.0, 1.0)
    return wp.uint8(int(out * 255.0)), s


@wp.kernel
def sensor_noise_kernel(p: SensorParams, depth_in: wp.array3d(dtype=float), depth_out: wp.array3d(dtype=float),
                        rgb_in: wp.array4d(dtype=wp.uint8), rgb_out: wp.array4d(dtype=wp.uint8),
                        keys: wp.array(dtype=wp.int32), counters: wp.array(dtype=wp.int32), env0: int,
                        width: int):
    """One row of one env: its depth and / or its RGB channels, pixel by pixel along the row
    (one stream per row and sensor: the stream set-up and the launch's index arithmetic are
    paid per row, not per pixel)."""
    le, j = wp.tid()
    e = env0 + le
    key = int(keys[e])
    c = int(counters[e])
    if p.depth_on != 0:
        h = depth_in.shape[1]
        sx = float(0.0)
        sy = float(0.0)
        if width > 1:
            sx = 639.0 / float(width - 1)     # the pixel remapped to the table's 640 x 480 frame
        if h > 1:
            sy = 479.0 / float(h - 1)
        rs = rng.stream(key, c, rng.DEPTH, j)
        for i in range(width):
            v = redwood(p, depth_in, e, j, i, sx, sy, rs)
            if p.depth_mode != _RAW:     # as habitat-lab's sensor after habitat-sim's noise: clip, scale
                v = wp.clamp(v, p.depth_lo, p.depth_hi)
                if p.depth_mode == _NORMALIZED:
                    v = (v - p.depth_lo) * p.depth_inv
            depth_out[e, j, i] = v
    if p.rgb_kind != 0:
        s = rng.stream(key, c, rng.RGB, j)
        nc = wp.min(rgb_in.shape[3], 3)
        for i in range(width):
            for ch in range(nc):
                c8, s = rgb_value(p, rgb_in[e, j, i, ch], s)
                rgb_out[e, j, i, ch] = c8
            if rgb_in.shape[3] > 3:
                rgb_out[e, j, i, 3] = rgb_in[e, j, i, 3]


def shuffle_cdf(multiplier: float) -> np.ndarray:
    """uint32 [2K + 1]: 2^32 x P(offset <= k) for k = -K..K of habitat's pixel shuffle (a normal of
    sd 0.25 x multiplier rounded to the nearest pixel); K covers 7 sd (the rest is below 2^-32)."""
    from math import ceil, erf, sqrt
    sd = 0.25 * multiplier
    k = int(ceil(7.0 * sd + 0.5)) if sd > 0 else 0
    out = []
    for off in range(-k, k + 1):
        p = 1.0 if sd == 0 else 0.5 * (1.0 + erf((off + 0.5) / (sd * sqrt(2.0))))
        out.append(min(int(p * 2.0**32), 2**32 - 1))
    out[-1] = 2**32 - 1
    return np.array(out, np.uint32)


class _RedwoodParams(ctypes.Structure):
    """RedwoodParams of render/_embree_bridge.c."""
    _fields_ = [("mult", ctypes.c_float), ("lo", ctypes.c_float), ("hi", ctypes.c_float), ("inv", ctypes.c_float),
                ("finish", ctypes.c_int64)]


def _native_redwood():
    """``bps_redwood_depth`` of the compiled Embree bridge, or None when it was not built."""
    from bps_assets import native

    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    return native.function("bps_runtime.render._embree_bridge", "bps_redwood_depth",
                           [vp, vp, i64, i64, i64, i64, vp, vp, vp, vp, vp, vp, vp, i64, vp])


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of two tensors overlap."""
    sa, sb = a.untyped_storage(), b.untyped_storage()
    if sa.data_ptr() != sb.data_ptr():
        return False
    ea = a.data_ptr() + sum((n - 1) * s for n, s in zip(a.shape, a.stride())) * a.element_size()
    eb = b.data_ptr() + sum((n - 1) * s for n, s in zip(b.shape, b.stride())) * b.element_size()
    return a.data_ptr() <= eb and b.data_ptr() <= ea


def native_isa(isa: int) -> int:
    """Pin the C pass's widest vector path (0: scalar, 2: AVX2, -1: the CPU's best, AVX-512 where
    it has it; the values are the same on every path) -> the previous setting (tests, measurements)."""
    from bps_assets import native

    f = native.function("bps_runtime.render._embree_bridge", "bps_redwood_isa", [ctypes.c_int])
    if f is None:
        raise RuntimeError("the Embree bridge (and its native Redwood pass) was not built")
    return f(int(isa))


_EMPTY: dict = {}


def _frame3d(t: torch.Tensor, device: str):
    """A [N, H, W, 1] float32 tensor as a Warp [N, H, W] array over the same memory (no torch op)."""
    st = t.stride()
    return wp.array(ptr=t.data_ptr(), dtype=float, shape=tuple(t.shape[:3]), strides=tuple(4 * x for x in st[:3]),
                    device=device)


def _empty(device: str, dtype, ndim: int):
    key = (device, dtype, ndim)
    if key not in _EMPTY:
        shape = (0,) * ndim
        _EMPTY[key] = wp.zeros(shape, dtype=dtype, device=device)
    return _EMPTY[key]


class SensorNoise:
    """The sensor half of ``NoiseOptions`` on one device (see the module docstring)."""

    def __init__(self, options: NoiseOptions, device: str | torch.device = "cpu", normalized: bool = False,
                 min_depth: float | None = None, max_depth: float | None = None, native: bool = False):
        dev = torch.device(device)
        self.wdev = "cpu" if dev.type == "cpu" else f"cuda:{dev.index or 0}"
        self.options = options
        self.depth_on = options.depth_on
        self.rgb_on = options.rgb_on
        # the CPU's Redwood pass in C (the same values as the kernel), when asked for and built
        self._native = _native_redwood() if native and self.wdev == "cpu" and self.depth_on else None
        p = SensorParams()
        p.depth_on = int(self.depth_on)
        p.depth_mult = float(options.depth_mult)
        clip = min_depth is not None or max_depth is not None
        if (normalized or clip) and (min_depth is None or max_depth is None or not min_depth < max_depth):
            raise ConfigError(None, f"sensor noise: normalized or clipped depth needs min_depth < max_depth, got "
                                    f"{min_depth}, {max_depth}")
        p.depth_mode = DEPTH_NORMALIZED if normalized else DEPTH_CLIPPED if clip else DEPTH_RAW
        p.depth_lo, p.depth_hi = (float(min_depth), float(max_depth)) if clip else (0.0, 0.0)
        p.depth_inv = 1.0 / (p.depth_hi - p.depth_lo) if clip else 0.0
        host = (load_table(), rng.zig_table(), shuffle_cdf(options.depth_mult))   # float32, float32, uint32
        self._table = wp.array(host[0], dtype=float, device=self.wdev)
        p.table = self._table
        self._zig = wp.array(host[1], dtype=float, device=self.wdev)
        p.zig = self._zig
        self._shuffle = wp.array(host[2], dtype=wp.uint32, device=self.wdev)
        p.shuffle = self._shuffle
        p.rgb_kind = RGB_KINDS[options.rgb]
        p.rgb_intensity = float(options.rgb_intensity)
        p.rgb_mean = float(options.rgb_mean)
        p.rgb_sigma = float(options.rgb_sigma)
        p.salt_vs_pepper = float(options.salt_vs_pepper)
        p.amount = float(options.rgb_amount)
        self.params = p
        self._variants: dict = {}   # (depth on, rgb on) -> params with the others off (_params_for)
        if self._native is not None:
            self._host = host   # the C pass reads the same tables from host memory
            self._native_params = _RedwoodParams(p.depth_mult, p.depth_lo, p.depth_hi, p.depth_inv, p.depth_mode)

    @property
    def native(self) -> bool:
        """Whether depth noise runs as the C pass (else: the Warp kernel)."""
        return self._native is not None

    def launch(self, depth_in, depth_out, rgb_in, rgb_out, keys, counters, lo: int = 0,
               hi: int | None = None, stream=None) -> None:
        """Noisy copies of envs ``lo:hi`` (torch tensors; a sensor left out: None). One launch.
        With the native pass, ``depth_out`` may be ``depth_in`` itself (noise in place)."""
        ft = wp.from_torch
        ref = depth_in if depth_in is not None else rgb_in
        n, h, w = int(ref.shape[0]), int(ref.shape[1]), int(ref.shape[2])
        hi = n if hi is None else hi
        if hi <= lo:
            return
        use_d = self.depth_on and depth_in is not None
        use_c = self.rgb_on and rgb_in is not None
        if use_d and self._native is not None:
            self._redwood_native(depth_in, depth_out, keys, counters, lo, hi)
            use_d = False
            if not use_c:
                return
        p = self._params_for(use_d, use_c)
        # [N, H, W, 1] as a Warp [N, H, W] view (no torch op; half the kernel's time of 4-d indexing)
        d_in = _frame3d(depth_in, self.wdev) if use_d else _empty(self.wdev, float, 3)
        d_out = _frame3d(depth_out, self.wdev) if use_d else _empty(self.wdev, float, 3)
        c_in = ft(rgb_in) if use_c else _empty(self.wdev, wp.uint8, 4)
        c_out = ft(rgb_out) if use_c else _empty(self.wdev, wp.uint8, 4)
        wp.launch(sensor_noise_kernel, dim=(hi - lo, h),
                  inputs=[p, d_in, d_out, c_in, c_out, ft(keys), ft(counters), lo, w],
                  device=self.wdev, stream=stream)

    def _redwood_native(self, depth_in, depth_out, keys, counters, lo: int, hi: int) -> None:
        """Envs ``lo:hi`` of depth through the C pass (GIL released: ranges run side by side)."""
        for t, dt in ((depth_in, torch.float32), (depth_out, torch.float32), (keys, torch.int32),
                      (counters, torch.int32)):
            if t.device.type != "cpu" or t.dtype != dt or (t.dim() == 1 and t.stride(0) != 1):
                raise ValueError(f"native Redwood noise: expected CPU {dt} tensors, got {t.dtype} on {t.device}")
        n, h, w = depth_in.shape[:3]
        same = depth_out.data_ptr() == depth_in.data_ptr() and depth_out.stride() == depth_in.stride()
        if not (0 <= lo <= hi <= n and tuple(depth_out.shape[:3]) == (n, h, w) and len(keys) >= n
                and len(counters) >= n) or (not same and _overlap(depth_in, depth_out)):
            raise ValueError(f"native Redwood noise: envs {lo}:{hi} of {n}, frames {tuple(depth_in.shape)} -> "
                             f"{tuple(depth_out.shape)}, {len(keys)} keys, {len(counters)} counters")
        s_in = (ctypes.c_int64 * 3)(*depth_in.stride()[:3])
        s_out = (ctypes.c_int64 * 3)(*depth_out.stride()[:3])
        table, zig, cdf = self._host
        rc = self._native(depth_in.data_ptr(), depth_out.data_ptr(), lo, hi, h, w, s_in, s_out, keys.data_ptr(),
                          counters.data_ptr(), table.ctypes.data, zig.ctypes.data, cdf.ctypes.data, len(cdf),
                          ctypes.byref(self._native_params))
        if rc != 0:
            raise MemoryError("native Redwood noise: out of memory for its per-frame tables")

    def _params_for(self, depth: bool, rgb: bool):
        """``self.params`` with the sensors this launch does not run turned off: built once per
        combination (a launch runs every frame), not copied per call."""
        p = self.params
        key = (depth and bool(p.depth_on), rgb and bool(p.rgb_kind))
        if key == (bool(p.depth_on), bool(p.rgb_kind)):
            return p
        variants = self._variants
        if key not in variants:
            q = SensorParams()
            for name in SensorParams.vars:   # every field of the Warp struct, as it is
                setattr(q, name, getattr(p, name))
            q.depth_on = p.depth_on if key[0] else 0
            q.rgb_kind = p.rgb_kind if key[1] else 0
            variants[key] = q
        return variants[key]
