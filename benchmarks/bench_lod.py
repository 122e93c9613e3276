"""Levels of detail (``bps_assets.transforms.lod``) against the full mesh: 64x64 depth error,
depth fps and resident bytes, in one run (issue 32 item 2's figures, before the LODs are wired
into the packed format and the runtime).

    python benchmarks/bench_lod.py                   # synth Gibson scan + a ReplicaCAD object (if present)
    python benchmarks/bench_lod.py --errors 0.01,0.05 --rounds 9

Per scene and error: triangles, the depth error of the LOD vs the full mesh over pixels both
hit (median in metres, p95 relative to the depth), depth fps of the LOD's BVH / the full mesh's
(Embree bridge, default BVH, one thread, interleaved rounds), and the bytes a scene holding only
the LOD would be charged (shading tables of the LOD triangles, kept mips, vertex copy, BVH) over
the decoded scan. Groups: one per (object, material). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_resident import make_scene  # noqa: E402

REPLICA_OBJECT = "../shared/datasets/replicacad/objects/frl_apartment_cabinet.glb"


def cameras(kind, pos, n, rng):
    """Camera origins [n,3] and yaws: inside the scan at eye height, or on a ring around an object."""
    lo, hi = pos.min(0), pos.max(0)
    if kind == "object":
        c = (lo + hi) / 2
        r = float(np.linalg.norm(hi - lo)) * 0.9 + 0.5
        a = rng.uniform(-np.pi, np.pi, n)
        org = np.c_[c[0] + r * np.sin(a), np.full(n, c[1]), c[2] + r * np.cos(a)]
        return org.astype(np.float32), a.astype(np.float32)  # yaw a looks along -(sin a, cos a): at the centre
    org = np.c_[rng.uniform(lo[0] + 0.5, hi[0] - 0.5, n), np.full(n, lo[1] + 1.25),
                rng.uniform(lo[2] + 0.5, hi[2] - 0.5, n)]
    return org.astype(np.float32), rng.uniform(-np.pi, np.pi, n).astype(np.float32)


def measure(kind, path, dec, errors, rounds, agents):
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.transforms.lod import Options, simplify
    from bps_runtime.render import RenderOptions, build_shading_data
    from bps_runtime.render.camera import camera_directions, rotation_matrices
    from bps_runtime.render.embree import BRIDGE_BVH_BYTES_PER_TRI
    from bps_runtime.render.embree_bridge import BridgeAccel
    from bps_runtime.render.mips import sensor_mips

    ps = read_packed_scene(path)
    pos, idx = np.asarray(ps.positions, np.float32), np.asarray(ps.indices, np.uint32)
    obj = getattr(ps, "tri_object", None)
    mat = np.asarray(ps.tri_material, np.int64)
    groups = mat if obj is None else np.asarray(obj, np.int64) * (int(mat.max()) + 1) + mat
    opts = RenderOptions(resolution=(64, 64), threads=1)
    dirs = camera_directions(opts)
    rng = np.random.default_rng(0)
    org, yaw = cameras("object" if kind == "object" else "scan", pos, agents, rng)
    rot = rotation_matrices(yaw)
    full = BridgeAccel(pos, idx)
    sd = sensor_mips(build_shading_data(ps, path), opts)
    out = {"scene": kind, "triangles": int(len(idx)), "decoded_bytes": dec, "levels": []}
    for e in errors:
        t0 = time.perf_counter()
        lod = simplify(pos, idx, groups, Options(max_error=e))
        t_simplify = time.perf_counter() - t0
        acc = {"full": full, "lod": BridgeAccel(pos, lod.indices)}
        z, times = {}, {k: [] for k in acc}
        for rd in range(rounds + 1):
            for k in (list(acc) if rd % 2 else list(acc)[::-1]):
                zz = np.empty(agents * dirs.shape[0], np.float32)
                t = time.perf_counter()
                acc[k].trace_cameras(org, rot, dirs, zz)
                if rd:
                    times[k].append(time.perf_counter() - t)
                z[k] = zz
        both = (z["full"] > 0) & (z["lod"] > 0)
        d = np.abs(z["lod"] - z["full"])[both]
        nt = len(lod.indices)
        per_tri = sd.tri_material.itemsize + sd.tri_lod_bias.itemsize + 12 + (4 if sd.tri_object is not None else 0)
        lod_bytes = (nt * (per_tri + BRIDGE_BVH_BYTES_PER_TRI) + sd.uvs.nbytes + (0 if sd.colors is None else sd.colors.nbytes)
                     + 12 * len(pos) + 4 + sum(getattr(sd, k).nbytes for k in ("tex_data", "level_info", "tex_nlevels",
                                                                                "tex_format", "material_color", "material_texture")))
        out["levels"].append({
            "max_error_m": e, "triangles": nt, "triangles_ratio": round(nt / len(idx), 4),
            "simplify_s": round(t_simplify, 2), "result_error_m": round(lod.result_error, 4),
            "pixels_compared": int(both.sum()), "pixels_hit_only_one": int(((z["full"] > 0) != (z["lod"] > 0)).sum()),
            "depth_err_median_m": round(float(np.median(d)), 5),
            "depth_err_p95_rel": round(float(np.percentile(d / z["full"][both], 95)), 5),
            "depth_fps_lod_over_full": round(float(np.median(np.array(times["full"]) / np.array(times["lod"]))), 3),
            "resident_lod_only_over_decoded": round(lod_bytes / dec, 3)})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--errors", default="0.01,0.05")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--agents", type=int, default=128)
    args = ap.parse_args(argv)
    errors = [float(x) for x in args.errors.split(",")]
    out = Path(tempfile.mkdtemp(prefix="bps-bench-lod-"))
    res = {"load_avg_1min": round(os.getloadavg()[0], 2), "scenes": []}
    path, dec = make_scene("gibson", out)
    res["scenes"].append(measure("synth_gibson", str(path), dec, errors, args.rounds, args.agents))
    src = Path(__file__).resolve().parents[1] / REPLICA_OBJECT
    if src.exists():
        from bps_assets.packed_scene import convert_file
        from bps_assets.readers import load as read_scene
        from bench_render import decoded_bytes
        dst = out / "object.bps"
        convert_file(src, dst, overwrite=True)
        res["scenes"].append(measure("object", str(dst), decoded_bytes(read_scene(str(src))), errors,
                                     args.rounds, args.agents))
    res["load_avg_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
