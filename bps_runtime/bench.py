"""The environment benchmark (``bps-assets bench``, ``benchmarks/bench_env.py``): ratios
measured in one run, on one machine, with the same scenes and agents.

- env step fps with random actions vs render-only fps (the same batch of poses rendered with
  the same renderer, nothing else): goal >= 0.8;
- with a scene swap every ``swap_every`` steps: p99 step time / p50 step time of the run
  without swaps (goal <= 1.15) and the number of steps that waited for a load (goal 0);
- peak RSS of the process.
"""
from __future__ import annotations

import resource
import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class BenchOptions:
    num_envs: int = 1024
    scenes: int = 8              # resident scene slots
    resolution: int = 64
    steps: int = 100             # timed steps per phase
    warmup: int = 5
    swap_every: int = 50         # steps between scene swaps in the swap phase
    swap_steps: int | None = None  # timed steps of the swap phase (default 3 * swap_every)
    renderer: str = "embree"
    sensors: tuple = ("depth",)
    split: str | None = "train"
    seed: int = 0


DEFAULTS = BenchOptions()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _step_times(env, steps: int, gen) -> tuple[np.ndarray, int]:
    import torch

    times, waited = [], 0
    for _ in range(steps):
        a = torch.randint(0, 4, (env.batch_size,), generator=gen)
        t = time.perf_counter()
        _, _, _, info = env.step(a)
        times.append(time.perf_counter() - t)
        waited += int(info["waited_for_load"])
    return np.asarray(times), waited


def run(manifest, options: BenchOptions = DEFAULTS, echo=print) -> dict:
    import torch

    from .api import make
    from .task import yaw_to_quat

    o = options
    res: dict = {"options": asdict(o)}
    gen = torch.Generator().manual_seed(o.seed)
    common = dict(split=o.split, num_envs=o.num_envs, sensors=o.sensors, resolution=(o.resolution, o.resolution),
                  renderer=o.renderer, seed=o.seed, episodes="sample")

    # phase 1: no swaps -- env step vs render only
    t0 = time.perf_counter()
    env = make(manifest, cache={"slots": o.scenes, "swap_every": None}, **common)
    env.reset()
    res["setup_seconds"] = time.perf_counter() - t0
    try:
        res["resident_scenes"] = len(set(env.world.scenes.resident_names()))
        _step_times(env, o.warmup, gen)
        steady, waited0 = _step_times(env, o.steps, gen)
        # render only: the same renderer, the same agents' current poses, nothing else
        w = env.world
        keys, pos, rot = env.scene.clone(), env.pos.clone(), yaw_to_quat(env.yaw)
        w.render(keys, pos, rot, env.sensors)
        rt = []
        for _ in range(max(o.steps // 2, 5)):
            t = time.perf_counter()
            w.render(keys, pos, rot, env.sensors)
            rt.append(time.perf_counter() - t)
        rt = np.asarray(rt)
    finally:
        env.close()
    res["env_fps"] = o.num_envs * len(steady) / steady.sum()
    res["render_fps"] = o.num_envs * len(rt) / rt.sum()
    res["env_over_render"] = res["env_fps"] / res["render_fps"]
    res["p50_step_ms_no_swaps"] = float(np.percentile(steady, 50) * 1e3)
    res["p99_step_ms_no_swaps"] = float(np.percentile(steady, 99) * 1e3)
    res["waited_steps_no_swaps"] = waited0
    echo(f"env step: {res['env_fps']:.0f} fps, render only: {res['render_fps']:.0f} fps, "
         f"ratio {res['env_over_render']:.3f} (goal >= 0.8)")

    # phase 2: a scene swap every `swap_every` steps
    env = make(manifest, cache={"slots": o.scenes, "swap_every": o.swap_every}, **common)
    env.reset()
    try:
        _step_times(env, o.warmup, gen)
        swaps, waited = _step_times(env, o.swap_steps or 3 * o.swap_every, gen)
        res["swaps"] = int(getattr(env.world.scenes, "swap_count", lambda: -1)())
    finally:
        env.close()
    res["p50_step_ms_swaps"] = float(np.percentile(swaps, 50) * 1e3)
    res["p99_step_ms_swaps"] = float(np.percentile(swaps, 99) * 1e3)
    res["p99_swaps_over_p50_no_swaps"] = res["p99_step_ms_swaps"] / res["p50_step_ms_no_swaps"]
    res["waited_steps_swaps"] = waited
    res["peak_rss_mb"] = _peak_rss_mb()
    echo(f"with a swap every {o.swap_every} steps ({res['swaps']} swaps): p99 step {res['p99_step_ms_swaps']:.1f} ms "
         f"/ p50 without swaps {res['p50_step_ms_no_swaps']:.1f} ms = {res['p99_swaps_over_p50_no_swaps']:.3f} "
         f"(goal <= 1.15); steps that waited for a load: {waited} (goal 0)")
    echo(f"peak RSS: {res['peak_rss_mb']:.0f} MB")
    return res
