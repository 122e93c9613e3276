"""Env step with noise / without, measured in one run: two PointNav envs over the same in-memory
rooms (tests/inmemory_scenes.py, Embree, depth), one with ``--noise`` (default: Redwood depth,
Gaussian RGB when RGB is on, LoCoBot ILQR actuation), one without, stepped in alternating blocks
so load changes hit both alike; prints each env's median step time and the fps ratio
(noise on / off; the issue's goal: >= 0.9 at 1,024 envs, 64x64 depth), and the process's CPU
time per step of each (all threads: what the noise costs, less bound to the machine's load).

    python benchmarks/bench_noise.py                      # 1,024 envs, 64x64 depth, 8 rooms
    python benchmarks/bench_noise.py --num-envs 256 --rounds 4 --sensors depth rgb
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # inmemory_scenes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-envs", type=int, default=1024)
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--scenes", type=int, default=8)
    ap.add_argument("--sensors", nargs="+", default=["depth"])
    ap.add_argument("--noise", default="", help="make()'s noise (key=value text or a preset); default: all on")
    ap.add_argument("--rounds", type=int, default=6, help="alternating blocks per env")
    ap.add_argument("--block", type=int, default=5, help="timed steps per block")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: every usable core)")
    a = ap.parse_args(argv)
    from inmemory_scenes import make_env, room

    noise = a.noise or ("depth=redwood,actuation=locobot-ilqr" + (",rgb=gaussian" if "rgb" in a.sensors else ""))
    scenes = [room(f"r{i}", 3.0 + 0.5 * i, 4.0, pillars=[(1.0, -2.0, 1.5, -1.5)]) for i in range(a.scenes)]
    kw = dict(num_envs=a.num_envs, seed=0, resolution=(a.resolution, a.resolution), sensors=tuple(a.sensors),
              threads=a.threads or None)
    envs = {"off": make_env(scenes, **kw), "on": make_env(scenes, noise=noise, **kw)}
    gen = torch.Generator().manual_seed(0)
    times: dict = {"off": [], "on": []}
    cpu: dict = {"off": 0.0, "on": 0.0}     # the process's CPU seconds (all threads): less load-bound
    for env in envs.values():
        env.reset()
        for _ in range(3):   # warm-up: kernels compiled and loaded
            env.step(torch.randint(0, env.num_actions, (a.num_envs,), generator=gen))
    for _ in range(a.rounds):
        for name, env in envs.items():
            for _ in range(a.block):
                act = torch.randint(0, env.num_actions, (a.num_envs,), generator=gen)
                t, c = time.perf_counter(), time.process_time()
                env.step(act)
                times[name].append(time.perf_counter() - t)
                cpu[name] += time.process_time() - c
    for env in envs.values():
        env.close()
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    n = len(times["on"])
    print(f"envs={a.num_envs} {a.resolution}x{a.resolution} {'+'.join(a.sensors)} scenes={a.scenes} "
          f"noise={noise}: median step off {off * 1e3:.1f} ms, on {on * 1e3:.1f} ms; "
          f"fps on / off = {off / on:.3f} (sum over {len(times['on'])} steps each: "
          f"{sum(times['off']) / sum(times['on']):.3f}); CPU time per step off {cpu['off'] / n * 1e3:.1f} ms, "
          f"on {cpu['on'] / n * 1e3:.1f} ms (off / on {cpu['off'] / cpu['on']:.3f}); load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
