"""A composed scene's top-level instance structure charges what it allocates (issue 31 item 4):
``InstancedAccel.nbytes`` (Embree's instances and top-level BVH, the instance arrays) and
``WarpInstances.nbytes`` (the wp.Bvh over instance bounds, the instance arrays, on Warp's CPU
device) within 15% of the RSS growth building 10,000 instances, measured by
``benchmarks/bench_instance_bytes.py`` in a fresh process (memory freed by earlier tests would
be reused and hide growth)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_instance_bytes.py"


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS read from /proc (Linux)")
@pytest.mark.parametrize("backend", ["embree", "warp"])
def test_instance_structure_nbytes_match_the_rss_it_adds(backend):
    out = subprocess.run([sys.executable, str(BENCH), "--instances", "10000", "--rounds", "1", "--renderer", backend],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    row = [ln for ln in out.splitlines() if ln.startswith("1 |")][0].split("|")
    grown, nbytes = float(row[1]), float(row[3])   # MB
    assert nbytes > 10000 * 100 / 1e6                 # more than the per-instance arrays alone
    assert 0.85 <= grown / nbytes <= 1.15, out
