"""The fused stem (bps_train/stem.py, _stem.c) against torch's own conv + max-pool + relu: values,
weight and bias gradients, the pool's ties and NaNs, the layout it returns, the frames split over
threads, and the cases it leaves to torch (an input that needs a gradient, tracing)."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_reference import reference_encoder, torch_stem  # noqa: E402

from bps_train import stem  # noqa: E402
from bps_train.models import SEResNet9  # noqa: E402

needs_kernel = pytest.mark.skipif(not stem.available(),
                                  reason="bps_train/_stem.c not built (no C compiler) or no AVX-512 on this CPU")


def grads(fn, x, conv, g):
    out = fn(x, conv)
    dw, db = torch.autograd.grad((out * g).sum(), [conv.weight, conv.bias])
    return out, dw, db


def test_kernel_is_built_where_a_compiler_is():
    """The test install (scripts/setup_venv.sh) compiles the kernel; without it every test below
    would only check the fallback."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler on this machine")
    assert stem._forward is not None and stem._backward is not None and stem._wide is not None


@needs_kernel
@pytest.mark.parametrize("n,h,w,cin,cout", [(6, 64, 64, 1, 16), (5, 17, 23, 3, 8), (3, 2, 3, 1, 4),
                                            (4, 32, 30, 4, 32), (2, 9, 9, 2, 20)])
def test_values_and_gradients_match_torch(n, h, w, cin, cout):
    torch.manual_seed(n * 100 + h)
    conv = torch.nn.Conv2d(cin, cout, 3, 2, 1)
    x = torch.rand(n, h, w, cin).permute(0, 3, 1, 2)   # an observation batch [N, H, W, C] as NCHW
    assert stem.fusable(x, conv)
    ref, dw_ref, db_ref = grads(torch_stem, x, conv, g := torch.randn(n, cout, (h + 3) // 4, (w + 3) // 4))
    got, dw, db = grads(stem.stem_pool_relu, x, conv, g)
    assert got.shape == ref.shape
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    # sums over N x H x W terms in float32 (torch) and float64 (the kernel): tolerances scale
    # with the largest gradient
    torch.testing.assert_close(dw, dw_ref, rtol=1e-4, atol=1e-5 * float(dw_ref.abs().max()))
    torch.testing.assert_close(db, db_ref, rtol=1e-4, atol=1e-5 * float(db_ref.abs().max()))
    assert (got == 0).sum() == (ref == 0).sum()   # the same outputs relu zeroed


@needs_kernel
def test_an_empty_batch_gives_empty_output_and_zero_gradients():
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1)
    x = torch.rand(0, 64, 64, 1).permute(0, 3, 1, 2)
    out = stem.stem_pool_relu(x, conv)
    assert out.shape == (0, 16, 16, 16)
    out.sum().backward()
    assert torch.equal(conv.weight.grad, torch.zeros_like(conv.weight))


@needs_kernel
@pytest.mark.parametrize("cout", [16, 20])   # the AVX-512 pool and the portable one
def test_a_forward_without_backward_writes_no_window_positions(cout, monkeypatch):
    """Under no_grad (the rollout acting) the kernel gets no position buffer (NULL) and the
    output is bit for bit the one a forward with gradients gives."""
    torch.manual_seed(cout)
    conv = torch.nn.Conv2d(1, cout, 3, 2, 1)
    x = torch.rand(5, 64, 64, 1).permute(0, 3, 1, 2)
    seen = []
    kernel = stem._forward
    monkeypatch.setattr(stem, "_forward", lambda *a: seen.append(a[-1]) or kernel(*a))
    with torch.no_grad():
        plain = stem.stem_pool_relu(x, conv)
    assert seen == [None]
    assert torch.equal(plain, stem.stem_pool_relu(x, conv).detach())
    assert seen[1] is not None
    conv.requires_grad_(False)   # parameters frozen: no backward either
    stem.stem_pool_relu(x, conv)
    assert seen[2] is None


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")   # torch's forward AD
def test_forward_mode_tangents_take_torchs_ops():
    """The kernel has no jvp: a weight carrying a forward-mode tangent (frozen parameters, so no
    backward follows) gets torch's ops and the tangent they give, not a silently dropped one."""
    import torch.autograd.forward_ad as fwad

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1).requires_grad_(False)
    x = torch.rand(3, 64, 64, 1).permute(0, 3, 1, 2)
    dual = torch.nn.Conv2d(1, 16, 3, 2, 1).requires_grad_(False)
    tangent = torch.randn_like(conv.weight)
    with fwad.dual_level():
        del dual.weight
        dual.weight, dual.bias = fwad.make_dual(conv.weight, tangent), conv.bias
        assert not stem.fusable(x, dual)
        got = fwad.unpack_dual(stem.stem_pool_relu(x, dual)).tangent
        ref = fwad.unpack_dual(torch_stem(x, dual)).tangent
    assert got is not None and torch.equal(got, ref)


@needs_kernel
def test_returns_channels_last_like_torch():
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1)
    x = torch.rand(2, 64, 64, 1).permute(0, 3, 1, 2)
    got, ref = stem.stem_pool_relu(x, conv), torch_stem(x, conv)
    assert got.stride() == ref.stride() and got.is_contiguous(memory_format=torch.channels_last)


@needs_kernel
def test_ties_take_torchs_window_position():
    """Flat depth (walls at one distance, holes at 0) makes equal conv outputs inside a pool
    window; the gradient must go to the position torch's pool picks (the first maximum, row
    by row). Integer inputs and weights make both sides' sums exact, so the ties are real."""
    torch.manual_seed(3)
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1)
    with torch.no_grad():
        conv.weight.copy_(torch.randint(-3, 4, conv.weight.shape).float())
        conv.bias.copy_(torch.randint(-2, 3, conv.bias.shape).float())
    x = torch.zeros(4, 32, 32, 1)
    x[:, :, 16:] = 2.0
    x[1] = 5.0
    x[2, ::3, ::5] = 1.0
    x[3] = torch.randint(0, 2, (32, 32, 1)).float()
    x = x.permute(0, 3, 1, 2)
    g = torch.randn(4, 16, 8, 8)
    ref, dw_ref, db_ref = grads(torch_stem, x, conv, g)
    got, dw, db = grads(stem.stem_pool_relu, x, conv, g)
    assert torch.equal(got, ref)
    torch.testing.assert_close(dw, dw_ref, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(db, db_ref, rtol=1e-6, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("cout", [8, 16])
def test_nan_and_inf_frames_get_torchs_gradients(cout):
    """A frame with a NaN or an infinity: torch's dense backward makes 0 x inf into NaN weight
    gradients (so a NaN guard sees a corrupt observation); the kernel notices such frames and the
    call takes torch's ops, the same values and the same non-finite gradient entries."""
    torch.manual_seed(4)
    conv = torch.nn.Conv2d(1, cout, 3, 2, 1)
    x = torch.rand(2, 16, 16, 1)
    x[0, 5, 7] = float("nan")
    x[1, 0, 0] = float("inf")
    x = x.permute(0, 3, 1, 2)
    g = torch.randn(2, cout, 4, 4)
    ref, dw_ref, db_ref = grads(torch_stem, x, conv, g)
    got, dw, db = grads(stem.stem_pool_relu, x, conv, g)
    assert torch.isnan(ref).any() and not torch.isfinite(dw_ref).all()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert torch.equal(torch.isfinite(dw), torch.isfinite(dw_ref))
    torch.testing.assert_close(db, db_ref, rtol=1e-4, atol=1e-5, equal_nan=True)


@needs_kernel
@pytest.mark.parametrize("cout", [8, 16])
def test_nan_and_inf_weights_propagate_as_in_torch(cout):
    """Finite frames, non-finite weights (the kernel's own path): a NaN bias makes its channel NaN,
    which relu keeps and whose gradient it passes; an infinite centre tap gives inf, and NaN
    (0 x inf) on zero depth. (Not an infinite border tap: how it meets the zero padding differs
    between oneDNN's AVX2 and AVX-512 kernels.)"""
    torch.manual_seed(5)
    conv = torch.nn.Conv2d(1, cout, 3, 2, 1)
    with torch.no_grad():
        conv.bias[1] = float("nan")
        conv.weight[2, 0, 1, 1] = float("inf")
        conv.weight[3, 0, 1, 1] = -float("inf")
    x = torch.rand(2, 16, 16, 1)
    x[0, :4] = 0.0
    x = x.permute(0, 3, 1, 2)
    g = torch.randn(2, cout, 4, 4)
    ref, dw_ref, db_ref = grads(torch_stem, x, conv, g)
    got, dw, db = grads(stem.stem_pool_relu, x, conv, g)
    assert torch.isnan(ref).any() and torch.isinf(ref).any()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert torch.equal(torch.isfinite(db), torch.isfinite(db_ref))
    fin = torch.isfinite(db_ref)
    torch.testing.assert_close(db[fin], db_ref[fin], rtol=1e-4, atol=1e-5)


@needs_kernel
def test_frames_split_over_threads_give_the_same_result():
    torch.manual_seed(5)
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1)
    x = torch.rand(70, 64, 64, 1).permute(0, 3, 1, 2)
    g = torch.randn(70, 16, 16, 16)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = grads(stem.stem_pool_relu, x, conv, g)
        torch.set_num_threads(3)
        assert len(stem.frame_parts(70)) == 3
        three = grads(stem.stem_pool_relu, x, conv, g)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one[0], three[0])   # each frame is computed alone
    for a, b in zip(one[1:], three[1:]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)   # float64 sums, added in another order


def test_input_that_needs_a_gradient_takes_torchs_ops():
    conv = torch.nn.Conv2d(1, 8, 3, 2, 1)
    x = torch.rand(2, 1, 16, 16, requires_grad=True)
    assert not stem.fusable(x, conv)
    out = stem.stem_pool_relu(x, conv)
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_unsupported_convolutions_take_torchs_ops():
    x = torch.rand(2, 1, 16, 16)
    for conv in (torch.nn.Conv2d(1, 8, 3, 1, 1), torch.nn.Conv2d(1, 8, 3, 2, 1, bias=False),
                 torch.nn.Conv2d(5, 8, 3, 2, 1), torch.nn.Conv2d(1, 8, 5, 2, 2),
                 torch.nn.Conv2d(1, 16, 3, 2, 1, padding_mode="reflect"), torch.nn.ConvTranspose2d(1, 16, 3, 2, 1)):
        xc = torch.rand(2, conv.in_channels, 16, 16)
        assert not stem.fusable(xc, conv)
        torch.testing.assert_close(stem.stem_pool_relu(xc, conv), torch_stem(xc, conv))
    assert not stem.fusable(x.double(), torch.nn.Conv2d(1, 8, 3, 2, 1).double())
    one_channel = torch.nn.Conv2d(1, 16, 3, 2, 1)
    four = torch.rand(2, 4, 8, 8)   # the wrong channel count: torch's own error, never the kernel
    assert not stem.fusable(four, one_channel)
    with pytest.raises(RuntimeError, match="channels"):
        stem.stem_pool_relu(four, one_channel)


@needs_kernel
def test_output_is_float32_whatever_the_default_dtype():
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1)
    x = torch.rand(2, 32, 32, 1).permute(0, 3, 1, 2)
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        got = stem.stem_pool_relu(x, conv)
    finally:
        torch.set_default_dtype(before)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch_stem(x, conv))


@needs_kernel
def test_second_order_gradients_are_refused_not_silently_zero():
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1)
    x = torch.rand(2, 32, 32, 1).permute(0, 3, 1, 2)
    (dw,) = torch.autograd.grad(stem.stem_pool_relu(x, conv).square().sum(), [conv.weight], create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dw.sum().backward()


_FORK_CASE: dict = {}


def _stem_in_child(queue):
    """Only the kernel and numpy here: torch's own OpenMP pool is not usable after a fork."""
    import numpy as np

    torch.set_num_threads(2)
    x, conv, want = _FORK_CASE["x"], _FORK_CASE["conv"], _FORK_CASE["want"]
    with torch.no_grad():
        got = stem.stem_pool_relu(x, conv)
    queue.put(bool(np.allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)))


@needs_kernel
def test_a_forked_child_runs_the_kernel_on_threads():
    """The worker threads do not survive a fork: a child must start its own (it hung before)."""
    import multiprocessing

    before = torch.get_num_threads()
    conv = torch.nn.Conv2d(1, 16, 3, 2, 1)
    x = torch.rand(64, 32, 32, 1).permute(0, 3, 1, 2)
    with torch.no_grad():
        _FORK_CASE.update(x=x, conv=conv, want=torch_stem(x, conv).numpy())
    try:
        torch.set_num_threads(2)
        with torch.no_grad():
            stem.stem_pool_relu(x, conv)   # the parent's pool now has threads
        assert stem._pool is not None
    finally:
        torch.set_num_threads(before)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_stem_in_child, args=(queue,))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung in the stem kernel")
    assert child.exitcode == 0 and queue.get(timeout=5)


@needs_kernel
@pytest.mark.filterwarnings("ignore:`torch.jit.trace")   # deprecated in torch 2.13; FrozenAct still traces
def test_tracing_records_torchs_ops():
    """torch.jit.trace cannot see the kernel's writes (bps_train.frozen_act traces the policy), so
    a trace records torch's ops, and the traced module computes the same values."""
    torch.manual_seed(6)
    net = SEResNet9(1, 16, 64).eval()
    x = torch.rand(3, 1, 64, 64)
    with torch.no_grad():
        net(x)   # materialises the lazy fc
        traced = torch.jit.trace(net, (x,))
        assert "max_pool2d" in str(traced.inlined_graph)
        y = torch.rand(3, 1, 64, 64)
        torch.testing.assert_close(traced(y), net(y), rtol=1e-5, atol=1e-6)


@needs_kernel
def test_encoder_with_the_fused_stem_matches_the_reference():
    """The paper's SE-ResNet-9 (tests/learner_reference.py's form) and the trainer's, fused stem
    included: outputs and every parameter's gradient."""
    torch.manual_seed(7)
    net = SEResNet9(1, 16, 256)
    x = torch.rand(8, 64, 64, 1).permute(0, 3, 1, 2)
    with torch.no_grad():
        net(x)   # materialises the lazy fc
    for p in net.parameters():   # Fixup zero-initialises the second convs: give every path a gradient
        with torch.no_grad():
            p.add_(torch.randn_like(p) * 0.05)
    out = net(x)
    ref = reference_encoder(net, x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(out)
    got = torch.autograd.grad((out * g).sum(), list(net.parameters()))
    want = torch.autograd.grad((ref * g).sum(), list(net.parameters()))
    for (name, _), a, b in zip(net.named_parameters(), got, want):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4, msg=name)
