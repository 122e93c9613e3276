"""Start-up time of `bps-assets` as ratios to an empty interpreter, measured in one run.

Each command runs as a fresh process, interleaved, N times; the fastest run of each counts
(the least disturbed by other load). ``torch (bench's old import path)`` is what every command
paid before commands were imported lazily (cli.main imported cli.env_bench -> torch).

    python benchmarks/bench_cli_startup.py [--repeat 9] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import click": ["-c", "import click"],
    "import numpy": ["-c", "import numpy"],
    "import cli.main": ["-c", "import cli.main"],
    "bps-assets --help": ["-m", "cli.main", "--help"],
    "bps-assets --version": ["-m", "cli.main", "--version"],
    "bps-assets datasets": ["-m", "cli.main", "datasets"],
    "import pipeline.manifest (what reads a manifest)": ["-c", "import bps_assets.pipeline.manifest"],
    "  + bps_assets.nav (what it imported until 2026-11-28)": [
        "-c", "import bps_assets.pipeline.manifest, bps_assets.nav.settings"],
    "import bps_runtime (torch; the old start-up path)": ["-c", "import cli.env_bench"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    best = dict.fromkeys(COMMANDS, float("inf"))
    for _ in range(a.repeat):
        for name, args in COMMANDS.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True)
            best[name] = min(best[name], time.perf_counter() - t0)
    base = best["python -c pass"]
    rows = {k: {"seconds": round(v, 4), "ratio": round(v / base, 2)} for k, v in best.items()}
    if a.json:
        print(json.dumps({"repeat": a.repeat, "loadavg": os.getloadavg(), "rows": rows}, indent=1))
        return
    print(f"fastest of {a.repeat} runs each; load average {os.getloadavg()[0]:.1f}")
    for k, r in rows.items():
        print(f"  {k:52s} {r['seconds'] * 1000:8.0f} ms  {r['ratio']:6.1f}x")


if __name__ == "__main__":
    main()
