"""Cost of the scan checks a navmesh build now carries (docs/NAVMESH.md section 9), as shares of
the build itself, measured in one run on a Gibson-size synth scene (~550K triangles):

    python benchmarks/bench_scan_checks.py [--scene Allensville] [--size gibson]

the up-axis rule (one pass over the face normals), the footprint (0.25 m raster of the
non-vertical faces) and the indoor test (an Embree BVH of the scene, 100 rays per island; part
of ``build_navmesh``, so the build's time includes it).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from bps_assets import synth  # noqa: E402
from bps_assets.nav.build import build_navmesh, scene_triangles  # noqa: E402
from bps_assets.nav.indoor import island_indoor  # noqa: E402
from bps_assets.nav.scan_checks import footprint_area, up_axis_problem  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scene", default="Allensville")
    ap.add_argument("--size", default="gibson", choices=tuple(synth.SIZES))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        info = synth.generate(d, "gibson", [a.scene], size=a.size)[0]
        v, t, _ = scene_triangles(info.path, "gibson")
    t0 = time.perf_counter()
    nav = build_navmesh((v, t))
    t1 = time.perf_counter()
    island_indoor(nav, v, t)
    t2 = time.perf_counter()
    footprint_area(v, t)
    t3 = time.perf_counter()
    up_axis_problem(v, t, "z")
    t4 = time.perf_counter()
    b = t1 - t0
    print(f"{a.scene} ({a.size}, {len(t)} triangles): build {b:.2f} s (indoor test included)")
    for name, s in (("indoor test", t2 - t1), ("footprint", t3 - t2), ("up-axis rule", t4 - t3)):
        print(f"  {name:13s} {s:6.2f} s  = {s / b:.3f} x the build")


if __name__ == "__main__":
    main()
