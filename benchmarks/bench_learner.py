"""CPU learner levers, A/B in one process: the PPO update (and rollout inference) of the paper's
policy with each variant, the variants in turn round after round, fastest round reported.

    python benchmarks/bench_learner.py [--num-envs 128] [--steps 32] [--threads 1] [--rounds 2]
                                       [--variants lstm_per_step,unrolled,channels_last,bf16,...]

Variants: ``lstm_per_step`` (before issue 32: nn.LSTM called once per step, fp32), ``unrolled``
(``models.lstm_steps``, fp32: the trainer's ``--no-bf16`` path), ``channels_last`` (unrolled +
channels-last weights), ``bf16`` (unrolled + bf16 autocast: the trainer's default on CPUs with
oneDNN bf16 kernels), ``channels_last_bf16``, ``compile`` / ``bf16_compile`` (torch.compile of the
visual encoder, inductor CPU backend; the first round's time is the compile). Prints frames/s of
the update (2 minibatches: forward, backward, clip, LAMB step) on random 64x64 depth frames, and
of inference on one group (NUM_ENVS / 2), per variant, plus each variant's ratio to
``lstm_per_step``. Ratios are what to read on a shared machine.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bps_train import models as M  # noqa: E402
from bps_train.lamb import Lamb  # noqa: E402
from bps_train.ppo import Rollout  # noqa: E402
from bps_train.throughput import ppo_update  # noqa: E402

VARIANTS = ("lstm_per_step", "unrolled", "channels_last", "bf16", "channels_last_bf16", "compile", "bf16_compile")


def lstm_per_step(self, visual, goal, prev_action, state0, not_done):
    """evaluate_sequence as it was before issue 32: one nn.LSTM call per step (masks differ)."""
    t, n = not_done.shape
    f = self.features(visual.flatten(0, 1), goal.flatten(0, 1), prev_action.flatten(0, 1)).view(t, n, -1)
    h, c = state0
    outs = []
    with M._fp32(f):
        f = f.float()
        for i in range(t):
            m = not_done[i].float()[None, :, None]
            o, (h, c) = self.rnn(f[i:i + 1], (h * m, c * m))
            outs.append(o[0])
    out = torch.stack(outs)
    return self.actor(out), self.critic(out)[..., 0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-envs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="lstm_per_step,unrolled,channels_last,bf16,channels_last_bf16")
    a = ap.parse_args(argv)
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r} (choose from {', '.join(VARIANTS)})")
    if any("bf16" in v for v in variants) and not M.cpu_bf16_supported():
        print("this CPU's oneDNN has no bf16 kernels: bf16 variants skipped", flush=True)
        variants = [v for v in variants if "bf16" not in v]
    torch.set_num_threads(a.threads)
    n, t = a.num_envs, a.steps
    g = torch.Generator().manual_seed(0)
    ro = Rollout.empty(t, n, (64, 64, 1), torch.float32, 256, "cpu")
    ro.visual.uniform_(generator=g)
    ro.goal.uniform_(generator=g)
    ro.not_done.fill_(True)
    ro.actions.random_(0, 4, generator=g)
    ro.rewards.normal_(generator=g)
    setups = {}
    for v in variants:
        torch.manual_seed(0)
        p = M.Policy(1, hidden=256, width=16)
        if "channels_last" in v:
            p = p.to(memory_format=torch.channels_last)
        if "compile" in v:
            p.encoder = torch.compile(p.encoder)
        amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if "bf16" in v else contextlib.nullcontext
        setups[v] = (p, amp, Lamb(p.parameters(), lr=1e-4))
    unrolled = M.Policy.evaluate_sequence
    learn = {v: [] for v in variants}
    first = {}
    for r in range(a.rounds + 1):  # round 0 warms up (oneDNN primitives; compile)
        for v in variants:
            p, amp, opt = setups[v]
            M.Policy.evaluate_sequence = lstm_per_step if v == "lstm_per_step" else unrolled
            t0 = time.perf_counter()
            ppo_update(p, opt, ro, g, amp)
            dt = time.perf_counter() - t0
            if r:
                learn[v].append(n * t / dt)
            else:
                first[v] = dt
    M.Policy.evaluate_sequence = unrolled
    infer = {v: [] for v in variants}
    b = n // 2
    x, goal = torch.rand(b, 64, 64, 1), torch.rand(b, 2)
    prev, nd = torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool)
    with torch.no_grad():
        for r in range(a.rounds + 1):
            for v in variants:
                p, amp, _ = setups[v]
                st = p.initial_state(b)
                t0 = time.perf_counter()
                for _ in range(8):
                    with amp():
                        p(x, goal, prev, st, nd)
                if r:
                    infer[v].append(8 * b / (time.perf_counter() - t0))
    base = variants[0]
    out = {"num_envs": n, "steps": t, "threads": a.threads, "loadavg_at_end": os.getloadavg()[0]}
    for v in variants:
        out[v] = {"learn_fps": round(max(learn[v]), 1), "learn_fps_rounds": [round(x) for x in learn[v]],
                  "learn_vs_" + base: round(max(learn[v]) / max(learn[base]), 3),
                  "infer_fps": round(max(infer[v]), 1), "infer_vs_" + base: round(max(infer[v]) / max(infer[base]), 3),
                  "first_round_s": round(first[v], 1)}
        print(f"{v:20s} learn {max(learn[v]):7.0f} fps (x{max(learn[v]) / max(learn[base]):.2f})  infer "
              f"{max(infer[v]):7.0f} fps (x{max(infer[v]) / max(infer[base]):.2f})  first round {first[v]:.1f} s",
              flush=True)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
