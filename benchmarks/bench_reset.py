"""CPU cost of an episode reset in sampled-episode simulation (issue 32 item 3): process CPU per
frame of the batched PointNav env on the CPU under two action streams, uniform random (STOP 1
step in 4, as an untrained policy) and random moves without STOP, and where the difference goes:
rows ``sim`` (split into ``its render`` and ``the rest``, plus one ``release_many`` call),
``no render`` (the renderer answered by one kept frame: the reset's own CPU) and ``replay``
(the renderer alone on each stream's poses: what the views cost). What each row times:
docs/PERFORMANCE.md, "Benchmark methods".

    python benchmarks/bench_reset.py MANIFEST [--base /path/to/older/checkout] [--reps 3]

``--base``: the same measurement of that checkout, alternating with this tree (one child process
per run, each tree on its own PYTHONPATH); medians over ``--reps``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from bench_host_step import alternating, run_tree, tree_options  # noqa: E402   (a child process per tree and run)

STREAMS = {"uniform": (0, 1, 2, 3), "no_stop": (1, 2, 3)}
ROWS = ("sim", "  its render", "  the rest", "no render", "replay")


def _window(env, steps: int, seed: int, actions, start=None) -> tuple[float, float]:
    """Process CPU us per frame over ``steps`` batched steps, and episodes started per frame;
    ``start()``, if given, after the reset (whose render is not one of the steps')."""
    import torch

    g = torch.Generator().manual_seed(seed)
    choice = torch.tensor(actions)
    rand = lambda: choice[torch.randint(0, len(actions), (env.batch_size,), generator=g)]  # noqa: E731
    groups = env.num_envs // env.batch_size
    env.async_reset()
    for _ in range(groups):
        env.recv()
    if start is not None:
        start()
    for _ in range(groups):
        env.send(rand())
    e0, c0 = env.stats["episodes"], time.process_time()
    for _ in range(steps * groups):
        env.recv()
        env.send(rand())
    for _ in range(groups):
        env.recv()
    frames = (steps + 1) * env.num_envs
    return 1e6 * (time.process_time() - c0) / frames, (env.stats["episodes"] - e0) / frames


def _median_depth(env, render, poses) -> float:
    """Median depth (m) of the frames at ``poses`` (after the timing: how near the walls are)."""
    import torch

    d = torch.cat([render(si, p, q, ("depth",))["depth"].reshape(-1) for si, p, q in poses]).float()
    lo, hi = env.depth_range
    return float(lo + d.median() * (hi - lo) if env.normalize_depth else d.median())


def _worker(a) -> None:
    import torch

    import bps_runtime

    torch.set_num_threads(1)
    env = bps_runtime.make(a.manifest, split=a.split, num_envs=a.num_envs, batch_size=a.num_envs, seed=0,
                           resolution=(a.resolution, a.resolution), episodes="sample", threads=a.threads)
    world, render = env.world, env.world.render
    poses: list = []

    spent = [0.0]   # thread CPU of the render calls in the window
    window = [False]   # from _window's start: the renders of the steps whose frames it counts
    release = [0.0, 0]   # thread CPU and count of the supply's release_many calls in the window
    release_many = world.episodes.release_many

    def recording(si, p, q, sensors):
        if not window[0]:
            return render(si, p, q, sensors)
        poses.append((si.clone(), p.clone(), q.clone()))
        c = time.thread_time()
        try:
            return render(si, p, q, sensors)
        finally:
            spent[0] += time.thread_time() - c

    def releasing(scene_indices, rows):
        c = time.thread_time()
        try:
            return release_many(scene_indices, rows)
        finally:
            if window[0]:
                release[0] += time.thread_time() - c
                release[1] += 1

    def begin():
        poses.clear()
        spent[0], release[0], release[1], window[0] = 0.0, 0.0, 0, True

    kept: dict = {}

    def no_render(si, p, q, sensors):
        if not kept:
            kept.update(render(si, p, q, sensors))
        return kept

    out: dict = {}
    try:
        _window(env, a.warmup, 0, STREAMS["uniform"])
        for rep in range(a.reps):
            for name, acts in STREAMS.items():
                world.render, world.episodes.release_many = recording, releasing
                us, resets = _window(env, a.steps, rep, acts, start=begin)
                world.render, window[0] = render, False
                del world.episodes.release_many
                its = 1e6 * spent[0] / (len(poses) * a.num_envs)   # the window's renders: its frames'
                if release[1]:
                    out.setdefault(f"release_many/{name}", []).append(1e6 * release[0] / release[1])
                out.setdefault(f"sim/{name}", []).append(us)
                out.setdefault(f"  its render/{name}", []).append(its)
                out.setdefault(f"  the rest/{name}", []).append(us - its)
                out.setdefault(f"resets/{name}", []).append(resets)
                c0 = time.process_time()
                for si, p, q in poses:
                    render(si, p, q, env.sensors)
                out.setdefault(f"replay/{name}", []).append(1e6 * (time.process_time() - c0) / (len(poses) * a.num_envs))
                out.setdefault(f"depth/{name}", []).append(_median_depth(env, render, poses[::10]))
            for name, acts in STREAMS.items():
                world.render = no_render
                us, resets = _window(env, 3 * a.steps, rep, acts)
                world.render = render
                out.setdefault(f"no render/{name}", []).append(us)
                out.setdefault(f"resets nr/{name}", []).append(resets)
    finally:
        world.render = render
        world.episodes.__dict__.pop("release_many", None)
        env.close()
    print("RESULT " + json.dumps(out), flush=True)


def _report(name: str, runs: dict, threads: int) -> None:
    med = {k: statistics.median(v) for k, v in runs.items()}
    ru, rn = med["resets/uniform"], med["resets/no_stop"]
    print(f"\n{name}: resets per frame uniform {ru:.3f}, no STOP {rn:.4f}; median depth of the frames "
          f"{med['depth/uniform']:.2f} m uniform, {med['depth/no_stop']:.2f} m no STOP")
    print(f"  {'CPU us per frame':18s} {'uniform':>9s} {'no STOP':>9s} {'diff':>8s} {'no_stop/uniform':>16s}"
          f" {'per reset us':>13s}")
    for row in ROWS:
        u, n = med[f"{row}/uniform"], med[f"{row}/no_stop"]
        if row == "no render":
            du = med["resets nr/uniform"] - med["resets nr/no_stop"]
        else:
            du = ru - rn
        per = f"{(u - n) / du:13.1f}" if du > 0 else f"{'-':>13s}"   # no more resets: no figure
        print(f"  {row:18s} {u:9.1f} {n:9.1f} {u - n:8.1f} {n / u:16.3f} {per}")
    print("  (per reset: the difference over the difference in resets per frame; 'replay' is the views' "
          "cost, no reset work)")
    if "release_many/uniform" in med:   # a no-STOP window may end no episode
        print(f"  release_many: {med['release_many/uniform']:.1f} us a call (thread CPU), uniform stream")
    if threads != 1:
        print("  (--threads > 1: 'its render' is the calling thread's share only, 'the rest' holds the others')")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest")
    tree_options(ap, reps=3)
    ap.add_argument("--split", default="train")
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100, help="steps per timed window (no render: 3x)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    a.manifest = str(Path(a.manifest).resolve())
    if a.worker:
        return _worker(a)
    args = [a.manifest, "--split", a.split, "--num-envs", a.num_envs, "--steps", a.steps, "--warmup", a.warmup,
            "--resolution", a.resolution, "--threads", a.threads, "--reps", 1]
    runs: dict = {}
    for name, tree in alternating(a.base, a.reps):
        for k, v in run_tree(tree, __file__, args).items():
            runs.setdefault((name, tree), {}).setdefault(k, []).extend(v)
    print(f"{a.num_envs} envs, {a.resolution}x{a.resolution} depth, {a.threads} thread(s), sampled episodes; "
          f"medians of {a.reps} runs of {a.steps} steps; load average at the end {os.getloadavg()[0]:.1f}")
    for (name, tree), got in runs.items():
        _report(f"{name} ({tree})", got, a.threads)


if __name__ == "__main__":
    main()
