"""Batched PointNav env benchmark: env step fps vs render-only fps, step-time tail with scene
swaps, loads waited for, peak RSS, torch ops / Warp launches / host syncs per step
(cli.env_bench; same as `bps-assets bench`).

    python benchmarks/bench_env.py MANIFEST [--num-envs 1024 --scenes 8 --resolution 64 ...]
    python benchmarks/bench_env.py MANIFEST --device cuda --threads 4   # renderer auto: warp on CUDA
    python benchmarks/bench_env.py --synth DIR [--synth-scenes 10 --synth-size gibson] ...
    python benchmarks/bench_env.py MANIFEST --task objectnav   # ObjectNav / ImageNav (sampled episodes)
    python benchmarks/bench_env.py COMPOSED_MANIFEST --compare-flattened   # instances vs one mesh
    python benchmarks/bench_env.py MANIFEST --noise depth=redwood,actuation=locobot-ilqr   # with noise

``--compare-flattened`` (composed datasets, issue 31) runs the benchmark twice in one process,
alternating: scenes loaded as instances of shared assets, then flattened into one mesh each
(the loader's path for renderers without instancing), and prints render fps instanced /
flattened.

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

from bps_assets.errors import BpsError
from cli.env_bench import BenchOptions, run


def synth_dataset(out: Path, scenes: int, size: str, seed: int = 0) -> tuple[Path, str]:
    """A preprocessed Gibson-layout dataset of ``scenes`` synthetic scenes under ``out``
    (bps_assets.synth.generate(size=...); reused when its manifest exists)."""
    from bps_assets import synth
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    manifest = out / "out" / "manifest.json"
    note = out / "source.txt"
    if manifest.is_file():
        return manifest, note.read_text() if note.exists() else "?"
    src = out / "src"
    t = time.perf_counter()
    made = synth.generate(src, "gibson", scenes, seed=seed, size=size)
    what = f"bps_assets.synth.generate(size={size!r})"
    print(f"synthesized {len(made)} scenes in {time.perf_counter() - t:.0f} s: {what}", file=sys.stderr)
    t = time.perf_counter()
    res = preprocess(src, out / "out", "gibson", "tiny", PreprocessOptions(episodes=0, subsets=("train",)),
                     log=lambda s: print(s, file=sys.stderr))
    print(f"preprocessed in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    note.write_text(what)
    return res.manifest_path, what


def add_dataset_args(ap: argparse.ArgumentParser):
    """MANIFEST or ``--synth DIR`` (with ``--synth-scenes`` / ``--synth-size``)."""
    ap.add_argument("manifest", nargs="?")
    ap.add_argument("--synth", type=Path, help="build (or reuse) a synthetic dataset in this folder")
    ap.add_argument("--synth-scenes", type=int, default=12)
    ap.add_argument("--synth-size", default="gibson")


def dataset_of(ap: argparse.ArgumentParser, a) -> tuple[Path, str]:
    """(manifest, where its scenes come from) for ``add_dataset_args``' arguments; says it on stderr."""
    manifest, source = a.manifest, "given manifest"
    if manifest is None and a.synth:
        manifest, source = synth_dataset(a.synth, a.synth_scenes, a.synth_size)
    if manifest is None:
        ap.error("give a MANIFEST or --synth DIR")
    print(f"scenes: {source}", file=sys.stderr)
    return manifest, source


def compare_flattened(manifest, opts, rounds: int = 2) -> dict:
    """Render / env fps of a composed dataset as instances vs flattened, ``rounds`` alternations."""
    from bps_runtime.render.embree import EmbreeRenderer
    from bps_runtime.render.warp_backend import WarpRenderer

    out: dict = {"instanced": [], "flattened": []}
    for _ in range(rounds):
        for mode in ("instanced", "flattened"):
            saved = EmbreeRenderer.instancing, WarpRenderer.instancing
            if mode == "flattened":   # the loader flattens for a renderer without instancing
                EmbreeRenderer.instancing = WarpRenderer.instancing = False
            try:
                r, _ = run(manifest, opts, echo=lambda s: None)
            finally:
                EmbreeRenderer.instancing, WarpRenderer.instancing = saved
            out[mode].append(r)
            print(f"{mode:9s}: render {r['render_fps']:8.0f} fps, env {r['env_fps']:8.0f} fps", file=sys.stderr)
    for k in ("render_fps", "env_fps"):
        i = sum(r[k] for r in out["instanced"]) / rounds
        f = sum(r[k] for r in out["flattened"]) / rounds
        out[f"{k}_instanced_over_flattened"] = i / f
        print(f"{k} instanced / flattened: {i:.0f} / {f:.0f} = {i / f:.2f}", file=sys.stderr)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_args(ap)
    for f in fields(BenchOptions):
        if f.name == "sensors":
            ap.add_argument("--rgb", action="store_true")
            continue
        if isinstance(f.default, bool):
            ap.add_argument("--" + f.name.replace("_", "-"), action="store_true")
            continue
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default) if f.default is not None else str,
                        default=f.default)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare-flattened", action="store_true")
    a = ap.parse_args(argv)
    manifest, source = dataset_of(ap, a)
    opts = BenchOptions(**{f.name: getattr(a, f.name) for f in fields(BenchOptions) if f.name != "sensors"},
                        sensors=("depth", "rgb") if a.rgb else ("depth",))
    try:
        if a.compare_flattened:
            res = compare_flattened(manifest, opts)
        else:
            res, _ = run(manifest, opts, echo=lambda s: print(s, file=sys.stderr))
    except BpsError as e:  # bad settings or data: one line, as the CLI does
        sys.exit(f"error: {e}")
    res["scenes_source"] = source
    if a.json:
        print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
