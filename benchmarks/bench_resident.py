"""Resident bytes per scene against the decoded scan, by part, and the depth speed of the Embree
BVH variants, in one run.

    python benchmarks/bench_resident.py                      # bench_render's apartment + a synth Gibson scan
    python benchmarks/bench_resident.py --scenes apartment --rounds 5   # quicker
    python benchmarks/bench_resident.py --scenes small --copies 1 --rounds 1 --agents 4   # a smoke run

Per scene: the decoded scan (positions, indices, uvs, colours, normals + RGBA8 textures without
mips: bench_render's ``decoded_bytes``), what the cache charges now by part
(``scenes.footprint``: bvh / geometry / shading / textures / navigation; no navmesh is loaded
here; textures keep the mips the 64x64 sensor can sample, ``render.mips``), the charge before
(shading tables with every mip + 72 B/triangle + 16 B/vertex), the
measured RSS growth per loaded scene (``--copies`` loads kept resident), and the Warp backend's
(GPU) estimate. Then depth frames of ``--agents`` cameras (64x64, one thread) traced through three
BVHs of the same scene, timed interleaved round by round: Embree's default BVH over a private
uint32 index copy (the code before), the same over the shading tables' own indices (now), the
renderer's ``compact_bvh`` option (``embree_bridge.COMPACT_TRI_ACCEL``) and Embree's COMPACT
scene flag; plus the footprint and charge with ``compact_bvh``. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_render import decoded_bytes, fps_ratio, interleaved_traces, procedural_apartment  # noqa: E402


def rss() -> int:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def make_scene(kind: str, out: Path):
    from bps_assets.packed_scene import ConvertOptions, convert_scene
    if kind == "apartment":
        doc, opts = procedural_apartment(0, 600_000), ConvertOptions()
    else:
        from bps_assets.synth import build_scene
        doc, _, _ = build_scene("gibson", "Adrian", seed=0, size="small" if kind == "small" else "gibson")
        opts = ConvertOptions(dataset="gibson")
    dec = decoded_bytes(doc)
    dst = out / f"{kind}.bps"
    convert_scene(doc, dst, opts, overwrite=True)
    return dst, dec


def measure(kind: str, out: Path, copies: int, rounds: int, agents: int) -> dict:
    from bps_runtime.render import RenderOptions, make_renderer
    from bps_runtime.render.camera import camera_directions, camera_origins, rotation_matrices
    from bps_runtime.render.embree_bridge import COMPACT_TRI_ACCEL, SCENE_FLAG_COMPACT, BridgeAccel
    from bps_runtime.render.warp_backend import WarpRenderer
    from bps_runtime.scenes.footprint import scene_footprint
    from bps_runtime.scenes.loader import LoadFailure, SceneLoader, SceneSource

    def load(src):
        res = loader.submit(src, quiet=True).result()
        if isinstance(res, LoadFailure):
            raise res.error
        return res

    path, dec = make_scene(kind, out)
    opts = RenderOptions(resolution=(64, 64), threads=1)
    r = make_renderer("embree", opts)
    loader = SceneLoader(r, threads=1)
    load(SceneSource(f"{kind}-warm-up", str(path)))  # first-load allocations (arenas, caches)
    base = rss()
    kept = [load(SceneSource(f"{kind}{i}", str(path))) for i in range(copies)]
    grown = (rss() - base) / copies
    ls = kept[0]
    nv, nt = ls.num_vertices, ls.num_triangles
    from bps_assets.packed_scene import read_packed_scene
    from bps_runtime.render.mips import first_levels
    from bps_runtime.render.shading_data import build_shading_data
    full = build_shading_data(read_packed_scene(str(path)), str(path))  # every mip level
    old = full.nbytes + 72 * nt + 16 * nv
    warp = scene_footprint(ls.shading, WarpRenderer.__new__(WarpRenderer), nv, nt)
    rc = make_renderer("embree", opts, compact_bvh=True)
    compact = scene_footprint(ls.shading, rc, nv, nt)
    rc.close()
    res = {"scene": kind, "triangles": nt, "vertices": nv, "decoded_bytes": dec,
           "charged_bytes": ls.nbytes, "footprint": ls.footprint, "charged_before_bytes": old,
           "rss_growth_per_scene_bytes": int(grown),
           "charged_over_decoded": round(ls.nbytes / dec, 3), "before_over_decoded": round(old / dec, 3),
           "rss_over_decoded": round(grown / dec, 3),
           "compact_bvh_charged_bytes": sum(compact.values()),
           "compact_bvh_charged_over_decoded": round(sum(compact.values()) / dec, 3),
           "warp_estimate_bytes": sum(warp.values()), "warp_over_decoded": round(sum(warp.values()) / dec, 3),
           "warp_before_over_decoded": round((full.nbytes + 76 * nt + 12 * nv) / dec, 3)}
    res["textures"] = {"first_level_kept": first_levels(full, opts).tolist(),
                       "all_levels_bytes": int(full.tex_data.nbytes), "kept_bytes": int(ls.shading.tex_data.nbytes)}
    pos = ls.accel._vertices[:-1].reshape(-1, 3)
    idx = ls.shading.indices
    del kept
    make = {"before": lambda: BridgeAccel(pos, np.array(idx, np.uint32)),
            "now": lambda: BridgeAccel(pos, idx),
            "compact_bvh": lambda: BridgeAccel(pos, idx, tri_accel=COMPACT_TRI_ACCEL),
            "compact_flag": lambda: BridgeAccel(pos, idx, flags=SCENE_FLAG_COMPACT)}
    accels, grown = {}, {}
    for k, f in make.items():  # RSS growth of one more BVH (and its index copy, before), per copy
        b0 = rss()
        tmp = [f() for _ in range(copies)]
        grown[k] = int((rss() - b0) / copies)
        accels[k] = tmp[0]
        del tmp
    res["accel_rss_growth_bytes"] = grown
    res["accel_rss_bytes_per_triangle"] = {k: round(v / nt, 1) for k, v in grown.items()}
    rng = np.random.default_rng(0)
    lo, hi = pos.min(0), pos.max(0)
    p = rng.uniform(lo + 0.5, hi - 0.5, (agents, 3)).astype(np.float32)
    p[:, 1] = lo[1]
    if kind != "apartment":
        p[:, 1] = lo[1] + 0.2
    rot = rotation_matrices(rng.uniform(-np.pi, np.pi, agents).astype(np.float32))
    cam, dirs = camera_origins(p, opts), camera_directions(opts)
    times, depth = interleaved_traces(accels, cam, rot, dirs, agents, rounds)
    res.update({"depth_identical_now_vs_before": bool(np.array_equal(depth["now"], depth["before"])),
                "depth_fps": {k: round(agents / float(np.median(v)), 1) for k, v in times.items()},
                "depth_fps_now_over_before": fps_ratio(times, "now", "before"),
                "depth_fps_compact_bvh_over_before": fps_ratio(times, "compact_bvh", "before"),
                "depth_fps_compact_flag_over_before": fps_ratio(times, "compact_flag", "before"),
                "max_depth_diff_vs_before": {k: float(np.abs(depth[k] - depth["before"]).max()) for k in depth}})
    r.close()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenes", default="apartment,gibson",
                    help="comma list of apartment, gibson, small (a synth scan at the small preset)")
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--agents", type=int, default=128)
    args = ap.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="bps-bench-resident-"))
    res = {"load_avg_1min": round(os.getloadavg()[0], 2),
           "scenes": [measure(k, out, args.copies, args.rounds, args.agents) for k in args.scenes.split(",")]}
    res["load_avg_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
