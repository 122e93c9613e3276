"""Host bytes of a composed scene's top-level instance structure: RSS growth vs ``nbytes``.

Builds one small shared asset, then ``--rounds`` top-level structures of ``--instances``
instances each (random rotations, scales and positions over a 40 m floor), kept alive together,
and prints per round the process's RSS growth (``/proc/self/statm`` after ``malloc_trim``) beside the structure's
``nbytes`` (what the scene cache charges), per instance and as a ratio, measured in this one
run. ``--renderer embree``: ``InstancedAccel`` (the bridge's ``RTC_GEOMETRY_TYPE_INSTANCE``
geometries and Embree's top-level BVH); ``--renderer warp``: ``WarpInstances`` on Warp's CPU
device (its ``wp.Bvh`` over the instances' bounds and the instance arrays).

    python benchmarks/bench_instance_bytes.py --instances 10000 --rounds 3 [--renderer warp]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_resident import rss  # noqa: E402   (RSS after gc and malloc_trim)


def transforms(n: int, seed: int) -> np.ndarray:
    """[n, 4, 4] asset -> world transforms: a yaw, a uniform scale in 0.5..2, a floor position."""
    rng = np.random.default_rng(seed)
    yaw, s = rng.uniform(0, 2 * np.pi, n), rng.uniform(0.5, 2.0, n)
    m = np.zeros((n, 4, 4))
    m[:, 0, 0], m[:, 0, 2], m[:, 2, 0], m[:, 2, 2] = np.cos(yaw) * s, np.sin(yaw) * s, -np.sin(yaw) * s, np.cos(yaw) * s
    m[:, 1, 1], m[:, 3, 3] = s, 1.0
    m[:, :3, 3] = np.c_[rng.uniform(-20, 20, n), np.zeros(n), rng.uniform(-20, 20, n)]
    return m


def measure(renderer: str, instances: int, rounds: int):
    """Yield (RSS growth, nbytes) of each of ``rounds`` top-level structures of ``instances``
    instances of one small asset (a 0.6 m room), all kept alive until the generator ends."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from runtime_scenes import room_scene

    from bps_runtime.render import RenderOptions, build_shading_data, make_renderer

    asset = room_scene((0.6, 0.6, 0.6))
    sd = build_shading_data(asset)
    r = make_renderer(renderer, RenderOptions(threads=1), device="cpu")
    acc = r.prepare(sd, asset.positions, asset.indices)
    stage = r.prepare(sd, asset.positions, asset.indices)
    kept = [r.prepare_instances([(acc, np.eye(4), 1)])]   # first build: Warp's / Embree's one-time setup
    for k in range(rounds):
        parts = [(stage, np.eye(4), 0)] + [(acc, m, i + 1) for i, m in enumerate(transforms(instances, k))]
        before = rss()
        inst = r.prepare_instances(parts)
        del parts
        kept.append(inst)
        yield rss() - before, inst.nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--renderer", choices=("embree", "warp"), default="embree")
    a = ap.parse_args()
    print(f"{a.renderer}: {a.instances} instances (+ a stage) of one 12-triangle asset per round")
    print("round | RSS growth MB | B/instance | nbytes MB | B/instance | RSS / nbytes")
    n = a.instances + 1
    for k, (grown, nbytes) in enumerate(measure(a.renderer, a.instances, a.rounds)):
        print(f"{k + 1} | {grown / 1e6:.2f} | {grown / n:.0f} | {nbytes / 1e6:.2f} | {nbytes / n:.0f} | "
              f"{grown / max(nbytes, 1):.2f}")


if __name__ == "__main__":
    main()
