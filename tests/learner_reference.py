"""The paper's SE-ResNet encoder as written before issue 32's rewrite (the code at 9b8a679):
each Fixup bias, the scale, the SE gate and the residual add a pass of its own, relu on the
stem's output before the max-pool; the SE gate's mean as ``x.mean``; and the per-step nn.LSTM
loop the trainer had before; the stem as torch's own ops (before bps_train.stem); the block's bias adds promoted to fp32 under
autocast (before bps_train.cast_add). The references of tests/test_train_learner.py and
tests/test_train_stem.py and the ``old_encoder`` / ``se_mean`` / ``lstm_per_step`` / ``torch_stem`` /
``promoted_adds`` levers of benchmarks/bench_learner.py; they take the current modules' weights."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bps_train.models import _conv3x3


def torch_stem(x, conv):
    """``relu(max_pool2d(conv(x), 3, 2, 1))`` as torch's own ops (``bps_train.stem``'s reference)."""
    return F.relu(F.max_pool2d(conv(x), 3, 2, 1))


def reference_block(blk, x):
    """``models.FixupSEBlock`` ``blk`` on ``x``, the paper's form."""
    out = F.relu(blk.conv1(x + blk.bias1a) + blk.bias1b)
    out = blk.conv2(out + blk.bias2a) * blk.scale + blk.bias2b
    out = blk.se(out)
    if blk.shortcut is None:
        short = x
    else:
        s = blk.shortcut.stride
        short = F.conv2d((x + blk.bias1a)[:, :, ::s[0], ::s[1]], blk.shortcut.weight)
    return F.relu(out + short)


def promoted_block_forward(blk, x, bias=lambda b, t: b):
    """``models.FixupSEBlock.forward`` before ``bps_train.cast_add``: under autocast each bias add
    promoted to an fp32 tensor, which the next convolution's autocast cast reads again.
    ``bias(b, t)``: the scalar bias as added to ``t`` (bench_learner's ``bf16_acts`` casts it)."""
    cout = blk.conv1.out_channels
    xb = x + bias(blk.bias1a, x)
    out = F.relu(_conv3x3(xb, blk.conv1.weight, blk.bias1b.expand(cout), blk.conv1.stride))
    out = _conv3x3(out + bias(blk.bias2a, out), blk.conv2.weight * blk.scale, blk.bias2b.expand(cout), (1, 1))
    if blk.shortcut is None:
        short = x
    else:
        s = blk.shortcut.stride
        short = F.conv2d(xb[:, :, ::s[0], ::s[1]], blk.shortcut.weight)
    return F.relu(torch.addcmul(short, out, blk.se.weights(out)))


def reference_se_weights(se, x):
    """``models.SqueezeExcite`` ``se``'s gate on ``x`` [N, C, H, W] with the spatial mean as
    ``x.mean`` (before the third pass; its backward divides the expanded gradient: a pass more)."""
    return torch.sigmoid(se.fc2(F.relu(se.fc1(x.mean((2, 3))))))[:, :, None, None]


def reference_encoder(net, x):
    """``models.SEResNet9`` ``net`` on ``x`` [N, C, H, W], the paper's form."""
    x = F.max_pool2d(F.relu(net.stem(x)), 3, 2, 1)
    for blk in net.blocks:
        x = reference_block(blk, x)
    x = F.relu(net.compress(x))
    return F.relu(net.fc(x.flatten(1)))


def stepwise_reference(rnn, x, h, c, not_done):
    """nn.LSTM called one step at a time with the masked state (the trainer's former loop):
    ``x`` [T, N, F], ``h``/``c`` [N, H] -> (outputs [T, N, H], (h, c) [N, H])."""
    h, c, outs = h[None], c[None], []
    for t in range(x.shape[0]):
        m = not_done[t].float()[None, :, None]
        o, (h, c) = rnn(x[t:t + 1], (h * m, c * m))
        outs.append(o[0])
    return torch.stack(outs), (h[0], c[0])
