"""Host CPU of one env step on the simulator thread (thread-CPU time of the step minus its
render and minus the CPU inside ``warp.launch``): what stays on the host when the step's device
work is asynchronous CUDA launches. Prints the median per part (between steps, FusedStep.step
without launches, info dict, rest) for the ``random`` and ``turn`` action policies.

    python benchmarks/bench_host_step.py MANIFEST [--base /path/to/older/checkout] [--reps N]

``--base``: each configuration also runs against that checkout (alternating, lowest median of
the reps; last column base / this tree). What each part covers and how to read the control
row: docs/PERFORMANCE.md, "Benchmark methods".
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("host total", "between steps", "  learn", "  refill", "  upload", "FusedStep.step w/o launches",
         "info dict", "rest (after_step, waits, counters)")


def _measure(manifest: str, n: int, policy: str, steps: int, warmup: int, resolution: int, scenes: int) -> dict:
    """Median thread-CPU ms per step of each part (this process's bps_runtime)."""
    import torch
    import warp as wp

    from bps_runtime.step import fused as fs
    from bps_runtime.step import ring
    from bps_runtime.env import world as wd
    from bps_runtime.env.make import make

    acc: dict[str, float] = {}
    depth = threading.local()

    def timed(name, fn):
        def w(*args, **kw):
            c = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                if threading.current_thread().name.startswith("bps-sim"):
                    acc[name] = acc.get(name, 0.0) + time.thread_time() - c
        return w

    launch = wp.launch

    def counted_launch(*args, **kw):   # kernel time on Warp's CPU device: not host bookkeeping
        c = time.thread_time()
        try:
            return launch(*args, **kw)
        finally:
            if threading.current_thread().name.startswith("bps-sim") and getattr(depth, "step", False):
                acc["launches"] = acc.get("launches", 0.0) + time.thread_time() - c

    step = fs.FusedStep.step

    def marked_step(*args, **kw):
        depth.step = True
        try:
            return step(*args, **kw)
        finally:
            depth.step = False

    saved = []

    def patch(owner, name, new):
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    env = make(manifest, split="train", num_envs=n, sensors=("depth",), device="cpu",
               resolution=(resolution, resolution), renderer="embree", seed=0, episodes="sample",
               cache={"slots": scenes, "swap_every": None}, threads=2)
    E = type(env.sim)   # the simulator: what runs on the env's simulator thread
    patch(wp, "launch", counted_launch)
    patch(fs.FusedStep, "step", timed("FusedStep.step", marked_step))
    patch(E, "step_group", timed("step", E.step_group))
    patch(E, "_render", timed("render", E._render))
    patch(E, "_host_between_steps", timed("between steps", E._host_between_steps))
    patch(E, "_info", timed("info dict", E._info))
    patch(ring.EpisodeRing, "learn", timed("  learn", ring.EpisodeRing.learn))
    patch(ring.EpisodeRing, "refill", timed("  refill", ring.EpisodeRing.refill))
    patch(fs.FusedStep, "upload", timed("  upload", fs.FusedStep.upload))
    patch(wd.World, "after_step", timed("after_step", wd.World.after_step))
    per_step: dict[str, list] = {k: [] for k in PARTS}
    gen = torch.Generator().manual_seed(0)
    try:
        env.reset()
        for i in range(warmup + steps):
            if policy == "random":
                a = torch.randint(0, 4, (env.batch_size,), generator=gen)
            else:
                a = torch.full((env.batch_size,), 2, dtype=torch.int64)
            acc.clear()
            env.step(a)
            if i < warmup:
                continue
            g = acc.get
            host = g("step", 0) - g("render", 0) - g("launches", 0)
            row = {"host total": host, "between steps": g("between steps", 0), "  learn": g("  learn", 0),
                   "  refill": g("  refill", 0), "  upload": g("  upload", 0),
                   "FusedStep.step w/o launches": g("FusedStep.step", 0) - g("launches", 0),
                   "info dict": g("info dict", 0)}
            row["rest (after_step, waits, counters)"] = host - row["between steps"] - row[
                "FusedStep.step w/o launches"] - row["info dict"]
            for k, v in row.items():
                per_step[k].append(v)
    finally:
        env.close()
        for owner, name, old in reversed(saved):
            setattr(owner, name, old)
    return {k: statistics.median(v) * 1e3 for k, v in per_step.items()}


def _worker(a) -> None:
    out = {}
    for n in a.num_envs:
        for policy in a.policies:
            out[f"{n}/{policy}"] = _measure(a.manifest, n, policy, a.steps, a.warmup, a.resolution, a.scenes)
    print("RESULT " + json.dumps(out), flush=True)


def run_tree(tree: Path, script: str, args: list) -> dict:
    """One ``--worker`` run of benchmark ``script`` (with ``args``) in a child process with ``tree``
    first on PYTHONPATH (its bps); -> the dict its ``RESULT`` line holds. Exits on a failed run."""
    env = dict(os.environ, PYTHONPATH=str(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, str(Path(script).resolve()), *map(str, args), "--worker"]
    p = subprocess.run(cmd, env=env, cwd=str(tree), capture_output=True, text=True)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        sys.exit(f"{tree}: benchmark run failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def tree_options(ap: argparse.ArgumentParser, reps: int) -> None:
    """The options of a benchmark that compares checkouts: ``--base``, ``--reps`` and the child's
    ``--worker`` (hidden)."""
    ap.add_argument("--base", type=Path, default=None, help="an older checkout to compare with (same venv)")
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)


def alternating(base: Path | None, reps: int):
    """(name, tree) to run, ``reps`` rounds: this checkout, and ``base`` where given, taking turns to
    run first (a ratio of the two is then fair to the load's drift)."""
    trees = [("this", ROOT)] + ([("base", base.resolve())] if base is not None else [])
    for rep in range(reps):
        yield from (trees if rep % 2 == 0 else trees[::-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest")
    tree_options(ap, reps=2)
    ap.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--policies", nargs="+", choices=("random", "turn"), default=["random", "turn"])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--resolution", type=int, default=16)
    ap.add_argument("--scenes", type=int, default=8)
    a = ap.parse_args(argv)
    a.manifest = str(Path(a.manifest).resolve())
    if a.worker:
        return _worker(a)
    args = [a.manifest, "--steps", a.steps, "--warmup", a.warmup, "--resolution", a.resolution, "--scenes", a.scenes,
            "--num-envs", *a.num_envs, "--policies", *a.policies]
    best: dict = {}
    for name, tree in alternating(a.base, a.reps):
        for cfg, parts in run_tree(tree, __file__, args).items():
            for k, v in parts.items():
                key = (name, cfg, k)
                best[key] = min(best.get(key, v), v)
    print(f"host CPU per step on the simulator thread (ms, lowest median of {a.reps} runs of {a.steps} steps); "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    if a.base is not None:
        print(f"base = {a.base}")
    for n in a.num_envs:
        for policy in a.policies:
            cfg = f"{n}/{policy}"
            print(f"\n{n} envs, {policy} actions")
            print(f"  {'part':38s} {'this':>8s}" + (f" {'base':>8s} {'base/this':>10s}" if a.base else ""))
            for k in PARTS:
                v = best[("this", cfg, k)]
                line = f"  {k:38s} {v:8.3f}"
                if a.base is not None:
                    b = best[("base", cfg, k)]
                    line += f" {b:8.3f} {b / v if v > 1e-6 else float('inf'):10.2f}"
                print(line)


if __name__ == "__main__":
    main()
