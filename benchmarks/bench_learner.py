"""CPU learner levers, A/B in one process: the PPO update (and rollout inference) of the paper's
policy with each variant, the variants in turn round after round, fastest round reported.

    python benchmarks/bench_learner.py [--num-envs 128] [--steps 32] [--rounds 3] [--minibatches 2]
                                       [--variants before,fewer_passes,heap,every_core,...]

A variant is levers joined by ``+`` (``LEVERS`` below says what each one switches; ``NAMED``
gives old trainers' variants a name; ``--help`` lists both). Prints per variant: update frames/s
by wall clock and by process CPU time (user + sys: robust to others' load at one thread), kernel
seconds and page faults per update, inference frames/s on NUM_ENVS / 2 (one thread); ratios to
the first variant.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import resource
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # learner_reference

from bps_train import models as M  # noqa: E402
from bps_train.learner_cpu import keep_freed_memory, update_threads  # noqa: E402
from bps_train.lamb import Lamb  # noqa: E402

from bps_train.throughput import ppo_update, random_rollout  # noqa: E402
from learner_reference import (promoted_block_forward, reference_encoder, reference_se_weights,  # noqa: E402
                               stepwise_reference, torch_stem)

LEVERS = {
    "old_encoder": "the encoder's forward at 9b8a679 (relu before the max-pool, Fixup's biases and scale as "
                   "passes of their own)",
    "se_mean": "the SE gate's mean, before the third pass",
    "lstm_per_step": "one nn.LSTM call per step, before issue 32",
    "promoted_adds": "the blocks' bias adds promoted to fp32 and cast again by the convolutions (before "
                     "bps_train.cast_add)",
    "indexed_lstm": "models.lstm_steps indexing gx[t] per step, with fp32 GEMMs (so fp32_lstm too; before "
                    "2026-11-28: autograd zero-fills and adds a gx-sized gradient per step)",
    "fp32_lstm": "the LSTM's GEMMs in fp32 under autocast too (before 2026-11-28)",
    "torch_stem": "the stem's conv, max-pool and relu as torch ops, before the fused stem (bps_train.stem)",
    "heap": "bps_train.learner_cpu.keep_freed_memory (without it glibc's defaults, the memory trimmed; an "
            "untimed update re-grows the heap first)",
    "all_threads": "every core during the update (else 1)",
    "channels_last": "channels-last weights",
    "bf16": "CPU autocast",
    "compile": "torch.compile of the encoder",
    "split_threads": "each minibatch's environments in halves on two Python threads of one torch thread each, "
                     "the gradients summed (split_update; tried, not adopted)",
    "bf16_acts": "with bf16: the fused stem's output and Fixup's scalar biases in bf16, so the residual stream "
                 "stays bf16 (tried, not adopted)",
}
# before: the code at 9b8a679; fewer_passes: the second pass's encoder; second_pass: the trainer at
# 960c6ca; every_core: throughput's default
NAMED = {"before": "old_encoder+se_mean", "fewer_passes": "se_mean", "every_core": "heap+all_threads",
         "second_pass": "heap+se_mean"}


def lstm_per_step(self, visual, goal, prev_action, state0, not_done):
    """evaluate_sequence as it was before issue 32: one nn.LSTM call per step (masks differ)."""
    t, n = not_done.shape
    f = self.features(visual.flatten(0, 1), goal.flatten(0, 1), prev_action.flatten(0, 1)).view(t, n, -1)
    with M._fp32(f):
        out, _ = stepwise_reference(self.rnn, f.float(), state0[0][0], state0[1][0], not_done)
    return self.actor(out), self.critic(out)[..., 0]


_split_pool = None


def split_update(policy, opt, ro, amp=contextlib.nullcontext, parts: int = 2) -> None:
    """The trainer's update (``train.learn``: its epochs, minibatches, clip and coefficients) with
    each minibatch's environments cut into ``parts`` halves run on as many Python threads (one torch
    thread each; autograd runs a CPU backward on the calling thread), their gradients summed. The
    advantages are normalised per part, not per minibatch: the same work, a slightly other loss."""
    global _split_pool
    from concurrent.futures import ThreadPoolExecutor

    from bps_train.ppo import gae, ppo_loss
    from bps_train.throughput import RECIPE as A

    _split_pool = _split_pool or ThreadPoolExecutor(parts)
    params = list(policy.parameters())
    adv, returns = gae(ro, A.gamma, A.gae_lambda)

    def part(idx):
        loss, _ = ppo_loss(policy, ro, idx, adv, returns, A.clip, A.value_coef, A.entropy_coef, amp)
        return torch.autograd.grad(loss / parts, params, allow_unused=True)

    for _ in range(A.epochs):
        for mb in torch.randperm(ro.actions.shape[1]).chunk(A.minibatches):
            grads = list(_split_pool.map(part, mb.chunk(parts)))
            for i, p in enumerate(params):
                gs = [g[i] for g in grads if g[i] is not None]
                p.grad = sum(gs[1:], gs[0]) if gs else None
            torch.nn.utils.clip_grad_norm_(params, A.max_grad_norm)
            opt.step()


# (class or module, attribute, current code, old code, the lever that selects the old code)
def bf16_block_forward(self, x):
    """FixupSEBlock.forward with its scalar biases in the activations' dtype, so under autocast the
    residual stream stays bf16 (the trainer's adds them in fp32: the stream is fp32)."""
    return promoted_block_forward(self, x, lambda b, t: b.to(t.dtype))


def bf16_stem(x, conv):
    """The fused stem, its output cast to the autocast dtype (bf16 from the first block on)."""
    y = FUSED_STEM(x, conv)
    return y.to(torch.get_autocast_dtype("cpu")) if torch.is_autocast_enabled("cpu") else y


def indexed_lstm_steps(rnn, x, h, c, not_done, gemm_dtype=torch.float32):
    """``models.lstm_steps`` before 2026-11-28: ``gx[t]`` indexed per step, fp32 GEMMs (as ``fp32_lstm``)."""
    x = x.float()
    gx = F.linear(x, rnn.weight_ih_l0, rnn.bias_ih_l0 + rnn.bias_hh_l0)
    w_hh = rnn.weight_hh_l0.t()
    keep = not_done.to(x.dtype)[..., None]
    outs = []
    for t in range(x.shape[0]):
        h, c = h * keep[t], c * keep[t]
        i, f, g, o = torch.addmm(gx[t], h, w_hh).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs), (h, c)


def fp32_lstm_steps(rnn, x, h, c, not_done, gemm_dtype=torch.float32):
    """``models.lstm_steps`` as the policy called it before 2026-11-28: fp32 GEMMs under autocast too."""
    return LSTM_STEPS(rnn, x, h, c, not_done)


FUSED_STEM = M.stem_pool_relu
LSTM_STEPS = M.lstm_steps
CODE = [(M.FixupSEBlock, "forward", M.FixupSEBlock.forward, promoted_block_forward, "promoted_adds"),
        (M, "lstm_steps", M.lstm_steps, indexed_lstm_steps, "indexed_lstm"),
        (M, "lstm_steps", M.lstm_steps, fp32_lstm_steps, "fp32_lstm"),
        (M, "stem_pool_relu", M.stem_pool_relu, torch_stem, "torch_stem"),
        (M, "stem_pool_relu", M.stem_pool_relu, bf16_stem, "bf16_acts"),
        (M.FixupSEBlock, "forward", M.FixupSEBlock.forward, bf16_block_forward, "bf16_acts"),
        (M.Policy, "evaluate_sequence", M.Policy.evaluate_sequence, lstm_per_step, "lstm_per_step"),
        (M.SEResNet9, "forward", M.SEResNet9.forward, reference_encoder, "old_encoder"),
        (M.SqueezeExcite, "weights", M.SqueezeExcite.weights, reference_se_weights, "se_mean")]


def use_code(levers) -> None:
    """Point the classes at the old (or tried) or the current code for this variant."""
    for cls, attr, now, old, lever in CODE:
        if lever in levers or getattr(cls, attr) is old:   # a lever's code never undoes another's
            setattr(cls, attr, old if lever in levers else now)


def cpu_and_faults():
    """(process CPU seconds, kernel seconds, minor page faults) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime, r.ru_minflt


def main(argv=None):
    levers = "\n".join(f"  {k}: {v}" for k, v in LEVERS.items())
    named = "\n".join(f"  {k} = {v}" for k, v in NAMED.items())
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=f"levers:\n{levers}\nnamed variants:\n{named}")
    ap.add_argument("--num-envs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="before,fewer_passes,heap,every_core")
    ap.add_argument("--minibatches", type=int, default=0,
                    help="PPO minibatches per update (0: the trainer's, 2); more = smaller minibatches")
    a = ap.parse_args(argv)
    if a.minibatches:   # ppo_update and split_update read throughput.RECIPE when called
        import bps_train.throughput as tp
        tp.RECIPE = dataclasses.replace(tp.RECIPE, minibatches=a.minibatches)
    variants = a.variants.split(",")
    levers = {v: {lv for tok in v.split("+") for lv in NAMED.get(tok, tok).split("+") if lv} for v in variants}
    for v, ls in levers.items():
        if ls - set(LEVERS):
            ap.error(f"variant {v!r}: unknown lever(s) {sorted(ls - set(LEVERS))} (choose from {', '.join(LEVERS)})")
    if any("bf16" in ls for ls in levers.values()) and not M.cpu_bf16_supported():
        print("this CPU's oneDNN has no bf16 kernels: bf16 variants skipped", flush=True)
        variants = [v for v in variants if "bf16" not in levers[v]]
    torch.set_num_threads(1)
    cores = update_threads(0)
    n, t = a.num_envs, a.steps
    ro = random_rollout(n, t, (64, 64), 256)
    setups = {}
    for v in variants:
        torch.manual_seed(0)
        p = M.Policy(1, hidden=256, width=16)
        if "channels_last" in levers[v]:
            p = p.to(memory_format=torch.channels_last)
        if "compile" in levers[v]:
            p.encoder = torch.compile(p.encoder)
        amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if "bf16" in levers[v] else contextlib.nullcontext
        setups[v] = (p, amp, Lamb(p.parameters(), lr=1e-4))
    rows = {v: {"wall": [], "cpu": [], "sys": [], "faults": []} for v in variants}
    first = {}
    for r in range(a.rounds + 1):  # round 0 warms up (oneDNN primitives; compile)
        kept = False
        for v in variants:
            p, amp, opt = setups[v]
            use_code(levers[v])
            keep_freed_memory("heap" in levers[v])
            torch.set_num_threads(cores if "all_threads" in levers[v] else 1)
            update = split_update if "split_threads" in levers[v] else ppo_update
            if "heap" in levers[v] and not kept and r:  # the heap as the trainer has it after its first update
                update(p, opt, ro, amp)
            kept = "heap" in levers[v]
            c0, s0, f0 = cpu_and_faults()
            t0 = time.perf_counter()
            update(p, opt, ro, amp)
            dt = time.perf_counter() - t0
            c1, s1, f1 = cpu_and_faults()
            torch.set_num_threads(1)
            if r:
                for k, x in zip(rows[v], (n * t / dt, n * t / (c1 - c0), s1 - s0, f1 - f0)):
                    rows[v][k].append(x)
            else:
                first[v] = dt
    use_code(set())
    infer = {v: [] for v in variants}
    b = n // 2
    x, goal = torch.rand(b, 64, 64, 1), torch.rand(b, 2)
    prev, nd = torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool)
    with torch.no_grad():
        for r in range(a.rounds + 1):
            for v in variants:
                p, amp, _ = setups[v]
                use_code(levers[v])
                keep_freed_memory("heap" in levers[v])
                st = p.initial_state(b)
                t0 = time.perf_counter()
                for _ in range(8):
                    with amp():
                        p(x, goal, prev, st, nd)
                if r:
                    infer[v].append(8 * b / (time.perf_counter() - t0))
    use_code(set())
    base = variants[0]
    out = {"num_envs": n, "steps": t, "update_threads_all": cores, "loadavg_at_end": os.getloadavg()[0]}
    for v in variants:
        w, c = max(rows[v]["wall"]), max(rows[v]["cpu"])
        out[v] = {"levers": sorted(levers[v]), "learn_fps": round(w, 1), "learn_fps_rounds": [round(x) for x in rows[v]["wall"]],
                  "learn_vs_" + base: round(w / max(rows[base]["wall"]), 3), "learn_cpu_fps": round(c, 1),
                  "learn_cpu_vs_" + base: round(c / max(rows[base]["cpu"]), 3),
                  "sys_s": round(min(rows[v]["sys"]), 2), "page_faults": min(rows[v]["faults"]),
                  "infer_fps": round(max(infer[v]), 1), "infer_vs_" + base: round(max(infer[v]) / max(infer[base]), 3),
                  "first_round_s": round(first[v], 1)}
        print(f"{v:16s} learn {w:6.0f} fps (x{w / max(rows[base]['wall']):.2f})  by CPU time {c:6.0f} "
              f"(x{c / max(rows[base]['cpu']):.2f})  sys {min(rows[v]['sys']):.2f} s  faults {min(rows[v]['faults']):7d}  "
              f"infer {max(infer[v]):6.0f} fps (x{max(infer[v]) / max(infer[base]):.2f})", flush=True)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
