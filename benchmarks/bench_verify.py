"""`bps-assets verify` (plain and ``--deep``) of a preprocessed dataset, this tree against a git
revision's (``--before``: its ``bps_assets`` from ``git archive``, with this checkout's built
C helpers), each run in its own process, the two trees alternating, best of ``--repeat``.

    python benchmarks/bench_verify.py MANIFEST [--before ffda29f] [--repeat 5] [--jobs 1]

Prints per mode and tree: seconds (best, median), navmesh sections decoded per navmesh, and the
after / before time ratio. MANIFEST: e.g. `bps-assets demo DIR`'s, or synth --size gibson
scenes preprocessed (navmeshes of real-scene size).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RUN = """
import collections, json, os, sys, time
sys.path.insert(0, sys.argv[1])
from bps_assets.container import Container
from bps_assets.pipeline.verify import verify_manifest
n = collections.Counter()
real = Container.read
def read(self, name, *a, **k):
    if self.path.endswith(".navmesh.bps"):
        n[self.path] += 1
    return real(self, name, *a, **k)
Container.read = read
t = time.perf_counter()
rep = verify_manifest(sys.argv[2], deep=sys.argv[3] == "deep", jobs=int(sys.argv[4]))
dt = time.perf_counter() - t
print(json.dumps({"s": dt, "ok": rep.ok, "reads_per_navmesh": max(n.values(), default=0)}))
"""


def _tree(rev: str, work: Path) -> Path:
    from bench_episode_files import _tree as archived   # the revision's bps_assets

    out = archived(rev, work)
    for so in (REPO / "bps_assets").rglob("*.so"):   # built in place, not in git
        dst = out / so.relative_to(REPO)
        if dst.parent.is_dir() and not dst.exists():
            dst.write_bytes(so.read_bytes())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest")
    ap.add_argument("--before", default="ffda29f", help="git revision to compare with")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=1, help="verify's threads (1: the ratio is not the scheduler's)")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bps-bench-verify-"))
    trees = [("after", REPO), ("before", _tree(a.before, work))]
    for mode in ("plain", "deep"):
        res = {label: [] for label, _ in trees}
        for _ in range(a.repeat + 1):   # the first round warms the page cache, not counted
            for label, root in trees:
                r = subprocess.run([sys.executable, "-c", RUN, str(root), a.manifest, mode, str(a.jobs)],
                                   capture_output=True, text=True, check=True)
                res[label].append(json.loads(r.stdout))
        for label, _ in trees:
            runs = res[label][1:]
            ts = [x["s"] for x in runs]
            print(f"verify {mode:<5} {label:<7} best {min(ts):.3f} s  median {statistics.median(ts):.3f} s  "
                  f"ok {runs[0]['ok']}  navmesh sections decoded (max per file) {runs[0]['reads_per_navmesh']}")
        t1, t0 = (min(x["s"] for x in res[k][1:]) for k in ("after", "before"))
        print(f"verify {mode:<5} after/before time (best): {t1 / t0:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
