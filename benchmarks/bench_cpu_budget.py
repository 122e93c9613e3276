"""Where a CPU training frame's time goes, and the end-to-end ceiling that implies (issue 32 item 3).

    python benchmarks/bench_cpu_budget.py MANIFEST [--num-envs 128] [--steps 32] [--rounds 2]

Measures in one process, each phase by wall clock and by process CPU microseconds per frame
(best of ``--rounds``): simulation alone with 1 group of NUM_ENVS and with 2 groups of NUM_ENVS/2
(random moves, no STOP, as the trainer's simulation-only figure; and with STOP, reset-heavy
like an untrained policy); the trainer's ``collect_rollout`` with 1 and 2 groups, with the
policy, with the policy's batch cut in halves acting on two Python threads (1 group only: a lever
tried and not adopted) and with a policy of no cost that never stops (the loop's own cost); the
policy's inference alone (NUM_ENVS/2, one thread); the PPO update on one thread and on every
core. Then the budget: CPU microseconds a frame needs (simulation + inference + the update on
one thread) and the end-to-end fraction of simulation-only that it allows with every core busy
all the time, beside the fractions measured (``throughput``'s loop: a rollout, then the update; with
2 groups, the trainer's default, and with 1). Simulation-only is the best window of the rounds
and of one more at the end; run it on a quiet machine (the phases run one after another).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bps_assets.host import available_cores  # noqa: E402
from bps_train.lamb import Lamb  # noqa: E402
from bps_train.learner_cpu import keep_freed_memory, threads, update_threads  # noqa: E402
from bps_train.ppo import Rollout  # noqa: E402
from bps_train.throughput import RECIPE, Phases, measure_learn_fps, ppo_update  # noqa: E402
from bps_train.train import autocast_of, build_policy, collect_rollout, sim_window, start_rollouts  # noqa: E402


class NoCostPolicy(torch.nn.Module):
    """Logits that never pick STOP (action 0), zero values, the state unchanged: a rollout with it
    times the collection loop and the simulator, not a policy."""

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden = hidden

    def initial_state(self, n: int, device=None):
        z = torch.zeros(1, n, self.hidden, device=device)
        return (z, z.clone())

    def forward(self, visual, goal, prev_action, state, not_done):
        logits = torch.zeros(visual.shape[0], 4)
        logits[:, 0] = -30.0
        return logits, torch.zeros(visual.shape[0]), state


class SplitAct(torch.nn.Module):
    """``policy``'s forward with the batch cut in ``parts`` run on as many Python threads (one torch
    thread each), the outputs joined: parallel by data instead of inside each op."""

    def __init__(self, policy, amp, parts: int = 2):
        super().__init__()
        from concurrent.futures import ThreadPoolExecutor

        self.policy, self.amp, self.parts = policy, amp, parts
        self.pool = ThreadPoolExecutor(parts)

    def initial_state(self, n: int, device=None):
        return self.policy.initial_state(n, device)

    def forward(self, visual, goal, prev_action, state, not_done):
        edges = [visual.shape[0] * i // self.parts for i in range(self.parts + 1)]

        def run(i):   # autocast and no_grad are per thread
            s = slice(edges[i], edges[i + 1])
            with torch.no_grad(), self.amp():
                return self.policy(visual[s], goal[s], prev_action[s], (state[0][:, s], state[1][:, s]), not_done[s])
        outs = list(self.pool.map(run, range(self.parts)))
        return (torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs]),
                tuple(torch.cat([o[2][j] for o in outs], 1) for j in range(2)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest")
    ap.add_argument("--num-envs", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args(argv)
    import bps_runtime

    keep_freed_memory()
    torch.set_num_threads(1)   # the rollout's torch threads on the CPU (the trainer's --act-threads)
    torch.manual_seed(0)
    n, t, res, hidden = a.num_envs, a.steps, (64, 64), 256
    policy = build_policy(dataclasses.replace(RECIPE, hidden=hidden, width=16, resolution=64), "cpu")
    amp = autocast_of(RECIPE, "cpu")
    free, split = NoCostPolicy(hidden), SplitAct(policy, amp)
    opt = Lamb(policy.parameters(), lr=1e-4)   # throughput's optimizer
    learn_threads = update_threads(0)
    ph, frames = Phases(), n * t
    for _ in range(a.rounds):
        for groups in (1, 2):
            env = bps_runtime.make(a.manifest, split="train", num_envs=n, batch_size=n // groups, seed=0,
                                   resolution=res, episodes="sample")
            sim_window(env, 2, 0, actions=(1, 2, 3))   # warm-up
            ph.add(f"sim_{groups}g", *sim_window(env, t, 0, actions=(1, 2, 3)))
            ph.add(f"sim_{groups}g_with_stop", *sim_window(env, t, 0))
            ro = Rollout.empty(t, n, (*res, 1), torch.float32, hidden, "cpu")
            acts = [(f"collect_{groups}g", policy), (f"collect_{groups}g_no_cost_policy", free)]
            for key, act in acts + ([("collect_1g_split_act", split)] if groups == 1 else []):
                carry = start_rollouts(env, act, torch.device("cpu"))
                collect_rollout(env, act, ro, carry, "depth", amp)   # warm-up
                ph.record(key, frames, lambda: collect_rollout(env, act, ro, carry, "depth", amp))
                if act is policy:   # throughput's end to end: a rollout, then the update
                    with threads(learn_threads):
                        ppo_update(policy, opt, ro, amp)

                    def loop():
                        collect_rollout(env, policy, ro, carry, "depth", amp)
                        with threads(learn_threads):
                            ppo_update(policy, opt, ro, amp)
                    ph.record("end_to_end" if groups == 2 else "end_to_end_1_group", frames, loop)
            env.close()
        b = n // 2
        x, goal = torch.rand(b, *res, 1), torch.rand(b, 2)
        prev, nd, st = torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool), policy.initial_state(b)
        with torch.no_grad(), amp():
            policy(x, goal, prev, st, nd)

            def infer():
                for _ in range(2 * t):
                    policy(x, goal, prev, st, nd)
            ph.record("infer", 2 * t * b, infer)
    # simulation once more at the end: the denominator is the best of windows before and after the
    # other phases, so a slow moment at the start does not flatter every ratio to it
    env = bps_runtime.make(a.manifest, split="train", num_envs=n, batch_size=n, seed=0, resolution=res,
                           episodes="sample")
    sim_window(env, 2, 0, actions=(1, 2, 3))
    ph.add("sim_1g", *sim_window(env, t, 0, actions=(1, 2, 3)))
    env.close()
    measure_learn_fps(policy, n, t, res, hidden, a.rounds, amp, 1, ph, "learn_1_thread")
    measure_learn_fps(policy, n, t, res, hidden, a.rounds, amp, learn_threads, ph, "learn")
    best = ph.best()
    cores = available_cores()
    sim = best["sim_1g"]
    need = best["sim_1g_core_us"] + best["infer_core_us"] + best["learn_1_thread_core_us"]
    ceiling = 1e6 * cores / need
    out = {"cores": cores, "num_envs": n, "steps": t, "loadavg": os.getloadavg()[0],
           **{k: round(v, 2) for k, v in best.items()},
           "frame_core_us_needed": round(need, 1), "ceiling_fps": round(ceiling, 1),
           "ceiling_over_sim": round(ceiling / sim, 3), "end_to_end_over_sim": round(best["end_to_end"] / sim, 3),
           "sim_2g_over_1g": round(best["sim_2g"] / sim, 3),
           "collect_loop_over_sim": round(best["collect_1g_no_cost_policy"] / sim, 3),
           "end_to_end_1_group_over_sim": round(best["end_to_end_1_group"] / sim, 3),
           "split_act_over_1g": round(best["collect_1g_split_act"] / best["collect_1g"], 3)}
    for k in best:
        if not k.endswith(("_cores", "_core_us")):
            print(f"{k:34s} {best[k]:8.0f} fps  {best[k + '_core_us']:6.1f} core-us/frame  "
                  f"{best[k + '_cores']:4.2f} cores", flush=True)
    print(f"a frame needs {need:.0f} core-us (simulation + inference + update on one thread): at most "
          f"{ceiling:.0f} fps on {cores} cores = {ceiling / sim:.2f} of simulation-only; measured end to end "
          f"{best['end_to_end'] / sim:.2f} (2 groups), {best['end_to_end_1_group'] / sim:.2f} (1 group)")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
