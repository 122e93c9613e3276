"""Converter LODs through the real packed file and the runtime's loader: 64x64 depth error of
each level against the full mesh, depth fps of the level's BVH / the full mesh's, and resident
bytes (what the scene cache charges) with the level the sensor picks / the decoded scan, in one run
(issue 32 item 2).

    python benchmarks/bench_lod.py                      # synth Gibson scan, bench_render's apartment, real meshes
    python benchmarks/bench_lod.py --errors 0.01,0.05 --rounds 9 --scenes synth,apartment

Per scene: ``convert_scene(..., ConvertOptions(lod=errors))``; the loader (``scenes.loader``,
Embree renderer, 64x64 HFOV 90, ``lod="auto"`` and ``"full"``) gives the charged bytes and the
level chosen; per level (``packed_scene.read_lod_level``): triangles, depth error over pixels
both hit (median in metres, p95 relative to the depth), depth fps of the level's / the full
mesh's raw Embree BVH (bridge, one thread, interleaved rounds; the level built as the renderer
builds it, Embree's HIGH quality from ``LOD_HIGH_MIN_TRIANGLES`` on, and at the default quality; the full mesh at the
default, as files without LODs are built) and the build times (median of 3). Depth error: over
the cameras that see no surface closer than the agent radius (0.1 m; random positions in a
scan's bounds fall inside walls too). Real meshes: ReplicaCAD objects from ../shared/datasets (cameras on a ring
around them) and habitat-sim's test stage from ../shared/assets; skipped when absent.
Groups: one per (object, material). Prints one JSON line.
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
from bench_render import decoded_bytes, fps_ratio, interleaved_traces, procedural_apartment  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NEAR = 0.1   # m, the default agent radius: cameras seeing a surface closer than this are left out
REAL = {  # name -> (path under the repository's parent, camera kind)
    "replica_cabinet": ("../shared/datasets/replicacad/objects/frl_apartment_cabinet.glb", "object"),
    "replica_table_02": ("../shared/datasets/replicacad/objects/frl_apartment_table_02.glb", "object"),
    "replica_towel": ("../shared/datasets/replicacad/objects/frl_apartment_towel.glb", "object"),
    "habitat_stage_floor1": ("../shared/assets/habitat-sim/scenes/stage_floor1.glb", "scan"),
}


def cameras(kind, pos, n, rng):
    """Camera origins [n,3] and yaws: inside the scan at eye height, or on a ring around an object."""
    lo, hi = pos.min(0), pos.max(0)
    if kind == "object":
        c = (lo + hi) / 2
        r = float(np.linalg.norm(hi - lo)) * 0.9 + 0.5
        a = rng.uniform(-np.pi, np.pi, n)
        org = np.c_[c[0] + r * np.sin(a), np.full(n, c[1]), c[2] + r * np.cos(a)]
        return org.astype(np.float32), a.astype(np.float32)  # yaw a looks along -(sin a, cos a): at the centre
    m = np.minimum(0.5, (hi - lo) / 4)
    org = np.c_[rng.uniform(lo[0] + m[0], hi[0] - m[0], n), np.full(n, lo[1] + min(1.25, (hi[1] - lo[1]) / 2)),
                rng.uniform(lo[2] + m[2], hi[2] - m[2], n)]
    return org.astype(np.float32), rng.uniform(-np.pi, np.pi, n).astype(np.float32)


def charged(path, lod):
    """(bytes the cache charges, level loaded, triangles) through the runtime's loader."""
    from bps_runtime.render import RenderOptions, make_renderer
    from bps_runtime.scenes.loader import LoadFailure, SceneLoader, SceneSource

    r = make_renderer("embree", RenderOptions(resolution=(64, 64), threads=1, lod=lod))
    loader = SceneLoader(r, threads=1)
    try:
        got = loader.submit(SceneSource("s", str(path))).result()
    finally:
        loader.close()
        r.close()
    if isinstance(got, LoadFailure):
        raise got.error
    return int(got.nbytes), got.num_triangles


def measure(name, kind, path, dec, rounds, agents):
    """One scene's figures (see the module docstring)."""
    from bps_assets import lod_section
    from bps_assets.packed_scene import read_lod_level, read_packed_scene
    from bps_runtime.render import RenderOptions
    from bps_runtime.render.camera import camera_directions, rotation_matrices
    from bps_runtime.render.embree import LOD_HIGH_MIN_TRIANGLES
    from bps_runtime.render.embree_bridge import BUILD_QUALITY_HIGH, BUILD_QUALITY_MEDIUM, BridgeAccel
    from bps_runtime.scenes.lod_levels import header_level

    opts = RenderOptions(resolution=(64, 64), threads=1)
    full_ps = read_packed_scene(path)
    levels = lod_section.levels(path, full_ps.header)
    dirs = camera_directions(opts)
    org, yaw = cameras(kind, full_ps.positions, agents, np.random.default_rng(0))
    rot = rotation_matrices(yaw)
    fp, fi = np.asarray(full_ps.positions, np.float32), np.asarray(full_ps.indices, np.uint32)
    full, t_full = _built(lambda: BridgeAccel(fp, fi))
    b_full, _ = charged(path, "full")
    b_auto, t_auto = charged(path, "auto")
    out = {"scene": name, "triangles": int(len(full_ps.indices)), "decoded_bytes": dec,
           "resident_full_over_decoded": round(b_full / dec, 3),
           "level_chosen_64px": header_level(path, opts), "triangles_chosen": t_auto,
           "resident_chosen_over_decoded": round(b_auto / dec, 3),
           "resident_chosen_over_full": round(b_auto / b_full, 3), "levels": []}
    for i, x in enumerate(levels):
        lv = read_lod_level(path, i)
        lp, li = np.asarray(lv.positions, np.float32), np.asarray(lv.indices, np.uint32)
        q = BUILD_QUALITY_HIGH if len(li) >= LOD_HIGH_MIN_TRIANGLES else BUILD_QUALITY_MEDIUM   # as the renderer
        high, t_high = _built(lambda: BridgeAccel(lp, li, quality=q))
        medium, t_medium = _built(lambda: BridgeAccel(lp, li))
        acc = {"full": full, "lod": high, "lod_default_build": medium}
        times, z = interleaved_traces(acc, org, rot, dirs, agents, rounds)
        zf = z["full"].reshape(agents, -1)
        near = np.where(zf > 0, zf, np.inf).min(1)   # a camera this close to a surface is inside the agent
        keep = np.repeat(near >= NEAR, zf.shape[1])
        both = (z["full"] > 0) & (z["lod"] > 0) & keep
        d = np.abs(z["lod"] - z["full"])[both]
        out["levels"].append({
            "max_error_m": x["max_error"], "triangles": x["triangles"],
            "triangles_ratio": round(x["triangles"] / len(full_ps.indices), 4),
            "result_error_m": round(x["result_error"], 4),
            "cameras_kept": int((near >= NEAR).sum()), "pixels_compared": int(both.sum()), "pixels_hit_only_one": int((((z["full"] > 0) != (z["lod"] > 0)) & keep).sum()),
            "depth_err_median_m": round(float(np.median(d)), 5) if d.size else None,
            "depth_err_p95_rel": round(float(np.percentile(d / z["full"][both], 95)), 5) if d.size else None,
            "high_build": q == BUILD_QUALITY_HIGH, "depth_equal_to_default_build": bool(np.array_equal(z["lod"], z["lod_default_build"])),
            "depth_fps_lod_over_full": fps_ratio(times, "lod", "full"),
            "depth_fps_lod_default_build_over_full": fps_ratio(times, "lod_default_build", "full"),
            "build_ms_full": round(t_full * 1e3, 1), "build_ms_lod": round(t_high * 1e3, 2),
            "build_ms_lod_default_build": round(t_medium * 1e3, 2)})
    return out


def _built(make, n=3):
    """(the last of ``n`` builds, their median seconds)."""
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        acc = make()
        ts.append(time.perf_counter() - t)
    return acc, float(np.median(ts))



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--errors", default="0.01,0.05")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--agents", type=int, default=128)
    ap.add_argument("--scenes", default="synth,apartment,real", help="comma list of synth, apartment, real")
    args = ap.parse_args(argv)
    from bps_assets.packed_scene import ConvertOptions, convert_scene
    from bps_assets.readers import load as read_scene

    errors = tuple(float(x) for x in args.errors.split(","))
    want = set(args.scenes.split(","))
    out = Path(tempfile.mkdtemp(prefix="bps-bench-lod-"))
    res = {"load_avg_1min": round(os.getloadavg()[0], 2), "errors": list(errors), "scenes": []}
    docs = []
    if "synth" in want:
        from bps_assets.synth import build_scene
        docs.append(("synth_gibson", "scan", lambda: build_scene("gibson", "Adrian", seed=0, size="gibson")[0],
                     ConvertOptions(dataset="gibson", lod=errors)))
    if "apartment" in want:
        docs.append(("apartment", "scan", lambda: procedural_apartment(0, 600_000), ConvertOptions(lod=errors)))
    if "real" in want:
        for name, (rel, kind) in REAL.items():
            if (ROOT / rel).exists():
                docs.append((name, kind, lambda p=ROOT / rel: read_scene(str(p)), ConvertOptions(lod=errors)))
    for name, kind, make, opts in docs:
        doc = make()
        dec = decoded_bytes(doc)
        dst = out / f"{name}.bps"
        convert_scene(doc, dst, opts, overwrite=True)
        res["scenes"].append(measure(name, kind, dst, dec, args.rounds, args.agents))
    res["load_avg_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
