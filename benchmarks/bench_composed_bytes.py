"""On-disk bytes of composed ReplicaCAD scenes: each asset stored once per output folder vs
what per-scene files would hold.

Preprocesses N ``v3_sc*`` scenes of ../shared/datasets/replicacad (box-room stand-in stages:
the real stage GLBs are not public; ReplicaCAD's navmeshes imported with a 0.3 m agent) and
prints, measured in this one run: the output's bytes (scene files + asset library), the bytes
if each scene stored its own copy of every asset it uses once ("per-scene library"), and the
bytes if each scene stored every instance's geometry ("flattened": the asset files summed per
instance), with the ratios.

    python benchmarks/bench_composed_bytes.py --scenes 8
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RCAD = ROOT.parent / "shared" / "datasets" / "replicacad"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=8)
    args = ap.parse_args()
    from bps_assets.nav.detour import read_detour_navmesh
    from bps_assets.nav.settings import DEFAULT_SETTINGS
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from bps_assets.scene_dataset.packing import read_composed
    from bps_assets.scene_dataset.standin import replicacad_with_standins

    names = [f"v3_sc{k // 21}_staging_{k % 21:02d}" for k in range(args.scenes)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bounds = read_detour_navmesh(RCAD / "navmeshes" / "v3_sc0_staging_00.navmesh").bounds
        cfg = replicacad_with_standins(RCAD, tmp / "rc", bounds, names)
        t0 = time.perf_counter()
        res = preprocess(cfg.parent, tmp / "out", str(cfg), options=PreprocessOptions(
            skip_missing_assets=True, workers=1, nav=dataclasses.replace(DEFAULT_SETTINGS, agent_radius=0.3)))
        secs = time.perf_counter() - t0
        assert res.ok, [r.error for r in res.scenes if r.error]
        out = tmp / "out"
        scene_bytes = {p.stem: p.stat().st_size for p in (out / "scenes").glob("*.bps")}
        asset_bytes = {p.name: p.stat().st_size for p in (out / "assets").glob("*.bps")}
        per_scene = flattened = instances = 0
        for name, sb in scene_bytes.items():
            _, table, paths = read_composed(out / "scenes" / f"{name}.bps", ["positions"])
            used = [paths[int(a)].name for a in table.asset]
            per_scene += sb + sum(asset_bytes[u] for u in set(used))
            flattened += sb + sum(asset_bytes[u] for u in used)
            instances += table.count
        total = sum(scene_bytes.values()) + sum(asset_bytes.values())
        print(f"{len(scene_bytes)} scenes, {instances} instances, {len(asset_bytes)} assets, "
              f"preprocess {secs:.1f} s")
        print(f"composed output (scenes + asset library): {total / 1e6:.2f} MB")
        print(f"per-scene asset copies:                   {per_scene / 1e6:.2f} MB  ({per_scene / total:.2f} x)")
        print(f"flattened instances:                      {flattened / 1e6:.2f} MB  ({flattened / total:.2f} x)")


if __name__ == "__main__":
    main()
