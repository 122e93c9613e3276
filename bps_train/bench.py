"""Does inference overlap simulation? Rollout speed with two groups (double buffering) vs one,
against the serial and perfect-overlap predictions from the parts measured in the same run.

    python -m bps_train.bench MANIFEST [--num-envs 32] [--steps 64] [--threads 1]

Prints frames/s of: simulation only (random moves), policy inference only, rollout collection
with 1 group (send then recv of everything: no overlap possible) and with 2 groups.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from bps_train.models import Policy
from bps_train.ppo import Rollout
from bps_train.train import collect_rollout, measure_sim_fps, start_rollouts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("manifest")
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--steps", type=int, default=64, help="batched steps per measurement")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args(argv)
    import bps_runtime

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    n, res = a.num_envs, (a.resolution, a.resolution)
    policy = Policy(1, hidden=a.hidden, width=a.width, resolution=res)
    out = {"sim": [], "infer": [], "collect_1_group": [], "collect_2_groups": []}
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
            collect_rollout(env, policy, ro, carry, "depth")  # warm-up
            t0 = time.perf_counter()
            collect_rollout(env, policy, ro, carry, "depth")
            out[f"collect_{groups}_group{'s' if groups > 1 else ''}"].append(n * a.steps / (time.perf_counter() - t0))
            env.close()
        # inference alone, on the batch size of one group of two
        b = n // 2
        x, g = torch.rand(b, *res, 1), torch.rand(b, 2)
        prev, nd, st = torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool), policy.initial_state(b)
        with torch.no_grad():
            policy(x, g, prev, st, nd)
            t0 = time.perf_counter()
            for _ in range(2 * a.steps):
                policy(x, g, prev, st, nd)
            out["infer"].append(2 * a.steps * b / (time.perf_counter() - t0))
    best = {k: (min(v) if k.endswith("_ms") else max(v)) for k, v in out.items()}
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
