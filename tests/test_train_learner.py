"""The CPU learner (issue 32 item 3): the unrolled LSTM computes nn.LSTM's function (values and
gradients; rollout step and update sequence agree), the trainer never autocasts on CPU, the
AVX2 path runs, and bf16 (the measurement tools' --bf16, where oneDNN has bf16 kernels) acts as
fp32 within tolerance and deterministically in inference."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from bps_train.args import parse  # noqa: E402
from bps_train.models import Policy, cpu_bf16_supported, lstm_steps  # noqa: E402
from bps_train.train import Args, autocast_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_bf16 = pytest.mark.skipif(not cpu_bf16_supported(), reason="this CPU's oneDNN has no bf16 kernels")


def stepwise_reference(rnn, x, h, c, not_done):
    """nn.LSTM called one step at a time with the masked state (the trainer's former loop)."""
    h, c, outs = h[None], c[None], []
    for t in range(x.shape[0]):
        m = not_done[t].float()[None, :, None]
        o, (h, c) = rnn(x[t:t + 1], (h * m, c * m))
        outs.append(o[0])
    return torch.stack(outs), (h[0], c[0])


def test_lstm_steps_is_nn_lstm_step_by_step_values_and_gradients():
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(12, 8)
    x = torch.randn(6, 5, 12, requires_grad=True)
    h0, c0 = torch.randn(5, 8), torch.randn(5, 8)
    not_done = torch.rand(6, 5) > 0.3
    not_done[0, 0] = False  # an episode start at step 0 zeroes the carried state
    out, (h, c) = lstm_steps(rnn, x, h0, c0, not_done)
    ref, (rh, rc) = stepwise_reference(rnn, x, h0, c0, not_done)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h, rh, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c, rc, rtol=1e-5, atol=1e-6)
    w = torch.randn_like(out)
    grads = torch.autograd.grad((out * w).sum() + h.sum() + c.sum(), [x, *rnn.parameters()])
    ref_grads = torch.autograd.grad((ref * w).sum() + rh.sum() + rc.sum(), [x, *rnn.parameters()])
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    # a masked-out step forgets the state: the output equals a fresh start's
    fresh, _ = lstm_steps(rnn, x[:1, :1], torch.zeros(1, 8), torch.zeros(1, 8), torch.ones(1, 1, dtype=torch.bool))
    torch.testing.assert_close(out[0, 0], fresh[0, 0])


def test_policy_step_and_sequence_agree():
    """forward (rollout, one step) and evaluate_sequence (update) give the same logits and values."""
    torch.manual_seed(1)
    pol = Policy(1, hidden=16, width=4, resolution=(16, 16))
    t, n = 4, 3
    vis, goal = torch.rand(t, n, 16, 16, 1), torch.rand(t, n, 2)
    prev = torch.randint(-1, 4, (t, n))
    nd = torch.rand(t, n) > 0.25
    state = pol.initial_state(n)
    with torch.no_grad():
        seq_logits, seq_values = pol.evaluate_sequence(vis, goal, prev, state, nd)
        for i in range(t):
            logits, values, state = pol(vis[i], goal[i], prev[i], state, nd[i])
            torch.testing.assert_close(logits, seq_logits[i], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(values, seq_values[i], rtol=1e-5, atol=1e-6)


def test_trainer_never_autocasts_on_cpu():
    """CPU bf16 gave NaN gradients now and then (docs/PERFORMANCE.md, CPU learner): the trainer's
    autocast is off on CPU whatever --bf16 says, also where oneDNN has bf16 kernels."""
    for argv in ([], ["--bf16", "true"]):
        assert autocast_of(parse(Args, argv), "cpu") is contextlib.nullcontext


def test_avx2_cpu_falls_back_to_fp32():
    """Under ONEDNN_MAX_CPU_ISA=AVX2 (a CPU without AVX-512) oneDNN reports no bf16 kernels (the
    measurement tools' --bf16 then runs fp32), and a PPO update with the unrolled LSTM runs there
    (the AVX2 path is kept)."""
    code = (
        "import contextlib, torch\n"
        "from bps_train.args import parse\n"
        "from bps_train.models import Policy, cpu_bf16_supported\n"
        "from bps_train.ppo import Rollout, ppo_loss\n"
        "from bps_train.train import Args, autocast_of\n"
        "assert not cpu_bf16_supported()\n"
        "amp = autocast_of(parse(Args, ['--bf16', 'true']), 'cpu')\n"
        "assert amp is contextlib.nullcontext\n"
        "torch.manual_seed(0)\n"
        "pol = Policy(1, hidden=16, width=4, resolution=(16, 16))\n"
        "ro = Rollout.empty(4, 2, (16, 16, 1), torch.float32, 16, 'cpu')\n"
        "ro.visual.uniform_(); ro.not_done.fill_(True)\n"
        "loss, _ = ppo_loss(pol, ro, torch.arange(2), torch.randn(4, 2), torch.randn(4, 2), 0.2, 0.5, 0.01, amp)\n"
        "loss.backward()\n"
        "assert torch.isfinite(loss) and loss.dtype == torch.float32\n"
        "print('fp32 ok')\n")
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "fp32 ok" in r.stdout


def _rollout_batch(seed, n=16, res=32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, res, res, 1, generator=g), torch.rand(n, 2, generator=g) * 5,
            torch.randint(-1, 4, (n,), generator=g), torch.ones(n, dtype=torch.bool))


@needs_bf16
def test_bf16_policy_acts_as_fp32_within_tolerance_and_deterministically():
    torch.manual_seed(0)
    pol = Policy(1, hidden=64, width=8, resolution=(32, 32))
    with torch.no_grad():  # a policy with preferences (the init's actor is nearly uniform)
        pol.actor.weight.normal_(0, 3, generator=torch.Generator().manual_seed(5))
    vis, goal, prev, nd = _rollout_batch(0)
    state = pol.initial_state(16)
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731  (throughput --bf16)
    with torch.no_grad():
        ref_logits, ref_values, _ = pol(vis, goal, prev, state, nd)
        with bf16():
            logits, values, (h, c) = pol(vis, goal, prev, state, nd)
            logits2, values2, (h2, c2) = pol(vis, goal, prev, state, nd)
    assert logits.dtype == torch.bfloat16 and h.dtype == torch.float32  # the LSTM stays fp32
    probs, ref_probs = logits.float().softmax(-1), ref_logits.softmax(-1)
    assert (probs - ref_probs).abs().max() < 0.05
    assert (values.float() - ref_values).abs().max() < 0.05 * max(1.0, ref_values.abs().max().item())
    confident = ref_probs.max(-1).values > 0.6
    assert confident.sum() >= 4  # the test compares actions that mean something
    assert torch.equal(logits.argmax(-1)[confident], ref_logits.argmax(-1)[confident])
    # same inputs, same machine: bit-identical
    assert torch.equal(logits, logits2) and torch.equal(values, values2) and torch.equal(h, h2)
