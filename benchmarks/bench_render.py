"""Batch render benchmark: depth / RGB fps for many envs over resident scenes, vs raw Embree.

    python benchmarks/bench_render.py                 # 1024 envs, 8 scenes, 64x64 (the issue's setup)
    python benchmarks/bench_render.py --envs 64 --scenes 2 --triangles 50000 --iters 2   # quick

Scenes are Gibson-size synthetic apartments (``bps_assets.synth`` when available, else the
procedural rooms below: tessellated walls/floors and furniture boxes, BC1 textures), packed
with ``bps_assets.packed_scene.convert_scene`` and streamed in through the real SceneCache.
Prints one JSON line of measurements; every ratio is measured within this one run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _grid_quad(origin, du, dv, nu, nv):
    """A quad tessellated into nu x nv cells -> (positions, triangles, uvs)."""
    o, du, dv = (np.asarray(x, np.float64) for x in (origin, du, dv))
    i, j = np.meshgrid(np.arange(nu + 1), np.arange(nv + 1), indexing="ij")
    p = o + i[..., None] / nu * du + j[..., None] / nv * dv
    uv = np.stack([i / nu * np.linalg.norm(du), j / nv * np.linalg.norm(dv)], -1)
    idx = (i * (nv + 1) + j)[:-1, :-1].reshape(-1)
    a, b, c, d = idx, idx + nv + 1, idx + nv + 2, idx + 1
    tris = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    return p.reshape(-1, 3), tris, uv.reshape(-1, 2)


def procedural_apartment(seed: int, triangles: int):
    """A Y-up SceneDocument: 3x2 rooms of 4x5 m, walls, furniture boxes; ~``triangles`` tris."""
    from bps_assets.scene import Material, Mesh, SceneDocument, Texture

    rng = np.random.default_rng(seed)
    parts = []  # (positions, tris, uvs, material)
    W, D, H = 12.0, 10.0, 2.8
    n = max(4, int(np.sqrt(triangles / 34)))  # tessellation per surface (~34 n^2 triangles in all)
    parts.append((*_grid_quad((0, 0, 0), (W, 0, 0), (0, 0, -D), 3 * n, 2 * n), 0))          # floor
    parts.append((*_grid_quad((0, H, 0), (0, 0, -D), (W, 0, 0), n, n), 2))                # ceiling
    walls = [((0, 0, 0), (W, 0, 0)), ((0, 0, -D), (W, 0, 0)), ((0, 0, 0), (0, 0, -D)), ((W, 0, 0), (0, 0, -D)),
             ((4, 0, 0), (0, 0, -D * 0.4)), ((8, 0, -D), (0, 0, D * 0.45)), ((0, 0, -5), (W * 0.3, 0, 0)),
             ((W * 0.55, 0, -5), (W * 0.45, 0, 0))]
    for o, d in walls:
        parts.append((*_grid_quad(o, d, (0, H, 0), n, n // 2 + 1), 1))
    for _ in range(40):  # furniture
        c = rng.uniform([0.5, 0, -D + 0.5], [W - 0.5, 0, -0.5])
        s = rng.uniform([0.3, 0.4, 0.3], [1.5, 1.8, 1.0])
        m = n // 6 + 1
        x0, y0, z0 = c - [s[0] / 2, 0, s[2] / 2]
        sx, sy, sz = s
        for o, du, dv in [((x0, y0 + sy, z0), (sx, 0, 0), (0, 0, sz)), ((x0, y0, z0), (0, sy, 0), (sx, 0, 0)),
                          ((x0, y0, z0 + sz), (sx, 0, 0), (0, sy, 0)), ((x0, y0, z0), (0, 0, sz), (0, sy, 0)),
                          ((x0 + sx, y0, z0), (0, sy, 0), (0, 0, sz))]:
            parts.append((*_grid_quad(o, du, dv, m, m), 3))
    meshes = [Mesh(positions=p.astype(np.float32), indices=t.astype(np.uint32), uvs=uv.astype(np.float32),
                   material=mat, name=f"m{k}") for k, (p, t, uv, mat) in enumerate(parts)]

    def tex(seed_, base):
        r = np.random.default_rng(seed_)
        img = np.clip(np.array(base)[None, None] * r.uniform(0.7, 1.1, (512, 512, 1)) * 255, 0, 255)
        img[::64] *= 0.5
        img[:, ::64] *= 0.5
        out = np.empty((512, 512, 4), np.uint8)
        out[..., :3] = img
        out[..., 3] = 255
        return out

    textures = [Texture(rgba=tex(seed * 4 + k, b), name=f"t{k}") for k, b in
                enumerate([(0.6, 0.45, 0.3), (0.9, 0.88, 0.85), (0.95, 0.95, 0.95), (0.4, 0.45, 0.6)])]
    materials = [Material(name=f"mat{k}", texture=k) for k in range(4)]
    return SceneDocument(meshes=meshes, materials=materials, textures=textures,
                         source_path=f"procedural-{seed}", source_format="synthetic")


def decoded_bytes(doc) -> int:
    """Bytes of the decoded scan in memory (vertex/index arrays + RGBA8 textures, no mips)."""
    total = 0
    for m in doc.meshes:
        for a in (m.positions, m.indices, m.uvs, m.colors, m.normals):
            total += 0 if a is None else a.nbytes
    return total + sum(t.rgba.nbytes for t in doc.textures)


def make_scenes(out: Path, count: int, triangles: int):
    from bps_assets.packed_scene import convert_scene
    from bps_runtime.scenes.loader import SceneSource

    sources, decoded = [], []
    for i in range(count):
        doc = procedural_apartment(i, triangles)
        decoded.append(decoded_bytes(doc))
        dst = out / f"apt{i}.bps"
        convert_scene(doc, dst, overwrite=True)
        sources.append(SceneSource(f"apt{i}", str(dst)))
    return sources, decoded


def frame_arguments(ap: argparse.ArgumentParser, iters: int) -> argparse.ArgumentParser:
    """The issue's frame setup as options (shared with bench_semantic): 1024 envs over 8
    scenes of ~600K triangles, 64x64, 2 render threads."""
    ap.add_argument("--envs", type=int, default=1024)
    ap.add_argument("--scenes", type=int, default=8)
    ap.add_argument("--triangles", type=int, default=600_000)
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--iters", type=int, default=iters)
    ap.add_argument("--threads", type=int, default=2)
    return ap


def interleaved_traces(accels: dict, org, rot, dirs, cameras: int, rounds: int):
    """Depth of every accel in ``accels`` (name -> object with ``trace_cameras``) for the same
    ``cameras``, ``rounds`` + 1 rounds in alternating order (round 0 warms up, untimed) ->
    ({name: [seconds per round]}, {name: the last round's depth})."""
    times, depth = {k: [] for k in accels}, {}
    for rd in range(rounds + 1):
        for k in (list(accels) if rd % 2 else list(accels)[::-1]):
            z = np.empty(cameras * dirs.shape[0], np.float32)
            t = time.perf_counter()
            accels[k].trace_cameras(org, rot, dirs, z)
            if rd:
                times[k].append(time.perf_counter() - t)
            depth[k] = z
    return times, depth


def fps_ratio(times: dict, k: str, base: str) -> float:
    """Median over rounds of ``base``'s frame time / ``k``'s: ``k``'s fps over ``base``'s."""
    return round(float(np.median(np.array(times[base]) / np.array(times[k]))), 3)


def main(argv=None):
    ap = frame_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]), iters=5)
    args = ap.parse_args(argv)

    import torch
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.residency import renderer_listener
    from bps_runtime.render import RenderOptions, make_renderer
    from bps_runtime.render.camera import camera_directions, camera_origins, rotation_matrices

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="bps-bench-render-"))
    t0 = time.perf_counter()
    sources, decoded = make_scenes(tmp, args.scenes, args.triangles)
    t_make = time.perf_counter() - t0
    opts = RenderOptions(resolution=(args.res, args.res), threads=args.threads)
    r = make_renderer("embree", opts)
    cache = SceneCache(sources, r, args.envs, CacheOptions(slots=args.scenes, prefetch=False),
                       listeners=[renderer_listener(r)])
    t0 = time.perf_counter()
    cache.start()
    t_load = time.perf_counter() - t0
    sid = cache.assign_next(np.arange(args.envs))
    rng = np.random.default_rng(0)
    pos = np.c_[rng.uniform(0.5, 11.5, args.envs), np.zeros(args.envs), rng.uniform(-9.5, -0.5, args.envs)].astype(np.float32)
    yaw = rng.uniform(-np.pi, np.pi, args.envs).astype(np.float32)

    # raw Embree on the same rays: one call per scene (all its agents), rays prepared beforehand
    rot = rotation_matrices(yaw)
    cam = camera_origins(pos, opts)
    dirs_cam = camera_directions(opts)
    rays = []
    for s in np.unique(sid):
        a = np.flatnonzero(sid == s)
        d = np.matmul(dirs_cam[None], rot[a].transpose(0, 2, 1)).reshape(-1, 3)
        rays.append((int(s), np.repeat(cam[a], dirs_cam.shape[0], axis=0), np.ascontiguousarray(d)))
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(2)
    halves = []
    for s, o, d in rays:
        m = len(o) // 2
        halves += [(s, o[:m], d[:m]), (s, o[m:], d[m:])]

    cases = {
        "depth": lambda: r.render(sid, pos, yaw, ("depth",)),
        "rgb": lambda: r.render(sid, pos, yaw, ("rgb",)),
        "depth_rgb": lambda: r.render(sid, pos, yaw, ("depth", "rgb")),
        "raw1": lambda: [r.raw_depth(s, o, d) for s, o, d in rays],
        "raw2": lambda: list(pool.map(lambda x: r.raw_depth(*x), halves)),
    }
    times = {k: [] for k in cases}
    for k, f in cases.items():
        f()  # warm-up
    # interleaved, median per case: the machine is shared, so each ratio compares neighbours in time
    for _ in range(args.iters):
        for k, f in cases.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in times.items()}
    t_depth, t_rgb, t_both, t_raw, t_raw2 = (med[k] for k in ("depth", "rgb", "depth_rgb", "raw1", "raw2"))

    per_scene = [cache.scene(i).nbytes for i in cache.resident_scene_indices]
    shading_b = [cache.scene(i).shading.nbytes for i in cache.resident_scene_indices]
    n_tris = [cache.scene(i).num_triangles for i in cache.resident_scene_indices]
    res = {
        "load_avg_1min": round(os.getloadavg()[0], 2), "envs": args.envs, "scenes": args.scenes, "resolution": args.res, "threads": args.threads,
        "triangles_per_scene": int(np.mean(n_tris)), "make_scenes_s": round(t_make, 1), "load_s": round(t_load, 2),
        "depth_fps": round(args.envs / t_depth, 1), "rgb_fps": round(args.envs / t_rgb, 1),
        "depth_rgb_fps": round(args.envs / t_both, 1),
        "raw_embree_one_call_per_scene_fps": round(args.envs / t_raw, 1),
        "raw_embree_2threads_fps": round(args.envs / t_raw2, 1),
        "depth_vs_raw_one_call": round(t_raw / t_depth, 3),
        "depth_vs_raw_2threads": round(t_raw2 / t_depth, 3),
        "rgb_over_depth": round(t_depth / t_rgb, 3),
        "mrays_per_s_depth": round(args.envs * args.res * args.res / t_depth / 1e6, 2),
        "resident_bytes_per_scene": int(np.mean(per_scene)), "decoded_glb_bytes_per_scene": int(np.mean(decoded)),
        "shading_bytes_per_scene": int(np.mean(shading_b)),
        "accel_bytes_per_scene_estimate": int(np.mean(per_scene) - np.mean(shading_b)),
        "shading_over_decoded": round(float(np.mean(shading_b)) / float(np.mean(decoded)), 3),
        "resident_over_decoded": round(float(np.mean(per_scene)) / float(np.mean(decoded)), 3),
        "resident_footprint_first_scene": cache.scene(cache.resident_scene_indices[0]).footprint,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    cache.close()
    r.close()
    pool.shutdown()
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
