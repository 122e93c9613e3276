"""Batched PointNav env benchmark: env step fps vs render-only fps, step-time tail with scene
swaps, loads waited for, peak RSS (bps_runtime.bench; same as `bps-assets bench`).

    python benchmarks/bench_env.py MANIFEST [--num-envs 1024 --scenes 8 --resolution 64 ...]
    python benchmarks/bench_env.py --synth DIR [--synth-scenes 10 --synth-size gibson] ...

``--synth DIR`` first builds a synthetic dataset there (bps_assets.synth -> preprocess),
reusing it when it already exists.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields
from pathlib import Path

from bps_runtime.bench import DEFAULTS, BenchOptions, run


def synth_dataset(out: Path, scenes: int, size: str, seed: int = 0) -> Path:
    from bps_assets import synth
    from bps_assets.pipeline.demo import DEMO_SPLIT
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    manifest = out / "out" / "manifest.json"
    if manifest.is_file():
        return manifest
    names = synth.gibson_names(scenes) if hasattr(synth, "gibson_names") else None
    t = time.perf_counter()
    src = out / "src"
    names = synth.generate(src, "gibson", names, seed=seed, size=size) if names is None else \
        synth.generate(src, "gibson", names, seed=seed, size=size)
    print(f"synthesized {scenes} {size} scenes in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    res = preprocess(src, out / "out", "gibson", DEMO_SPLIT, PreprocessOptions(episodes=0), log=lambda s: None)
    return res.manifest_path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", nargs="?")
    ap.add_argument("--synth", type=Path, help="build (or reuse) a synthetic dataset in this folder")
    ap.add_argument("--synth-scenes", type=int, default=10)
    ap.add_argument("--synth-size", default="gibson")
    for f in fields(BenchOptions):
        if f.name == "sensors":
            ap.add_argument("--rgb", action="store_true")
            continue
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default) if f.default is not None else str,
                        default=f.default)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    manifest = a.manifest or (synth_dataset(a.synth, a.synth_scenes, a.synth_size) if a.synth else None)
    if manifest is None:
        ap.error("give a MANIFEST or --synth DIR")
    opts = BenchOptions(**{f.name: getattr(a, f.name) for f in fields(BenchOptions) if f.name != "sensors"},
                        sensors=("depth", "rgb") if a.rgb else ("depth",))
    res = run(manifest, opts, echo=lambda s: print(s, file=sys.stderr))
    if a.json:
        print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
