"""Navmesh build speed, geodesic accuracy, query costs (docs/PERFORMANCE.md, docs/NAVMESH.md).

    python benchmarks/bench_navmesh.py [--pairs 150] [--json] [--stand-in [--triangles 600000]]

1. build: the voxel recipe on a Gibson-size scene (``bps_assets.synth.build_scene``, ``--size``
   gibson; ``small`` for a quick run), or with ``--stand-in`` the tests' scan_like_house
   (bps_assets.nav.reference_scenes: ~150 m^2, ``--triangles`` small noisy triangles); goal < 30 s.
2. accuracy: geodesic_distance vs exact shortest paths (visibility graph) on rooms with rotated
   obstacles whose free space is known exactly, for neighbourhood radius R = 1..5, with and
   without the corner nodes (bps_assets/nav/geodesic.py); goal median <= 1%, p95 <= 3%.
3. queries on the built scene: graph build (and its corner nodes), distance_field per goal,
   geodesic_distance per pair, try_step per agent (0.25 m steps), snap_point per point.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from bps_assets.nav import build_navmesh  # noqa: E402
from bps_assets.nav.geodesic import GeodesicGraph  # noqa: E402
from bps_assets.nav.queries import geodesic_graph  # noqa: E402
from bps_assets.nav.reference_scenes import ExactRoom, geodesic_errors, scan_like_house  # noqa: E402


def scene(triangles, synth: bool, size: str = "gibson"):
    if synth:  # the demo data's Gibson-size preset (~600K triangles, ~150 m^2, Z-up)
        from bps_assets.synth import build_scene, scene_names

        name = scene_names("gibson", 2)[1][0]  # a two-storey house with stairs
        doc, _, info = build_scene("gibson", name, 0, size)
        return doc, f"bps_assets.synth {size} {name} ({info.triangles} triangles, {info.floor_area:.0f} m^2)", \
            dict(dataset="gibson")
    v, t = scan_like_house(triangles)
    return (v, t), f"scan_like_house ({len(t)} triangles)", {}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--triangles", type=int, default=None, help="--stand-in's triangles (default 600,000)")
    ap.add_argument("--size", choices=("gibson", "small"), default="gibson",
                    help="the synth scene's preset (small: ~30K triangles, a quick run)")
    ap.add_argument("--pairs", type=int, default=150)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--stand-in", action="store_true",
                    help="time the tests' scan_like_house instead of a synth Gibson-size scene")
    a = ap.parse_args(argv)
    if a.triangles is not None and not a.stand_in:
        ap.error("--triangles sizes the --stand-in scene; the synth scene's size is --size")
    out = {}

    sc, desc, kw = scene(a.triangles or 600_000, synth=not a.stand_in, size=a.size)
    t0 = time.perf_counter()
    nav = build_navmesh(sc, **kw)
    out["build"] = {"scene": desc, "seconds": round(time.perf_counter() - t0, 2),
                    "spans": nav.num_spans, "area_m2": round(nav.navigable_area, 2),
                    "islands": nav.num_islands, "grid": list(nav.shape)}

    q = {}
    goals = nav.sample_navigable_point(10, seed=1, island=0)
    spans = nav.locate(goals)
    # the graph without its corner nodes (paths bending at span centres only) and the default,
    # alternating, best of 3: their build and field costs as ratios measured in this run
    best = {}
    for _ in range(3):
        for corners, tag in ((False, "_centres_only"), (True, "")):
            t0 = time.perf_counter()
            g = GeodesicGraph(nav, corners=corners)
            tb = time.perf_counter() - t0
            t0 = time.perf_counter()
            for s, p in zip(spans, goals):
                g.field_from_point(int(s), p, nav.span_pos)
            tf = (time.perf_counter() - t0) / len(goals) * 1e3
            prev = best.get(tag, (tb, tf))
            best[tag] = (min(tb, prev[0]), min(tf, prev[1]))
            q[f"graph_edges{tag}"] = g.num_edges
    for tag, (tb, tf) in best.items():
        q[f"graph_build{tag}_s"], q[f"distance_field{tag}_ms"] = round(tb, 3), round(tf, 1)
    q["graph_corner_nodes"] = g.C
    q["graph_build_ratio"] = round(q["graph_build_s"] / q["graph_build_centres_only_s"], 2)
    q["distance_field_ratio"] = round(q["distance_field_ms"] / q["distance_field_centres_only_ms"], 2)
    pa, pb = nav.sample_navigable_point(100, seed=2, island=0), nav.sample_navigable_point(100, seed=3, island=0)
    geodesic_graph(nav)  # built and cached outside the timing, as before
    t0 = time.perf_counter()
    nav.geodesic_distance(pa, pb)
    q["geodesic_ms_per_pair"] = round((time.perf_counter() - t0) / 100 * 1e3, 1)
    st = nav.sample_navigable_point(1000, seed=4)
    ang = np.random.default_rng(5).uniform(0, 2 * np.pi, 1000)
    en = st + 0.25 * np.stack([np.cos(ang), np.zeros(1000), np.sin(ang)], 1)
    t0 = time.perf_counter()
    nav.try_step(st, en)
    q["try_step_us_per_agent"] = round((time.perf_counter() - t0) / 1000 * 1e6, 1)
    pts = nav.sample_navigable_point(10000, seed=6) + [0, 0.3, 0]
    t0 = time.perf_counter()
    nav.snap_point(pts)
    q["snap_us_per_point"] = round((time.perf_counter() - t0) / 10000 * 1e6, 2)
    out["queries"] = q

    acc = {}
    for seed in (0, 1):
        room = ExactRoom(seed=seed)
        rn = room.navmesh()
        for R in (1, 2, 3, 4, 5):
            for corners in (False, True):  # paths bending at span centres only / also at cell corners
                err, _ = geodesic_errors(room, rn, n_pairs=a.pairs, radius=R, corners=corners)
                acc[f"seed{seed}_R{R}" + ("_corners" if corners else "_centres")] = {
                    "median": round(float(np.median(err)), 5), "p95": round(float(np.percentile(err, 95)), 5),
                    "max": round(float(err.max()), 5), "pairs": int(len(err))}
    out["accuracy"] = acc
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            print(k, v)


if __name__ == "__main__":
    main()
