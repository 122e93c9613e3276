"""Where the non-render time of one CPU env step goes (issue 11): wall and thread-CPU time, median
per step, of each part of ``Simulator.step_group``, measured by wrapping the parts with
timers in this process (the env is otherwise unchanged):

- host between steps (Python bookkeeping; of which ``EpisodeRing.refill``, episode sampling);
- ``FusedStep.step``: copies, the refill kernel, the step kernel, the head snapshot; the step
  kernel's CPU time summed over its env ranges and of the longest range (its critical path);
- the render's host-side inputs (``check_render_inputs``, ``group_by_scene``), and, in code
  where it is a serial pass after the render threads, ``finish_depth``;
- the info dict; the step minus its render (wall); and the CPU time of the episode draws on the
  field worker thread (``EpisodeSupply._fill``, off the simulator thread; mean per step).

    python benchmarks/bench_step_split.py MANIFEST --threads 2 [--steps 20 --num-envs 1024]

Runs against older checkouts too (PYTHONPATH at one): the step kernel is then one launch.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections import defaultdict


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: every usable core)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--num-envs", type=int, default=1024)
    ap.add_argument("--scenes", type=int, default=8)
    ap.add_argument("--resolution", type=int, default=64)
    a = ap.parse_args(argv)

    import torch
    import warp as wp

    import bps_runtime.render.embree as emb
    from bps_runtime.step import fused as fs
    from bps_runtime.step import ring
    from bps_runtime.step import kernels as sk
    from bps_runtime.env.make import make

    wall, cpu = defaultdict(list), defaultdict(list)

    def timed(name, fn):
        def w(*args, **kw):
            t, c = time.perf_counter(), time.thread_time()
            r = fn(*args, **kw)
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.thread_time() - c)
            return r
        return w

    ranges, lock, launch = [], threading.Lock(), wp.launch

    def counted_launch(kernel, *args, **kw):   # CPU time of each launch, on whichever thread
        c = time.thread_time()
        r = launch(kernel, *args, **kw)
        dc = time.thread_time() - c
        if kernel.key == "step_kernel":
            with lock:
                ranges.append(dc)
        else:
            cpu["launch " + kernel.key].append(dc)
        return r

    wp.launch = counted_launch
    n = a.num_envs
    env = make(a.manifest, split="train", num_envs=n, sensors=("depth",), device="cpu",
               resolution=(a.resolution, a.resolution), renderer="embree", seed=0, episodes="sample",
               cache={"slots": a.scenes, "swap_every": None}, threads=a.threads)
    E = type(env.sim)   # the simulator: what runs on the env's simulator thread
    E._host_between_steps = timed("host between steps (Python)", E._host_between_steps)
    ring.EpisodeRing.refill = timed("  of which EpisodeRing.refill (episode sampling)", ring.EpisodeRing.refill)
    fs.FusedStep.step = timed("FusedStep.step (copies, refill + step kernels)", fs.FusedStep.step)
    E._render = timed("render in the step", E._render)
    emb.check_render_inputs = timed("  render inputs: check_render_inputs", emb.check_render_inputs)
    emb.groups = timed("  render inputs: group agents by scene", emb.groups)
    if not hasattr(sk, "CpuLaunches"):       # older code: one serial depth pass after the threads
        emb.finish_depth = timed("  render: finish_depth (serial pass)", emb.finish_depth)
    E._info = timed("info dict", E._info)
    E.step_group = timed("step on the simulator thread", E.step_group)
    from bps_runtime.episodes import sampled as es
    fill_cpu = [0.0]                          # newer code: episodes drawn ahead on the field worker
    if hasattr(es.SampledEpisodes, "_fill"):
        fill = es.SampledEpisodes._fill

        def timed_fill(*args):
            c = time.thread_time()
            try:
                return fill(*args)
            finally:
                if threading.current_thread().name.startswith("bps-nav-fields"):
                    with lock:
                        fill_cpu[0] += time.thread_time() - c
        es.SampledEpisodes._fill = timed_fill
    ksum, kmax = [], []
    gen = torch.Generator().manual_seed(0)
    try:
        env.reset()
        for i in range(a.warmup + a.steps):
            if i == a.warmup:
                wall.clear(), cpu.clear(), ksum.clear(), kmax.clear()
                fill_cpu[0] = 0.0
            ranges.clear()
            env.step(torch.randint(0, 4, (env.batch_size,), generator=gen))
            ksum.append(sum(ranges))
            kmax.append(max(ranges))
        threads = env.world.threads
    finally:
        env.close()
    ms = lambda v: statistics.median(v) * 1e3  # noqa: E731
    print(f"{n} envs, {threads} threads, {a.steps} steps; load average at the end {os.getloadavg()[0]:.1f}")
    print(f"{'part (median ms per step)':52s} {'wall':>8s} {'cpu':>8s}")
    for k in wall:
        print(f"{k:52s} {ms(wall[k]):8.2f} {ms(cpu[k]):8.2f}")
    for k in cpu:
        if k not in wall:
            print(f"{k:52s} {'':8s} {ms(cpu[k]):8.2f}")
    print(f"{'step kernel cpu: all ranges / the longest range':52s} {ms(ksum):8.2f} {ms(kmax):8.2f}")
    print(f"{'episode draws on the field worker (cpu, mean)':52s} {'':8s} {fill_cpu[0] / a.steps * 1e3:8.2f}")
    rest = [s - r for s, r in zip(wall["step on the simulator thread"], wall["render in the step"])]
    print(f"{'step minus its render (wall)':52s} {ms(rest):8.2f}")


if __name__ == "__main__":
    main()
