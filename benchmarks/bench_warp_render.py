"""Where the Warp render kernel's time goes, measured in one process on one device: the renderer's
depth frame (``WarpRenderer.launch_frame`` -> ``warp_kernels.depth_kernel``, no shading code),
the same depth frame from the general ``render_kernel`` (RGB and semantic off, their code
compiled in: the renderer's depth path until 2026-11-27), a lean kernel that reads the whole
table row before tracing (does the row read cost?), and the RGB + semantic frame; device
milliseconds per frame (CUDA events; wall clock on the CPU) and their ratios.

    python benchmarks/bench_warp_render.py MANIFEST --device cuda --num-envs 4096 [--iters 20]

Poses are the agents' own after a few random env steps (sampled PointNav episodes).
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import warp as wp

from bps_runtime.warp_init import init_warp

init_warp()

from bps_runtime.render.warp_kernels import SceneTable, depth_value, quat_to_mat  # noqa: E402


@wp.kernel
def row_first_kernel(tables: wp.array(dtype=SceneTable), scene_index: wp.array(dtype=wp.int64),
                     pos: wp.array(dtype=wp.vec3), quat: wp.array(dtype=Any), dirs: wp.array(dtype=wp.vec3),
                     hw: int, sensor_height: float, depth_mode: int, lo: float, hi: float,
                     depth: wp.array2d(dtype=float)):
    """The depth pixel as the render kernel drew it before: the whole row, then the ray; finished
    (clipped / normalised) as the renderer's kernels finish it, so its pixels can be compared."""
    tid = wp.tid()
    a = tid / hw
    p = tid - a * hw
    s = scene_index[a]
    z = float(0.0)
    if s >= wp.int64(0) and s < wp.int64(tables.shape[0]):
        tab = tables[int(s)]
        if tab.mesh != wp.uint64(0):
            qa = quat[a]
            rot = quat_to_mat(wp.vec4d(wp.float64(qa[0]), wp.float64(qa[1]), wp.float64(qa[2]), wp.float64(qa[3])))
            d = rot * dirs[p]
            q = wp.mesh_query_ray(tab.mesh, pos[a] + wp.vec3(0.0, sensor_height, 0.0), d, 1.0e30)
            if q.result:
                z = q.t
    depth[a, p] = depth_value(z, depth_mode, lo, hi)


wp.overload(row_first_kernel, {"quat": wp.array(dtype=wp.vec4f)})
wp.overload(row_first_kernel, {"quat": wp.array(dtype=wp.vec4d)})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--num-envs", type=int, default=4096)
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args(argv)

    import torch

    from bps_runtime.env.make import make

    env = make(a.manifest, num_envs=a.num_envs, device=a.device, resolution=(a.resolution, a.resolution),
               renderer="warp", episodes="sample", sensors=("depth",))
    cuda = env.device.type == "cuda"
    try:
        env.reset()
        g = torch.Generator().manual_seed(0)
        for _ in range(4):
            _, _, _, info = env.step(torch.randint(1, 4, (env.batch_size,), generator=g).to(env.device))
        keys, pos, rot = (info[k].clone().contiguous() for k in ("scene_index", "position", "rotation"))
        r = env.world.renderer
        n, h = keys.shape[0], a.resolution
        hw = h * h
        depth = torch.empty((n, h, h, 1), dtype=torch.float32, device=env.device)
        rgb = torch.empty((n, h, h, 3), dtype=torch.uint8, device=env.device)
        sem = torch.empty((n, h, h, 1), dtype=torch.int32, device=env.device)
        depth2, depth3 = torch.empty_like(depth), torch.empty_like(depth)
        stream = r._stream()

        def product():
            r.launch_frame(keys, pos, rot, depth, stream=stream)

        def row_first():   # the renderer's own frame arguments (depth mode, clip range included)
            frame, _ = r._frame_inputs(keys, pos, rot, depth2)
            wp.launch(row_first_kernel, dim=n * hw, device=r._wdev, stream=stream, inputs=[r._table, *frame])

        def general():   # render_kernel with RGB and semantic off: the depth path before depth_kernel
            frame, shaded = r._frame_inputs(keys, pos, rot, depth3)
            wp.launch(r._k.render_kernel, dim=n * hw, device=r._wdev, stream=stream,
                      inputs=[r._meshes, r._table, *frame, *shaded])

        def shaded():
            r.launch_frame(keys, pos, rot, depth, rgb, stream=stream, semantic=sem)

        def timed(fn) -> float:
            for _ in range(2):
                fn()
            if cuda:
                torch.cuda.synchronize()
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                for _ in range(a.iters):
                    fn()
                t1.record()
                torch.cuda.synchronize()
                return t0.elapsed_time(t1) / a.iters
            t = time.perf_counter()
            for _ in range(a.iters):
                fn()
            return (time.perf_counter() - t) * 1e3 / a.iters

        runs = {"depth": product, "general_depth": general, "row_first": row_first, "rgb_semantic": shaded}
        ms = {k: [] for k in runs}
        for _ in range(2):   # interleaved rounds
            for k, fn in runs.items():
                ms[k].append(timed(fn))
        best = {k: min(v) for k, v in ms.items()}
        # each kernel's own buffer, snapshot after its own run: the depth kernel against the general
        # one with normalisation on and off, and against the row-first one (metres, clipped to the sensor range)
        same = all(torch.equal(_depth_of(r, product, depth, norm), _depth_of(r, general, depth3, norm))
                   for norm in (True, False))
        row_same = torch.equal(_depth_of(r, row_first, depth2, False), _depth_of(r, product, depth, False))
    finally:
        env.close()
    print(f"{n} agents, {h}x{h}, device {a.device}, {a.iters} frames per timing, best of 2 interleaved rounds")
    for k, v in best.items():
        print(f"  {k:13s} {v:8.3f} ms/frame  {n / v * 1e3:12,.0f} frames/s")
    print(f"general kernel / depth kernel: {best['general_depth'] / best['depth']:.2f}x the time; row-first / "
          f"depth: {best['row_first'] / best['depth']:.2f}x; rgb+semantic / depth: "
          f"{best['rgb_semantic'] / best['depth']:.2f}x; depth identical: general = depth kernel "
          f"(normalised and metres) {same}, row-first = depth kernel {row_same}")


def _depth_of(r, kernel, out, normalize: bool):
    """A copy of ``out`` after one run of ``kernel`` with the renderer's depth normalisation
    ``normalize`` (the kernels read the renderer's options at launch)."""
    import dataclasses

    import torch

    opts = r.options
    r.options = dataclasses.replace(opts, normalize_depth=normalize)
    try:
        out.fill_(float("nan"))   # a kernel that wrote nothing cannot pass for a match
        kernel()
        if out.is_cuda:
            torch.cuda.synchronize()
        return out.clone()
    finally:
        r.options = opts


if __name__ == "__main__":
    main()
