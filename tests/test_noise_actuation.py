"""PyRobot actuation noise (bps_runtime.noise.actuation) against the model's parameters: over
10,000 noisy forward moves and turns, the mean and covariance of the displacement (along,
across) and of the heading change match the truncated Gaussians habitat-sim draws from
(scipy's truncnorm moments) within 3 standard errors; repeatable per seed, distinct per env."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import truncnorm

from bps_runtime.warp_init import init_warp

wp = init_warp()

from bps_runtime.noise import rng  # noqa: E402
from bps_runtime.noise.actuation import actuation_model, motion_query  # noqa: E402
from bps_runtime.noise.options import ACTUATION_KINDS, NoiseOptions, actuation_params  # noqa: E402

N = 10_000
STEP, TURN = 0.25, math.radians(10.0)


def motions(options: NoiseOptions, action: int, seed: int = 0, counter: int = 0, n: int = N) -> np.ndarray:
    out = wp.zeros(n, dtype=wp.vec3)
    keys = torch.from_numpy(rng.env_keys(seed, n))
    cnt = torch.full((n,), counter, dtype=torch.int32)
    acts = torch.full((n,), action, dtype=torch.int32)
    wp.launch(motion_query, dim=n, inputs=[actuation_model(options), wp.from_torch(keys), wp.from_torch(cnt),
                                           wp.from_torch(acts), STEP, TURN, out])
    return out.numpy().astype(np.float64)


def truncated_moments(mean: float, var: float, lower: float | None) -> tuple[float, float, float]:
    """(mean, variance, 4th central moment) of N(mean, var) truncated to +-3 sd and >= lower."""
    sd = math.sqrt(var)
    if sd == 0.0:
        return mean, 0.0, 0.0
    a = -3.0 if lower is None else max(-3.0, (lower - mean) / sd)
    dist = truncnorm(a, 3.0, loc=mean, scale=sd)
    m, v = float(dist.mean()), float(dist.var())
    m4 = float(dist.expect(lambda x: (x - m) ** 4))
    return m, v, m4


def expected(kind: str, action: int, mult: float):
    """Per component (along, across, yaw change): (mean, variance, 4th central moment)."""
    move, turn = actuation_params(kind)
    if action == 1:
        (tm, tv, rm, rv), base = move, (STEP, 0.0, 0.0)
        lowers = (-0.95 * STEP, None, None)
    else:
        (tm, tv, rm, rv), base = turn, (0.0, 0.0, TURN)
        lowers = (None, None, -0.95 * TURN)
    out = []
    for k, (mu, var) in enumerate(((tm[0], tv[0]), (tm[1], tv[1]), (rm, rv))):
        m, v, m4 = truncated_moments(mu, var, lowers[k])
        out.append((base[k] + mult * m, mult**2 * v, mult**4 * m4))
    if action == 3:       # a right turn: the yaw change is minus the left one's
        m, v, m4 = out[2]
        out[2] = (-m, v, m4)
    return out


CASES = [(k, a, m) for k in ACTUATION_KINDS[1:] for a in (1, 2, 3) for m in (1.0,)] + \
        [("locobot-proportional", a, 0.5) for a in (1, 2, 3)]


@pytest.mark.parametrize("kind,action,mult", CASES)
def test_motion_mean_and_covariance_match_the_model(kind, action, mult):
    x = motions(NoiseOptions(actuation=kind, multiplier=mult), action, seed=ACTUATION_KINDS.index(kind) * 10 + action)
    exp = expected(kind, action, mult)
    mean, cov = x.mean(axis=0), np.cov(x, rowvar=False)
    for k, (m, v, m4) in enumerate(exp):
        where = f"{kind} action {action} component {k}: mean {mean[k]:.5f} / {m:.5f}, var {cov[k, k]:.3g} / {v:.3g}"
        assert abs(mean[k] - m) <= 3 * math.sqrt(v / N) + 1e-7, where
        assert abs(cov[k, k] - v) <= 3 * math.sqrt(max(m4 - v * v, 0.0) / N) + 1e-9, where
    for i in range(3):       # the three draws are independent: no covariance
        for j in range(i + 1, 3):
            lim = 3 * math.sqrt(exp[i][1] * exp[j][1] / N) + 1e-12
            assert abs(cov[i, j]) <= lim, f"{kind} action {action} cov[{i},{j}] {cov[i, j]:.3g} > {lim:.3g}"


def test_no_noise_is_the_exact_motion_and_other_actions_stay():
    x = motions(NoiseOptions(), 1, n=16)
    assert np.allclose(x, [[STEP, 0.0, 0.0]] * 16, atol=0) and np.float32(x[0, 0]) == np.float32(STEP)
    y = motions(NoiseOptions(), 3, n=4)
    assert np.array_equal(y[:, 2], np.full(4, -np.float32(TURN), np.float64))
    for a in (0, 4, 5):     # STOP, LOOK_UP / LOOK_DOWN: no motion, noise or not
        assert (motions(NoiseOptions(actuation="locobot-ilqr"), a, n=8) == 0).all()


def test_truncation_keeps_motion_forward():
    """The along draw of a move is at least -0.95 x the step (habitat's truncation); a turn
    never reverses."""
    opts = NoiseOptions(actuation="locobot-lite-movebase", multiplier=1.0)
    assert (motions(opts, 1)[:, 0] >= STEP * 0.05 - 1e-6).all()
    assert (motions(opts, 2)[:, 2] > 0).all() and (motions(opts, 3)[:, 2] < 0).all()


def test_actuation_noise_repeats_per_seed_and_differs_between_envs():
    opts = NoiseOptions(actuation="locobot-ilqr")
    a, b = motions(opts, 1, seed=4, counter=9, n=64), motions(opts, 1, seed=4, counter=9, n=64)
    assert np.array_equal(a, b)
    assert len(np.unique(a[:, 0])) > 60          # 64 envs, 64 different draws
    assert not np.array_equal(a, motions(opts, 1, seed=4, counter=10, n=64))
    assert not np.array_equal(a, motions(opts, 1, seed=5, counter=9, n=64))
