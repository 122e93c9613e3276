"""The CPU learner (issue 32 item 3): the unrolled LSTM computes nn.LSTM's function (values and
gradients; rollout step and update sequence agree), the trainer autocasts to bf16 on the CPU only
where oneDNN has native bf16 kernels, the AVX2 path runs in fp32, and bf16 acts as fp32 within
tolerance and deterministically, in inference and in a PPO update's gradients."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys

import pytest

import torch  # noqa: E402  (a core dependency)

from bps_train.args import parse  # noqa: E402
from bps_train.models import Policy, cpu_bf16_supported, lstm_steps  # noqa: E402
from bps_train.train import Args, autocast_of  # noqa: E402
from learner_reference import (promoted_block_forward, reference_encoder, reference_se_weights,  # noqa: E402
                               stepwise_reference)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_bf16 = pytest.mark.skipif(not cpu_bf16_supported(), reason="this CPU's oneDNN has no bf16 kernels")


@pytest.fixture
def restore_torch_host():
    """A test that runs the trainer or sets torch's threads leaves both as it found them: torch's
    thread count restored, glibc's default malloc limits back (keep_freed_memory(False))."""
    from bps_train.learner_cpu import keep_freed_memory

    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)
        keep_freed_memory(False)


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


@needs_bf16
def test_blocks_write_their_bf16_conv_inputs_at_once_with_the_same_values_and_gradients(monkeypatch):
    """Under CPU bf16 autocast the blocks' bias adds write the convolutions' bf16 inputs in one
    pass (bps_train.cast_add): every block's output bit-identical to the promoted fp32 adds' (the
    code before), the gradients of the input and of every parameter equal to fp32 rounding (the
    bias gradients are summed in another order); without autocast, torch's adds as before."""
    import bps_train.cast_add as C
    from bps_train.models import SEResNet9

    torch.manual_seed(0)
    net = SEResNet9(1, 8, 32)
    net(torch.zeros(1, 1, 32, 32))
    with torch.no_grad():
        for blk in net.blocks:
            for name in ("bias1a", "bias1b", "bias2a", "bias2b"):
                getattr(blk, name).uniform_(-0.3, 0.3)
            blk.conv2.weight.normal_(0, 0.1)
    x0 = torch.rand(6, 8, 16, 16).contiguous(memory_format=torch.channels_last)
    w = torch.randn(6, 64, 2, 2, generator=torch.Generator().manual_seed(1))
    calls = []
    real = C._AddToBf16.apply
    monkeypatch.setattr(C._AddToBf16, "apply", lambda *a: calls.append(a[0].dtype) or real(*a))
    results = []
    for forward in (lambda b, x: b(x), promoted_block_forward):
        x = x0.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h, outs = x, []
            for blk in net.blocks:
                h = forward(blk, h)
                outs.append(h)
        grads = torch.autograd.grad((outs[-1].float() * w).sum(), [x, *net.blocks.parameters()])
        results.append((outs, grads))
    assert len(calls) == 2 * 4   # b1a and b2a of every block took the kernel (the first pass only)
    (new, new_g), (old, old_g) = results
    for a, b in zip(new, old):
        assert a.dtype == b.dtype and torch.equal(a, b)
    for a, b in zip(new_g, old_g):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * b.abs().max().item())
    calls.clear()
    x = x0.clone().requires_grad_(True)
    y = net.blocks(x)   # fp32: torch's adds, the same graph as before
    r = x0.clone().requires_grad_(True)
    ref = r
    for blk in net.blocks:
        ref = promoted_block_forward(blk, ref)
    assert not calls and torch.equal(y, ref)
    assert torch.equal(torch.autograd.grad(y.sum(), x)[0], torch.autograd.grad(ref.sum(), r)[0])


def test_add_to_bf16_is_the_promoted_sum_cast_bit_for_bit():
    """cast_add.add_to_bf16: float32 and bfloat16 inputs, contiguous and channels-last, with
    values at bf16 rounding ties, subnormals and zeros: torch's (x + b).to(bfloat16) bits, the
    layout kept, and torch's gradient of x; b's gradient the output gradient's sum."""
    from bps_train import cast_add
    from bps_train.cast_add import add_to_bf16, usable

    if cast_add._add is None:
        pytest.skip("bps_train._stem was not built (no C compiler at install)")
    g = torch.Generator().manual_seed(3)
    b = torch.tensor([0.3], requires_grad=True)
    for dt in (torch.float32, torch.bfloat16):
        for fmt in (torch.contiguous_format, torch.channels_last):
            x = (torch.randn(5, 6, 7, 3, generator=g) * 4).to(dt).contiguous(memory_format=fmt)
            flat = x.view(-1) if fmt == torch.contiguous_format else x.permute(0, 2, 3, 1).reshape(-1)
            if dt == torch.float32:   # exact ties of bf16 rounding once b is added, a subnormal, zeros
                flat[:4] = torch.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1e-40, 0.0]) - 0.3
            x = x.requires_grad_(True)
            assert usable(x, b)
            y = add_to_bf16(x, b)
            ref = (x + b).to(torch.bfloat16)
            assert y.dtype == torch.bfloat16 and torch.equal(y, ref) and y.stride() == ref.stride()
            go = torch.randn(y.shape, generator=g).to(torch.bfloat16)
            gx, gb = torch.autograd.grad(y, [x, b], go)
            rx, rb = torch.autograd.grad(ref, [x, b], go)
            assert gx.dtype == dt and torch.equal(gx, rx)
            torch.testing.assert_close(gb, rb)


@needs_bf16
def test_lstm_gemms_in_bf16_stay_near_fp32_and_keep_an_fp32_state():
    """Under the policy's autocast the LSTM's two GEMMs take bf16 operands (1.3-1.5x cheaper per
    frame on the CPU learner); the gates, state and output stay fp32 and within bf16 rounding of the
    fp32 LSTM, values and gradients, masks included."""
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(48, 32)
    x = torch.randn(8, 6, 48, requires_grad=True)
    h0, c0 = torch.randn(6, 32) * 0.5, torch.randn(6, 32) * 0.5
    not_done = torch.rand(8, 6) > 0.3
    ref, (rh, rc) = lstm_steps(rnn, x, h0, c0, not_done)
    out, (h, c) = lstm_steps(rnn, x, h0, c0, not_done, torch.bfloat16)
    assert out.dtype == h.dtype == c.dtype == torch.float32
    assert not torch.equal(out, ref)  # the bf16 GEMMs did run
    torch.testing.assert_close(out, ref, rtol=0, atol=0.03)
    torch.testing.assert_close(c, rc, rtol=0, atol=0.06)
    w = torch.randn_like(out)
    grads = torch.autograd.grad((out * w).sum() + h.sum(), [x, *rnn.parameters()])
    ref_grads = torch.autograd.grad((ref * w).sum() + rh.sum(), [x, *rnn.parameters()])
    for g, r in zip(grads, ref_grads):
        assert g.dtype == torch.float32
        assert (g - r).norm() <= 0.03 * r.norm()
    # a masked-out step forgets the state in bf16 too
    fresh, _ = lstm_steps(rnn, x[:1, :1], torch.zeros(1, 32), torch.zeros(1, 32), torch.ones(1, 1, dtype=torch.bool),
                          torch.bfloat16)
    first = lstm_steps(rnn, x[:1, :1], torch.randn(1, 32), torch.randn(1, 32), torch.zeros(1, 1, dtype=torch.bool),
                       torch.bfloat16)[0]
    torch.testing.assert_close(first, fresh, rtol=0, atol=0)


def test_policy_passes_autocasts_dtype_to_the_lstm_gemms(monkeypatch):
    """The policy's step and sequence give the LSTM autocast's dtype under autocast, fp32 without
    (the fp32 path, and so CPUs without bf16, is the code as before: bit-identical)."""
    import bps_train.models as M

    seen = []
    real = M.lstm_steps
    monkeypatch.setattr(M, "lstm_steps", lambda *a: seen.append(a[5]) or real(*a))
    torch.manual_seed(0)
    pol = Policy(1, hidden=32, width=8, resolution=(32, 32))
    vis, goal, prev, nd = _rollout_batch(0)
    state = pol.initial_state(16)
    with torch.no_grad():
        pol(vis, goal, prev, state, nd)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pol(vis, goal, prev, state, nd)
            pol.evaluate_sequence(vis[None], goal[None], prev[None], state, nd[None])
        pol.evaluate_sequence(vis[None], goal[None], prev[None], state, nd[None])
    assert seen == [torch.float32, torch.bfloat16, torch.bfloat16, torch.float32]


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


def test_trainer_autocasts_on_cpu_only_with_native_bf16():
    """--bf16 (default on) autocasts the CPU policy where oneDNN has native bf16 kernels (AVX-512
    BF16), fp32 elsewhere; --bf16 false is fp32 everywhere. (Until the fourth learner pass the CPU
    never autocast: the bf16 NaNs seen then are gone, test below; docs/PERFORMANCE.md.)"""
    for argv in ([], ["--bf16", "true"]):
        amp = autocast_of(parse(Args, argv), "cpu")
        assert (amp is contextlib.nullcontext) == (not cpu_bf16_supported())
        if cpu_bf16_supported():
            with amp():
                assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert autocast_of(parse(Args, ["--bf16", "false"]), "cpu") is contextlib.nullcontext


def _fill_freed_heap_with_nan():
    """Blocks of several sizes filled with NaN and freed: memory a kernel reads without writing
    it first then holds NaN, so an uninitialised read shows in its output."""
    for size in (1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22):
        for _ in range(6):
            block = torch.full((size,), float("nan"))
            del block


def _ppo_grads(width, hidden, res, seed, n, t, before_backward=lambda: None):
    """The PPO loss's gradients of a fresh policy (``seed``) on a random rollout of ``n`` envs x
    ``t`` steps, under the trainer's CPU autocast; ``before_backward()`` runs between the two."""
    from bps_train.ppo import gae, ppo_loss
    from bps_train.throughput import random_rollout

    torch.manual_seed(seed)
    pol = Policy(1, hidden=hidden, width=width, resolution=(res, res))
    ro = random_rollout(n, t, (res, res), hidden)
    adv, ret = gae(ro, 0.99, 0.95)
    loss, _ = ppo_loss(pol, ro, torch.arange(n), adv, ret, 0.2, 0.5, 0.01, autocast_of(parse(Args, []), "cpu"))
    before_backward()
    loss.backward()
    return {name: p.grad for name, p in pol.named_parameters() if p.grad is not None}


@needs_bf16
def test_bf16_backward_reads_no_uninitialised_memory(restore_torch_host):
    """oneDNN's bf16 backward of a stride-2 3x3 convolution on a 1x1 map reads uninitialised
    memory (models._conv3x3): with the heap pre-filled with NaN, the encoder at 8 and 16 px (its
    last blocks see 1x1 maps) got NaN weight gradients in 15 of 72 such updates before the
    centre-tap form; every gradient must be finite."""
    torch.set_num_threads(1)
    for width, res, seed in ((16, 8, 1), (16, 16, 0), (16, 8, 2), (8, 16, 1), (16, 16, 2)):
        grads = _ppo_grads(width, 64, res, seed, n=8, t=4, before_backward=_fill_freed_heap_with_nan)
        bad = [name for name, g in grads.items() if not torch.isfinite(g).all()]
        assert not bad, (width, res, seed, bad)


@needs_bf16
@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_update_gradients_are_finite_and_repeat(threads, restore_torch_host):
    """The NaN gradients CPU bf16 gave now and then in the first learner pass (in 3 of 5 runs of a
    file like this one) must not come back: one seed, the trainer's autocast, the PPO loss's
    gradients computed 6 times in one process (2 shapes), bit-identical and finite each time."""
    torch.set_num_threads(threads)

    def grads(width, hidden, res):
        return torch.cat([g.flatten() for g in _ppo_grads(width, hidden, res, 0, n=16, t=8).values()])

    for shape in ((4, 32, 16), (16, 64, 64)):
        first = grads(*shape)
        assert torch.isfinite(first).all() and first.abs().sum() > 0
        for _ in range(2):
            assert torch.equal(grads(*shape), first)


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
    run_with_isa_cap(code, "fp32 ok")


@pytest.mark.parametrize("isa", ["AVX512_CORE", "AVX512_CORE_VNNI"])
def test_avx512_without_bf16_instructions_stays_fp32(isa):
    """oneDNN reports bf16 kernels on any AVX-512 CPU (Skylake-SP to Ice Lake), where it emulates
    them (slower than fp32): the trainer autocasts only with native bf16 (AVX-512 BF16 or AMX)
    within oneDNN's ISA cap. ONEDNN_MAX_CPU_ISA stands in for such a CPU here."""
    code = ("import contextlib\n"
            "from bps_train.args import parse\n"
            "from bps_train.models import cpu_bf16_supported\n"
            "from bps_train.train import Args, autocast_of\n"
            "assert not cpu_bf16_supported()\n"
            "assert autocast_of(parse(Args, []), 'cpu') is contextlib.nullcontext\n"
            "print('fp32 ok')\n")
    run_with_isa_cap(code, "fp32 ok", isa)


def run_with_isa_cap(code: str, done: str, isa: str = "AVX2") -> None:
    """Run ``code`` in a fresh interpreter under ONEDNN_MAX_CPU_ISA=``isa``; it must print ``done``."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert done in r.stdout


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


# ---- issue 32 item 3, second pass: fewer passes over the activations, host memory, threads

def test_encoder_computes_the_fixup_se_resnet_values_and_gradients():
    """The rewritten forward (biases inside the convolutions, scale on conv2's weights, one
    x + b1a, addcmul, max-pool before relu) is the same function: values and gradients of every
    parameter agree with the paper's form to float rounding, with Fixup's scalars away from init."""
    from bps_train.models import SEResNet9

    torch.manual_seed(0)
    net = SEResNet9(1, 8, 32)
    net(torch.zeros(1, 1, 32, 32))  # the lazy fc
    with torch.no_grad():
        for blk in net.blocks:
            for name in ("bias1a", "bias1b", "bias2a", "bias2b"):
                getattr(blk, name).uniform_(-0.3, 0.3)
            blk.scale.uniform_(0.5, 1.5)
            blk.conv2.weight.normal_(0, 0.1)  # Fixup zero-initialises it: the test needs it live
    x = torch.rand(6, 32, 32, 1).permute(0, 3, 1, 2)
    x[:3, :, :12] = 0.25  # flat depth: ties in the max-pool windows
    want, got = reference_encoder(net, x), net(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    w = torch.randn_like(want)
    params = list(net.parameters())
    g_want = torch.autograd.grad((want * w).sum(), params)
    g_got = torch.autograd.grad((got * w).sum(), params)
    for p, a, b in zip(params, g_got, g_want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=lambda m: f"{tuple(p.shape)}: {m}")


def test_max_pool_then_relu_is_bit_identical_to_relu_then_max_pool():
    """The stem's swap is exact, values and gradients, ties included (relu is monotonic and the
    pool's padding is -inf): the stem's weights get the same gradient bit for bit."""
    F = torch.nn.functional
    torch.manual_seed(2)
    y = torch.randn(4, 3, 16, 16)
    y[:, :, :6] = 0.0  # ties at zero, as relu makes them
    y[:, :, 8:10] = 0.7  # ties above zero
    y1, y2 = y.clone().requires_grad_(), y.clone().requires_grad_()
    a, b = F.max_pool2d(F.relu(y1), 3, 2, 1), F.relu(F.max_pool2d(y2, 3, 2, 1))
    assert torch.equal(a, b)
    w = torch.randn_like(a)
    (a * w).sum().backward()
    (b * w).sum().backward()
    assert torch.equal(y1.grad, y2.grad)


def test_rewritten_encoder_runs_on_the_avx2_path():
    """The biased convolutions and the addcmul run under ONEDNN_MAX_CPU_ISA=AVX2 (forward and
    backward) and agree there with the paper's form."""
    code = (
        "import torch\n"
        "from learner_reference import reference_encoder\n"
        "from bps_train.models import SEResNet9\n"
        "torch.manual_seed(0)\n"
        "net = SEResNet9(1, 16, 32); net(torch.zeros(1, 1, 64, 64))\n"
        "x = torch.rand(8, 64, 64, 1).permute(0, 3, 1, 2)\n"
        "got, want = net(x), reference_encoder(net, x)\n"
        "torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)\n"
        "got.sum().backward()\n"
        "assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())\n"
        "print('avx2 ok')\n")
    run_with_isa_cap(code, "avx2 ok")


_KEPT_MEMORY_SCRIPT = """
import json, resource, threading, sys
import torch
from bps_train.learner_cpu import keep_freed_memory

def cycle():
    blocks = [torch.empty(12 << 20).fill_(1.0) for _ in range(6)]
    del blocks

def faults_of_cycle(k):  # the k-th from now: memalign's slack grows a fresh heap over up to four
    for _ in range(k - 1):
        cycle()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cycle()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

got = []
if not keep_freed_memory(False):
    print(json.dumps(None))
    sys.exit(0)
fresh = faults_of_cycle(3)
assert keep_freed_memory(True)
kept = faults_of_cycle(8)
t = threading.Thread(target=lambda: got.append(float(torch.ones(40 << 20)[-1])))
t.start()
t.join()
print(json.dumps([fresh, kept, got]))
"""


def test_kept_memory_is_reused_without_page_faults():
    """bps_train.learner_cpu.keep_freed_memory: an update-like cycle (6 blocks of 48 MB allocated, written,
    freed) repeated is served from the process's heap once it has grown (no page faults), where
    glibc's defaults map every block afresh each cycle (73K faults); blocks over a thread arena's
    64 MB still work from a thread. In a fresh process, whose heap grows over the first four
    cycles (73K, 73K, 25K, 25K, then 0 faults): in this one, how far earlier tests had grown the
    heap decided whether a third cycle still faulted. Assumes glibc's malloc with 4 KiB pages and
    no transparent huge pages for these blocks; it checks that mmap is off, not the trim threshold."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", _KEPT_MEMORY_SCRIPT], capture_output=True, text=True,
                         cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res is None:
        pytest.skip("no glibc mallopt here")
    fresh, kept, got = res
    assert fresh > 60_000 and kept < 2_000, (fresh, kept)
    assert got == [1.0]


def test_update_threads_and_the_thread_switch(monkeypatch):
    from bps_train.learner_cpu import threads, update_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert update_threads(0) == 4 and update_threads(3) == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun's ranks on this host share the cores
    assert update_threads(0) == 4                # ... when WORLD_SIZE says there are ranks
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert update_threads(0) == 2
    before = torch.get_num_threads()
    with threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


def test_update_on_more_threads_is_the_same_update(restore_torch_host):
    """The update's threads change only float rounding (oneDNN's reduction order): one update on
    1 and on 2 threads from one seed gives weights within 1e-6, each bit-identical on repeat."""
    from bps_train.lamb import Lamb
    from bps_train.throughput import ppo_update, random_rollout

    res = []
    for n in (1, 2, 1):
        torch.set_num_threads(n)
        torch.manual_seed(0)
        pol = Policy(1, hidden=32, width=8, resolution=(32, 32))
        opt = Lamb(pol.parameters(), lr=1e-3)
        torch.manual_seed(1)
        ppo_update(pol, opt, random_rollout(8, 4, (32, 32), 32))
        res.append(torch.cat([p.detach().flatten() for p in pol.parameters()]))
    assert torch.equal(res[0], res[2])
    torch.testing.assert_close(res[1], res[0], rtol=0, atol=1e-6)


def test_throughput_prints_every_figure_of_the_issue_in_one_run(manifest, capsys, restore_torch_host):
    """`python -m bps_train.throughput MANIFEST` measures sim-only, the update (its threads and
    one thread) and end to end in one run, and prints their ratios and the thread settings."""
    import json

    from bps_train import throughput

    best = throughput.main([str(manifest), "--num-envs", "4", "--steps", "3", "--resolution", "16",
                            "--width", "4", "--hidden", "16", "--repeats", "1", "--learn-threads", "2",
                            "--env-threads", "1", "--frozen-act", "1", "--bf16", "0"])   # frozen: fp32 only
    for k in ("sim", "infer", "collect_1_group", "collect_2_groups", "learn", "learn_1_thread", "end_to_end",
              "end_to_end_1_thread", "end_to_end_1_group", "infer_eager", "collect_2_groups_eager"):
        assert best[k] > 0, k
        # the phase's CPU time: cores busy (at most the process's threads) and CPU per frame
        assert 0 < best[k + "_cores"] < 8 and best[k + "_core_us"] > 0, k
    assert best["learn_over_sim"] == pytest.approx(best["learn"] / best["sim"])
    assert best["end_to_end_over_sim"] == pytest.approx(best["end_to_end"] / best["sim"])
    assert best["frozen_act_gain"] == pytest.approx(best["collect_2_groups"] / best["collect_2_groups_eager"])
    out = capsys.readouterr().out
    assert "rollout_torch_threads 1, update_torch_threads 2, env_threads 1" in out
    assert "rollout_act frozen" in out
    printed = json.loads(out.strip().splitlines()[-1])
    assert printed["update_torch_threads"] == 2 and "end_to_end_over_sim" in printed


def test_a_cpu_rank_with_one_core_runs_one_group_on_its_share_of_the_cores(monkeypatch):
    """Under torchrun on a CPU host each rank gets its share of the cores for the env and torch
    (``rank_threads``), and a rank left with one core runs one env group (``double_buffered``:
    the second group's policy would have no idle core); one rank keeps every core and two groups;
    ``--threads`` and CUDA are left as they are."""
    from bps_train.train import Args, double_buffered, host_share, rank_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    from bps_assets.errors import ConfigError

    cpu, a = torch.device("cpu"), Args()
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert host_share(cpu) == (4, 1) and rank_threads(a, cpu) == 0 and double_buffered(a, cpu)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")   # left in the environment of one process: not a rank
    assert host_share(cpu) == (4, 1) and double_buffered(a, cpu)
    monkeypatch.setenv("WORLD_SIZE", "x")
    with pytest.raises(ConfigError, match="WORLD_SIZE='x'"):
        host_share(cpu)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert host_share(cpu) == (2, 2) and rank_threads(a, cpu) == 2 and double_buffered(a, cpu)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert host_share(cpu) == (1, 4) and rank_threads(a, cpu) == 1 and not double_buffered(a, cpu)
    three = dataclasses.replace(a, threads=3)
    assert rank_threads(three, cpu) == 3 and not double_buffered(three, cpu)   # the cores decide, not --threads
    assert host_share("cuda:0") == (4, 1) and double_buffered(a, "cuda:0")
    assert not double_buffered(dataclasses.replace(a, double_buffer=False), cpu)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.delenv("WORLD_SIZE")
    assert rank_threads(a, cpu) == 0 and not double_buffered(a, cpu)   # one core, one rank: nothing to overlap on
    # the rule is --double-buffer auto (the default); true / false given decide, one core or not
    assert a.double_buffer is None
    assert double_buffered(dataclasses.replace(a, double_buffer=True), cpu)
    assert not double_buffered(dataclasses.replace(a, double_buffer=False), cpu)


def test_throughput_ranks_times_every_rank_at_once(manifest, capsys, restore_torch_host):
    """`throughput --ranks 2` runs the trainer as 2 gloo ranks on this host (each its share of the
    envs, cores and scenes) beside the one-process figures, and divides by the faster
    simulation-only layout."""
    from bps_train import throughput

    best = throughput.main([str(manifest), "--num-envs", "4", "--steps", "3", "--resolution", "16",
                            "--width", "4", "--hidden", "16", "--repeats", "1", "--ranks", "2", "--bf16", "0"])
    for k in ("ranks_sim", "ranks_sim_uniform", "ranks_collect", "ranks_learn", "ranks_end_to_end",
              "ranks_sim_replay", "sim_replay"):
        assert best[k] > 0 and 0 < best[k + "_cores"] < 8 and best[k + "_core_us"] > 0, k
    # the replays retraced the trainer's rollouts (same rewards every step): the same frames, no policy
    assert best["sim_replay_retraced"] == 1 and best["ranks_sim_replay_retraced"] == 1
    replay = max(best["sim_replay"], best["ranks_sim_replay"])
    assert best["ranks_end_to_end_over_sim_replay"] == pytest.approx(best["ranks_end_to_end"] / replay)
    assert best["end_to_end_over_sim_replay"] == pytest.approx(best["end_to_end"] / best["sim_replay"])
    cores = os.sched_getaffinity(0)
    assert best["ranks"] == 2 and best["ranks_threads_per_rank"] == max(1, len(cores) // 2)
    assert best["ranks_groups_per_rank"] == (1 if len(cores) // 2 == 1 else 2)
    sim = max(best["sim"], best["ranks_sim"])
    assert best["ranks_end_to_end_over_sim"] == pytest.approx(best["ranks_end_to_end"] / sim)
    assert best["ranks_sim_over_sim"] == pytest.approx(best["ranks_sim"] / best["sim"])
    assert '"ranks_end_to_end_over_sim"' in capsys.readouterr().out


def test_sim_replay_retraces_the_rollout_only_on_the_same_episodes(manifest, restore_torch_host):
    """``throughput.sim_replay`` replays a timed rollout's own actions (started by
    ``replay_start``, after other rollouts on the same env, in one group or two) on a fresh env:
    retraced (the same reward every step) when the env is the same seed's, not when its episodes
    differ."""
    import itertools

    import bps_runtime
    from bps_train import throughput
    from bps_train.ppo import Rollout
    from bps_train.train import collect_rollout, start_rollouts

    torch.manual_seed(0)
    policy = Policy(1, hidden=16, width=4, resolution=(16, 16))
    seeds = itertools.count(1)

    def make(seed=None, batch=4):
        return bps_runtime.make(str(manifest), split="train", num_envs=4, batch_size=batch, seed=seed,
                                resolution=(16, 16), episodes="sample", threads=1)

    for batch in (4, 2):   # the one-process trainer's two groups are replayed in one
        env = make(0, batch)
        ro = Rollout.empty(6, 4, (16, 16, 1), torch.float32, 16, "cpu")
        carry = start_rollouts(env, policy, torch.device("cpu"))
        for _ in range(2):   # the phases before the timed rollout
            collect_rollout(env, policy, ro, carry, "depth")
        collect_rollout(env, policy, ro, throughput.replay_start(env, policy, 0), "depth")   # the timed one
        env.close()
        (frames, wall, cpu), same = throughput.sim_replay(lambda: make(0), ro.actions, ro.rewards)
        assert same and frames == 24 and wall > 0 and cpu > 0, batch
        _, same = throughput.sim_replay(lambda: make(next(seeds)), ro.actions, ro.rewards)
        assert not same


@pytest.mark.parametrize("ranks", ["1", "3", "-2"])
def test_throughput_ranks_must_divide_the_envs(ranks, capsys):
    from bps_train import throughput

    with pytest.raises(SystemExit) as e:
        throughput.main(["nowhere.json", "--ranks", ranks, "--num-envs", "4"])
    assert e.value.code == 2 and f"--ranks {ranks}: expected 0 or >= 2 dividing --num-envs 4" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--learn-only"], ["nowhere.json"]])
def test_throughput_needs_one_repeat_at_least(argv, capsys):
    """`throughput --repeats 0` is an argparse error before any work (it ended in a KeyError)."""
    from bps_train import throughput

    with pytest.raises(SystemExit) as e:
        throughput.main([*argv, "--repeats", "0", "--num-envs", "4", "--steps", "2", "--resolution", "16",
                         "--width", "4", "--hidden", "16"])
    assert e.value.code == 2
    assert "--repeats 0: must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--act-threads", "--threads"])
def test_throughput_act_threads_keeps_its_old_name(flag, capsys, restore_torch_host):
    """`throughput --act-threads N` (the trainer's name) sets the rollout's torch threads;
    ``--threads``, its old name, still does the same."""
    from bps_train import throughput

    throughput.main(["--learn-only", flag, "2", "--num-envs", "4", "--steps", "2", "--resolution", "16",
                     "--width", "4", "--hidden", "16", "--repeats", "1", "--learn-threads", "1"])
    assert "rollout_torch_threads 2, update_torch_threads 1" in capsys.readouterr().out


def test_throughput_phases_use_sim_windows_cpu_clock(monkeypatch):
    """Every phase's CPU time is read on ``train.sim_window``'s clock (time.process_time), so the
    ``*_core_us`` figures compare with ``sim_core_us``."""
    import time

    from bps_train import throughput

    ticks = iter([10.0, 10.5])
    monkeypatch.setattr(time, "process_time", lambda: next(ticks))
    ph = throughput.Phases()
    ph.record("x", 100, lambda: None)
    assert ph.cpu["x"][0][1] == pytest.approx(1e6 * 0.5 / 100)


def test_throughput_sim_is_the_timed_steps_alone(manifest, monkeypatch, restore_torch_host):
    """`throughput`'s ``sim`` and ``sim_core_us`` are measure_sim_fps's own figure (frames over
    its timed window), not the whole call: a slow reset before the window changes nothing."""
    import time

    import bps_runtime
    from bps_train import throughput

    windows, real_make, real_window = [], bps_runtime.make, throughput.sim_window

    def make(*a, **kw):
        env = real_make(*a, **kw)
        reset = env.async_reset
        env.async_reset = lambda *x, **y: (time.sleep(0.3), reset(*x, **y))[1]
        return env

    def window(*a, **kw):
        windows.append(real_window(*a, **kw))
        return windows[-1]

    monkeypatch.setattr(bps_runtime, "make", make)
    monkeypatch.setattr(throughput, "sim_window", window)
    best = throughput.main([str(manifest), "--num-envs", "4", "--steps", "3", "--resolution", "16",
                            "--width", "4", "--hidden", "16", "--repeats", "1", "--env-threads", "1"])
    assert best["sim"] > 4 * 4 / 0.3   # 4 envs x (3 + 1) steps: the 0.3 s reset is not in it
    frames, seconds, cpu = windows[-1]
    assert frames == 4 * 4
    assert [w[0] for w in windows] == [4 * 3, 4 * 4]   # the warm-up runs the timed window's code
    assert best["sim"] == pytest.approx(frames / seconds, rel=1e-12)
    assert best["sim_core_us"] == pytest.approx(1e6 * cpu / frames, rel=1e-12)


def _threads_seen(manifest, tmp_path, monkeypatch, argv) -> list:
    """Train a tiny run with ``argv``; -> [(phase, torch's threads)] as collect / learn saw them
    (its callers use ``restore_torch_host``)."""
    from bps_train import train as T

    seen = []
    real_learn, real_collect = T.learn, T.collect_rollout

    def learn(*a, **kw):
        seen.append(("learn", torch.get_num_threads()))
        return real_learn(*a, **kw)

    def collect(*a, **kw):
        seen.append(("collect", torch.get_num_threads()))
        return real_collect(*a, **kw)

    monkeypatch.setattr(T, "learn", learn)
    monkeypatch.setattr(T, "collect_rollout", collect)
    T.run(["--dataset", str(manifest), "--out-dir", str(tmp_path / "run"), "--num-envs", "2",
           "--rollout-steps", "2", "--resolution", "16", "--width", "4", "--hidden", "16",
           "--sim-only-steps", "0", "--minibatches", "1", *argv])
    seen.append(("after", torch.get_num_threads()))
    return seen


def test_trainer_runs_the_update_on_learn_threads(manifest, tmp_path, monkeypatch, restore_torch_host):
    """--learn-threads sets torch's threads for the update only and --act-threads for the
    rollout's policy (0: 1 on the CPU, whatever --threads is); --threads stays torch's count
    outside the two."""
    seen = _threads_seen(manifest, tmp_path / "a", monkeypatch,
                         ["--total-steps", "8", "--threads", "1", "--learn-threads", "2"])
    assert seen[:-1] == [("collect", 1), ("learn", 2)] * 2
    seen = _threads_seen(manifest, tmp_path / "b", monkeypatch,
                         ["--total-steps", "8", "--threads", "2", "--learn-threads", "1"])
    assert seen == [("collect", 1), ("learn", 1)] * 2 + [("after", 2)]
    seen = _threads_seen(manifest, tmp_path / "c", monkeypatch,
                         ["--total-steps", "8", "--threads", "2", "--learn-threads", "1", "--act-threads", "2"])
    assert seen == [("collect", 2), ("learn", 1)] * 2 + [("after", 2)]


def _act_inputs(n, res, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, res, res, 1, generator=g), torch.rand(n, 2, generator=g),
            torch.randint(-1, 4, (n,), generator=g), (torch.randn(1, n, 32, generator=g), torch.randn(1, n, 32, generator=g)),
            torch.rand(n, generator=g) > 0.2)


def test_frozen_act_is_the_eager_policy_to_float_rounding():
    """The rollout's frozen TorchScript act path (bps_train.frozen_act) gives the eager policy's
    logits, values and next state to float rounding, and with the same RNG the same actions and
    log-probabilities: on the default path and on the AVX2 path alike (scripts/test.sh reruns
    this file under ONEDNN_MAX_CPU_ISA=AVX2)."""
    from bps_train.frozen_act import FrozenAct

    torch.manual_seed(0)
    pol = Policy(1, hidden=32, width=8, resolution=(32, 32))
    act = FrozenAct(pol)
    for seed in (1, 2):
        x = _act_inputs(16, 32, seed)
        with torch.no_grad():
            want = pol(*x)
        got = act(*x)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)
        for g, w in zip(got[2], want[2]):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        picks = []
        for logits in (want[0], got[0]):
            torch.manual_seed(7)
            d = torch.distributions.Categorical(logits=logits, validate_args=False)
            a = d.sample()
            picks.append((a, d.log_prob(a)))
        assert torch.equal(picks[0][0], picks[1][0])
        torch.testing.assert_close(picks[1][1], picks[0][1], rtol=1e-5, atol=1e-6)
    assert act.freezes == 1   # unchanged weights: frozen once


def test_frozen_act_refreezes_after_every_weight_change():
    """An optimizer step or a checkpoint load changes the weights in place: the next call acts with
    the new weights (never stale ones), re-freezing once per change, not once per call."""
    from bps_train.frozen_act import FrozenAct
    from bps_train.lamb import Lamb
    from bps_train.throughput import ppo_update, random_rollout

    torch.manual_seed(0)
    pol = Policy(1, hidden=32, width=8, resolution=(32, 32))
    act = FrozenAct(pol)
    x = _act_inputs(8, 32, 3)
    before = act(*x)[0]
    torch.manual_seed(1)
    ppo_update(pol, Lamb(pol.parameters(), lr=1e-2), random_rollout(8, 4, (32, 32), 32))
    with torch.no_grad():
        want = pol(*x)[0]
    assert not torch.allclose(want, before, rtol=0, atol=1e-6)   # the update moved the policy
    torch.testing.assert_close(act(*x)[0], want, rtol=1e-5, atol=1e-6)
    act(*x)
    assert act.freezes == 2
    other = Policy(1, hidden=32, width=8, resolution=(32, 32))
    pol.load_state_dict(other.state_dict())   # a restore copies into the same tensors
    with torch.no_grad():
        torch.testing.assert_close(act(*x)[0], other(*x)[0], rtol=1e-5, atol=1e-6)
    assert act.freezes == 3
    assert set(pol.state_dict()) == set(other.state_dict())   # nothing of the copy in the policy


def test_trainer_with_the_frozen_act_trains_as_with_the_eager_policy(manifest, tmp_path, restore_torch_host):
    """bps-train's rollouts act through the frozen copy with --frozen-act, eagerly by default.
    Same seed: the same actions (float rounding cannot flip them here), so the checkpoints'
    weights agree to rounding, with the same keys (the frozen copy is never saved)."""
    from bps_train import train as T

    weights = []
    for flag in (["--frozen-act"], []):
        out = tmp_path / f"run{len(weights)}"
        T.run(["--dataset", str(manifest), "--out-dir", str(out), "--num-envs", "4", "--rollout-steps", "4",
               "--total-steps", "32", "--resolution", "16", "--width", "4", "--hidden", "16", "--threads", "1",
               "--sim-only-steps", "0", "--bf16", "false", *flag])   # the frozen copy acts in fp32 only
        weights.append(torch.load(out / "checkpoint.pt", weights_only=False)["policy"])
    assert set(weights[0]) == set(weights[1])
    for k in weights[0]:
        torch.testing.assert_close(weights[0][k], weights[1][k], rtol=1e-4, atol=1e-5)


def test_squeeze_excite_gate_is_the_mean_form_bit_for_bit():
    """The SE gate's spatial mean as sum / (H * W) (a pass less in backward) gives the bits of
    ``x.mean((2, 3))``: values and every gradient, on power-of-two and other sizes."""
    from bps_train.models import SqueezeExcite

    torch.manual_seed(0)
    se = SqueezeExcite(16)
    for hw in (16, 12, 3):
        x = torch.randn(5, 16, hw, hw, requires_grad=True)
        mean_form = reference_se_weights(se, x)
        got = se.weights(x)
        assert torch.equal(got, mean_form)
        w = torch.randn_like(got)
        params = [x, *se.parameters()]
        for a, b in zip(torch.autograd.grad((got * w).sum(), params), torch.autograd.grad((mean_form * w).sum(), params)):
            assert torch.equal(a, b)


def test_sample_actions_is_categoricals_draw_bit_for_bit():
    """The rollout's sampler (ppo.sample_actions) draws what Categorical(logits).sample() draws
    from the same generator state, with the same log-probabilities, bit for bit."""
    from bps_train.ppo import sample_actions

    g = torch.Generator().manual_seed(3)
    for n, k in ((64, 4), (7, 6)):
        logits = torch.randn(n, k, generator=g) * 3
        logits[0] = torch.tensor([20.0] + [-20.0] * (k - 1))   # a confident row
        torch.manual_seed(11)
        d = torch.distributions.Categorical(logits=logits, validate_args=False)
        want = d.sample()
        want_logp, want_next = d.log_prob(want), torch.rand(3)
        torch.manual_seed(11)
        got, logp = sample_actions(logits)
        assert torch.equal(got, want) and torch.equal(logp, want_logp)
        assert torch.equal(torch.rand(3), want_next)   # the generator advanced as much


@pytest.mark.parametrize("flags, want", [([], 1), (["--act-threads", "2"], 2)])
def test_rollout_acts_on_one_torch_thread_on_the_cpu(manifest, tmp_path, monkeypatch, flags, want, restore_torch_host):
    """On the CPU the rollout's policy acts on one torch thread by default (the render threads
    share the cores: 2 threads ran collection 0.62-0.70x), whatever --threads gives the env and
    the update; --act-threads sets it."""
    seen = _threads_seen(manifest, tmp_path, monkeypatch, ["--total-steps", "4", "--threads", "2", *flags])
    assert seen == [("collect", want), ("learn", 2), ("after", 2)]   # --threads outside the rollout
