"""Semantic sensor cost: depth + semantic fps vs depth-only fps (and RGB with / without
semantic), same agents, same frame, measured interleaved in one run.

    python benchmarks/bench_semantic.py                    # 1024 envs, 8 scenes of ~600K tris, 64x64
    python benchmarks/bench_semantic.py --envs 64 --scenes 2 --triangles 50000 --iters 3   # quick

Scenes are bench_render's procedural apartments (walls, floors, 40 furniture boxes), merged in
memory with one instance id per wall / floor / ceiling / furniture box (``tri_object``), and
attached straight to the renderer (untextured: RGB is material x vertex colour). The issue's
bar: depth + semantic >= 0.85 of depth-only fps on 2 cores (Embree). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import numpy as np


def semantic_scene(seed: int, triangles: int):
    """A procedural apartment (habitat frame) with one instance id per part: floor 1, ceiling 2,
    walls 3.., furniture box b 100 + b (its five faces)."""
    from bench_render import procedural_apartment

    from bps_assets.packed_scene import PackedScene
    from bps_assets.transforms.merged import merge

    doc = procedural_apartment(seed, triangles)
    part_ids = [1, 2] + [3 + k for k in range(8)] + [100 + k // 5 for k in range(len(doc.meshes) - 10)]
    g = merge(doc)
    tri_object = np.repeat(np.asarray(part_ids, np.int32), [len(m.indices) for m in doc.meshes])
    return PackedScene(header={}, positions=g.positions, indices=g.indices, uvs=g.uvs, colors=g.colors,
                       tri_material=g.tri_material, material_color=g.material_color,
                       material_texture=np.full(len(g.material_color), -1, np.int32), tri_object=tri_object)


def main(argv=None):
    from bench_render import frame_arguments

    ap = frame_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]), iters=9)
    ap.add_argument("--backend", default="embree", choices=("embree", "warp"))
    args = ap.parse_args(argv)

    import torch

    from bps_runtime.render import RenderOptions, build_shading_data, make_renderer

    torch.set_num_threads(1)
    opts = RenderOptions(resolution=(args.res, args.res), threads=args.threads)
    r = make_renderer(args.backend, opts)
    tris, id_bytes = [], []
    for s in range(args.scenes):
        sc = semantic_scene(s, args.triangles)
        sd = build_shading_data(sc)
        r.attach(s, sd, r.prepare(sd, sc.positions, sc.indices))
        tris.append(len(sc.indices))
        id_bytes.append(sd.tri_object.nbytes)
    rng = np.random.default_rng(0)
    sid = np.arange(args.envs) % args.scenes
    pos = np.c_[rng.uniform(0.5, 11.5, args.envs), np.zeros(args.envs), rng.uniform(-9.5, -0.5, args.envs)].astype(np.float32)
    yaw = rng.uniform(-np.pi, np.pi, args.envs).astype(np.float32)

    cases = {"depth": ("depth",), "depth_semantic": ("depth", "semantic"),
             "depth_rgb": ("depth", "rgb"), "depth_rgb_semantic": ("depth", "rgb", "semantic")}
    times = {k: [] for k in cases}
    cpu = {k: [] for k in cases}  # CPU seconds of all threads: less sensitive to other processes
    for s in cases.values():
        r.render(sid, pos, yaw, s)  # warm-up (Warp compiles here)
    # interleaved, the order reversed every other round (ABBA: drift cancels); the machine is
    # shared, so each ratio is the median of per-round ratios of neighbours in time
    for i in range(args.iters):
        for k, s in (list(cases.items()) if i % 2 == 0 else list(cases.items())[::-1]):
            t, c = time.perf_counter(), time.process_time()
            r.render(sid, pos, yaw, s)
            times[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    med = {k: float(np.median(v)) for k, v in times.items()}

    def ratio(base, with_sem, t=times):
        return round(float(np.median(np.asarray(t[base]) / np.asarray(t[with_sem]))), 3)

    sem = r.render(sid, pos, yaw, ("semantic",))["semantic"]
    res = {
        "load_avg_1min": round(os.getloadavg()[0], 2), "backend": args.backend, "envs": args.envs,
        "scenes": args.scenes, "resolution": args.res, "threads": args.threads, "iters": args.iters,
        "triangles_per_scene": int(np.mean(tris)),
        **{f"{k}_fps": round(args.envs / v, 1) for k, v in med.items()},
        "depth_semantic_over_depth": ratio("depth", "depth_semantic"),
        "depth_rgb_semantic_over_depth_rgb": ratio("depth_rgb", "depth_rgb_semantic"),
        "cpu_time_depth_semantic_over_depth": ratio("depth", "depth_semantic", cpu),
        "cpu_time_depth_rgb_semantic_over_depth_rgb": ratio("depth_rgb", "depth_rgb_semantic", cpu),
        "ratio_spread_depth": [round(float(q), 3) for q in np.percentile(
            np.asarray(times["depth"]) / np.asarray(times["depth_semantic"]), [25, 75])],
        "semantic_bytes_per_triangle": round(sum(id_bytes) / sum(tris), 3),
        "pixels_with_an_object": round(float((sem > 0).float().mean()), 3),
    }
    r.close()
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(0 if main() else 1)
