"""What `bps-train --eval CKPT --video N` costs: the same eval with and without videos.

    python benchmarks/bench_video.py [--dataset MANIFEST] [--episodes 4] [--rounds 3] [--stop]
                                     [--baseline-rev REV]

Runs ``bps_train.train.run(["--eval", CKPT, "--eval-episodes", E, ...])`` at 64x64 with
``--video 0``, with ``--video 0`` while ``bps_train.video`` / ``video_io`` cannot be imported
(``sys.modules[name] = None``: the eval would fail if it touched them; its time against the
plain ``--video 0`` is the "no cost when unused" figure) and with ``--video E`` (MP4 when PyAV
is installed), alternating, ``--rounds`` times each, and prints the median seconds and their
ratios (the issue's bar for ``--video E``: under 2x) with the load average. With
``--baseline-rev`` it also runs the eval of that revision's bps_train/train.py (read with
``git show``, run against this tree's other modules), so the no-video eval can be compared with
the code before ``--video`` existed (its "no cost when unused" figure). Without ``--dataset``
it builds the 3-scene synthetic dataset of tests/test_train_smoke.py. The checkpoint is one PPO
update of the default model (the policy's cost per step is the real one) with its STOP logit
set to -30 (unless ``--stop``), so episodes run to the 500-step limit like a trained agent's
long ones instead of ending after one or two random STOPs.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tiny_dataset(out: Path) -> Path:
    from bps_assets.pipeline import demo

    def synthesize(ctx):
        from bps_assets.synth import generate

        ctx.src_root = ctx.outdir / "src"
        generate(ctx.src_root, "gibson", 3, seed=0, size="small")

    steps = [demo.DemoStep("synthesize", "synthesize", synthesize)]
    steps += [s for s in demo.DEFAULT_STEPS if s.name == "preprocess"]
    assert demo.run_demo(out / "demo", scenes=3, workers=1, echo=lambda s: None, steps=steps)
    return out / "demo" / "manifest.json"


def baseline_module(rev: str):
    """bps_train/train.py as of ``rev``, imported as its own module."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:bps_train/train.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "train_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("train_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


VIDEO_MODULES = ("bps_train.video", "bps_train.video_io")


def without_video_modules(run):
    """``run`` with the video modules made unimportable (an import of them raises) meanwhile."""
    def go(argv):
        saved = {m: sys.modules.pop(m) for m in VIDEO_MODULES if m in sys.modules}
        sys.modules.update(dict.fromkeys(VIDEO_MODULES))
        try:
            return run(argv)
        finally:
            for m in VIDEO_MODULES:
                del sys.modules[m]
            sys.modules.update(saved)
    return go


def timed(run, argv) -> tuple[float, dict]:
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        res = run(argv)
    return time.perf_counter() - t0, res


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", type=Path, default=None)
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--baseline-rev", default=None)
    p.add_argument("--stop", action="store_true", help="keep the policy's STOP action (an untrained policy then "
                                                       "stops within a few steps: the eval is mostly set-up)")
    a = p.parse_args()
    from bps_train import train

    work = Path(tempfile.mkdtemp(prefix="bench_video_"))
    dataset = a.dataset or tiny_dataset(work)
    common = ["--dataset", str(dataset), "--threads", str(a.threads), "--resolution", "64"]
    with contextlib.redirect_stdout(io.StringIO()):
        train.run([*common, "--out-dir", str(work / "ckpt"), "--num-envs", "4", "--rollout-steps", "8",
                   "--total-steps", "32", "--sim-only-steps", "0"])
    ckpt = work / "ckpt" / "checkpoint.pt"
    if not a.stop:   # a trained agent's episodes are long: never STOP, so each runs to the step limit
        from bps_train import checkpoint

        state = checkpoint.load(ckpt)
        state["policy"]["actor.bias"][0] = -30.0
        checkpoint.save(ckpt, state)
    ckpt = str(ckpt)
    ev = [*common, "--eval", ckpt, "--eval-episodes", str(a.episodes), "--out-dir", str(work / "eval"),
]
    variants = {"no video": (train.run, [*ev, "--video", "0"]),
                "no video, video code unimportable": (without_video_modules(train.run), [*ev, "--video", "0"]),
                f"--video {a.episodes}": (train.run, [*ev, "--video", str(a.episodes), "--video-format", "auto"])}
    if a.baseline_rev:
        variants[f"{a.baseline_rev} (before --video)"] = (baseline_module(a.baseline_rev).run, ev)
    times = {k: [] for k in variants}
    info = {}
    timed(*variants["no video"])   # warm-up: imports, first scene loads
    load0 = os.getloadavg()
    for _ in range(a.rounds):
        for k, (fn, argv) in variants.items():
            s, res = timed(fn, argv)
            times[k].append(s)
            info[k] = res
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}   # the least disturbed run: other load only adds
    base = med["no video"]
    lens = info["no video"]["mean_length"]
    load1 = os.getloadavg()
    print(f"eval of {a.episodes} episodes at 64x64{'' if a.stop else ' (no STOP)'}, {a.threads} threads, "
          f"mean length {lens:.1f} steps; median (and fastest) of {a.rounds} rounds; load average "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} before, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} after, "
          f"{os.cpu_count()} cores:")
    for k, v in med.items():
        print(f"  {k:>34}: {v:6.2f} s  x{v / base:.2f}   fastest {low[k]:6.2f} s  x{low[k] / low['no video']:.2f}"
              f"   (all: {', '.join(f'{t:.2f}' for t in times[k])})")
    vids = info[f"--video {a.episodes}"].get("videos", [])
    unused = "no video, video code unimportable"
    print(json.dumps({"ratio_unimportable": med[unused] / base, "ratio_unimportable_fastest": low[unused] / low["no video"],
                      "ratio_video": med[f"--video {a.episodes}"] / base,
                      "ratio_video_fastest": low[f"--video {a.episodes}"] / low["no video"], "videos": len(vids),
                      "format": Path(vids[0]).suffix if vids else None}))


if __name__ == "__main__":
    main()
