"""Per-step torch ops, Warp launches and host syncs of the batched PointNav env on CPU
(cli.step_profile), for 64 / 1024 envs and 1 / 8 resident scenes (small generated
rooms of tests/inmemory_scenes.py, Embree renderer, 16x16 depth).

    python benchmarks/bench_step_counts.py
    python benchmarks/bench_step_counts.py --renderer warp            # the frame as a Warp launch
    python benchmarks/bench_step_counts.py --renderer warp --capture  # ... and step + frame as one graph
    python benchmarks/bench_step_counts.py --task objectnav  # ObjectNav (1 / 50 goal objects too)
    python benchmarks/bench_step_counts.py --task imagenav   # ImageNav (RGB; goal images at queue time)
    python benchmarks/bench_step_counts.py --task instance_imagenav   # goal images from each episode's camera
    python benchmarks/bench_step_counts.py --noise depth=redwood,actuation=locobot-ilqr   # with noise

``--capture`` records the graphs on Warp's CPU device (``fused_step.CAPTURE_DEVICES``, as the
tests do; one CPU thread): what a captured CUDA step launches, counted here.

Counts are the averages over 3 steady-state steps; the "render" phase (the renderer's own host
conversions) and the "input check" phase (the CPU env's action range check) are printed apart
when the code marks them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # inmemory_scenes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--renderer", choices=("embree", "warp"), default="embree")
    ap.add_argument("--capture", action="store_true", help="capture step + frame (Warp CPU graphs; --renderer warp)")
    from bps_runtime.tasks import TASKS

    ap.add_argument("--task", choices=TASKS, default="pointnav")
    ap.add_argument("--noise", default="", help="make()'s noise as key=value text or a preset (docs/NOISE.md); "
                                               "its launches are the 'noise' phase")
    a = ap.parse_args(argv)
    if a.capture and a.renderer != "warp":
        ap.error("--capture needs --renderer warp (the frame is in the graph only as a Warp launch)")
    from inmemory_scenes import make_env, room

    from cli.step_profile import count_ops

    cases = [(n, k, 1) for n, k in ((64, 1), (1024, 1), (64, 8), (1024, 8))]
    if a.task != "pointnav":
        cases += [(64, 1, 50), (1024, 8, 50)]
    for n, k, goals in cases:
        scenes = [room(f"r{i}", 3.0 + 0.5 * i, 4.0, pillars=[(1.0, -2.0, 1.5, -1.5)]) for i in range(k)]
        kw = {} if a.renderer == "embree" else {"renderer": "warp"}
        if a.noise:
            kw["noise"] = a.noise
        if a.task != "pointnav":
            from bps_runtime.tasks import task_spec
            eps, targets = _episodes(scenes, goals, a.task != "imagenav", a.task == "instance_imagenav")
            kw.update(task=task_spec(a.task).defaults, episodes=eps, goals=targets)
            if a.task != "objectnav":
                kw["sensors"] = ("rgb",)
        if a.capture:
            from bps_runtime.step import fused as fused_step
            fused_step.CAPTURE_DEVICES = ("cuda", "cpu")
            kw.update(capture_graph=True, threads=1)
        env = make_env(scenes, num_envs=n, seed=0, **kw)
        env.reset()
        g = torch.Generator().manual_seed(0)
        for _ in range(3):
            env.step(torch.randint(0, env.num_actions, (n,), generator=g))
        tot = {}
        for _ in range(3):
            with count_ops() as c:
                env.step(torch.randint(0, env.num_actions, (n,), generator=g))
            for p in c.phases():
                t = tot.setdefault(p, [0, 0, 0])
                t[0] += c.total("torch_ops", p)
                t[1] += c.total("warp_launches", p)
                t[2] += c.total("syncs", p)
        parts = "; ".join(f"{p}: {a / 3:.0f} torch ops, {b / 3:.0f} warp launches, {s / 3:.0f} syncs"
                          for p, (a, b, s) in sorted(tot.items()))
        graph = f" [{env.capture_status}]" if a.capture else ""
        gl = f" goal objects={goals}" if a.task != "pointnav" else ""
        gl += f" noise={a.noise}" if a.noise else ""
        print(f"{a.task} envs={n} scenes={k}{gl}{graph}: {parts}", flush=True)
        env.close()


def _episodes(scenes, goals: int, objectnav: bool, camera: bool = False, per_scene: int = 64):
    """Dataset episodes per scene; ObjectNav: every episode's field is the distance to the nearest
    of ``goals`` points (two categories per scene); ``camera``: each episode's goal has a goal
    camera (InstanceImageNav's ``image_goals``) 1.2 m above its goal point, 16 x 16 px."""
    import numpy as np

    from bps_runtime.episodes.dataset import EpisodeGoal

    out, targets = {}, {}
    for j, (name, _, _, _, nm) in enumerate(scenes):
        pts = np.asarray(nm.sample_navigable_point(2 * goals + per_scene, seed=j), np.float64)
        eps = []
        for i in range(per_scene):
            s = pts[2 * goals + i]
            e = {"episode_id": str(i), "scene_id": name, "start_position": s.tolist(),
                 "start_rotation": [0.0, 0.0, 0.0, 1.0], "goals": [{"position": pts[i % (2 * goals)].tolist()}]}
            if objectnav:
                c = i % 2
                targets.setdefault(name, {})[str(i)] = EpisodeGoal(pts[c * goals:(c + 1) * goals], f"{name}_{c}", c)
            if camera:
                cam = {"position": (pts[i % (2 * goals)] + [0.0, 1.2, 0.0]).tolist(), "rotation": [0.0, 0.0, 0.0, 1.0],
                       "hfov": 60.0 + 10 * (i % 3), "image_dimensions": [16, 16]}
                e["goals"][0]["image_goals"] = [cam]
                e["goal_image_id"] = 0
            eps.append(e)
        out[name] = eps
    return out, targets


if __name__ == "__main__":
    main()
