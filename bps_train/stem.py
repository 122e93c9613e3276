"""The policy's stem, ``relu(max_pool2d(conv(x), 3, 2, 1))``, fused on the CPU.

Contract: ``stem_pool_relu(x, conv)`` returns the values of
``F.relu(F.max_pool2d(conv(x), 3, 2, 1))`` (to float rounding; the pool's ties, NaNs and relu's
gradient at 0 and NaN as torch's; float32 and channels-last, also under autocast) and gives
``conv.weight`` / ``conv.bias`` the same gradients, for an ``nn.Conv2d`` 3x3 stride-2 zero-pad-1
with a bias and 1-4 input channels. The fused kernel (``_stem.c``, built by ``pip install``) runs
when the CPU has its AVX-512 loops and ``x`` is a float32 CPU tensor that needs no gradient (an
observation) with finite values, outside tracing, compilation and forward-mode AD (a tangent on
``x`` or the weights); everything else (CUDA, CPUs
without AVX-512, an input that needs a gradient or holds NaN / inf, a build without a C
compiler) takes torch's own ops. Frames are split over torch's intra-op thread count.
First-order gradients only.
"""
from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from bps_assets.native import function

_P, _I = ctypes.c_void_p, ctypes.c_int64
_forward = function("bps_train._stem", "stem_forward", [_P, _I, _I, _I, _I, _I, _P, _P, _I, _P, _P])
_backward = function("bps_train._stem", "stem_backward", [_P, _I, _I, _I, _I, _I, _P, _P, _I, _P, _P])
_wide = function("bps_train._stem", "stem_wide", [])
MIN_FRAMES_PER_THREAD = 16   # below this a second thread costs more than it saves
ERRORS = {-1: "refused its sizes", -2: "could not allocate its buffers"}
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool_in_child():
    """A forked child has the pool object but none of its threads: start afresh."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def available() -> bool:
    """Whether the fused kernel was built (``pip install`` with a C compiler) and this CPU runs
    its AVX-512 loops (elsewhere torch's ops are faster: docs/PERFORMANCE.md, learner fourth pass)."""
    return _forward is not None and _backward is not None and _wide is not None and bool(_wide())


def frame_parts(n: int) -> list[tuple[int, int]]:
    """Frame ranges, one per torch thread (the update's cores; one in the rollout)."""
    k = max(1, min(torch.get_num_threads(), n // MIN_FRAMES_PER_THREAD))
    edges = [n * i // k for i in range(k + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


class _NonFinite(Exception):
    """The kernel saw a NaN or an infinity in the frames (its forward returned 1)."""


def run_parts(fn, parts):
    """Calls ``fn(a, b)`` for each part (on the pool's threads when there are several: ctypes
    releases the GIL); _NonFinite if a call returned 1, RuntimeError if one failed."""
    global _pool
    if not parts:   # an empty batch
        return
    if len(parts) == 1:
        codes = [fn(*parts[0])]
    else:
        with _pool_lock:   # submitted under the lock: another caller cannot shut this pool down first
            if _pool is None or _pool._max_workers < len(parts):
                if _pool is not None:
                    _pool.shutdown(wait=False)
                _pool = ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="bps-stem")
            futures = [_pool.submit(fn, *p) for p in parts]
        codes = [f.result() for f in futures]
    bad = [c for c in codes if c and c != 1]
    if 1 in codes and not bad:
        raise _NonFinite()
    if bad:
        raise RuntimeError(f"bps_train._stem: the kernel {ERRORS.get(bad[0], f'failed ({bad[0]})')}")


def _stem_forward(x_nhwc, weight, bias, positions: bool):
    """The kernel's forward -> (out [N, C, H', W'] channels-last, the pool's window positions
    [N, H', W', C] uint8, or None when ``positions`` is False: a forward no backward follows)."""
    n, h, w, cin = x_nhwc.shape
    cout = weight.shape[0]
    hp, wp = (((h - 1) // 2) // 2 + 1), (((w - 1) // 2) // 2 + 1)
    out = torch.empty(n, hp, wp, cout, dtype=torch.float32)   # [N, C, H, W] channels-last, as torch's stem
    pos = torch.empty(n, hp, wp, cout, dtype=torch.uint8) if positions else None
    wc = weight.detach().float().contiguous()
    bc = bias.detach().float().contiguous()
    run_parts(lambda a, b: _forward(x_nhwc.data_ptr(), a, b, h, w, cin, wc.data_ptr(), bc.data_ptr(), cout,
                               out.data_ptr(), None if pos is None else pos.data_ptr()), frame_parts(n))
    return out.permute(0, 3, 1, 2), pos


class _FusedStem(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_nhwc, weight, bias):
        out, pos = _stem_forward(x_nhwc, weight, bias, positions=True)
        ctx.save_for_backward(x_nhwc, pos)
        ctx.cout = weight.shape[0]
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, gout):
        x_nhwc, pos = ctx.saved_tensors
        n, h, w, cin = x_nhwc.shape
        cout = ctx.cout
        gout = gout.float().permute(0, 2, 3, 1).contiguous()   # a no-op for channels-last
        parts = frame_parts(n)
        dw = torch.zeros(len(parts), cout * cin * 9, dtype=torch.float64)
        db = torch.zeros(len(parts), cout, dtype=torch.float64)
        slots = {p: i for i, p in enumerate(parts)}
        run_parts(lambda a, b: _backward(x_nhwc.data_ptr(), a, b, h, w, cin, gout.data_ptr(), pos.data_ptr(), cout,
                                    dw[slots[(a, b)]].data_ptr(), db[slots[(a, b)]].data_ptr()), parts)
        return None, dw.sum(0).float().view(cout, cin, 3, 3), db.sum(0).float()


def fusable(x: torch.Tensor, conv: torch.nn.Module) -> bool:
    """Whether ``stem_pool_relu`` takes the fused kernel for this input and convolution."""
    return (type(conv) is torch.nn.Conv2d and available() and x.device.type == "cpu" and x.dtype == torch.float32
            and not x.requires_grad and x.dim() == 4 and 1 <= x.shape[1] <= 4 and x.shape[1] == conv.in_channels
            and conv.bias is not None and conv.padding_mode == "zeros"
            and conv.weight.dtype == torch.float32 and conv.weight.device.type == "cpu"
            and tuple(conv.weight.shape) == (conv.out_channels, x.shape[1], 3, 3)
            and conv.stride == (2, 2) and conv.padding == (1, 1) and conv.dilation == (1, 1) and conv.groups == 1
            and conv.out_channels <= 256 and not torch.jit.is_tracing() and not torch.compiler.is_compiling()
            and not any(_tangent(t) for t in (x, conv.weight, conv.bias)))


def _tangent(t) -> bool:
    """Whether ``t`` carries a forward-mode AD tangent (the kernel has no jvp: torch's ops do)."""
    return torch.autograd.forward_ad.unpack_dual(t).tangent is not None


def stem_pool_relu(x: torch.Tensor, conv: torch.nn.Module) -> torch.Tensor:
    """``F.relu(F.max_pool2d(conv(x), 3, 2, 1))`` for ``x`` [N, C, H, W] (module docstring)."""
    if fusable(x, conv):
        x_nhwc = x.permute(0, 2, 3, 1).contiguous()
        try:
            if torch.is_grad_enabled() and (conv.weight.requires_grad or conv.bias.requires_grad):
                return _FusedStem.apply(x_nhwc, conv.weight, conv.bias)
            return _stem_forward(x_nhwc, conv.weight, conv.bias, positions=False)[0]   # the rollout's acting
        except _NonFinite:
            pass   # torch's dense backward turns 0 x inf into NaN weight gradients: a NaN guard sees them
    # max-pool then relu: the same values and gradients as relu then max-pool (relu is
    # monotonic; -inf padding), on a quarter of the elements
    return F.relu(F.max_pool2d(conv(x), 3, 2, 1))
