"""What one env step asks of the CUDA driver, counted by the torch profiler (issue 11 measured
88cbd84 this way: 5,121 kernel launches, 463 stream synchronisations and 492 memcpys per
1,024-env step). An independent check of ``step_profile``'s counts, which intercept torch ops
and Warp launches in Python: this one counts the CUDA runtime / driver calls themselves
(Warp launches through the driver API, torch through the runtime API; a replayed graph is one
graph launch), per step, and the share of the host's profiled time spent in them.

    python benchmarks/profile_step.py MANIFEST --device cuda --num-envs 1024 [--capture-graph]

On the CPU there are no driver calls to count (the run only checks the script). The profiler
sees the driver calls of every thread (CUPTI), the env's simulator thread's included.
"""
from __future__ import annotations

import argparse
import re
from collections import Counter

# CUDA runtime / driver API calls, by what they do (names as the profiler reports them)
KINDS = {
    "kernel launches": re.compile(r"^(cudaLaunchKernel(ExC)?|cuLaunchKernel(Ex)?|cudaLaunchCooperativeKernel)"),
    "graph launches": re.compile(r"^(cudaGraphLaunch|cuGraphLaunch)"),
    "synchronisations": re.compile(r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|"
                                   r"cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize)"),
    "memcpys": re.compile(r"^(cudaMemcpy|cuMemcpy)"),
    "memsets": re.compile(r"^(cudaMemset|cuMemset)"),
}


def classify(events) -> tuple[Counter, float, float]:
    """(calls per kind, host us in those calls, host us of all top-level events) of profiler
    events (``prof.events()``: objects with ``name``, ``cpu_time_total``)."""
    calls, api_us, total_us = Counter(), 0.0, 0.0
    for e in events:
        total_us += getattr(e, "self_cpu_time_total", 0.0)
        for kind, pat in KINDS.items():
            if pat.match(e.name):
                calls[kind] += 1
                api_us += getattr(e, "self_cpu_time_total", 0.0)
                break
    return calls, api_us, total_us


def top_kernels(averages, steps: int, k: int = 8) -> list[tuple[str, float, float]]:
    """(name, calls per step, device us per step) of the ``k`` ops with the most self device time
    (``prof.key_averages()``): where a step's GPU time goes."""
    rows = []
    for e in averages:
        us = getattr(e, "self_device_time_total", 0.0) or 0.0
        if us > 0:
            rows.append((e.key[:90], e.count / steps, us / steps))
    return sorted(rows, key=lambda r: -r[2])[:k]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--num-envs", type=int, default=1024)
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10, help="profiled steps")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--capture-graph", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from bps_runtime.env.make import make

    env = make(a.manifest, num_envs=a.num_envs, device=a.device, resolution=(a.resolution, a.resolution),
               renderer="embree" if a.device == "cpu" else "warp", episodes="sample",
               capture_graph=a.capture_graph, threads=a.threads)
    cuda = env.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    acts = [torch.randint(0, 4, (env.batch_size,), generator=gen).to(env.device) for _ in range(a.warmup + a.steps)]
    try:
        env.reset()
        for x in acts[:a.warmup]:
            env.step(x)
        sync()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for x in acts[a.warmup:]:
                env.step(x)
            sync()
        status = env.capture_status
    finally:
        env.close()
    events = prof.events()
    calls, api_us, total_us = classify(events)
    n = a.steps
    print(f"{a.num_envs} envs on {a.device}, {n} profiled steps, step graph: {status}")
    if cuda:
        per = ", ".join(f"{calls[k] / n:.1f} {k}" for k in KINDS)
        print(f"per step: {per}")
        print(f"host time in these calls: {api_us / max(total_us, 1e-9):.1%} of the profiled host time")
        for name, calls_per, us_per in top_kernels(prof.key_averages(), n):
            print(f"  device {us_per:9.1f} us/step  {calls_per:5.1f} calls/step  {name}")
    else:
        print("no CUDA device: no driver calls to count (on the CPU, benchmarks/bench_step_counts.py "
              "counts the step's torch ops and Warp launches in the simulator thread)")

if __name__ == "__main__":
    main()
