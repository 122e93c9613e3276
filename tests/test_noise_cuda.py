"""Noise on Warp's CUDA device against the CPU paths (issue 33: CPU and CUDA give the same
statistics): the Redwood error per 0.5 m bin on flat walls, Gaussian RGB per grey level and
PyRobot actuation (mean and covariance over 10,000 moves and turns) agree with the CPU's (the
Warp kernel and the Embree path's C pass), and, the draws being the same counter-based
streams, nearly every value is the CPU's own. Skipped without CUDA (benchmarks/gpu_checks.sh
runs it on a lent GPU machine)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bps_runtime.warp_init import init_warp

wp = init_warp()

from bps_runtime.noise import rng  # noqa: E402
from bps_runtime.noise.actuation import actuation_model, motion_query  # noqa: E402
from bps_runtime.noise.options import NoiseOptions  # noqa: E402
from bps_runtime.noise.sensors import SensorNoise  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or wp.get_cuda_device_count() == 0,
                                reason="no CUDA device (benchmarks/gpu_checks.sh tests runs this on a GPU machine)")

H, W = 48, 64


def _noisy(frames: torch.Tensor, options: NoiseOptions, device: str, native: bool = False, counter: int = 0):
    n = frames.shape[0]
    keys = torch.from_numpy(rng.env_keys(5, n)).to(device)
    cnt = torch.full((n,), counter, dtype=torch.int32, device=device)
    src = frames.to(device)
    out = torch.zeros_like(src)
    noise = SensorNoise(options, device, native=native)
    if frames.dtype == torch.uint8:
        noise.launch(None, None, src, out, keys, cnt)
    else:
        noise.launch(src, out, None, None, keys, cnt)
    if device != "cpu":
        torch.cuda.synchronize()
    return out.cpu()


def test_redwood_on_cuda_has_the_cpu_statistics():
    walls = np.arange(0.5, 9.0, 0.125, dtype=np.float32)          # 4 walls per 0.5 m bin
    frames = torch.from_numpy(walls[:, None, None, None] * np.ones((1, H, W, 1), np.float32))
    opts = NoiseOptions(depth="redwood")
    runs = {name: torch.stack([_noisy(frames, opts, dev, native, c) for c in range(4)], 1).numpy()
            for name, dev, native in (("cuda", "cuda", False), ("warp", "cpu", False), ("native", "cpu", True))}
    same = (runs["cuda"] == runs["warp"]).mean()
    assert same > 0.99, same            # the same draws; float contraction may move a rare rounding
    assert np.array_equal(runs["warp"], runs["native"])
    for b in range(0, len(walls), 4):
        gt = walls[b:b + 4, None, None, None, None]
        stats = {}
        for name, x in runs.items():
            sel = x[b:b + 4]
            zero = sel == 0
            err = (sel - gt)[~zero]
            stats[name] = (err.mean(), err.std(), zero.mean())
        (m0, s0, z0), (m1, s1, z1) = stats["cuda"], stats["warp"]
        where = f"{walls[b]:.1f} m: cuda {stats['cuda']} cpu {stats['warp']}"
        assert abs(m0 - m1) <= 0.05 * max(abs(m1), s1) and abs(s0 - s1) <= 0.05 * s1, where
        assert abs(z0 - z1) <= 0.05 * max(z1, 0.01), where


def test_gaussian_rgb_on_cuda_has_the_cpu_statistics():
    levels = np.arange(0, 256, 15, dtype=np.uint8)
    img = torch.from_numpy(np.broadcast_to(levels[:, None, None, None], (len(levels), 32, 32, 3)).copy())
    opts = NoiseOptions(rgb="gaussian", rgb_intensity=0.1)
    gpu, cpu = (_noisy(img, opts, d).numpy().astype(np.float64) for d in ("cuda", "cpu"))
    assert (gpu == cpu).mean() > 0.99
    for k, v in enumerate(levels):
        a, b = gpu[k] - v, cpu[k] - v
        assert abs(a.mean() - b.mean()) <= 0.05 * max(abs(b.mean()), b.std()) + 1e-9, (v, a.mean(), b.mean())
        assert abs(a.std() - b.std()) <= 0.05 * b.std() + 1e-9, (v, a.std(), b.std())


@pytest.mark.parametrize("action", [1, 2, 3])
def test_actuation_on_cuda_has_the_cpu_statistics(action):
    n, opts = 10_000, NoiseOptions(actuation="locobot-proportional", multiplier=0.5)
    runs = []
    for dev in ("cuda:0", "cpu"):
        tdev = "cuda" if dev != "cpu" else "cpu"
        out = wp.zeros(n, dtype=wp.vec3, device=dev)
        keys = torch.from_numpy(rng.env_keys(2, n)).to(tdev)
        cnt = torch.full((n,), 3, dtype=torch.int32, device=tdev)
        acts = torch.full((n,), action, dtype=torch.int32, device=tdev)
        wp.launch(motion_query, dim=n, inputs=[actuation_model(opts), wp.from_torch(keys), wp.from_torch(cnt),
                                               wp.from_torch(acts), 0.25, math.radians(30.0), out], device=dev)
        runs.append(out.numpy().astype(np.float64))
    gpu, cpu = runs
    assert np.isclose(gpu, cpu, rtol=1e-5, atol=1e-7).all(axis=1).mean() > 0.99
    mg, mc = gpu.mean(0), cpu.mean(0)
    cg, cc = np.cov(gpu, rowvar=False), np.cov(cpu, rowvar=False)
    se = np.sqrt(np.diag(cc) / n)
    assert (np.abs(mg - mc) <= 3 * se + 1e-9).all(), (mg, mc)
    assert np.allclose(cg, cc, rtol=0.05, atol=3 * np.sqrt(np.outer(np.diag(cc), np.diag(cc)) / n).max())
