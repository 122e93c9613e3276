"""The rollout's act path, eager policy vs the frozen TorchScript copy (bps_train.frozen_act),
interleaved in one process; ratios frozen / eager (issue 32 item 3, "CPU learner, third pass").

    python benchmarks/bench_rollout_act.py [MANIFEST] [--num-envs 128] [--steps 32] [--rounds 6]
                                           [--act-threads 1,2]

Prints, per variant: inference alone (one group of NUM_ENVS / 2, one thread) by wall clock and
by CPU time; inference while a Python thread spins beside it (what the GIL costs each: the
eager forward takes the GIL back after every op, the frozen graph once per call); the cost of
re-freezing after a weight change. With MANIFEST, also 2-group rollout collection (the
trainer's ``collect_rollout``) by wall clock and by CPU microseconds per frame, the variants in
turn round after round (median of the per-round ratios), and collection with each torch thread
count of ``--act-threads`` (the rollout's inference threads), and (Linux) how each variant's
CPU splits between the threads: the policy's (main), the simulator's (``bps-sim``), the
renderer's (``bps-embree``) and the rest, in CPU microseconds per frame.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bps_train.frozen_act import FrozenAct  # noqa: E402
from bps_train.learner_cpu import keep_freed_memory, threads  # noqa: E402
from bps_train.throughput import Phases  # noqa: E402
from bps_train.train import Args, build_policy  # noqa: E402


def infer_loop(act, inputs, calls: int):
    """``calls`` forward passes of ``act`` on ``inputs`` (no autograd)."""
    with torch.no_grad():
        for _ in range(calls):
            act(*inputs)


def beside_spinner(fn) -> float:
    """Seconds ``fn()`` takes while another Python thread spins (holding the GIL when it can)."""
    stop = threading.Event()

    def spin():
        for _ in iter(stop.is_set, True):   # a busy loop on purpose: it takes the GIL whenever it can
            pass
    th = threading.Thread(target=spin, daemon=True)
    th.start()
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    stop.set()
    th.join()
    return dt


def thread_cpu() -> dict:
    """CPU seconds so far of each of this process's threads, by role (Linux /proc; {} elsewhere)."""
    roles = {t.native_id: ("main" if t is threading.main_thread() else t.name.split("_")[0])
             for t in threading.enumerate()}
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:   # the thread ended meanwhile
            continue
        role = roles.get(int(tid), "other")
        out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick   # utime + stime
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", help="dataset manifest (rollout collection; omit for inference only)")
    ap.add_argument("--num-envs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--act-threads", default="1,2", help="torch threads of the rollout's inference to compare "
                                                          "(the first: frozen_act_gain_best's)")
    a = ap.parse_args(argv)
    keep_freed_memory()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = build_policy(dataclasses.replace(Args(), hidden=256, width=16, resolution=64), "cpu")
    frozen = FrozenAct(policy)
    b = a.num_envs // 2
    inputs = (torch.rand(b, 64, 64, 1), torch.rand(b, 2), torch.zeros(b, dtype=torch.long),
              policy.initial_state(b), torch.ones(b, dtype=torch.bool))
    acts = {"eager": policy, "frozen": frozen}
    for act in acts.values():
        infer_loop(act, inputs, 2)
    ph, spin = Phases(), {k: [] for k in acts}
    calls = 2 * a.steps
    for _ in range(a.rounds):
        for k, act in acts.items():
            ph.record("infer_" + k, calls * b, lambda act=act: infer_loop(act, inputs, calls))
            spin[k].append(calls * b / beside_spinner(lambda act=act: infer_loop(act, inputs, 8)) * 8 / calls)
    refreeze = []
    for _ in range(3):
        with torch.no_grad():
            policy.critic.bias.add_(0.0)   # bumps the version: the next call re-freezes
        c0 = time.process_time()
        frozen(*inputs)
        refreeze.append(1e3 * (time.process_time() - c0))
    out = {"num_envs": a.num_envs, "loadavg": os.getloadavg()[0], **{k: round(v, 2) for k, v in ph.best().items()},
           "infer_beside_spinner_eager": round(max(spin["eager"]), 1),
           "infer_beside_spinner_frozen": round(max(spin["frozen"]), 1),
           "refreeze_and_call_ms_cpu": round(min(refreeze), 1)}
    out["infer_gain"] = round(out["infer_frozen"] / out["infer_eager"], 3)
    out["infer_cpu_gain"] = round(out["infer_eager_core_us"] / out["infer_frozen_core_us"], 3)
    out["infer_beside_spinner_gain"] = round(out["infer_beside_spinner_frozen"] / out["infer_beside_spinner_eager"], 3)
    if a.manifest:
        out.update(collect(a, policy, frozen))
    for k, v in out.items():
        print(f"{k:34s} {v}")
    print(json.dumps(out))
    return out


def collect(a, policy, frozen) -> dict:
    """2-group collection, eager vs frozen (and the frozen copy on each ``--act-threads``), in turn."""
    import bps_runtime
    from bps_train.ppo import Rollout
    from bps_train.train import collect_rollout, start_rollouts

    n = a.num_envs
    env = bps_runtime.make(a.manifest, split="train", num_envs=n, batch_size=n // 2, seed=0, resolution=(64, 64),
                           episodes="sample")
    try:
        ro = Rollout.empty(a.steps, n, (64, 64, 1), torch.float32, 256, "cpu")
        carry = start_rollouts(env, policy, torch.device("cpu"))
        variants = {"collect_eager": (policy, 1)}
        for k in (int(x) for x in a.act_threads.split(",")):
            variants[f"collect_frozen_{k}_thread{'s' if k > 1 else ''}"] = (frozen, k)
        for act, k in variants.values():  # warm-up
            with threads(k):
                collect_rollout(env, act, ro, carry, "depth")
        ph, split = Phases(), {name: {} for name in variants}
        for _ in range(a.rounds):
            for name, (act, k) in variants.items():
                before = thread_cpu()
                with threads(k):
                    ph.record(name, n * a.steps, lambda act=act: collect_rollout(env, act, ro, carry, "depth"))
                for role, sec in thread_cpu().items():
                    split[name][role] = split[name].get(role, 0.0) + sec - before.get(role, 0.0)
    finally:
        env.close()
    out = {k: round(v, 2) for k, v in ph.best().items()}
    for name, roles in split.items():   # CPU us per frame by thread role, over all rounds
        out[name + "_thread_core_us"] = {r: round(1e6 * sec / (a.rounds * n * a.steps)) for r, sec in sorted(roles.items())}
    base = next(name for name in variants if name != "collect_eager")   # the first --act-threads count
    for name in variants:
        if name == "collect_eager":
            continue
        wall = [f / e for f, e in zip(ph.fps[name], ph.fps["collect_eager"])]
        cpu = [e[1] / f[1] for f, e in zip(ph.cpu[name], ph.cpu["collect_eager"])]
        out[name + "_gain_median"] = round(statistics.median(wall), 3)
        out[name + "_cpu_gain_median"] = round(statistics.median(cpu), 3)
    out["frozen_act_gain_best"] = round(out[base] / out["collect_eager"], 3)
    return out


if __name__ == "__main__":
    main()
