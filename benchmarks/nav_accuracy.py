"""Navmesh accuracy against exactly known free space, default (exact radius) vs --recast-compat.

    python benchmarks/nav_accuracy.py [--starts 12] [--per-start 20] [--radius 0.18] [--json]

1. For each scene of ``bps_assets.nav.exact_scenes`` (apartment; split level with stairs; the
   apartment tessellated 4 times with 2 mm noise, like a scan): navigable area against the area
   of the free space eroded by the exact radius, and geodesic errors (median / p95 / max)
   against exact visibility-graph paths, for both settings, with the build times.
2. The van Gogh room scan (../shared/assets) built both ways against the ``.navmesh`` habitat
   ships for it: areas and how much of each lies on the other.
3. Build time of a Gibson-size synth scene (bps_assets.synth) both ways: the cost of the exact
   erosion, as a ratio measured in this run.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from bps_assets.nav import NavSettings, build_navmesh
from bps_assets.nav.exact_scenes import ExactGeodesic, apartment, measure, split_level, subdivide

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "assets"


def _timed_build(arrays, settings, **kw):
    t0 = time.perf_counter()
    nav = build_navmesh(arrays, settings, **kw)
    return nav, time.perf_counter() - t0


def exact_scenes(radius, starts, per_start):
    rows = []
    for name, sc, tess in (("apartment", apartment(), 0), ("split_level", split_level(), 0),
                           ("apartment, scan-like (4x subdivided, 2 mm noise)", apartment(), 4)):
        v, t = sc.arrays()
        for _ in range(tess):
            v, t = subdivide(v, t)
        if tess:
            v = v + np.random.default_rng(0).normal(0, 0.002, v.shape)
        geo = ExactGeodesic(sc, radius)
        for compat in (False, True):
            nav, secs = _timed_build((v, t), NavSettings(agent_radius=radius, recast_compat=compat))
            m = measure(sc, nav, radius, n_starts=starts, per_start=per_start, seed=0, geo=geo)
            rows.append(dict(scene=name, mode="recast-compat" if compat else "exact",
                             triangles=len(t), build_s=round(secs, 2), **{
                                 k: (round(x, 5) if isinstance(x, float) else x) for k, x in m.items()
                                 if k != "scene"}))
    return rows


def van_gogh():
    ply = SHARED / "habitat-sim" / "deleted_history" / "van-gogh-room.mesh.ply"
    ref = SHARED / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"
    if not (ply.exists() and ref.exists()):
        return None
    from bps_assets.nav.detour import import_detour, read_detour_navmesh
    from bps_assets.readers import load

    habitat = import_detour(ref)
    doc = load(ply)
    out = {"habitat_detour_area": round(read_detour_navmesh(ref).area(), 3),
           "habitat_grid_area": round(habitat.navigable_area, 3), "agent_radius": 0.1}
    b = habitat.sample_navigable_point(5000, seed=0)
    for compat in (False, True):
        nav, secs = _timed_build(doc, NavSettings(recast_compat=compat), dataset="gibson")
        a = nav.sample_navigable_point(5000, seed=0)
        out["recast-compat" if compat else "exact"] = {
            "area": round(nav.navigable_area, 3), "islands": nav.num_islands,
            "ours_on_habitat": round(float(habitat.is_navigable(a).mean()), 4),
            "habitat_on_ours": round(float(nav.is_navigable(b).mean()), 4),
            "build_s": round(secs, 2)}
    return out


def gibson_build_times(repeats=2):
    try:
        from bps_assets.synth import build_scene, scene_names
    except ImportError:
        return None
    name = scene_names("gibson", 2)[1][0]
    doc, _, info = build_scene("gibson", name, 0, "gibson")
    times = {"exact": [], "recast-compat": []}
    for _ in range(repeats):
        for compat in (True, False):
            _, secs = _timed_build(doc, NavSettings(recast_compat=compat), dataset="gibson")
            times["recast-compat" if compat else "exact"].append(secs)
    best = {k: round(min(v), 2) for k, v in times.items()}
    return {"scene": f"synth gibson {name} ({info.triangles} triangles)", "best_of": repeats,
            **best, "ratio_exact_over_compat": round(best["exact"] / best["recast-compat"], 2)}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=12)
    ap.add_argument("--per-start", type=int, default=20)
    ap.add_argument("--radius", type=float, default=0.18)
    ap.add_argument("--no-gibson", action="store_true", help="skip the build-time comparison")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    out = {"radius": a.radius, "cell_size": NavSettings().cell_size,
           "scenes": exact_scenes(a.radius, a.starts, a.per_start), "van_gogh": van_gogh(),
           "gibson_build": None if a.no_gibson else gibson_build_times()}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"agent radius {a.radius} m, cell {out['cell_size']} m")
    print("| scene | mode | area vs exact | geodesic median | p95 | max | pairs | build s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in out["scenes"]:
        print(f"| {r['scene']} | {r['mode']} | {r['navigable_area']:.2f} vs {r['exact_area']:.2f} m^2 "
              f"({100 * r['area_error']:+.1f} %) | {100 * r['geo_median']:.2f} % | "
              f"{100 * r['geo_p95']:.2f} % | {100 * r['geo_max']:.2f} % | {r['pairs']} | {r['build_s']} |")
    vg = out["van_gogh"]
    if vg:
        print(f"\nvan Gogh room (radius {vg['agent_radius']}): habitat .navmesh {vg['habitat_detour_area']} m^2 "
              f"(imported grid {vg['habitat_grid_area']})")
        for mode in ("exact", "recast-compat"):
            m = vg[mode]
            print(f"  {mode}: {m['area']} m^2, {m['islands']} islands, {100 * m['ours_on_habitat']:.1f} % of "
                  f"ours on habitat's, {100 * m['habitat_on_ours']:.1f} % of habitat's on ours, {m['build_s']} s")
    gb = out["gibson_build"]
    if gb:
        print(f"\nbuild {gb['scene']}, best of {gb['best_of']}: exact {gb['exact']} s, "
              f"recast-compat {gb['recast-compat']} s, ratio {gb['ratio_exact_over_compat']}")


if __name__ == "__main__":
    main()
