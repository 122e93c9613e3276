"""The paper's policy: an SE-ResNet-9 with Fixup initialisation on 64x64 depth (or RGB),
a goal/previous-action embedding and an LSTM state encoder, with actor and critic heads.

Fixup (Zhang et al., 2019) replaces batch norm: no statistics to sync across ranks or to
corrupt with the highly correlated frames of one environment batch, and faster on CPU.
"""
from __future__ import annotations

import math
import os

import torch
from torch import nn
import torch.nn.functional as F

from bps_runtime.tasks import task_spec
from bps_runtime.tasks.spec import GoalEncoderArgs
from bps_train.cast_add import add_to_bf16, usable as cast_add_usable
from bps_train.stem import stem_pool_relu

NUM_CATEGORIES = 64   # the category embedding's rows: goal category ids 0-63 (ObjectNav's task ids)


class SqueezeExcite(nn.Module):
    def __init__(self, ch: int, reduction: int = 8):
        super().__init__()
        hidden = max(ch // reduction, 4)
        self.fc1 = nn.Linear(ch, hidden)
        self.fc2 = nn.Linear(hidden, ch)

    def weights(self, x):
        """The per-channel gates [N, C, 1, 1] that ``forward`` multiplies ``x`` by.

        The spatial mean as sum / (H * W), the bits of ``x.mean((2, 3))`` (which computes just
        that), but its backward divides the small [N, C] gradient and expands it as a view, where
        mean's backward divides the expanded [N, C, H, W] one: a pass less over the activations."""
        w = x.sum((2, 3)) / (x.shape[2] * x.shape[3])
        return torch.sigmoid(self.fc2(F.relu(self.fc1(w))))[:, :, None, None]

    def forward(self, x):
        return x * self.weights(x)


def _conv3x3(x, weight, bias, stride):
    """``F.conv2d(x, weight, bias, stride, padding=1)`` for a 3x3 ``weight``. On a 1x1 map every
    tap but the centre reads the zero padding, so the same function is a 1x1 convolution with the
    centre tap (the other taps' gradients are 0 either way). That form also avoids oneDNN's bf16
    backward of a stride-2 3x3 convolution on a 1x1 input, which reads uninitialised memory (NaN
    weight gradients now and then; docs/PERFORMANCE.md, "CPU learner, fourth pass"). The
    encoder's last block sees a 1x1 map at resolutions up to 16."""
    if x.shape[-2:] == (1, 1):
        return F.conv2d(x, weight[:, :, 1:2, 1:2], bias)
    return F.conv2d(x, weight, bias, stride, 1)


def _stores_bf16(x, b) -> bool:
    """Whether the blocks' bias adds take ``cast_add.add_to_bf16``: CPU bf16 autocast and a tensor
    its kernel takes."""
    return x.device.type == "cpu" and _autocast_dtype(x) == torch.bfloat16 and cast_add_usable(x, b)


class FixupSEBlock(nn.Module):
    """conv3x3 -> relu -> conv3x3 (zero-init) -> scale -> SE, plus a (downsampled) shortcut.

    The shortcut's stride-2 1x1 convolution runs as a 2x subsample then a stride-1 1x1
    convolution (the same function, the same ``shortcut`` weights). oneDNN's own strided 1x1 path corrupts the
    heap in backward on AVX2 CPUs (glibc abort or SIGSEGV) when the input has 2..7 channels in
    channels-last layout, which a [N, H, W, 1] depth batch permuted to NCHW is: measured with
    torch 2.13.0+cpu on an AMD EPYC without AVX-512, one thread, 6-20 forward+backward passes of
    one Conv2d(cin, 2*cin, 1, stride=2): cin 2-7 abort, cin 1 and 8-12 pass; the same layer passes
    with stride 1, in NCHW layout, forward-only, or with mkldnn disabled. Subsampling first keeps
    oneDNN on for every width (disabling it costs the normal widths their fast path).
    """

    def __init__(self, cin: int, cout: int, stride: int, num_blocks: int):
        super().__init__()
        self.bias1a = nn.Parameter(torch.zeros(1))
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bias1b = nn.Parameter(torch.zeros(1))
        self.bias2a = nn.Parameter(torch.zeros(1))
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.scale = nn.Parameter(torch.ones(1))
        self.bias2b = nn.Parameter(torch.zeros(1))
        self.se = SqueezeExcite(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=False)
        # Fixup: He init scaled by L^(-1/(2m-2)) with m = 2 layers per branch; last layer zero
        fan_in = cin * 9
        nn.init.normal_(self.conv1.weight, 0, math.sqrt(2 / fan_in) * num_blocks ** -0.5)
        nn.init.zeros_(self.conv2.weight)
        if self.shortcut is not None:
            nn.init.normal_(self.shortcut.weight, 0, math.sqrt(2 / cin))

    def forward(self, x):
        """relu(se(conv2(relu(conv1(x + b1a) + b1b) + b2a) * scale + b2b) + shortcut(x + b1a)).

        Written with fewer passes over the activations (on the CPU each pass is memory bound, and
        they were ~40 % of a PPO update): b1b and b2b enter as the convolutions' biases, ``scale``
        multiplies conv2's weights instead of its output, x + b1a is computed once for both
        branches, and the SE gate, the shortcut's add and the relu run as addcmul + relu."""
        cout = self.conv1.out_channels
        # under CPU bf16 autocast the adds write the convolutions' bf16 inputs in one pass, the
        # values the promoted fp32 sum and the convolution's cast gave (bps_train.cast_add)
        stored = _stores_bf16(x, self.bias1a)
        add = add_to_bf16 if stored else torch.add
        xb = add(x, self.bias1a)
        out = F.relu(_conv3x3(xb, self.conv1.weight, self.bias1b.expand(cout), self.conv1.stride))
        out = _conv3x3(add(out, self.bias2a), self.conv2.weight * self.scale, self.bias2b.expand(cout), (1, 1))
        if self.shortcut is None:
            short = x
        else:  # = self.shortcut(x + self.bias1a), without oneDNN's strided 1x1 path (docstring)
            s = self.shortcut.stride
            # with xb stored as bf16, x's subsample (x's gradient then sums in x's dtype, as before)
            sub = x[:, :, ::s[0], ::s[1]] + self.bias1a if stored else xb[:, :, ::s[0], ::s[1]]
            short = F.conv2d(sub, self.shortcut.weight)
        return F.relu(torch.addcmul(short, out, self.se.weights(out)))


class SEResNet9(nn.Module):
    """stem conv + max-pool + 4 residual blocks of 2 convs = 9 conv layers; 64x64 -> 2x2 spatial.

    The max-pool after the stem is the standard ResNet stem; without it the first stage runs at
    32x32 and training on one CPU thread is 4x slower (293 vs 1190 frames/s forward+backward,
    width 16, hidden 256, evaluate_sequence over 32x16 frames, one thread, shared 2-core machine).
    """

    def __init__(self, in_channels: int, width: int = 32, out_dim: int = 256):
        super().__init__()
        chans = [width, width * 2, width * 4, width * 8]
        self.stem = nn.Conv2d(in_channels, width, 3, 2, 1)
        blocks, cin = [], width
        for i, c in enumerate(chans):
            blocks.append(FixupSEBlock(cin, c, 1 if i == 0 else 2, num_blocks=len(chans)))
            cin = c
        self.blocks = nn.Sequential(*blocks)
        self.compress = nn.Conv2d(cin, 32, 1)
        self.fc = nn.LazyLinear(out_dim)

    def forward(self, x):
        x = stem_pool_relu(x, self.stem)   # relu(max_pool(stem(x))), fused on the CPU (bps_train.stem)
        x = self.blocks(x)
        x = F.relu(self.compress(x))
        return F.relu(self.fc(x.flatten(1)))


# oneDNN's ISA names (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) from the first with bf16 instructions
_BF16_ISAS = {"AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX512_CORE_AMX", "AVX10_1_512_AMX",
              "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2", "ALL"}


def cpu_bf16_supported() -> bool:
    """Whether oneDNN runs bf16 convolutions with native bf16 instructions here: the CPU has
    AVX-512 BF16 or AMX, oneDNN reports bf16 kernels, and ONEDNN_MAX_CPU_ISA (if set) does not
    cap it below them. oneDNN alone says yes on any AVX-512 CPU (Skylake-SP, Cascade Lake, Ice
    Lake), where it emulates bf16, slower than fp32."""
    try:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return False
        native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    except (AttributeError, RuntimeError):  # a torch build without oneDNN or these probes
        return False
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL").upper()
    return bool(native) and cap in _BF16_ISAS


def _fp32(x):
    """Autocast off for the LSTM's own code: its state and gates are fp32 (``lstm_steps``: the
    state accumulates over 32+ steps); only its two GEMMs take autocast's dtype, ``_autocast_dtype``."""
    return torch.autocast(x.device.type, enabled=False)


def _autocast_dtype(x) -> torch.dtype:
    """Autocast's dtype (bf16) where autocast is on for ``x``'s device, else fp32: the LSTM GEMMs'
    operands (read before ``_fp32`` turns autocast off) and the blocks' bias adds (``_stores_bf16``)."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else torch.float32


def _cnn(in_channels: int, width: int, hidden: int, resolution) -> "SEResNet9":
    """An SE-ResNet-9 with its lazy layer materialized (parameters known up front)."""
    net = SEResNet9(in_channels, width, hidden)
    with torch.no_grad():
        net(torch.zeros(1, in_channels, *resolution))
    return net


def lstm_steps(rnn: nn.LSTM, x, h, c, not_done, gemm_dtype: torch.dtype = torch.float32):
    """``rnn``'s 1-layer LSTM over ``x`` [T, N, in] from (h, c) [N, hidden], zeroing the state
    of agents where ``not_done`` [T, N] is False before that step -> (out [T, N, hidden], (h, c)).

    The same function as calling ``rnn`` one step at a time (its weights, torch's gate order
    i, f, g, o), computed as one input-projection GEMM for all T steps and a ``T``-step loop of
    one small GEMM + the gates: the masks differ per step, so ``rnn`` itself ran one call per step,
    and oneDNN's LSTM backward per call was 1/3 of a CPU PPO update (docs/PERFORMANCE.md, learner).
    ``gemm_dtype`` bf16 (the policy under autocast): both GEMMs take bf16 operands; the biases,
    gates, state and output stay fp32 (docs/PERFORMANCE.md, "CPU learner, fifth pass")."""
    bias = rnn.bias_ih_l0 + rnn.bias_hh_l0
    if gemm_dtype == torch.float32:
        gx = F.linear(x.float(), rnn.weight_ih_l0, bias)
        w_hh = rnn.weight_hh_l0.t()
        recur = lambda g, h: torch.addmm(g, h, w_hh)  # noqa: E731
    else:
        gx = torch.add(F.linear(x.to(gemm_dtype), rnn.weight_ih_l0.to(gemm_dtype)), bias)
        w_hh = rnn.weight_hh_l0.t().to(gemm_dtype)
        recur = lambda g, h: torch.add(g, torch.mm(h.to(gemm_dtype), w_hh))  # noqa: E731
    keep = not_done.to(torch.float32)[..., None].unbind(0)
    outs = []
    for t, gx_t in enumerate(gx.unbind(0)):   # one unbind: indexing gx[t] zero-fills a gx-sized gradient per step
        h, c = h * keep[t], c * keep[t]
        i, f, g, o = recur(gx_t, h).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs), (h, c)


class Policy(nn.Module):
    """Observations -> (action logits, value, next recurrent state).

    ``visual``: [N, H, W, C] float (depth normalized 0..1) or uint8 RGB; ``goal``: the task's goal
    input (``task``'s ``TaskSpec.goal_input``: PointNav the pointgoal, ObjectNav (category,
    compass, gps), ImageNav the goal image), encoded by the task's ``TaskSpec.goal_encoder``
    (bps_runtime/tasks/goal_encoders.py; it may reuse the visual encoder). ``prev_action``:
    [N] long (-1 at episode start); ``state``: (h, c) [1, N, hidden].
    """

    def __init__(self, in_channels: int, num_actions: int = 4, hidden: int = 256, width: int = 32,
                 resolution: tuple[int, int] = (64, 64), task: str = "pointnav",
                 num_categories: int = NUM_CATEGORIES):
        super().__init__()
        self.task = task
        self.encoder = _cnn(in_channels, width, hidden, resolution)
        # the task's goal encoder (bps_runtime.tasks: TaskSpec.goal_encoder), built here so the
        # parameters are initialised in the same order as the visual encoder's
        self.goal_encoder = task_spec(task).goal_encoder(GoalEncoderArgs(
            in_channels, hidden, width, tuple(resolution), num_categories, lambda c: _cnn(c, width, hidden, resolution)))
        goal_dim = self.goal_encoder.out_dim
        self.prev_action = nn.Embedding(num_actions + 1, 32)
        self.rnn = nn.LSTM(hidden + goal_dim + 32, hidden)
        self.actor = nn.Linear(hidden, num_actions)
        self.critic = nn.Linear(hidden, 1)
        self.hidden = hidden
        nn.init.orthogonal_(self.actor.weight, 0.01)
        nn.init.zeros_(self.actor.bias)
        nn.init.orthogonal_(self.critic.weight, 1.0)
        nn.init.zeros_(self.critic.bias)

    def initial_state(self, n: int, device=None):
        z = torch.zeros(1, n, self.hidden, device=device)
        return (z, z.clone())

    def goal_features(self, goal):
        return self.goal_encoder(goal, self.encoder)

    def features(self, visual, goal, prev_action):
        if visual.dtype == torch.uint8:
            visual = visual.float() / 255.0
        x = self.encoder(visual.permute(0, 3, 1, 2))
        g = self.goal_features(goal)
        a = self.prev_action(prev_action + 1)
        return torch.cat([x, g, a], 1)

    def forward(self, visual, goal, prev_action, state, not_done):
        """One step: ``not_done`` [N] zeroes the state of agents whose episode just began."""
        f = self.features(visual, goal, prev_action)
        gemm = _autocast_dtype(f)
        with _fp32(f):
            out, (h, c) = lstm_steps(self.rnn, f[None], state[0][0].float(), state[1][0].float(),
                                     not_done[None], gemm)
        out = out[0]
        return self.actor(out), self.critic(out)[:, 0], (h[None], c[None])

    def evaluate_sequence(self, visual, goal, prev_action, state0, not_done):
        """Re-run a rollout [T, N, ...] from ``state0`` (for the PPO update)."""
        t, n = not_done.shape
        f = self.features(visual.flatten(0, 1), goal.flatten(0, 1), prev_action.flatten(0, 1))
        f = f.view(t, n, -1)
        gemm = _autocast_dtype(f)
        with _fp32(f):
            out, _ = lstm_steps(self.rnn, f, state0[0][0].float(), state0[1][0].float(), not_done, gemm)
        return self.actor(out), self.critic(out)[..., 0]
