"""Cost of refusing a composed scene over the instance cap by its articulated links.

Writes a generated scene instance of ``--copies`` instances of one ``--links``-link URDF (each
link one mesh visual; 132 x 1000 = 132,000 links > the 2^17 cap) and times
``read_scene_instance`` on it, printing the error, the seconds and the peak Python allocation
(tracemalloc, which slows both sides alike). Run it on two checkouts to compare.

    python benchmarks/bench_composed_cap.py --copies 132 --links 1000
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=132)
    ap.add_argument("--links", type=int, default=1000)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from bps_assets.errors import BpsError
    from bps_assets.scene_dataset import habitat as H

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in ("u", "s"):
            (root / d).mkdir()
        vis = '<visual><geometry><mesh filename="m.glb"/></geometry></visual>'
        links = "".join(f'<link name="l{k}">{vis}</link>' for k in range(args.links))
        joints = "".join(f'<joint name="j{k}" type="fixed"><parent link="l{k - 1}"/><child link="l{k}"/></joint>'
                         for k in range(1, args.links))
        (root / "u" / "r.urdf").write_text(f'<robot name="r">{links}{joints}</robot>')
        (root / "u" / "m.glb").write_bytes(b"x")   # never read: the links are refused first
        (root / "s" / "x.scene_instance.json").write_text(
            json.dumps({"articulated_object_instances": [{"template_name": "r"}] * args.copies}))
        cfg = root / "d.scene_dataset_config.json"
        cfg.write_text(json.dumps({"articulated_objects": {"paths": {".urdf": ["u"]}},
                                   "scene_instances": {"paths": {".json": ["s"]}}}))
        ds = H.read_dataset_config(cfg)
        tracemalloc.start()
        t0 = time.perf_counter()
        try:
            H.read_scene_instance(ds, "x")
            outcome = "accepted"
        except BpsError as e:
            outcome = f"{type(e).__name__}: {e.detail}"
        secs, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    print(f"{args.copies} x {args.links} links: {outcome}\n{secs:.2f} s, peak {peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
