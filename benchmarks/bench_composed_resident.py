"""Resident bytes of composed scenes in the scene cache: each asset once vs flattened.

Loads the first ``--scenes`` scenes of a preprocessed composed dataset (e.g. ReplicaCAD's v3_sc*
with stand-in stages: see bench_composed_bytes.py / tests/test_composed_runtime.py) into one
scene cache with that many slots, once as instances of shared assets and once flattened (the
loader's path for a renderer without instancing), and prints, measured in this one run, the
cache's resident bytes for each against the bytes of (unique assets + stages) computed from the
files. ``--renderer warp`` charges the cache's GPU estimate (Warp's device bytes) instead of
Embree's host bytes. For the instanced run it also prints the cache report's breakdown by part
(the scenes' own parts, each shared asset once), its sum beside the resident bytes, and the
bytes of the scenes' top-level instance structures (charged as bvh).

    python benchmarks/bench_composed_resident.py OUT/manifest.json --scenes 8 [--renderer warp]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--scenes", type=int, default=8)
    ap.add_argument("--renderer", choices=("embree", "warp"), default="embree")
    a = ap.parse_args()
    from bps_assets.nav import load_navmesh
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.scene_dataset.packing import read_composed
    from bps_runtime.render.protocol import RenderOptions
    from bps_runtime.render.shading_data import build_shading_data
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.loader import SceneSource, navmesh_nbytes

    out = a.manifest.parent
    entries = json.loads(a.manifest.read_text())["scenes"]
    names = sorted(entries)[:a.scenes]
    srcs = [SceneSource(n, str(out / entries[n]["outputs"]["scene"]["path"]),
                        str(out / entries[n]["outputs"]["navmesh"]["path"])) for n in names]

    def renderer():
        if a.renderer == "warp":
            from bps_runtime.render.warp_backend import WarpRenderer
            return WarpRenderer(RenderOptions(threads=1), device="cpu")
        from bps_runtime.render.embree import EmbreeRenderer
        return EmbreeRenderer(RenderOptions(threads=1))

    from bps_runtime.scenes.footprint import accel_bytes

    r = renderer()

    def cost(ps, path):
        return build_shading_data(ps, path).nbytes + accel_bytes(r, len(ps.positions), len(ps.indices))

    assets: dict[str, int] = {}
    stages = instances = 0
    for s in srcs:
        stage, table, paths = read_composed(s.scene_path)
        stages += cost(stage, s.scene_path) + navmesh_nbytes(load_navmesh(s.navmesh_path))
        instances += table.count
        for k in set(table.asset.tolist()):
            p = os.path.realpath(paths[k])
            if p not in assets:
                ps = read_packed_scene(p, expand=False)
                assets[p] = cost(ps, p) + ps.positions.nbytes   # + the vertices kept for object boxes
    unique = stages + sum(assets.values())
    got = {}
    for mode in ("instanced", "flattened"):
        cls = type(r)
        saved = cls.instancing
        # instancing switched off here on purpose: the loader's "no instance path" warning is not news
        quiet = logging.getLogger("bps_runtime.scenes.loader")
        level = quiet.level
        if mode == "flattened":
            cls.instancing = False
            quiet.setLevel(logging.ERROR)
        try:
            with SceneCache(srcs, renderer(), len(srcs), CacheOptions(slots=len(srcs), prefetch=False)) as cache:
                cache.start(refuse=True)
                got[mode] = cache.resident_bytes
                if mode == "instanced":
                    parts = cache.take_report().resident_footprint
                    top = sum(int(getattr(cache.scene(i).accel, "nbytes", 0))
                              for i in cache.resident_scene_indices)
        finally:
            cls.instancing = saved
            quiet.setLevel(level)
    print(f"{len(srcs)} scenes resident, {instances} instances of {len(assets)} assets, renderer {a.renderer}")
    print(f"unique assets + stages (from the files): {unique / 1e6:8.2f} MB")
    for mode, b in got.items():
        print(f"cache resident bytes, {mode:9s}:       {b / 1e6:8.2f} MB  ({b / unique:.2f} x)")
    print("instanced, the report's breakdown: " + ", ".join(f"{k} {v / 1e6:.3f} MB" for k, v in parts.items())
          + f"; sum {sum(parts.values())} B vs resident {got['instanced']} B; instance structures {top} B")


if __name__ == "__main__":
    main()
