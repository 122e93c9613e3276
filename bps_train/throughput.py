"""Does inference overlap simulation? Rollout speed with two groups (double buffering) vs one,
against the serial and perfect-overlap predictions from the parts measured in the same run.

    python -m bps_train.throughput MANIFEST [--num-envs 32] [--steps 64] [--threads 1]
    python -m bps_train.throughput --learn-only [--num-envs 32] [--steps 32] [--threads 1]

Prints frames/s of: simulation only (random moves), policy inference only, rollout collection
with 1 group (send then recv of everything: no overlap possible) and with 2 groups, the
learner: one PPO update (2 minibatches: forward, backward, clip, LAMB step) on a rollout of
random frames, in frames/s of rollout learned from (``--learn-only``: that alone, no dataset),
and end to end (a 2-group rollout then the update on it, as the trainer loops); then
``learn_over_sim`` and ``end_to_end_over_sim`` (issue 32: >= 1 and >= 0.45). ``--bf16``: bf16 autocast.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch

from bps_train.lamb import Lamb
from bps_train.models import Policy, cpu_bf16_supported
from bps_train.ppo import Rollout, gae, ppo_loss
from bps_train.train import collect_rollout, measure_sim_fps, start_rollouts


def ppo_update(policy, opt, ro, g, amp=contextlib.nullcontext) -> None:
    """One PPO update as the trainer's (2 minibatches: forward, backward, clip, LAMB step)."""
    adv, returns = gae(ro, 0.99, 0.95)
    for mb in torch.randperm(ro.actions.shape[1], generator=g).chunk(2):
        loss, _ = ppo_loss(policy, ro, mb, adv, returns, 0.2, 0.5, 0.01, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()


def measure_learn_fps(policy, num_envs: int, steps: int, resolution, hidden: int, repeats: int,
                      amp=contextlib.nullcontext) -> float:
    """Frames/s of the PPO update alone (the trainer's minibatch loop) on random frames."""
    g = torch.Generator().manual_seed(0)
    ro = Rollout.empty(steps, num_envs, (*resolution, 1), torch.float32, hidden, "cpu")
    ro.visual.uniform_(generator=g)
    ro.goal.uniform_(generator=g)
    ro.not_done.fill_(True)
    ro.actions.random_(0, 4, generator=g)
    ro.rewards.normal_(generator=g)
    opt = Lamb(policy.parameters(), lr=1e-4)
    best = 0.0
    for _ in range(repeats + 1):  # the first pass warms up (oneDNN primitive creation)
        t0 = time.perf_counter()
        ppo_update(policy, opt, ro, g, amp)
        best = max(best, num_envs * steps / (time.perf_counter() - t0))
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("manifest", nargs="?", help="dataset manifest (not needed with --learn-only)")
    p.add_argument("--learn-only", action="store_true", help="time the PPO update alone")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--steps", type=int, default=64, help="batched steps per measurement")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--bf16", action="store_true",
                   help="bf16 autocast of the policy (CPUs with oneDNN bf16 kernels; measurement only: the trainer "
                        "never autocasts on CPU)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    n, res = a.num_envs, (a.resolution, a.resolution)
    policy = Policy(1, hidden=a.hidden, width=a.width, resolution=res)
    amp = contextlib.nullcontext
    if a.bf16 and cpu_bf16_supported():
        amp = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    print(f"autocast: {'bf16' if amp is not contextlib.nullcontext else 'none (fp32)'}", flush=True)
    if a.learn_only:
        fps = measure_learn_fps(policy, n, a.steps, res, a.hidden, a.repeats, amp)
        print(f"{'learn':28s} {fps:8.2f}")
        print(json.dumps({"learn": round(fps, 2)}))
        return {"learn": fps}
    if a.manifest is None:
        p.error("MANIFEST is needed unless --learn-only")
    import bps_runtime

    out = {"sim": [], "infer": [], "collect_1_group": [], "collect_2_groups": [], "end_to_end": []}
    opt, g = Lamb(policy.parameters(), lr=1e-4), torch.Generator().manual_seed(0)
    for _ in range(a.repeats):
        for groups in (1, 2):
            env = bps_runtime.make(a.manifest, split="train", num_envs=n, batch_size=n // groups, seed=0,
                                   resolution=res, episodes="sample")
            if groups == 1:
                out["sim"].append(measure_sim_fps(env, a.steps, 0, actions=(1, 2, 3)))
            else:  # send() must return at once: the group is simulated on the runtime's thread
                env.async_reset()
                for _ in range(groups):
                    env.recv()
                ts = tr = 0.0
                for _ in range(a.steps):
                    t0 = time.perf_counter()
                    env.send(torch.ones(n // groups, dtype=torch.long))
                    t1 = time.perf_counter()
                    env.recv()
                    ts, tr = ts + t1 - t0, tr + time.perf_counter() - t1
                out.setdefault("send_ms", []).append(1e3 * ts / a.steps)
                out.setdefault("recv_ms", []).append(1e3 * tr / a.steps)
            ro = Rollout.empty(a.steps, n, (*res, 1), torch.float32, a.hidden, "cpu")
            carry = start_rollouts(env, policy, torch.device("cpu"))
            collect_rollout(env, policy, ro, carry, "depth", amp)  # warm-up
            t0 = time.perf_counter()
            collect_rollout(env, policy, ro, carry, "depth", amp)
            out[f"collect_{groups}_group{'s' if groups > 1 else ''}"].append(n * a.steps / (time.perf_counter() - t0))
            if groups == 2:  # the trainer's loop: a rollout, then the PPO update on it
                ppo_update(policy, opt, ro, g, amp)  # warm-up
                t0 = time.perf_counter()
                collect_rollout(env, policy, ro, carry, "depth", amp)
                ppo_update(policy, opt, ro, g, amp)
                out["end_to_end"].append(n * a.steps / (time.perf_counter() - t0))
            env.close()
        # inference alone, on the batch size of one group of two
        b = n // 2
        x, goal = torch.rand(b, *res, 1), torch.rand(b, 2)
        prev, nd, st = torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool), policy.initial_state(b)
        with torch.no_grad(), amp():
            policy(x, goal, prev, st, nd)
            t0 = time.perf_counter()
            for _ in range(2 * a.steps):
                policy(x, goal, prev, st, nd)
            out["infer"].append(2 * a.steps * b / (time.perf_counter() - t0))
    out["learn"] = [measure_learn_fps(policy, n, a.steps, res, a.hidden, a.repeats, amp)]
    best = {k: (min(v) if k.endswith("_ms") else max(v)) for k, v in out.items()}
    best.update(learn_over_sim=best["learn"] / best["sim"], end_to_end_over_sim=best["end_to_end"] / best["sim"])
    serial = 1 / (1 / best["sim"] + 1 / best["infer"])
    perfect = min(best["sim"], best["infer"])
    best.update(serial_prediction=serial, perfect_overlap_prediction=perfect,
                overlap_gain=best["collect_2_groups"] / best["collect_1_group"])
    for k, v in best.items():
        print(f"{k:28s} {v:8.2f}")
    print(json.dumps({k: round(v, 2) for k, v in best.items()}))
    return best


if __name__ == "__main__":
    main()
