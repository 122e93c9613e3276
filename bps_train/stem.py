"""The policy's stem, ``relu(max_pool2d(conv(x), 3, 2, 1))``, fused on the CPU.

Contract: ``stem_pool_relu(x, conv)`` returns what ``F.relu(F.max_pool2d(conv(x), 3, 2, 1))``
returns (the same values to float rounding; the pool's ties and NaNs resolved as torch does) and
gives ``conv.weight`` / ``conv.bias`` the same gradients, for a 3x3 stride-2 pad-1 ``conv`` with a
bias and at most 4 input channels. The fused kernel (``_stem.c``, compiled at install) runs when
``x`` is a float32 CPU tensor that needs no gradient (an observation), outside tracing and
compilation; everything else (CUDA, an input that needs a gradient, a build without the kernel)
takes torch's own ops. Frames are split over torch's intra-op thread count.
"""
from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F

from bps_assets.native import function

_P, _I = ctypes.c_void_p, ctypes.c_int64
_forward = function("bps_train._stem", "stem_forward", [_P, _I, _I, _I, _I, _I, _P, _P, _I, _P, _P])
_backward = function("bps_train._stem", "stem_backward", [_P, _I, _I, _I, _I, _I, _P, _P, _I, _P, _P])
_use_avx512 = function("bps_train._stem", "stem_use_avx512", [ctypes.c_int])
MIN_FRAMES_PER_THREAD = 16   # below this a second thread costs more than it saves
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def available() -> bool:
    """Whether the fused kernel was built (``pip install`` with a C compiler)."""
    return _forward is not None and _backward is not None


def use_avx512(on: bool) -> bool:
    """Whether the kernel may take its AVX-512 loops where the CPU has them (default True; False:
    the portable loops, which CPUs without AVX-512 run). -> the previous setting."""
    return bool(_use_avx512(int(on))) if _use_avx512 is not None else False


def _executor(workers: int) -> ThreadPoolExecutor:
    """The kernel's worker threads (grown, never shrunk: torch's thread count may change)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < workers:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bps-stem")
        return _pool


def _split(n: int) -> list[tuple[int, int]]:
    """Frame ranges, one per torch thread (the update's cores; one in the rollout)."""
    k = max(1, min(torch.get_num_threads(), n // MIN_FRAMES_PER_THREAD))
    edges = [n * i // k for i in range(k + 1)]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def _run(fn, parts):
    """Calls ``fn(a, b)`` for each part (on the pool's threads when there are several: ctypes
    releases the GIL) and raises if any call returned non-zero."""
    if not parts:   # an empty batch
        return
    if len(parts) == 1:
        codes = [fn(*parts[0])]
    else:
        codes = list(_executor(len(parts)).map(lambda p: fn(*p), parts))
    if any(codes):
        raise RuntimeError(f"bps_train._stem: the kernel refused its sizes (codes {codes})")


class _FusedStem(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_nhwc, weight, bias):
        n, h, w, cin = x_nhwc.shape
        cout = weight.shape[0]
        hp, wp = (((h - 1) // 2) // 2 + 1), (((w - 1) // 2) // 2 + 1)
        out = torch.empty(n, hp, wp, cout)   # returned as [N, C, H, W] channels-last, like torch's stem
        pos = torch.empty(n, hp, wp, cout, dtype=torch.uint8)
        wc, bc = weight.detach().contiguous(), bias.detach().contiguous()
        _run(lambda a, b: _forward(x_nhwc.data_ptr(), a, b, h, w, cin, wc.data_ptr(), bc.data_ptr(), cout,
                                   out.data_ptr(), pos.data_ptr()), _split(n))
        ctx.save_for_backward(x_nhwc, pos)
        ctx.cout = cout
        return out.permute(0, 3, 1, 2)

    @staticmethod
    def backward(ctx, gout):
        x_nhwc, pos = ctx.saved_tensors
        n, h, w, cin = x_nhwc.shape
        cout = ctx.cout
        gout = gout.float().permute(0, 2, 3, 1).contiguous()   # a no-op for channels-last
        parts = _split(n)
        dw = torch.zeros(len(parts), cout * cin * 9, dtype=torch.float64)
        db = torch.zeros(len(parts), cout, dtype=torch.float64)
        slots = {p: i for i, p in enumerate(parts)}
        _run(lambda a, b: _backward(x_nhwc.data_ptr(), a, b, h, w, cin, gout.data_ptr(), pos.data_ptr(), cout,
                                    dw[slots[(a, b)]].data_ptr(), db[slots[(a, b)]].data_ptr()), parts)
        return None, dw.sum(0).float().view(cout, cin, 3, 3), db.sum(0).float()


def fusable(x: torch.Tensor, conv: torch.nn.Conv2d) -> bool:
    """Whether ``stem_pool_relu`` takes the fused kernel for this input and convolution."""
    return (available() and x.device.type == "cpu" and x.dtype == torch.float32 and not x.requires_grad
            and x.dim() == 4 and 1 <= x.shape[1] <= 4 and conv.bias is not None
            and conv.weight.dtype == torch.float32 and conv.weight.device.type == "cpu"
            and conv.kernel_size == (3, 3) and conv.stride == (2, 2) and conv.padding == (1, 1)
            and conv.dilation == (1, 1) and conv.groups == 1 and conv.out_channels <= 256
            and not torch.jit.is_tracing() and not torch.compiler.is_compiling())


def stem_pool_relu(x: torch.Tensor, conv: torch.nn.Conv2d) -> torch.Tensor:
    """``F.relu(F.max_pool2d(conv(x), 3, 2, 1))`` for ``x`` [N, C, H, W] (module docstring)."""
    if not fusable(x, conv):
        # max-pool then relu: the same values and gradients as relu then max-pool (relu is
        # monotonic; -inf padding), on a quarter of the elements
        return F.relu(F.max_pool2d(conv(x), 3, 2, 1))
    return _FusedStem.apply(x.permute(0, 2, 3, 1).contiguous(), conv.weight, conv.bias)
