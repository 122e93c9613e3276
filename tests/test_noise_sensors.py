"""Sensor noise kernels (bps_runtime.noise.sensors) against numpy transcriptions of habitat-sim's
CPU models (tests/noise_reference.py): the Redwood error distribution on flat walls per 0.5 m
bin, the Gaussian RGB distribution per grey level, the other RGB models against their
formulas; seeded repeatability and independence between envs, on Warp's CPU device."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bps_assets.errors import ConfigError
from bps_runtime.warp_init import init_warp

init_warp()

from bps_runtime.noise import rng  # noqa: E402
from bps_runtime.noise.options import NoiseOptions  # noqa: E402
from bps_runtime.noise.sensors import SensorNoise, load_table, native_isa  # noqa: E402

from noise_reference import gaussian_reference, redwood_reference  # noqa: E402

H, W = 48, 64
BINS = np.arange(0.5, 9.01, 0.5)       # 17 bins of 0.5 m, 0.5 - 9 m
PER_BIN = 4                            # wall distances per bin
FRAMES = 6                             # frames (steps) per wall


def noisy_depth(depth: torch.Tensor, options: NoiseOptions, seed: int = 0, counter: int = 0,
                lo: int = 0, hi: int | None = None, out: torch.Tensor | None = None, native: bool = False,
                **kw) -> torch.Tensor:
    n = depth.shape[0]
    out = torch.zeros_like(depth) if out is None else out
    keys = torch.from_numpy(rng.env_keys(seed, n))
    noise = SensorNoise(options, native=native, **kw)
    assert noise.native == native
    noise.launch(depth, out, None, None, keys, torch.full((n,), counter, dtype=torch.int32), lo, hi)
    return out


def noisy_rgb(rgb: torch.Tensor, options: NoiseOptions, seed: int = 0, counter: int = 0) -> torch.Tensor:
    n = rgb.shape[0]
    out = torch.zeros_like(rgb)
    keys = torch.from_numpy(rng.env_keys(seed, n))
    SensorNoise(options).launch(None, None, rgb, out, keys, torch.full((n,), counter, dtype=torch.int32))
    return out


def walls() -> np.ndarray:
    """[bins * PER_BIN] wall distances, PER_BIN evenly inside each 0.5 m bin."""
    return np.array([lo + 0.5 * (k + 0.5) / PER_BIN for lo in BINS[:-1] for k in range(PER_BIN)], np.float32)


def error_stats(noisy: np.ndarray, gt: np.ndarray) -> tuple[float, float, float]:
    """(mean error, its std over non-zero returns, share of zeros) of one bin's pixels."""
    zero = noisy == 0.0
    err = (noisy - gt)[~zero]
    return float(err.mean()), float(err.std()), float(zero.mean())


@pytest.mark.parametrize("native", [False, True])
def test_redwood_error_distribution_matches_habitat_cpu_model_per_bin(native):
    d = walls()
    frames = torch.from_numpy(np.repeat(d, 1)[:, None, None, None] * np.ones((1, H, W, 1), np.float32))
    ours = np.stack([noisy_depth(frames, NoiseOptions(depth="redwood"), seed=3, counter=c, native=native).numpy()[..., 0]
                     for c in range(FRAMES)], axis=1)          # [walls, frames, H, W]
    table, gen = load_table(), np.random.default_rng(7)
    ref = np.stack([[redwood_reference(np.full((H, W), x, np.float32), table, 1.0, gen) for _ in range(FRAMES)]
                    for x in d])
    gt = d[:, None, None, None]
    for b in range(len(BINS) - 1):
        sl = slice(b * PER_BIN, (b + 1) * PER_BIN)
        m0, s0, z0 = error_stats(ours[sl], np.broadcast_to(gt[sl], ours[sl].shape))
        m1, s1, z1 = error_stats(ref[sl], np.broadcast_to(gt[sl], ref[sl].shape))
        where = f"bin {BINS[b]:.1f}-{BINS[b + 1]:.1f} m: ours ({m0:.4f}, {s0:.4f}, {z0:.4f}) ref ({m1:.4f}, {s1:.4f}, {z1:.4f})"
        assert abs(m0 - m1) <= 0.1 * max(abs(m1), s1), where
        assert abs(s0 - s1) <= 0.1 * s1, where
        assert abs(z0 - z1) <= 0.1 * max(z1, 0.01), where
        assert s1 > 0.0 and z1 < 0.5, where


def test_redwood_without_randomness_is_habitat_cpu_model_pixel_for_pixel():
    """Multiplier 0 leaves the table and the quantisation: deterministic on both sides."""
    gen = np.random.default_rng(1)
    depth = gen.uniform(0.2, 11.0, (3, H, W)).astype(np.float32)
    ours = noisy_depth(torch.from_numpy(depth[..., None]), NoiseOptions(depth="redwood", multiplier=0.0))
    table = load_table()
    ref = np.stack([redwood_reference(x, table, 0.0, gen) for x in depth])
    ours = ours.numpy()[..., 0]
    assert (ref == 0).any() and (ref > 0).any()
    same = np.isclose(ours, ref, rtol=1e-5, atol=0)
    assert same.mean() > 0.999, same.mean()
    # the few others: a quantisation step apart (a float32 / float64 tie at the rounding)
    step = (ref / 8.0 * ref / 35.130 * 8.0 + 1e-3)
    assert (np.abs(ours - ref)[~same] <= 2 * step[~same]).all()


def test_redwood_zero_beyond_10_m_and_scaled_depth():
    depth = torch.full((2, H, W, 1), 10.5)
    assert (noisy_depth(depth, NoiseOptions(depth="redwood")) == 0).all()
    # normalised depth (0-1 of [0.1, 10] m): the model works on the raw metres, then clips and
    # scales (habitat-lab's sensor after habitat-sim's noise)
    d = torch.full((2, H, W, 1), 3.0)
    keys = torch.from_numpy(rng.env_keys(0, 2))
    cnt = torch.zeros(2, dtype=torch.int32)
    a, b = torch.zeros_like(d), torch.zeros_like(d)
    SensorNoise(NoiseOptions(depth="redwood")).launch(d, a, None, None, keys, cnt)
    SensorNoise(NoiseOptions(depth="redwood"), normalized=True, min_depth=0.1, max_depth=10.0).launch(
        d, b, None, None, keys, cnt)
    want = (a.clamp(0.1, 10.0) - 0.1) / 9.9
    assert (a == 0).any() and torch.allclose(want, b, atol=1e-6)
    c = torch.zeros_like(d)      # clipped to the range, in metres
    SensorNoise(NoiseOptions(depth="redwood"), min_depth=0.1, max_depth=2.5).launch(d, c, None, None, keys, cnt)
    assert torch.equal(c, a.clamp(0.1, 2.5))
    for lo, hi in ((2.5, 2.5), (3.0, 0.1), (None, 10.0)):   # a bad range: the config's error
        with pytest.raises(ConfigError, match="min_depth < max_depth"):
            SensorNoise(NoiseOptions(depth="redwood"), normalized=True, min_depth=lo, max_depth=hi)


def test_redwood_shuffle_reads_neighbours():
    """On a step edge the shuffle mixes the two sides (habitat: N(0, 0.25 px) then 2x2)."""
    depth = np.full((1, H, W, 1), 2.0, np.float32)
    depth[:, :, W // 2:] = 4.0
    out = noisy_depth(torch.from_numpy(depth), NoiseOptions(depth="redwood", multiplier=4.0)).numpy()[0, :, :, 0]
    col = W // 2 - 1     # left of the edge: some pixels read the far side
    assert (out[:, col] > 3.0).any() and (out[:, col] < 3.0).any()
    assert (out[:, 2:8] < 3.0).all() or (out[:, 2:8][out[:, 2:8] > 0] < 3.0).all()


def test_gaussian_rgb_matches_habitat_per_level():
    levels = np.arange(0, 256, 5, dtype=np.uint8)
    img = np.broadcast_to(levels[:, None, None, None], (len(levels), 32, 32, 3)).copy()
    opts = NoiseOptions(rgb="gaussian", rgb_intensity=0.1)
    ours = np.concatenate([noisy_rgb(torch.from_numpy(img), opts, counter=c).numpy() for c in range(3)], 1)
    gen = np.random.default_rng(5)
    ref = np.concatenate([gaussian_reference(img, 0.1, 0.0, 1.0, gen) for _ in range(3)], 1)
    for k, v in enumerate(levels):
        a, b = ours[k].astype(np.float64) - v, ref[k].astype(np.float64) - v
        where = f"level {v}: ours ({a.mean():.2f}, {a.std():.2f}) ref ({b.mean():.2f}, {b.std():.2f})"
        assert abs(a.mean() - b.mean()) <= 0.1 * max(abs(b.mean()), b.std()), where
        assert abs(a.std() - b.std()) <= 0.1 * b.std(), where


def test_gaussian_without_spread_is_habitat_formula_exactly():
    img = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, 3)
    out = noisy_rgb(torch.from_numpy(img), NoiseOptions(rgb="gaussian", rgb_sigma=0.0, rgb_mean=0.5, rgb_intensity=0.2))
    want = gaussian_reference(img, 0.2, 0.5, 0.0, np.random.default_rng(0))
    assert np.array_equal(out.numpy(), want)


def test_salt_pepper_speckle_poisson_follow_their_formulas():
    img = np.full((4, 64, 64, 4), 100, np.uint8)
    img[..., 3] = 7
    sp = noisy_rgb(torch.from_numpy(img), NoiseOptions(rgb="salt_pepper", rgb_amount=0.1, salt_vs_pepper=0.3)).numpy()
    rgb = sp[..., :3]
    assert abs((rgb == 255).mean() - 0.03) < 0.003 and abs((rgb == 0).mean() - 0.07) < 0.005
    assert ((rgb == 255) | (rgb == 0) | (rgb == 100)).all()
    assert (sp[..., 3] == 7).all()      # alpha kept
    sk = noisy_rgb(torch.from_numpy(img), NoiseOptions(rgb="speckle", rgb_intensity=0.2)).numpy()[..., :3] / 255.0
    x = 100 / 255.0        # img * (1 + 0.2 N(0, 1)), truncated to uint8: mean ~x - 0.5/255, std x * 0.2
    assert abs(sk.mean() - (x - 0.5 / 255)) < 0.002 and abs(sk.std() - 0.2 * x) < 0.01 * x
    po = noisy_rgb(torch.from_numpy(img), NoiseOptions(rgb="poisson")).numpy()[..., :3] / 255.0
    lam = x * 256       # Poisson(lam) / 256: mean x, variance x / 256 (before the uint8 truncation)
    assert abs(po.mean() - (x - 0.5 / 255)) < 0.003 and abs(po.var() - lam / 256**2) < 0.1 * lam / 256**2


def test_seeded_noise_repeats_and_splits_bit_for_bit():
    gen = np.random.default_rng(2)
    depth = torch.from_numpy(gen.uniform(0.5, 9.0, (6, H, W, 1)).astype(np.float32))
    opts = NoiseOptions(depth="redwood")
    a = noisy_depth(depth, opts, seed=11, counter=5)
    b = noisy_depth(depth, opts, seed=11, counter=5)
    assert torch.equal(a, b)
    # two launches over env ranges give the one-launch result (the CPU step's threads)
    c = torch.zeros_like(depth)
    noisy_depth(depth, opts, seed=11, counter=5, lo=0, hi=2, out=c)
    noisy_depth(depth, opts, seed=11, counter=5, lo=2, hi=6, out=c)
    assert torch.equal(a, c)
    assert not torch.equal(a, noisy_depth(depth, opts, seed=11, counter=6))
    assert not torch.equal(a, noisy_depth(depth, opts, seed=12, counter=5))


@pytest.mark.parametrize("kind", ["depth", "rgb"])
def test_envs_never_share_a_noise_stream(kind):
    """Identical frames in every env: two envs' noise is no more alike than one env's noise at two
    steps (independent draws by construction). Depth errors share the table's fixed pattern
    (a correlation of ~0.28 at 4 m), so the step-to-step figure is the yardstick."""
    n, h, w = 8, 96, 128
    if kind == "depth":
        frame = torch.full((n, h, w, 1), 4.0)
        draw = lambda c: noisy_depth(frame, NoiseOptions(depth="redwood"), seed=0, counter=c).numpy()  # noqa: E731
        truth = 4.0
    else:
        frame = torch.full((n, h, w, 3), 128, dtype=torch.uint8)
        draw = lambda c: noisy_rgb(frame, NoiseOptions(rgb="gaussian"), seed=0, counter=c).numpy()  # noqa: E731
        truth = 128.0
    out, later = draw(0), draw(1)
    res = out.reshape(n, -1).astype(np.float64) - truth
    res_later = later.reshape(n, -1).astype(np.float64) - truth
    between_envs = np.corrcoef(res)[~np.eye(n, dtype=bool)]
    between_steps = np.array([np.corrcoef(res[e], res_later[e])[0, 1] for e in range(n)])
    base = between_steps.mean()
    assert np.abs(between_steps - base).max() < 0.05, between_steps
    assert np.abs(between_envs - base).max() < 0.05, (between_envs, base)
    for e in range(1, n):
        assert not np.array_equal(out[0], out[e])


@pytest.mark.parametrize("multiplier", [1.0, 3.0])
def test_redwood_on_a_slanted_wall_matches_habitat_cpu_model(multiplier):
    """A wall slanted across the view (depth 1 -> 6 m along the columns, steps of 2 pixels) makes
    the pixel shuffle visible: the error per 0.5 m bin of true depth matches the reference."""
    cols = np.linspace(1.0, 6.0, W, dtype=np.float32)
    ramp = np.broadcast_to(cols[None, :], (H, W)).astype(np.float32)
    n = 96
    ours = noisy_depth(torch.from_numpy(np.broadcast_to(ramp[None, ..., None], (n, H, W, 1)).copy()),
                       NoiseOptions(depth="redwood", multiplier=multiplier), seed=9).numpy()[..., 0]
    table, gen = load_table(), np.random.default_rng(3)
    ref = np.stack([redwood_reference(ramp, table, multiplier, gen) for _ in range(n)])
    gt = np.broadcast_to(ramp, ours.shape)
    for lo in np.arange(1.0, 6.0, 0.5):
        sel = (gt >= lo) & (gt < lo + 0.5)
        m0, s0, z0 = error_stats(ours[sel], gt[sel])
        m1, s1, z1 = error_stats(ref[sel], gt[sel])
        where = f"{lo:.1f} m x{multiplier}: ours ({m0:.4f}, {s0:.4f}, {z0:.4f}) ref ({m1:.4f}, {s1:.4f}, {z1:.4f})"
        assert abs(m0 - m1) <= 0.1 * max(abs(m1), s1), where
        assert abs(s0 - s1) <= 0.1 * s1, where
        assert abs(z0 - z1) <= 0.1 * max(z1, 0.01), where


def test_shuffle_offsets_are_habitats_rounded_normal():
    """The shuffle CDF: offsets k with P(k) = P(k - 1/2 <= 0.25 m z < k + 1/2)."""
    from scipy.stats import norm

    from bps_runtime.noise.sensors import shuffle_cdf
    for m in (0.0, 1.0, 4.0):
        cdf = shuffle_cdf(m).astype(np.float64) / 2**32
        k = (len(cdf) - 1) // 2
        if m == 0.0:
            assert len(cdf) == 1
            continue
        want = norm.cdf((np.arange(-k, k + 1) + 0.5) / (0.25 * m))
        assert np.allclose(cdf[:-1], want[:-1], atol=1e-9) and cdf[-1] > 1 - 1e-9


def test_redwood_negative_and_huge_depths_stay_in_the_table():
    """A negative or huge negative depth (a corrupt frame) reads the table's first slice, never
    before it: finite output, the C pass (scalar, AVX2, widest) the Warp kernel's bit for bit
    (before: the scalar C cast -1e30 out of range and read before the table, a segfault)."""
    depth = np.array([-0.5, -2.0, -3.0, -5.0, -1e3, -1e30, -np.inf, 0.5, 9.5, 12.0], np.float32)
    src = torch.from_numpy(np.tile(depth, (2, 6, 2))[..., None])
    opts = NoiseOptions(depth="redwood", multiplier=0.0)
    want = noisy_depth(src, opts, seed=2)
    assert torch.isfinite(want).all()
    for isa in (0, 2, -1):
        before = native_isa(isa)
        try:
            got = noisy_depth(src, opts, seed=2, native=True)
        finally:
            native_isa(before)
        assert torch.equal(want, got), (isa, want, got)


@pytest.mark.parametrize("multiplier", [0.0, 0.2, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("normalized", [False, "clipped", True])
@pytest.mark.parametrize("shape", [(7, 21, 45), (3, 16, 64), (3, 10, 83)])
def test_native_redwood_is_the_kernel_value_for_value(multiplier, normalized, shape):
    """The C pass the Embree path takes (render/_embree_bridge.c: 16 or 8 pixels at a time with
    AVX-512 / AVX2, one at a time at the row ends, for shuffle offsets beyond one pixel and without
    them; each path pinned in turn) gives
    the Warp kernel's values bit for bit: the same draws, the same float32 arithmetic. Frames
    of odd widths (a scalar tail) and whole blocks, depth across the table's range, misses (0)
    and beyond 10 m, an env range, strided input (gathers, not row loads)."""
    gen = np.random.default_rng(int(multiplier * 10) + (normalized is True))
    n, h, w = shape
    depth = gen.uniform(0.0, 11.0, (n, h, w, 1)).astype(np.float32)
    depth[:, :, :3] = 0.0
    depth[:, 5:9] = np.linspace(0.3, 9.8, w, dtype=np.float32)[None, None, :, None]   # a smooth ramp
    # the raw frame in, whatever leaves (metres, clipped to 0.1-6 m, or 0-1 of 0.1-10 m)
    kw = {False: {}, "clipped": dict(min_depth=0.1, max_depth=6.0),
          True: dict(normalized=True, min_depth=0.1, max_depth=10.0)}[normalized]
    src = torch.from_numpy(depth)
    opts = NoiseOptions(depth="redwood", multiplier=multiplier)
    for counter in (0, 5):
        want = noisy_depth(src, opts, seed=4, counter=counter, **kw)
        for isa in (0, 2, -1):     # scalar, AVX2, the CPU's widest (AVX-512 where it has it)
            before = native_isa(isa)
            try:
                got = noisy_depth(src, opts, seed=4, counter=counter, native=True, **kw)
            finally:
                native_isa(before)
            assert torch.equal(want, got), (isa, (want != got).sum())
    part = torch.full_like(src, -1.0)
    noisy_depth(src, opts, seed=4, counter=5, lo=1, hi=n - 1, out=part, native=True, **kw)
    assert torch.equal(part[1:-1], got[1:-1]) and (part[0] == -1).all() and (part[-1] == -1).all()
    with pytest.raises(ValueError, match="envs 1:9 of 3"):
        noisy_depth(src[:3], opts, lo=1, hi=9, native=True, **kw)
    inplace = src.clone()                         # in place: each env read from a copy
    noisy_depth(inplace, opts, seed=4, counter=5, out=inplace, native=True, **kw)
    assert torch.equal(inplace, got)
    shared = src.clone()
    with pytest.raises(ValueError, match="native Redwood"):   # overlapping, not the same: refused
        noisy_depth(shared[:, 1:], opts, out=shared[:, :-1], native=True, **kw)
    wide = torch.zeros((n, h, 2 * w, 2))          # a view with strides of its own
    wide[:, :, ::2, :1] = src
    view = wide[:, :, ::2, :1]
    assert torch.equal(noisy_depth(view, opts, seed=4, counter=5, native=True, **kw), got)
