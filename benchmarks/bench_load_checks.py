"""What the scene loader's checks (bps_runtime.scenes.checks: files against the manifest, the
packed scene's header identity, the navmesh's values and fit) cost per scene, next to the read
of the packed scene and its navmesh they follow.

    python benchmarks/bench_load_checks.py PATH/manifest.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest")
    a = ap.parse_args(argv)
    from bps_assets.nav import load_navmesh
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.scenes.checks import check_files, check_navmesh, check_scene_header, expected_for
    from bps_runtime.scenes.loader import SceneSource

    m = load_manifest(a.manifest)
    entries = m.scenes(None)
    read = checks = 0.0
    for e, x in zip(entries, expected_for(m, entries)):
        s = SceneSource(e.name, str(e.scene), str(e.navmesh), x)
        t0 = time.perf_counter()
        ps, nav = read_packed_scene(s.scene_path), load_navmesh(s.navmesh_path)
        t1 = time.perf_counter()
        check_files(s)
        check_scene_header(s, ps.header)
        check_navmesh(s, nav, ps.header)
        read, checks = read + t1 - t0, checks + time.perf_counter() - t1
    n = max(1, len(entries))
    print(f"{len(entries)} scenes: read scene + navmesh {read / n * 1e3:.1f} ms/scene, "
          f"checks {checks / n * 1e3:.1f} ms/scene ({checks / max(read, 1e-9):.1%} of the read)")


if __name__ == "__main__":
    main()
