"""Detour import and PointNav episode generation speed on the real files in ../shared/assets.

    python benchmarks/bench_detour_episodes.py [--episodes 100]

Prints per file: parse ms, import s, Detour area vs grid area, episodes/s with habitat-lab's
rules. Results: docs/PERFORMANCE.md ("Detour import and PointNav episodes").
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from bps_assets.nav import episodes as ep
from bps_assets.nav.detour import import_detour, read_detour_navmesh

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
FILES = ["habitat_test_scenes_navmesh/van-gogh-room.navmesh",
         "habitat_test_scenes_navmesh/apartment_1.navmesh",
         "replicacad/navmeshes_default/apt_0.navmesh",
         "navmesh/go-detour/mesh2.bin"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=100)
    args = ap.parse_args()
    print(f"{'file':<22} {'parse ms':>8} {'import s':>8} {'detour m2':>9} {'grid m2':>8} "
          f"{'episodes/s':>10} {'targets/ep':>10}")
    for rel in FILES:
        f = ASSETS / rel
        t0 = time.perf_counter()
        dm = read_detour_navmesh(f)
        t1 = time.perf_counter()
        nm = import_detour(f)
        t2 = time.perf_counter()
        st: dict = {}
        ep.generate_episodes(nm, "x.glb", args.episodes, seed=0, stats=st)
        t3 = time.perf_counter()
        print(f"{f.name:<22} {1e3 * (t1 - t0):8.2f} {t2 - t1:8.3f} {dm.area():9.2f} "
              f"{nm.navigable_area:8.2f} {args.episodes / (t3 - t2):10.1f} "
              f"{st['targets'] / args.episodes:10.2f}")


if __name__ == "__main__":
    main()
