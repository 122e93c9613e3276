"""The demo's last step (bps_assets.pipeline.demo's extension point): run the batched PointNav
environment on the demo dataset with random actions and print its speed."""
from __future__ import annotations

import time

DEMO_ENVS = 32
DEMO_STEPS = 100


def run_env(manifest_path, num_envs: int = DEMO_ENVS, steps: int = DEMO_STEPS, split: str | None = "train",
            echo=print, seed: int = 0, **make_kw) -> dict:
    """make() -> reset -> ``steps`` random steps; returns and prints fps and episode stats."""
    import torch

    from bps_runtime import make

    t0 = time.perf_counter()
    env = make(manifest_path, split=split, num_envs=num_envs, seed=seed, **make_kw)
    try:
        env.reset()
        t_ready = time.perf_counter() - t0
        g = torch.Generator().manual_seed(seed)
        episodes = successes = waited = 0
        spl_sum = 0.0
        t1 = time.perf_counter()
        for _ in range(steps):
            obs, reward, done, info = env.step(torch.randint(0, 4, (env.batch_size,), generator=g))
            episodes += int(done.sum())
            successes += int(info["episode"]["success"].sum())
            spl_sum += float(info["episode"]["spl"].sum())
            waited += int(info["waited_for_load"])
        dt = time.perf_counter() - t1
        scenes = sorted(set(env.world.scenes.resident_scene_ids()))
    finally:
        env.close()
    res = {"num_envs": num_envs, "steps": steps, "fps": num_envs * steps / dt, "setup_seconds": t_ready,
           "episodes": episodes, "successes": successes, "mean_spl": spl_sum / max(episodes, 1),
           "waited_steps": waited, "scenes": scenes}
    shape = "x".join(map(str, obs[next(iter(obs))].shape[1:3]))
    echo(f"  {num_envs} envs over {len(scenes)} resident scenes, {shape} {', '.join(k for k in obs if k != 'pointgoal')}: "
         f"{res['fps']:.0f} env steps/s ({steps} batched steps in {dt:.1f} s, setup {t_ready:.1f} s)")
    echo(f"  random policy: {episodes} episodes ended, {successes} successes, "
         f"mean SPL {res['mean_spl']:.3f}; steps that waited for a scene load or an episode's "
         f"preparation: {waited}")
    return res


def _demo_env_step(ctx):
    ctx.results["env"] = run_env(ctx.manifest_path, echo=ctx.echo)


def demo_steps():
    """The runtime's steps of ``bps_assets.pipeline.demo``: one step that runs the batched
    PointNav env on the demo dataset and prints its frame rate."""
    from bps_assets.pipeline.demo import DemoStep

    return [DemoStep("env", f"run the batched PointNav env ({DEMO_ENVS} agents, random actions) and print fps",
                     _demo_env_step)]
