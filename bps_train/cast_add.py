"""The residual blocks' bias add under bf16 autocast, written once as the convolution's input.

Contract: ``add_to_bf16(x, b)`` (``x`` a float32 or bfloat16 CPU tensor, dense in contiguous or
channels-last layout; ``b`` a one-element float32 tensor) returns ``(x + b).to(torch.bfloat16)``
bit for bit on finite values (torch's promoted float32 sum, rounded to nearest even) in ``x``'s
layout, in one pass (``_stem.c``'s ``add_to_bf16``, frames split over torch's threads); without
the kernel, torch's two ops. Gradients: ``x``'s is the output's in ``x``'s dtype (the cast's
backward), ``b``'s the output's sum in float32. ``usable(x, b)`` says when the kernel runs: the
models call it only under bf16 autocast, where the promoted add and the convolution's cast were
two extra passes over each map (docs/PERFORMANCE.md, "CPU learner, fifth pass").
"""
from __future__ import annotations

import ctypes

import torch
from torch.autograd.function import once_differentiable

from bps_assets.native import function
from bps_train.stem import frame_parts, run_parts

_P, _I = ctypes.c_void_p, ctypes.c_int64
_add = function("bps_train._stem", "add_to_bf16", [_P, _I, _I, _I, ctypes.c_float, _P])


def usable(x: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``add_to_bf16`` takes the kernel for these tensors."""
    return (_add is not None and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16)
            and b.numel() == 1 and b.dtype == torch.float32 and x.dim() == 4
            and (x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last))
            and not torch.jit.is_tracing() and not torch.compiler.is_compiling())


class _AddToBf16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, b):
        ctx.x_dtype, ctx.b_shape = x.dtype, b.shape
        out = torch.empty_like(x, dtype=torch.bfloat16)   # x's layout: the same strides, dense
        per = x[0].numel() if x.shape[0] else 0
        bv, x_bf16 = float(b.detach().reshape(())), int(x.dtype == torch.bfloat16)
        run_parts(lambda a, z: _add(x.data_ptr(), a * per, z * per, x_bf16, bv, out.data_ptr()), frame_parts(x.shape[0]))
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return g.to(ctx.x_dtype), g.sum(dtype=torch.float32).reshape(ctx.b_shape)


def add_to_bf16(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(x + b).to(torch.bfloat16)`` in one pass where ``usable``, else as those two ops."""
    if usable(x, b):
        return _AddToBf16.apply(x, b)
    return (x + b).to(torch.bfloat16)
