"""Preprocess throughput (1 vs 2 workers) and verify speed vs plain sha256sum.

    python benchmarks/bench_pipeline.py [--scenes 6] [--size small] [--big-mb 512]

1. Synthesizes ``--scenes`` Gibson-layout scenes (bps_assets.synth), preprocesses them from
   scratch with 1 and then 2 workers (navmesh built or imported as shipped, 20 episodes per
   scene) and prints scenes/minute, source MB/s and the 2-vs-1 scaling ratio.
2. verify (sizes + sha256 + headers) of that manifest vs ``sha256sum`` of the same files, and
   the same on a manifest of large containers (``--big-mb`` in total) where hashing dominates;
   page cache warm for both (each is run once before timing).
Prints ratios measured in this one run; results go to docs/PERFORMANCE.md.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bps_assets.container import SectionSpec, write_container  # noqa: E402
from bps_assets.pipeline.demo import demo_scene_names  # noqa: E402
from bps_assets.hashing import sha256_file  # noqa: E402
from bps_assets.pipeline.manifest import load_manifest, new_manifest, write_manifest  # noqa: E402
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess  # noqa: E402
from bps_assets.pipeline.verify import verify_manifest  # noqa: E402


def best(fn, n=3):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def sha256sum(files):
    subprocess.run(["sha256sum", *map(str, files)], check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenes", type=int, default=6)
    ap.add_argument("--size", default="small")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--big-mb", type=int, default=512)
    ap.add_argument("--part", choices=["all", "preprocess", "verify"], default="all")
    ap.add_argument("--src", default=None, help="use this Gibson-layout tree instead of synthesizing")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    print(f"cores: {os.cpu_count()}")
    try:
        if a.part in ("all", "preprocess"):
            bench_preprocess(a, tmp)
        if a.part in ("all", "verify"):
            bench_verify_big(a, tmp)
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def compare(manifest, label):
    m = load_manifest(manifest)
    files = [m.resolve(o["path"]) for _, _, o in m.files()]
    files += [m.resolve(e["path"]) for e in m.doc.get("episodes", {}).values()]
    files = list(dict.fromkeys(files))
    total = sum(f.stat().st_size for f in files)
    verify_manifest(manifest)  # warm the page cache
    t_v = best(lambda: verify_manifest(manifest))
    t_v1 = best(lambda: verify_manifest(manifest, jobs=1))
    t_d = best(lambda: verify_manifest(manifest, deep=True), 1)
    t_s = best(lambda: sha256sum(files))
    print(f"verify {label}: {len(files)} files, {total / 1e6:.1f} MB: verify {t_v:.3f} s "
          f"({total / t_v / 1e6:.0f} MB/s), 1 thread {t_v1:.3f} s, --deep {t_d:.3f} s; "
          f"sha256sum {t_s:.3f} s ({total / t_s / 1e6:.0f} MB/s); verify / sha256sum time: {t_v / t_s:.2f}")


def bench_preprocess(a, tmp):
    if a.src:
        src = Path(a.src)
        print(f"source tree: {src}")
    else:
        from bps_assets import synth

        src = tmp / "src"
        names = demo_scene_names(a.scenes)  # tiny train/val ids in synth's order (<= 30)
        t = time.perf_counter()
        synth.generate(src, "gibson", names, seed=0, size=a.size)
        print(f"synthesized {len(names)} scenes ({a.size}) in {time.perf_counter() - t:.1f} s")
    src_bytes = sum(p.stat().st_size for p in (src / "gibson").iterdir() if p.is_file())
    print(f"source: {src_bytes / 1e6:.1f} MB in {len(list((src / 'gibson').iterdir()))} files")
    rates = {}
    for workers in (1, 2):
        out = tmp / f"out{workers}"
        opts = PreprocessOptions(workers=workers, episodes=a.episodes, subsets=("train", "val"))
        t = time.perf_counter()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        res = preprocess(src, out, "gibson", "tiny", opts, progress=False)
        dt = time.perf_counter() - t
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool's workers, once reaped
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        assert res.count("failed") == 0, [r.error for r in res.results if r.error]
        n = res.count("ok")
        out_bytes = sum(o["size"] for _, _, o in load_manifest(res.manifest_path).files())
        rates[workers] = dt
        per = {k: np.mean([r.entry["stats"].get(k + "_seconds", 0) for r in res.results if r.entry])
               for k in ("convert", "navmesh", "episodes")}
        print(f"preprocess workers={workers}: {n} scenes in {dt:.1f} s = {60 * n / dt:.1f} scenes/min, "
              f"{src_bytes / dt / 1e6:.2f} MB/s of sources -> {out_bytes / 1e6:.1f} MB outputs; "
              "per scene mean " + ", ".join(f"{k} {v:.2f} s" for k, v in per.items())
              + f"; worker CPU {cpu:.1f} s = {cpu / max(n, 1):.2f} s/scene (CPU share {cpu / dt:.2f} cores)")
        t = time.perf_counter()
        preprocess(src, out, "gibson", "tiny", opts, progress=False)
        print(f"  rerun with nothing to do: {time.perf_counter() - t:.2f} s")
    print(f"scaling 2 vs 1 workers: {rates[1] / rates[2]:.2f}x")

    compare(tmp / "out2" / "manifest.json", "demo dataset")


def bench_verify_big(a, tmp):
    # large containers: where a real dataset's verify time goes
    big = tmp / "big"
    k = 8
    per = a.big_mb // k << 20
    rng = np.random.default_rng(0)
    scenes = {}
    for i in range(k):
        rel = f"scenes/s{i}.bps"
        write_container(big / rel, "SCEN", {"i": i}, {"data": rng.integers(0, 255, per, dtype=np.uint8)},
                        {"data": SectionSpec(codec="raw")})
        digest, size = sha256_file(big / rel)
        rec = {"path": rel, "size": size, "sha256": digest, "format": "SCEN", "format_version": 1}
        nrel = f"navmeshes/s{i}.navmesh.bps"
        write_container(big / nrel, "NAVM", {"i": i}, {"h": rng.random(1 << 18, dtype=np.float32)})
        digest, size = sha256_file(big / nrel)
        nrec = {"path": nrel, "size": size, "sha256": digest, "format": "NAVM", "format_version": 1}
        scenes[f"s{i}"] = {"subset": "train", "status": "ok", "fingerprint": "0" * 64, "sources": {},
                           "outputs": {"scene": rec, "navmesh": nrec}, "stats": {}}
    doc = new_manifest(dataset="gibson", split="tiny", subsets=["train"], settings={}, shard=None,
                       source_root=None, scenes=scenes, missing=[], episodes={})
    write_manifest(doc, big / "manifest.json")
    compare(big / "manifest.json", f"{k} large containers")

    f0 = big / "scenes" / "s0.bps"
    for chunk in (64 << 10, 1 << 20, 4 << 20):
        t = best(lambda: sha256_file(f0, chunk))
        print(f"sha256_file chunk {chunk >> 10} KiB: {f0.stat().st_size / t / 1e6:.0f} MB/s")


if __name__ == "__main__":
    main()
