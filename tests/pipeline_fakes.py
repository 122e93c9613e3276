"""Small fakes for the pipeline tests: a source tree in the Gibson layout and a backend that
writes real containers quickly (and can fail, crash, or sleep on chosen scenes).

The fake backend is pickled to spawned worker processes, so it lives in an importable module.
"""
from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import numpy as np

from bps_assets.container import atomic_write, write_container
from bps_assets.pipeline.backend import Backend


def make_source(root: Path, names, navmesh=(), size=4096, seed=0, extra=()):
    """gibson/NAME.glb (random bytes) for each name; NAME.navmesh for names in ``navmesh``."""
    rng = np.random.default_rng(seed)
    g = root / "gibson"
    g.mkdir(parents=True, exist_ok=True)
    for n in names:
        (g / f"{n}.glb").write_bytes(b"glTF" + rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        if n in navmesh:
            (g / f"{n}.navmesh").write_bytes(b"MSET" + rng.integers(0, 256, 64, dtype=np.uint8).tobytes())
    for rel in extra:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
    return root


class FakeBackend(Backend):
    """Writes an SCEN container holding the source bytes, a NAVM container, gz episodes.

    ``fail``: names whose convert raises; ``crash``: names whose worker process dies
    (os._exit); ``sleep``: seconds per scene; ``log``: a file each convert call appends its
    scene name to (counts the work done across processes); ``knob``: a setting value.
    """

    name = "fake"

    def __init__(self, fail=(), crash=(), sleep=0.0, log=None, knob=1):
        super().__init__()
        self.fail, self.crash, self.sleep, self.log, self.knob = set(fail), set(crash), sleep, log, knob

    def settings(self, dataset_name):
        return {"backend": self.name, "knob": self.knob}

    def convert(self, src, dst, scene_id, dataset_name):
        if self.log:
            with open(self.log, "a") as f:
                f.write(scene_id + "\n")
        if scene_id in self.crash:
            os._exit(7)
        if scene_id in self.fail:
            raise ValueError(f"cannot convert {scene_id} (fake failure)")
        data = np.frombuffer(Path(src).read_bytes(), np.uint8)
        if self.sleep:
            time.sleep(self.sleep)
        write_container(dst, "SCEN", {"scene_id": scene_id, "knob": self.knob}, {"bytes": data},
                        overwrite=True)
        return {"triangles": int(data.size // 3), "texture_bytes": 0}

    def navmesh(self, mode, packed, detour_src, dst):
        src = "imported" if (detour_src is not None and mode != "build") else "built"
        if mode == "import" and detour_src is None:
            raise ValueError("no .navmesh to import")
        write_container(dst, "NAVM", {"source": src}, {"h": np.arange(100, dtype=np.float32)},
                        overwrite=True)
        return {"source": src, "navigable_area": 12.5, "islands": 1}

    def episodes(self, navmesh_path, scene, dataset_name, n, seed, dst, scene_id=None):
        eps = [{"episode_id": str(i), "scene_id": f"gibson/{scene}.glb",
                "start_position": [0.0, 0.0, float(i)], "start_rotation": [0, 0, 0, 1],
                "info": {"geodesic_distance": 1.0 + i},
                "goals": [{"position": [1.0, 0.0, float(i)], "radius": 0.2}]} for i in range(n)]
        data = gzip.compress(json.dumps({"episodes": eps}).encode(), mtime=0)
        atomic_write(dst, lambda f: f.write(data), overwrite=True)
        return {"count": n}
