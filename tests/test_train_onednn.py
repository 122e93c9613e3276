"""The policy's encoder must not reach oneDNN's strided 1x1 backward with few channels in
channels-last layout: on AVX2 CPUs it corrupts the heap (issue 13 item 1). Each configuration
runs in a subprocess, so an abort fails the test instead of killing pytest."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

# The reproduction: a [N, H, W, 1] depth batch permuted to NCHW (channels-last strides),
# one thread (as under torchrun), forward + backward 6 times.
SCRIPT = """
import torch
from bps_train.models import SEResNet9
for threads in (1, 2):
    torch.set_num_threads(threads)
    for width in (2, 4, 6):  # 2..7 reached the bad path; 8 and up did not
        torch.manual_seed(0)
        m = SEResNet9(1, width, 32)
        for _ in range(6):
            x = torch.rand(32, 32, 32, 1).permute(0, 3, 1, 2)
            m(x).sum().backward()
print("ok")
"""


@pytest.mark.parametrize("isa", ["", "AVX2"])
def test_small_widths_train_without_crashing(isa):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    p = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr[-2000:])


@pytest.mark.parametrize("width", [4, 16])
def test_shortcut_is_the_strided_1x1_convolution(width):
    """Subsample + stride-1 1x1 conv is the same function as the strided 1x1 conv it replaces.
    At Fixup's init the residual branch is zero, so the block is relu(shortcut(x + bias1a)); the
    reference runs with mkldnn off, forward only, so it cannot reach the bad path."""
    from bps_train.models import FixupSEBlock

    torch.manual_seed(0)
    block = FixupSEBlock(width, 2 * width, 2, num_blocks=4)
    x = torch.rand(3, width, 15, 16)
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False):
        block.bias1a.fill_(0.3)
        want = torch.relu(torch.nn.functional.conv2d(x + 0.3, block.shortcut.weight, stride=2))
        got = block(x)
    assert got.shape == want.shape == (3, 2 * width, 8, 8)
    torch.testing.assert_close(got, want)
