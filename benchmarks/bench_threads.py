"""CPU thread scaling of the env (issue 11): render-only fps and env-step fps at 1 thread and
at each thread count asked for, in one run, with the same scenes, agents and seed
(cli.env_bench.measure_threads). Prints render(N) / (N x render(1)) and env step /
render only per N, and the goal lines with PASS / FAIL: render scaling >= 0.8 at every N > 1,
env step / render only >= 0.85 at the highest N. A measurement: exits 0 on a missed goal
unless ``--check`` (exit 1), as ``bps-assets bench``.

    python benchmarks/bench_threads.py MANIFEST                   # threads 1, 2 and every usable core
    python benchmarks/bench_threads.py MANIFEST --threads 1 8 15  # chosen counts (1 is always measured)
    python benchmarks/bench_threads.py --synth DIR [--synth-scenes 12] ...

Each count builds its own env (``make(threads=N)``, Embree on the CPU) and times ``--steps``
steps, each followed by a render-only frame of the same poses (cli.env_bench).
Scene swaps are off unless ``--swap-every`` is given: this measures scaling, bench_env.py the
swaps. Machine load shifts between the counts' runs: read the load average column.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_env import add_dataset_args, dataset_of  # noqa: E402

from bps_assets.errors import BpsError  # noqa: E402
from cli.env_bench import (BenchOptions, closing_line, default_thread_counts, measure_threads,  # noqa: E402
                           summarize_threads, thread_report)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dataset_args(ap)
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help=f"thread counts (default: 1, 2 and every usable core = {default_thread_counts()})")
    ap.add_argument("--num-envs", type=int, default=1024)
    ap.add_argument("--scenes", type=int, default=8, help="resident scene slots")
    ap.add_argument("--resolution", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40, help="timed steps per thread count")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--swap-every", type=int, default=0)
    ap.add_argument("--rgb", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 when a goal is missed (FAIL)")
    a = ap.parse_args(argv)
    manifest, source = dataset_of(ap, a)
    opts = BenchOptions(num_envs=a.num_envs, scenes=a.scenes, resolution=a.resolution, steps=a.steps,
                        warmup=a.warmup, swap_every=a.swap_every, sensors=("depth", "rgb") if a.rgb else ("depth",),
                        seed=a.seed, device="cpu", renderer="embree", count_steps=0)
    try:
        per = measure_threads(manifest, a.threads or default_thread_counts(), opts,
                              echo=lambda s: print(s, file=sys.stderr))
    except BpsError as e:  # bad settings or data: one line, as the CLI does
        sys.exit(f"error: {e}")
    res = summarize_threads(per)
    res["scenes_source"] = source
    rep = thread_report(res)
    for line in rep.lines:
        print(line)
    print(closing_line(rep, res["rows"][-1]["load_avg_1min_end"], a.check))
    if a.json:
        print(json.dumps(res, indent=1, default=str))
    if a.check and rep.missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
